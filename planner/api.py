"""The library facade: one entry per step, each taking a request and returning an outcome (docs/LIBRARY.md).

    snapshot(SnapshotRequest)      -> SnapshotOutcome    ZooKeeper -> snapshot folder
    risk(RiskRequest)              -> RiskOutcome        snapshot (+ plan) -> risk folder (Spark)
    plan_drain(DrainRequest)       -> PlanOutcome        snapshot -> plan folder (OR-Tools)
    plan_rebalance(RebalanceRequest) -> PlanOutcome
    plan_return(ReturnRequest)     -> PlanOutcome        drained brokers back: replicas moved only onto them
    plan_restart(RestartRequest)   -> PlanOutcome        snapshot -> restart plan (temporary replicas, the roll)
    apply(ApplyRequest)            -> ApplyOutcome       plan folder -> the cluster, batch by batch (ZooKeeper)
    verify(VerifyRequest)          -> VerifyOutcome      converged? elect, remove throttles, report.json
    verify_probe(VerifyRequest)    -> dict               converged yet? one read-only pass (a deferred wait)
    cancel(CancelRequest)          -> CancelOutcome      stop (or revert) a running apply
    brokers(BrokersRequest)        -> BrokerRow, ...     brokers and their maintenance state (read-only;
                                                         ZooKeeper, KRaft or a snapshot)
    clear_maintenance(ClearRequest) -> ClearOutcome      the explicit act that ends a broker's maintenance
    carry_maintenance(CarryRequest) -> CarryOutcome      a migration's maintenance znodes copied into __kplan
    roll(RollRequest)              -> RollOutcome        a restart plan carried out, broker by broker
    read_snapshot(path), read_plan(path), RunFolder

The `kplan` CLI, the Airflow tasks and the review UI all call these, so the same request gives the same
result (and the same plan id) whoever asks. Requests and outcomes are frozen dataclasses with plain fields,
defined in planner.requests (the layers below take them as they are) and re-exported here: an Airflow operator
builds one from its parameters, the CLI from argparse.

Importing this module is cheap: nothing heavier than the standard library and the plan model is loaded until
a step runs (a test checks that ortools, pyspark, kazoo and airflow stay unloaded).

Errors: every entry raises planner.errors types. `BadInput` (exit 2, not retryable: nothing was written),
`ZkUnavailable` (retryable: ZooKeeper down or the session lost), `SafetyRefusal` / `KraftMigration` (exit 1),
`NotConverged` (exit 1). Each step writes its folder completely or not at all (planner.runfolder).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from planner.errors import (
    BadInput,
    KraftMigration,
    NextStep,
    NotConverged,
    NoThrottle,
    NotYourTurn,
    PlannerError,
    RollStopped,
    SafetyRefusal,
    WrongPlanKind,
    ZkUnavailable,
)
from planner.intent import next_steps as intent_steps
from planner.plan_model import ApplySchedule, Plan, apply_schedule, read_plan
from planner.requests import (
    MIN_THROTTLE,
    ApplyOutcome,
    ApplyRequest,
    BrokerRow,
    BrokersRequest,
    CancelOutcome,
    CancelRequest,
    CarryOutcome,
    CarryRequest,
    ClearOutcome,
    ClearRequest,
    DrainRequest,
    PlanOutcome,
    Progress,
    ProgressFn,
    RebalanceRequest,
    RestartRequest,
    ReturnRequest,
    RiskOutcome,
    RiskRequest,
    RiskSubmit,
    RollOutcome,
    RollRequest,
    SnapshotOutcome,
    SnapshotRequest,
    VerifyOutcome,
    VerifyRequest,
)
from planner.runfolder import RunFolder, check_output, step_complete, step_output

if TYPE_CHECKING:
    from planner.kafka_admin import KafkaSecurity
    from planner.snapshot_io import Snapshot

__all__ = ["ApplySchedule", "MIN_THROTTLE", "Plan", "ProgressFn",
    "BadInput", "KraftMigration", "NextStep", "NoThrottle", "NotConverged", "NotYourTurn", "PlannerError", "RiskSubmit", "RollStopped",
    "SafetyRefusal", "WrongPlanKind", "ZkUnavailable", "roll_status",
    "risk_submit",
    "ApplyOutcome", "ApplyRequest", "CancelOutcome", "CancelRequest", "DrainRequest", "PlanOutcome", "Progress",
    "RebalanceRequest", "RestartRequest", "ReturnRequest", "RollOutcome", "RollRequest", "roll", "RiskOutcome", "BrokerRow", "BrokersRequest", "ClearOutcome",
    "ClearRequest", "brokers", "clear_maintenance", "CarryRequest", "CarryOutcome", "carry_maintenance", "RiskRequest", "RunFolder", "SnapshotOutcome", "SnapshotRequest",
    "VerifyOutcome", "VerifyRequest", "apply", "apply_schedule", "bootstrap_servers", "cancel", "kafka_security", "plan_drain", "plan_rebalance", "plan_restart", "plan_return",
    "read_plan",
    "read_snapshot", "refuse_kraft_write", "reread", "risk", "snapshot", "step_complete", "verify", "verify_probe", "verify_report_text", "human_size", "human_duration",
]

log = logging.getLogger(__name__)


def _reporter(step: str, progress: ProgressFn | None) -> Callable[[str], None]:
    """The library's progress callback: log the message (Airflow task logs see it) and pass it on."""
    logger = logging.getLogger(f"planner.{step}")

    def say(message: str, done: int | None = None, total: int | None = None) -> None:
        logger.info("%s", message)
        if progress is not None:
            progress(Progress(step, message, done, total))

    return say


