"""apply / verify / cancel on a KRaft cluster as whole steps (planner.execution.steps dispatches here when a
request names bootstrap servers): the plan read and checked before any connection, the Admin client connected
and the cluster checked to be KRaft (a ZooKeeper address, refused credentials, a ZooKeeper-mode cluster and a
metadata.version too old are one line each, nothing written), then the KRaft executor or verifier. The files
in the records folder are the ZooKeeper steps' own (apply/progress.json, apply/outcome.json, report.json)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from planner.errors import BadInput
from planner.execution.kraftexec import KraftExecutor, KraftOptions, KraftVerifier, KraftVerifyResult
from planner.execution.kraftstore import Store, check_lease
from planner.execution.progress import Progress


def check_request(req: Any) -> None:
    if req.zk is not None:
        raise BadInput("give either a ZooKeeper connect string or Kafka bootstrap servers, not both")
    check_bootstrap(req.bootstrap, req.kafka_timeout)
    check_lease(req.lease)


def check_bootstrap(bootstrap: str, kafka_timeout: float) -> None:
    """The bootstrap servers and the brokers' answer timeout, checked before any connection."""
    from planner.snapshot import check_bootstrap as check

    check(bootstrap)
    if not kafka_timeout > 0:
        raise BadInput(f"kafka_timeout must be positive, got {kafka_timeout}")


@contextmanager
def session(req: Any) -> Iterator[Store]:
    """A Store on the cluster at req.bootstrap, its Admin client connected and the cluster checked to be KRaft
    (admin_reader's refusals); closed on the way out."""
    from planner.admin_reader import AdminClusterReader
    from planner.errors import KafkaUnavailable
    from planner.kafka_admin import KafkaSecurity
    from planner.kraft_admin import connect

    security = req.kafka or KafkaSecurity()
    reader = AdminClusterReader(req.bootstrap, security, req.kafka_timeout)
    try:
        reader.admin = connect(req.bootstrap, security.client_config(), req.kafka_timeout)
    except KafkaUnavailable:
        reader._refuse_zookeeper_address()
        reader._refuse_credentials()
        raise
    store = Store(req.bootstrap, security, req.kafka_timeout, getattr(req, "lease", 30.0), admin=reader.admin)
    try:
        reader._check_kraft()
        yield store
    finally:
        store.close()


def apply(req: Any, plan: Any, folder: Path | None, progress: Callable[[Progress], None] | None,
          run: str | None = None) -> Any:
    """The KRaft executor's apply (the caller, planner.execution.steps, writes outcome.json). `run`: named in a
    drain's or return's brokers' maintenance state."""
    opts = KraftOptions(throttle=req.throttle, poll=req.poll, wait=req.wait, lock_wait=req.lock_wait,
                        dry_run=req.dry_run, lease=req.lease, stop=req.stop, bootstrap=req.bootstrap,
                        progress_file=folder / "progress.json" if folder is not None else None,
                        run=run, reason=req.reason)
    with session(req) as store:
        return KraftExecutor(store, plan, opts, progress, "apply").apply()


def cancel(req: Any, plan: Any, folder: Path, progress: Callable[[Progress], None] | None) -> Any:
    opts = KraftOptions(poll=req.poll, lease=req.lease, progress_file=folder / "progress.json",
                        bootstrap=req.bootstrap)
    with session(req) as store:
        return KraftExecutor(store, plan, opts, progress, "cancel").cancel(req.wait)


def verify(req: Any, plan: Any, report: Path, prog: Path, progress: Callable[[Progress], None] | None
           ) -> KraftVerifyResult:
    with session(req) as store:
        return KraftVerifier(store, plan, wait=req.wait, poll=req.poll, elect=req.elect, lease=req.lease,
                             report=report, progress_file=prog, progress=progress, since=req.since).verify()


def probe(req: Any, plan: Any) -> dict[str, Any]:
    from planner.execution.kraftcluster import AdminCluster
    from planner.execution.kraftexec import probe as one_pass

    with session(req) as store:
        return one_pass(AdminCluster(store.admin()), plan)