def read_snapshot(path: Path | str) -> Snapshot:
    """A snapshot folder, checked (format, schemas); see planner.snapshot_io."""
    from planner.snapshot_io import read_snapshot as _read

    return _read(path)


# ------------------------------------------------------------------------------------------ snapshot
def snapshot(req: SnapshotRequest, *, progress: ProgressFn | None = None) -> SnapshotOutcome:
    """Read the cluster at `req.zk` (ZooKeeper mode) or `req.bootstrap` (KRaft, through the Admin API) into the
    folder `req.out` (never writes to the cluster)."""
    import time

    from planner import zk as zkmod
    from planner.plan_model import frozen
    from planner.snapshot import take_snapshot

    if not req.timeout > 0:
        raise BadInput(f"timeout must be positive, got {req.timeout}")
    if not req.kafka_timeout > 0:
        raise BadInput(f"kafka_timeout must be positive, got {req.kafka_timeout}")
    if req.sizes_from not in ("brokers", "none"):
        raise BadInput(f"sizes_from must be brokers or none, not {req.sizes_from!r}")
    if req.workers is not None and req.workers < 1:
        raise BadInput(f"workers must be at least 1, got {req.workers}")
    if (req.zk is None) == (req.bootstrap is None):
        raise BadInput("give either a ZooKeeper connect string or Kafka bootstrap servers, not both")
    if req.zk is not None:
        zkmod.parse_connect(req.zk)
        if req.sizes is None and req.sizes_from == "brokers":
            from planner.extras import require

            require("kafka", "reading sizes from the brokers (DescribeLogDirs)",
                    "take the snapshot with a sizes file, or with none")
    else:
        from planner.extras import require
        from planner.snapshot import check_bootstrap

        check_bootstrap(req.bootstrap)
        require("kafka", "reading a KRaft cluster through the Admin API")
    inputs = (Path(req.sizes),) if req.sizes is not None else ()
    check_output(Path(req.out), req.force, inputs)
    say = _reporter("snapshot", progress)
    started = time.monotonic()
    with step_output(req.out, req.force, inputs) as tmp:
        result = take_snapshot(req.zk, tmp, sizes=req.sizes, lenient=req.lenient, timeout=req.timeout,
                               auth=req.auth, workers=req.workers, read_mode=req.read_mode, progress=say,
                               sizes_from=req.sizes_from, kafka=req.kafka, partial_sizes=req.partial_sizes,
                               kafka_timeout=req.kafka_timeout, bootstrap=req.bootstrap)
    m = result.manifest
    return SnapshotOutcome(Path(req.out), m["fingerprint"], frozen(m["counts"]), frozen(m["warnings"]),
                           frozen(m), time.monotonic() - started)


def bootstrap_servers(text: str | None) -> str:
    """Kafka bootstrap servers, HOST:PORT[,HOST:PORT...], normalized; BadInput (one line) otherwise, e.g. for a
    ZooKeeper connect string with a chroot (an Airflow Kafka connection's bootstrap.servers is checked here)."""
    from planner.snapshot import check_bootstrap

    return check_bootstrap(text)


def kafka_security(config: Mapping[str, Any], listener: str | None = None) -> KafkaSecurity:
    """How to reach the brokers, from librdkafka-style keys (an Airflow Kafka connection's extra)."""
    from planner.kafka_admin import KafkaSecurity as _KS

    return _KS.from_config(config, listener)


# ---------------------------------------------------------------------------------------------- risk
def risk(req: RiskRequest, *, progress: ProgressFn | None = None, spark: Any = None) -> RiskOutcome:
    """Score what the requested drains (or the sweep) would break; writes summary.json + Parquet to `req.out`.
    `spark`: an existing SparkSession to run in (default: a new local one, or spark-submit)."""
    from planner import risk as risk_lib
    from planner.plan_model import frozen
    from planner.risk_run import run_risk

    inputs = tuple(Path(p) for p in (req.snapshot, req.plan, req.plan_snapshot) if isinstance(p, str | Path))
    check_output(Path(req.out), req.force, inputs)
    say = _reporter("risk", progress)
    prepared = risk_lib.prepare(req, kraft_ok=True)
    if spark is None:
        from planner.extras import require

        require("spark", "the risk job (Spark)")
    with step_output(req.out, req.force, inputs) as tmp:
        if req.zk is None and req.bootstrap is None:
            summary = run_risk(replace(req, out=tmp), prepared, spark=spark, progress=say)
        else:
            with reread(replace(req, out=tmp), Path(req.out), progress=progress) as run_req:
                summary = run_risk(run_req, risk_lib.prepare(run_req, kraft_ok=True), spark=spark, progress=say)
            summary = json.loads((tmp / "summary.json").read_text())
    return RiskOutcome(Path(req.out), summary["level"], frozen(summary["level_by_state"]), summary)


@contextmanager
def reread(req: RiskRequest, final: Path, *, progress: ProgressFn | None = None) -> Iterator[RiskRequest]:
    """Read the cluster at `req.zk` (or `req.bootstrap`, KRaft) again and yield the request that scores `req.plan`
    on that read
    (snapshot = the read, plan_snapshot = the snapshot the plan was made from). `req.out` is the step's
    temporary output folder and `final` the folder it becomes: once the block has written the job's output,
    the read is kept in it as `cluster/` (summary.json names it there). For schedulers that submit the job
    themselves (Airflow) as for `risk`."""
    import shutil

    if req.plan is None or (req.zk is None and req.bootstrap is None):
        raise BadInput("re-reading the cluster for the risk (zk or bootstrap) needs a plan to score on it")
    tmp = Path(req.out)
    cluster = tmp.parent / f"{tmp.name}-cluster"   # beside the job's output folder: an input, not inside it
    try:
        snapshot(SnapshotRequest(zk=req.zk, bootstrap=req.bootstrap, kafka=req.kafka, out=cluster, auth=req.auth,
                                 timeout=req.timeout), progress=progress)
        yield replace(req, snapshot=cluster, plan_snapshot=Path(req.snapshot), zk=None, auth=None, bootstrap=None,
                      kafka=None)
        os.rename(cluster, tmp / "cluster")
        path = tmp / "summary.json"
        doc = json.loads(path.read_text())
        kept = str(Path(final).absolute() / "cluster")
        doc["snapshot"]["path"] = kept
        if doc.get("reread"):
            doc["reread"]["cluster"]["path"] = kept
        path.write_text(json.dumps(doc, indent=1) + "\n")
    finally:
        shutil.rmtree(cluster, ignore_errors=True)


def risk_submit(req: RiskRequest) -> RiskSubmit:
    """Validate `req` exactly as `risk` does (BadInput, nothing written, no JVM) and describe its submit.
    The caller runs spark-submit with its own master; the job writes `req.out` (give it a temporary folder
    and rename it on success, as `risk` does through runfolder.step_output)."""
    from planner import risk as risk_lib
    from planner.risk_args import to_args
    from planner.risk_run import job_entry
    from planner.spark import settings

    if (req.zk is not None or req.bootstrap is not None) and req.plan is None:
        raise BadInput("re-reading the cluster for the risk (zk or bootstrap) needs a plan to score on it")
    risk_lib.prepare(req, kraft_ok=True)    # the job's entry runs a KRaft snapshot's rules too
    if req.zk is not None or req.bootstrap is not None:   # the job reads snapshots, never a cluster: api.reread first
        req = replace(req, zk=None, auth=None, bootstrap=None, kafka=None)
    return RiskSubmit(job_entry(), tuple(to_args(req)), MappingProxyType(settings.submit_conf()),
                      settings.driver_memory(req.driver_memory))


# ---------------------------------------------------------------------------------------------- plan
def plan_drain(req: DrainRequest, *, progress: ProgressFn | None = None) -> PlanOutcome:
    """Move every replica off `req.brokers` with the fewest moves, balanced; writes the plan folder."""
    from planner.plan_step import run_plan

    return run_plan("drain", req, _reporter("plan", progress))


def plan_rebalance(req: RebalanceRequest, *, progress: ProgressFn | None = None) -> PlanOutcome:
    """Level replicas (or bytes) and preferred leaders over the registered brokers; writes the plan folder."""
    from planner.plan_step import run_plan

    return run_plan("rebalance", req, _reporter("plan", progress))


def plan_return(req: ReturnRequest, *, progress: ProgressFn | None = None) -> PlanOutcome:
    """Move replicas back onto drained brokers that have returned (only onto them); writes the plan folder.
    Its apply marks them `returning`; its verify restores preferred leadership and takes them out of
    maintenance."""
    from planner.plan_step import run_plan

    return run_plan("return", req, _reporter("plan", progress))


def plan_restart(req: RestartRequest, *, progress: ProgressFn | None = None) -> PlanOutcome:
    """The smallest temporary change that keeps every partition online, at or above min ISR and cleanly
    electable while each of `req.brokers` is down in turn, the roll's order and each step's demotion; writes
    the plan folder (docs/PLAN.md "Restart plans")."""
    from planner.restart_step import run_restart

    return run_restart(req, _reporter("plan", progress))


# ------------------------------------------------------------------------------- apply / verify / cancel
def _exec_progress(step: str, progress: ProgressFn | None) -> Callable[[Any], None] | None:
    if progress is None:
        return None

    def relay(p: Any) -> None:
        progress(Progress(step, p.message, p.done, p.total, p.as_dict()))

    return relay


def refuse_kraft_write(plan: Any, step: str, bootstrap: str | None = None) -> None:
    """The plan's backend (plan.json's snapshot.backend) and the cluster the request names must agree: a plan made
    from a KRaft snapshot is applied, verified, cancelled and rolled through the cluster's bootstrap servers (the
    Admin API, docs/KRAFT.md), a ZooKeeper one through ZooKeeper. BadInput (exit 2) before anything is read from or
    written to a cluster."""
    backend = (plan.snapshot or {}).get("backend", "zookeeper")
    if backend != "zookeeper" and bootstrap is None:
        raise BadInput(f"plan {plan.id[:19]} was made from a KRaft snapshot: {step} on KRaft needs the Admin API writer, "
                       "through the cluster's bootstrap servers (not a ZooKeeper connect string); nothing was written")
    if backend == "zookeeper" and bootstrap is not None:
        raise BadInput(f"plan {plan.id[:19]} was made from a ZooKeeper snapshot: {step} it through its ZooKeeper "
                       "connect string, not bootstrap servers; nothing was written")


def apply(req: ApplyRequest, *, progress: ProgressFn | None = None) -> ApplyOutcome:
    """Apply the reviewed plan through ZooKeeper (docs/APPLY.md): lock, preflight, throttles, one batch at a
    time; resumes a recorded run. Raises SafetyRefusal (refused, nothing written), NotConverged (`wait` ran
    out; the run is recorded and resumable), ZkUnavailable (retryable), BadInput."""
    from planner.execution import steps
    from planner.plan_model import apply_schedule

    if req.throttle is not None and (isinstance(req.throttle, bool) or not isinstance(req.throttle, int)
                                     or req.throttle < 1):
        raise BadInput(f"throttle must be a rate of at least 1 byte/s, got {req.throttle!r} (a throttle of 0 "
                       "would stall the copy; to copy without one, say no_throttle)")
    if req.throttle is not None and req.no_throttle:
        raise BadInput("give either a throttle or no_throttle, not both")
    plan = read_plan(req.plan)
    refuse_kraft_write(plan, "apply", req.bootstrap)
    refusal = apply_schedule(plan, req.throttle, req.no_throttle).refusal if plan.kind != "restart" else None
    if refusal and not req.dry_run:      # a dry run copies nothing (it lists the writes, with no rate); a restart
        # plan is refused further on: it is run whole by the roll
        raise NoThrottle(refusal)
    return steps.apply(req, progress=_exec_progress("apply", progress))


def verify(req: VerifyRequest, *, progress: ProgressFn | None = None) -> VerifyOutcome:
    """Wait until the cluster has converged to the plan, elect preferred leaders, remove the run's throttles,
    write report.json. Raises NotConverged on timeout (with `fail=True`), naming each stalled partition; with
    `fail=False` returns converged=False with the same text as `message`."""
    from planner.execution import steps

    refuse_kraft_write(read_plan(req.plan), "verify", req.bootstrap)
    r = steps.verify(req, progress=_exec_progress("verify", progress))
    if r.converged:
        return VerifyOutcome(r.path, r.plan_id, True, (), tuple(r.warnings), r.report, r.message)
    if req.fail:
        raise NotConverged(r.message, next_steps=intent_steps(r.report.get("intent")))
    report = r.report
    pending = tuple((s["partition"].rsplit("-", 1)[0], int(s["partition"].rsplit("-", 1)[1]))
                    for s in report.get("stalled", ()))
    return VerifyOutcome(r.path, report.get("plan_id", ""), False, pending, tuple(report.get("warnings", ())),
                         report, r.message)


def verify_probe(req: VerifyRequest) -> dict[str, Any]:
    """One read-only look at whether the cluster has converged to the plan (verify's own test, one pass; no
    lock, no write, no file): what a deferred wait polls before `verify` finishes the job. Returns
    {"status": "converged" | "waiting", "converged": n, "total": n, "reassigning": bool,
    "leaders_on_preferred": n, "pending": [up to 20 partitions]}, or {"status": "failed", "message": ...} for an
    error no retry mends (the plan folder changed, not a Kafka cluster, ...). ZkUnavailable (retryable) is
    raised: try again later. Uses req.zk, req.plan, req.auth, req.timeout."""
    from planner.execution import steps

    try:
        refuse_kraft_write(read_plan(req.plan), "verify", req.bootstrap)
        return steps.verify_probe(req)
    except PlannerError as e:
        if e.retryable:
            raise
        return {"status": "failed", "message": str(e)}


# ------------------------------------------------------------------------------------ maintenance state
def brokers(req: BrokersRequest) -> tuple[BrokerRow, ...]:
    """Every broker that is registered or in maintenance, with its rack and maintenance state (read-only)."""
    from planner import maintenance as mt

    if sum(x is not None for x in (req.zk, req.bootstrap, req.snapshot)) != 1:
        raise BadInput("give exactly one of a ZooKeeper connect string (zk), Kafka bootstrap servers (bootstrap) "
                       "or a snapshot folder")
    if req.snapshot is not None:
        snap = read_snapshot(req.snapshot)
        rows = mt.statuses_in_snapshot(snap.brokers, snap.manifest)
    elif req.bootstrap is not None:
        from planner import maintenance_kraft
        from planner.execution import kraftsteps

        kraftsteps.check_bootstrap(req.bootstrap, req.kafka_timeout)
        with kraftsteps.session(req) as store:
            rows = maintenance_kraft.statuses(store)
    else:
        from planner import maintenance_zk
        from planner import zk as zkmod

        with zkmod.session(req.zk, auth=req.auth, timeout=req.timeout) as client:
            rows = maintenance_zk.statuses(client)
    return tuple(BrokerRow(r.broker, r.rack, r.registered, r.state, *(
        (r.entry.since, r.entry.who, r.entry.reason or None, r.entry.plan_id, r.entry.run) if r.entry else ()))
        for r in rows)


def clear_maintenance(req: ClearRequest) -> ClearOutcome:
    """Take `req.brokers` out of maintenance: one transaction under the apply lock (ZooKeeper) or the fence
    (KRaft). Refused, with nothing written, for a broker with no state, an unknown broker, another state than
    `req.state`, and a state a running apply holds (SafetyRefusal)."""
    from planner import maintenance as mt

    if (req.zk is None) == (req.bootstrap is None):
        raise BadInput("give either a ZooKeeper connect string (zk) or Kafka bootstrap servers (bootstrap), "
                       + ("not both" if req.zk else "one of them"))
    ids = mt.clear_args(req.brokers, req.state)
    if req.bootstrap is not None:
        from planner import maintenance_kraft
        from planner.execution import kraftsteps

        kraftsteps.check_request(req)
        with kraftsteps.session(req) as store:
            changed = maintenance_kraft.clear(store, ids, expect=req.state, reason=req.reason)
    else:
        from planner import maintenance_zk
        from planner import zk as zkmod

        zkmod.parse_connect(req.zk)
        with zkmod.session(req.zk, auth=req.auth, timeout=req.timeout) as client:
            zkmod.require_kafka(client)   # a mistyped chroot is named as such, before anything is written
            changed = maintenance_zk.clear(client, ids, expect=req.state, reason=req.reason)
    cleared = tuple((c.broker, c.before.state if c.before else "in service") for c in changed)
    text = ", ".join(f"broker {b} was {st}" for b, st in cleared)
    return ClearOutcome(cleared, f"cleared: {text}; now in service")


def carry_maintenance(req: CarryRequest) -> CarryOutcome:
    """Read the brokers' maintenance znodes (ZooKeeper, read only) and write the same entries into `__kplan`
    through the KRaft brokers (maintenance_kraft.carry: one fenced transaction; a differing state refused with
    nothing written). For a ZooKeeper-to-KRaft migration once its brokers run in KRaft mode (docs/KRAFT.md
    "Migration")."""
    from planner import maintenance_kraft, maintenance_zk
    from planner import zk as zkmod
    from planner.execution import kraftsteps

    zkmod.parse_connect(req.zk)
    kraftsteps.check_bootstrap(req.bootstrap, req.kafka_timeout)
    kraftsteps.check_lease(req.lease)
    with zkmod.session(req.zk, auth=req.auth, timeout=req.timeout) as client:
        zkmod.require_kafka(client)
        entries = dict(maintenance_zk.read_all(client).entries)
    if not entries:
        return CarryOutcome((), (), "ZooKeeper holds no maintenance state: nothing to carry")
    with kraftsteps.session(req) as store:
        carried = maintenance_kraft.carry(store, entries)
    done = tuple((b, entries[b].state) for b in carried)
    kept = tuple((b, e.state) for b, e in sorted(entries.items()) if b not in carried)
    parts = ([("carried into __kplan: " + ", ".join(f"broker {b} {st}" for b, st in done))] if done else []) + (
        [("already in __kplan: " + ", ".join(f"broker {b} {st}" for b, st in kept))] if kept else [])
    return CarryOutcome(done, kept, "; ".join(parts))


def human_duration(seconds: float | None, unknown: str = "unknown") -> str:
    """A duration as every kplan output shows it ('45 s', '12 min', '3 h 05 min')."""
    from planner.text import duration

    return duration(seconds, unknown)


def human_size(n: float | None, unknown: str = "?") -> str:
    """Bytes as every kplan output shows them (binary units: '68.7 MiB'), for callers that present sizes."""
    from planner.text import size

    return size(n, unknown)


def verify_report_text(report: Mapping[str, Any]) -> str:
    """A report.json as `kplan verify` prints it (a table), for callers that present it: the Airflow report
    task and the demo."""
    from planner.execution.verify import table

    return table(dict(report))


def cancel(req: CancelRequest, *, progress: ProgressFn | None = None) -> CancelOutcome:
    """Stop an apply after its batch in flight (or revert that batch), remove the throttles, release the lock
    and record the state. NotConverged when the batch in flight did not finish within `wait`."""
    from planner.execution import steps

    refuse_kraft_write(read_plan(req.plan), "cancel", req.bootstrap)
    r = steps.cancel(req, progress=_exec_progress("cancel", progress))
    return CancelOutcome(r.plan_id, r.state, tuple(r.reverted), tuple(r.warnings), r.message)


# ---------------------------------------------------------------------------------------------- roll
def roll(req: RollRequest, *, progress: ProgressFn | None = None, restart: Callable[[int], None] | None = None,
         mark: str | None = None, reason: str = "") -> RollOutcome:
    """Carry out a restart plan (docs/APPLY.md "Restart rolls"): temporary replicas, then per broker its
    demotion, its restart (`restart_command`, `restart` (a callable, for embedders), or someone else), the
    gates and its leadership restored, then the undo. Locked like apply and resumable; stops at the first
    failed gate (NotConverged / SafetyRefusal, exit 1) saying what to do next. `mark` ("paused", "running",
    "stopped", with a `reason`) records a person's say between brokers instead of running anything."""
    from planner.execution.roll import roll_folder, roll_step

    def relay(p: Any) -> None:
        if progress is not None:
            progress(Progress("roll", p.message, p.done, p.total, p.as_dict()))

    refuse_kraft_write(read_plan(req.plan), "roll", req.bootstrap)
    r = roll_step(req, progress=relay, restart=restart, mark=(mark, reason) if mark is not None else None)
    return RollOutcome(roll_folder(req.plan, req.out), r.plan_id, r.state, r.steps_done, r.steps_total, r.message,
                       tuple(r.warnings), tuple(r.cannot_move), r.kept_temporary, r.resumed, r.seconds, r.broker,
                       r.czxid)


def roll_status(zk: str, plan: Path, *, auth: tuple[str, str] | None = None, timeout: float = 10.0
                ) -> dict[str, Any]:
    """A restart roll as recorded in the cluster (read-only, no lock): state, phase, each step's state and
    its broker's registration before the restart, and every roll broker's registration now (ZooKeeper czxid,
    None when not registered): what a deferred task watches for (a broker that left and registered again,
    a step's turn)."""
    from planner import zk as zkmod
    from planner.execution.roll import status

    plan_model = read_plan(plan)
    with zkmod.session(zk, auth=auth, timeout=timeout) as client:
        return status(client, plan_model)
