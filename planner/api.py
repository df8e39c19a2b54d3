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
    brokers(BrokersRequest)        -> BrokerRow, ...     brokers and their maintenance state (read-only)
    clear_maintenance(ClearRequest) -> ClearOutcome      the explicit act that ends a broker's maintenance
    roll(RollRequest)              -> RollOutcome        a restart plan carried out, broker by broker
    read_snapshot(path), read_plan(path), RunFolder

The `kplan` CLI, the Airflow tasks and the review UI all call these, so the same request gives the same
result (and the same plan id) whoever asks. Requests and outcomes are frozen dataclasses with plain fields:
an Airflow operator builds one from its parameters, the CLI from argparse.

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
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from planner.errors import (
    BadInput,
    KraftMigration,
    NotConverged,
    NotYourTurn,
    PlannerError,
    RollStopped,
    SafetyRefusal,
    ZkUnavailable,
)
from planner.plan_model import ApplySchedule, Plan, apply_schedule, read_plan
from planner.runfolder import RunFolder, check_output, step_output

if TYPE_CHECKING:
    from planner.kafka_admin import KafkaSecurity
    from planner.snapshot_io import Snapshot

__all__ = ["ApplySchedule",
    "BadInput", "KraftMigration", "NotConverged", "NotYourTurn", "PlannerError", "RiskSubmit", "RollStopped",
    "SafetyRefusal", "ZkUnavailable", "roll_status",
    "risk_submit",
    "ApplyOutcome", "ApplyRequest", "CancelOutcome", "CancelRequest", "DrainRequest", "PlanOutcome", "Progress",
    "RebalanceRequest", "RestartRequest", "ReturnRequest", "RollOutcome", "RollRequest", "roll", "RiskOutcome", "BrokerRow", "BrokersRequest", "ClearOutcome",
    "ClearRequest", "brokers", "clear_maintenance", "RiskRequest", "RunFolder", "SnapshotOutcome", "SnapshotRequest",
    "VerifyOutcome", "VerifyRequest", "apply", "apply_schedule", "cancel", "kafka_security", "plan_drain", "plan_rebalance", "plan_restart", "plan_return",
    "read_plan",
    "read_snapshot", "reread", "risk", "snapshot", "verify", "verify_probe", "verify_report_text", "human_size", "human_duration",
]

log = logging.getLogger(__name__)
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Mapping[str, Any]:
    return _EMPTY


@dataclass(frozen=True)
class Progress:
    """What a step is doing now. `done`/`total` are set when the step knows how far it is."""

    step: str
    message: str
    done: int | None = None
    total: int | None = None
    detail: Mapping[str, Any] = field(default_factory=_empty)   # step-specific figures (apply: bytes, rate, ETA)


ProgressFn = Callable[[Progress], None]


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
@dataclass(frozen=True)
class SnapshotRequest:
    zk: str                                   # HOST:PORT[,HOST:PORT...][/chroot]
    out: Path
    sizes: Path | None = None                 # kafka-log-dirs.sh --describe output
    lenient: bool = False                     # malformed znodes become manifest warnings instead of errors
    timeout: float = 10.0                     # seconds to wait for ZooKeeper to answer the connection
    auth: tuple[str, str] | None = field(default=None, repr=False)   # digest user, password (never logged)
    workers: int | None = None
    read_mode: str = "auto"                   # auto | multiread | plain
    force: bool = False                       # replace a non-empty `out`
    # Sizes and disk capacity (docs/SNAPSHOT.md "Sizes"): from the brokers (DescribeLogDirs) unless `sizes`
    # is given (the override) or sizes_from="none" (count-only); `kafka` is how to reach them (secrets inside
    # are never logged nor shown in a repr); `partial_sizes` accepts brokers that do not answer and log dirs
    # in error, naming them in the manifest's warnings.
    sizes_from: str = "brokers"               # brokers | none
    kafka: KafkaSecurity | None = field(default=None, repr=False)
    partial_sizes: bool = False
    kafka_timeout: float = 10.0


@dataclass(frozen=True)
class SnapshotOutcome:
    path: Path
    fingerprint: str
    counts: Mapping[str, int]
    warnings: tuple[Mapping[str, str], ...]
    manifest: Mapping[str, Any] = field(default_factory=_empty, repr=False)
    seconds: float = 0.0


def snapshot(req: SnapshotRequest, *, progress: ProgressFn | None = None) -> SnapshotOutcome:
    """Read the cluster at `req.zk` into the folder `req.out` (never writes to ZooKeeper)."""
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
    zkmod.parse_connect(req.zk)
    inputs = (Path(req.sizes),) if req.sizes is not None else ()
    check_output(Path(req.out), req.force, inputs)
    say = _reporter("snapshot", progress)
    started = time.monotonic()
    with step_output(req.out, req.force, inputs) as tmp:
        result = take_snapshot(req.zk, tmp, sizes=req.sizes, lenient=req.lenient, timeout=req.timeout,
                               auth=req.auth, workers=req.workers, read_mode=req.read_mode, progress=say,
                               sizes_from=req.sizes_from, kafka=req.kafka, partial_sizes=req.partial_sizes,
                               kafka_timeout=req.kafka_timeout)
    m = result.manifest
    return SnapshotOutcome(Path(req.out), m["fingerprint"], frozen(m["counts"]), frozen(m["warnings"]),
                           frozen(m), time.monotonic() - started)


def kafka_security(config: Mapping[str, Any], listener: str | None = None) -> KafkaSecurity:
    """How to reach the brokers, from librdkafka-style keys (an Airflow Kafka connection's extra)."""
    from planner.kafka_admin import KafkaSecurity as _KS

    return _KS.from_config(config, listener)


# ---------------------------------------------------------------------------------------------- risk
@dataclass(frozen=True)
class RiskRequest:
    snapshot: Path                            # snapshot folder (tests may pass an in-memory Snapshot)
    out: Path
    drains: tuple[tuple[int, ...], ...] = ()  # each a drain set, brokers in rolling order
    drain_racks: tuple[str, ...] = ()
    all_brokers: bool = False                 # also every live broker alone (default when no drain given)
    all_racks: bool = False                   # also every rack (default when no drain given)
    modes: tuple[str, ...] = ("controlled", "failure")
    plan: Path | None = None                  # also score the scenarios on this plan's target assignment
    kafka_version: str = "3.7"                # whose min-ISR rule applies
    session_timeout_s: float = 18.0           # zookeeper.session.timeout.ms: a kill's unavailability window
    master: str | None = None                 # Spark master (default $SPARK_MASTER or local[2])
    driver_memory: str | None = None
    spark_submit: bool = False                # run the job through spark-submit instead of in-process
    force: bool = False
    # With a plan: read the cluster again first (`zk`) and score the plan on it, so that whatever appeared
    # since the snapshot counts (a drain's intent is checked too). The read lands in `out`/cluster and the
    # job gets it as `snapshot`, with the snapshot the plan was made from as `plan_snapshot`.
    zk: str | None = None
    auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout: float = 10.0                     # ZooKeeper connection timeout (with zk)
    plan_snapshot: Path | None = None


@dataclass(frozen=True)
class RiskOutcome:
    path: Path
    level: str                                # low | medium | high | critical (worst scenario)
    level_by_state: Mapping[str, str]         # "current" and, with a plan, "plan"
    summary: dict[str, Any] = field(repr=False)   # summary.json as written


def risk(req: RiskRequest, *, progress: ProgressFn | None = None, spark: Any = None) -> RiskOutcome:
    """Score what the requested drains (or the sweep) would break; writes summary.json + Parquet to `req.out`.
    `spark`: an existing SparkSession to run in (default: a new local one, or spark-submit)."""
    from planner import risk as risk_lib
    from planner.plan_model import frozen

    inputs = tuple(Path(p) for p in (req.snapshot, req.plan, req.plan_snapshot) if isinstance(p, str | Path))
    check_output(Path(req.out), req.force, inputs)
    say = _reporter("risk", progress)
    prepared = risk_lib.prepare(req)
    with step_output(req.out, req.force, inputs) as tmp:
        if req.zk is None:
            summary = risk_lib.run_risk(replace(req, out=tmp), prepared, spark=spark, progress=say)
        else:
            with reread(replace(req, out=tmp), Path(req.out), progress=progress) as run_req:
                summary = risk_lib.run_risk(run_req, risk_lib.prepare(run_req), spark=spark, progress=say)
            summary = json.loads((tmp / "summary.json").read_text())
    return RiskOutcome(Path(req.out), summary["level"], frozen(summary["level_by_state"]), summary)


@contextmanager
def reread(req: RiskRequest, final: Path, *, progress: ProgressFn | None = None) -> Iterator[RiskRequest]:
    """Read the cluster at `req.zk` again and yield the request that scores `req.plan` on that read
    (snapshot = the read, plan_snapshot = the snapshot the plan was made from). `req.out` is the step's
    temporary output folder and `final` the folder it becomes: once the block has written the job's output,
    the read is kept in it as `cluster/` (summary.json names it there). For schedulers that submit the job
    themselves (Airflow) as for `risk`."""
    import shutil

    if req.plan is None or req.zk is None:
        raise BadInput("re-reading the cluster for the risk (zk) needs a plan to score on it")
    tmp = Path(req.out)
    cluster = tmp.parent / f"{tmp.name}-cluster"   # beside the job's output folder: an input, not inside it
    try:
        snapshot(SnapshotRequest(zk=req.zk, out=cluster, auth=req.auth, timeout=req.timeout), progress=progress)
        yield replace(req, snapshot=cluster, plan_snapshot=Path(req.snapshot), zk=None, auth=None)
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


@dataclass(frozen=True)
class RiskSubmit:
    """How to run a risk request through spark-submit yourself (Airflow's SparkSubmitOperator does)."""

    application: Path                         # the job's spark-submit entry inside the installed package
    args: tuple[str, ...]                     # the request as the entry's arguments
    conf: Mapping[str, str]                   # Spark properties the job is tuned with (log4j, GC, shuffle...)
    driver_memory: str


def risk_submit(req: RiskRequest) -> RiskSubmit:
    """Validate `req` exactly as `risk` does (BadInput, nothing written, no JVM) and describe its submit.
    The caller runs spark-submit with its own master; the job writes `req.out` (give it a temporary folder
    and rename it on success, as `risk` does through runfolder.step_output)."""
    import os

    from planner import risk as risk_lib
    from planner import risk_job as job
    from planner.risk_args import to_args

    if req.zk is not None and req.plan is None:
        raise BadInput("re-reading the cluster for the risk (zk) needs a plan to score on it")
    risk_lib.prepare(req)
    if req.zk is not None:   # the job reads snapshots, never ZooKeeper: api.reread first
        req = replace(req, zk=None, auth=None)
    conf = {k: v for k, v in job.CONF.items() if k != "spark.driver.memory"}
    conf["spark.driver.extraJavaOptions"] = f"-Dlog4j.configurationFile=file:{job.log4j_file()} {job.JAVA_OPTIONS}"
    memory = req.driver_memory or os.environ.get("KPLAN_SPARK_DRIVER_MEMORY") or job.CONF["spark.driver.memory"]
    return RiskSubmit(risk_lib.job_entry(), tuple(to_args(req)), MappingProxyType(conf), memory)


# ---------------------------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class DrainRequest:
    snapshot: Path
    out: Path
    brokers: tuple[int, ...]                  # brokers to empty
    exclude_topics: str | None = None         # full-match regex of topics the plan must not touch
    rack_aware: bool | None = None            # None: on when brokers have racks
    sizes: Path | None = None                 # {"topic-partition": bytes} or kafka-log-dirs.sh output
    max_concurrent_per_broker: int = 5
    order: str = "smallest-first"             # data batches: smallest-first | largest-first
    leader_scope: str = "touched"             # touched (only partitions the drain moves) | all
    max_leader_changes: int | None = None     # all preferred-leader changes, necessary ones included
    batch_seconds: int = 3600                 # target duration of a batch (its suggested throttle)
    force: bool = False
    max_disk_usage: float = 0.85              # no broker above this fraction of its disk capacity (docs/PLAN.md)


@dataclass(frozen=True)
class RebalanceRequest:
    snapshot: Path
    out: Path
    max_moves: int | None = None
    max_bytes: int | None = None
    balance: str = "auto"                     # auto | count | bytes
    exclude_topics: str | None = None
    rack_aware: bool | None = None
    sizes: Path | None = None
    max_concurrent_per_broker: int = 5
    order: str = "smallest-first"
    leader_scope: str = "all"                 # all | touched (only partitions whose replicas move)
    max_leader_changes: int | None = None
    batch_seconds: int = 3600
    force: bool = False
    max_disk_usage: float = 0.85


@dataclass(frozen=True)
class ReturnRequest:
    """Bring drained brokers back (they must be registered again): replicas move only onto them, the drain's own
    moves reversed where the cluster still matches them, then balanced up to their share (docs/PLAN.md)."""

    snapshot: Path
    out: Path
    brokers: tuple[int, ...]                  # the returning brokers (maintenance state drained or returning)
    drain_plan: Path | None = None            # the drain's plan folder (default: found through the state's run)
    exclude_topics: str | None = None
    rack_aware: bool | None = None
    sizes: Path | None = None
    max_concurrent_per_broker: int = 5
    order: str = "smallest-first"
    leader_scope: str = "touched"             # reversed partitions get their pre-drain order back either way
    max_leader_changes: int | None = None
    batch_seconds: int = 3600
    force: bool = False
    max_disk_usage: float = 0.85              # the returning brokers are filled up to this fraction at most


@dataclass(frozen=True)
class RestartRequest:
    snapshot: Path
    out: Path
    brokers: tuple[int, ...]                  # brokers to restart, one at a time
    order: str = "auto"                       # auto (ascending id, the controller's broker last) | given
    exclude_topics: str | None = None         # full-match regex of topics the plan must not touch
    rack_aware: bool | None = None            # None: on when brokers have racks
    sizes: Path | None = None
    kafka_version: str = "3.7"                # whose min-ISR rule applies (as in RiskRequest)
    max_concurrent_per_broker: int = 5        # the protecting reassignment's batches
    batch_order: str = "smallest-first"
    batch_seconds: int = 3600
    force: bool = False
    max_disk_usage: float = 0.85              # no broker above this fraction of its disk with the temporary replicas


@dataclass(frozen=True)
class PlanOutcome:
    path: Path
    plan_id: str
    plan: Plan = field(repr=False)
    solve: Mapping[str, Any] = field(default_factory=_empty, repr=False)   # solve.json: timings, methods


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
@dataclass(frozen=True)
class ApplyRequest:
    zk: str
    plan: Path                                # a plan folder (read_plan checks it)
    out: Path | None = None                   # apply/ folder: progress.json, outcome.json (default <run>/apply)
    auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout: float = 10.0                     # ZooKeeper connection timeout
    throttle: int | None = None               # bytes/s for data batches (None: the plan's suggestion, if any)
    no_throttle: bool = False                 # copy batches that have no rate at full speed, on purpose
    dry_run: bool = False                     # list every write, make none
    max_concurrent_per_broker: int | None = None   # split the plan's batches further (never raise the limit)
    poll: float = 1.0                         # seconds between checks when no watch fires
    wait: float | None = None                 # give up after this many seconds (None: as long as it takes)
    lock_wait: float = 0.0                    # wait this long for another apply's lock
    reason: str | None = None                 # why (a drain's or return's brokers' maintenance state records it)
    run: str | None = None                    # the run it belongs to, recorded with that state (default: the
    #                                           plan folder's parent, the run folder)
    # Set from another thread or a signal handler (the CLI's Ctrl-C / SIGTERM, Airflow's on_kill) to stop: the
    # batch in flight finishes, this run's throttles go, the run is recorded as stopped (state "interrupted").
    stop: threading.Event | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class ApplyOutcome:
    path: Path | None
    plan_id: str
    state: str                                # completed | already-completed | cancelled | reverted | dry-run |
    #                                           interrupted (a stop request honoured between batches)
    batches_done: int = 0
    batches_total: int = 0
    warnings: tuple[str, ...] = ()
    message: str = ""
    resumed: bool = False                     # a recorded run was continued
    batches_submitted: int = 0                # by this call
    partitions_done: int = 0
    partitions_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0
    seconds: float = 0.0
    writes: tuple[str, ...] = ()              # dry run: every write, in order
    intent: Mapping[str, Any] | None = None   # a drain: its brokers host and lead nothing now? (docs/APPLY.md)


@dataclass(frozen=True)
class VerifyRequest:
    zk: str
    plan: Path
    wait: float = 600.0                       # seconds to wait for convergence (0: check once)
    out: Path | None = None                   # folder for report.json (default: the run folder, <run>/report.json)
    auth: tuple[str, str] | None = field(default=None, repr=False)
    poll: float = 1.0
    elect: bool = True                        # preferred election where the leader is not the target's first
    timeout: float = 10.0                     # ZooKeeper connection timeout (as in every request)
    fail: bool = True                         # raise NotConverged on timeout (False: return converged=False)
    since: float | None = None                # epoch s the wait began, when a deferred wait (verify_probe polled
    #                                           elsewhere) came first: the report's seconds_to_converge count from it


@dataclass(frozen=True)
class VerifyOutcome:
    path: Path | None
    plan_id: str
    converged: bool
    pending: tuple[tuple[str, int], ...] = ()  # partitions not yet at their target
    warnings: tuple[str, ...] = ()
    report: Mapping[str, Any] = field(default_factory=_empty, repr=False)   # report.json as written


@dataclass(frozen=True)
class CancelRequest:
    zk: str
    plan: Path
    auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout: float = 10.0                     # ZooKeeper connection timeout
    revert: bool = False                      # move the batch in flight back once it has finished
    wait: float = 300.0                       # seconds to wait for the batch in flight / the running apply
    poll: float = 1.0
    out: Path | None = None                   # apply/ folder (default <run>/apply)


@dataclass(frozen=True)
class CancelOutcome:
    plan_id: str
    state: str                                # cancelled | reverted | completed | none (nothing to cancel)
    rolled_back: tuple[tuple[str, int], ...] = ()
    warnings: tuple[str, ...] = ()
    message: str = ""


def _exec_progress(step: str, progress: ProgressFn | None) -> Callable[[Any], None] | None:
    if progress is None:
        return None

    def relay(p: Any) -> None:
        progress(Progress(step, p.message, p.done, p.total, p.as_dict()))

    return relay


def apply(req: ApplyRequest, *, progress: ProgressFn | None = None) -> ApplyOutcome:
    """Apply the reviewed plan through ZooKeeper (docs/APPLY.md): lock, preflight, throttles, one batch at a
    time; resumes a recorded run. Raises SafetyRefusal (refused, nothing written), NotConverged (`wait` ran
    out; the run is recorded and resumable), ZkUnavailable (retryable), BadInput."""
    from planner.execution import steps
    from planner.execution.executor import Options
    from planner.plan_model import apply_schedule

    if req.throttle is not None and (isinstance(req.throttle, bool) or not isinstance(req.throttle, int)
                                     or req.throttle < 1):
        raise BadInput(f"throttle must be a rate of at least 1 byte/s, got {req.throttle!r} (a throttle of 0 "
                       "would stall the copy; to copy without one, say no_throttle / --no-throttle)")
    if req.throttle is not None and req.no_throttle:
        raise BadInput("give either a throttle or no_throttle (--no-throttle), not both")
    plan = read_plan(req.plan)
    refusal = apply_schedule(plan, req.throttle, req.no_throttle).refusal if plan.kind != "restart" else None
    if refusal and not req.dry_run:      # a dry run copies nothing (it lists the writes, with no rate); a restart
        # plan is refused further on: it is run whole by `kplan roll`
        raise BadInput(refusal)
    opts = Options(throttle=req.throttle, poll=req.poll, timeout=req.wait, lock_wait=req.lock_wait,
                   dry_run=req.dry_run, reason=req.reason, run=req.run, stop=req.stop)
    r = steps.apply(req.zk, req.plan, opts, max_concurrent=req.max_concurrent_per_broker, auth=req.auth,
                    connect_timeout=req.timeout, out=req.out, progress=_exec_progress("apply", progress))
    path = None if req.dry_run else steps.apply_folder(req.plan, req.out)
    return ApplyOutcome(path, r.plan_id, r.state, r.units_done, r.units_total, tuple(r.warnings), r.message,
                        r.resumed, r.units_submitted, r.partitions_done, r.partitions_total, r.bytes_done,
                        r.bytes_total, r.seconds, tuple(r.writes), r.intent)


def verify(req: VerifyRequest, *, progress: ProgressFn | None = None) -> VerifyOutcome:
    """Wait until the cluster has converged to the plan, elect preferred leaders, remove the run's throttles,
    write report.json. Raises NotConverged on timeout (with `fail=True`), naming each stalled partition."""
    from planner.errors import NotConverged
    from planner.execution import steps
    from planner.execution.verify import VerifyOptions

    opts = VerifyOptions(timeout=req.wait, poll=req.poll, elect=req.elect, since=req.since)
    try:
        r = steps.verify(req.zk, req.plan, opts, auth=req.auth, connect_timeout=req.timeout, out=req.out,
                         progress=_exec_progress("verify", progress))
    except NotConverged as e:
        if req.fail:
            raise
        report = getattr(e, "report", {})
        pending = tuple((s["partition"].rsplit("-", 1)[0], int(s["partition"].rsplit("-", 1)[1]))
                        for s in report.get("stalled", ()))
        return VerifyOutcome(getattr(e, "path", None), report.get("plan_id", ""), False, pending,
                             tuple(report.get("warnings", ())), report)
    return VerifyOutcome(r.path, r.plan_id, True, (), tuple(r.warnings), r.report)


def verify_probe(req: VerifyRequest) -> dict[str, Any]:
    """One read-only look at whether the cluster has converged to the plan (verify's own test, one pass; no
    lock, no write, no file): what a deferred wait polls before `verify` finishes the job. Returns
    {"status": "converged" | "waiting", "converged": n, "total": n, "reassigning": bool,
    "leaders_on_preferred": n, "pending": [up to 20 partitions]}, or {"status": "failed", "message": ...} for an
    error no retry mends (the plan folder changed, not a Kafka cluster, ...). ZkUnavailable (retryable) is
    raised: try again later. Uses req.zk, req.plan, req.auth, req.timeout."""
    from planner.execution import steps

    try:
        return steps.verify_probe(req.zk, req.plan, auth=req.auth, connect_timeout=req.timeout)
    except PlannerError as e:
        if e.retryable:
            raise
        return {"status": "failed", "message": str(e)}


# ------------------------------------------------------------------------------------ maintenance state
@dataclass(frozen=True)
class BrokersRequest:
    """The brokers and their maintenance state: read now from ZooKeeper (`zk`), or as a snapshot recorded it."""

    zk: str | None = None
    snapshot: Path | None = None
    auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout: float = 10.0                     # ZooKeeper connection timeout


@dataclass(frozen=True)
class BrokerRow:
    broker: int
    rack: str | None
    registered: bool                          # in /brokers/ids
    state: str                                # in service | draining | drained | restarting | returning | unknown
    since: str | None = None
    by: str | None = None                     # who set the state (user@host (command))
    reason: str | None = None
    plan_id: str | None = None                # the plan that set it
    run: str | None = None                    # the run that set it


def brokers(req: BrokersRequest) -> tuple[BrokerRow, ...]:
    """Every broker that is registered or in maintenance, with its rack and maintenance state (read-only)."""
    from planner import maintenance as mt

    if (req.zk is None) == (req.snapshot is None):
        raise BadInput("give either a ZooKeeper connect string (zk) or a snapshot folder, not both")
    if req.snapshot is not None:
        snap = read_snapshot(req.snapshot)
        rows = mt.statuses_in_snapshot(snap.brokers, snap.manifest)
    else:
        from planner import zk as zkmod

        with zkmod.session(req.zk, auth=req.auth, timeout=req.timeout) as client:
            rows = mt.statuses(client)
    return tuple(BrokerRow(r.broker, r.rack, r.registered, r.state, *(
        (r.entry.since, r.entry.who, r.entry.reason or None, r.entry.plan_id, r.entry.run) if r.entry else ()))
        for r in rows)


@dataclass(frozen=True)
class ClearRequest:
    """The explicit act that takes brokers out of maintenance (`kplan maintenance clear`)."""

    zk: str
    brokers: tuple[int, ...]
    state: str | None = None                  # the state the caller means to clear: refused if it is another
    reason: str = ""
    auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout: float = 10.0


@dataclass(frozen=True)
class ClearOutcome:
    cleared: tuple[tuple[int, str], ...]      # (broker, the state it had)
    message: str


def clear_maintenance(req: ClearRequest) -> ClearOutcome:
    """Take `req.brokers` out of maintenance: one transaction under the apply lock. Refused, with nothing
    written, for a broker with no state, an unknown broker, another state than `req.state`, and a state a
    running apply holds (SafetyRefusal)."""
    from planner import maintenance as mt
    from planner import zk as zkmod

    if not req.brokers:
        raise BadInput("name the brokers whose maintenance state to clear")
    zkmod.parse_connect(req.zk)
    with zkmod.session(req.zk, auth=req.auth, timeout=req.timeout) as client:
        zkmod.require_kafka(client)   # a mistyped chroot is named as such, before anything is written
        changed = mt.clear(client, req.brokers, expect=req.state, reason=req.reason)
    cleared = tuple((c.broker, c.before.state if c.before else "in service") for c in changed)
    text = ", ".join(f"broker {b} was {st}" for b, st in cleared)
    return ClearOutcome(cleared, f"cleared: {text}; now in service")


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

    r = steps.cancel(req.zk, req.plan, mode="revert" if req.revert else "after-batch", timeout=req.wait,
                     poll=req.poll, auth=req.auth, connect_timeout=req.timeout, out=req.out,
                     progress=_exec_progress("cancel", progress))
    return CancelOutcome(r.plan_id, r.state, tuple(r.reverted), tuple(r.warnings), r.message)


# ---------------------------------------------------------------------------------------------- roll
@dataclass(frozen=True)
class RollRequest:
    zk: str
    plan: Path                                # a restart plan folder (kplan plan restart)
    out: Path | None = None                   # roll/ folder: progress.json, outcome.json (default <run>/roll)
    auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout: float = 10.0                     # ZooKeeper connection timeout
    throttle: int | None = None               # bytes/s for the protecting batches (None: the plan's suggestion)
    restart_command: str | None = None        # e.g. "ssh kafka-{broker} sudo systemctl restart kafka"; None:
                                              # someone else restarts each broker when the roll says so
    command_timeout: float = 600.0            # how long the restart command may run
    restart_timeout: float = 900.0            # how long a broker may take to leave and register again
    gate_timeout: float = 900.0               # how long its partitions may take to rejoin the ISRs
    pause: bool = False                       # stop after each broker (state paused); run again to continue
    keep_temporary: bool = False              # after the last broker, keep the temporary replicas
    poll: float = 1.0
    lock_wait: float = 0.0
    part: str | None = None                   # the whole roll, or one part: "protect" | "step" | "finish" (a
                                              # scheduler running it as separate tasks)
    step: int | None = None                   # part "step": its index in the plan's order
    wait_restart: bool = True                 # False: return state "restarting" instead of waiting for it
    run: str | None = None                    # named in the brokers' maintenance state (default: the records folder)
    no_throttle: bool = False                 # copy temporary replicas that get no rate at full speed, on purpose
    reason: str = ""                          # why the brokers restart: recorded in their maintenance state


@dataclass(frozen=True)
class RollOutcome:
    path: Path
    plan_id: str
    state: str                                # completed | already-completed | paused
    steps_done: int
    steps_total: int
    message: str = ""
    warnings: tuple[str, ...] = ()
    cannot_move: tuple[str, ...] = ()         # partitions whose leadership could not move off their broker
    kept_temporary: bool = False
    resumed: bool = False
    seconds: float = 0.0
    broker: int | None = None                 # state "restarting": the broker the roll waits for
    czxid: int | None = None                  # ... and its registration (ZooKeeper czxid) before the restart


def roll(req: RollRequest, *, progress: ProgressFn | None = None, restart: Callable[[int], None] | None = None,
         mark: str | None = None, reason: str = "") -> RollOutcome:
    """Carry out a restart plan (docs/APPLY.md "Restart rolls"): temporary replicas, then per broker its
    demotion, its restart (`restart_command`, `restart` (a callable, for embedders), or someone else), the
    gates and its leadership restored, then the undo. Locked like apply and resumable; stops at the first
    failed gate (NotConverged / SafetyRefusal, exit 1) saying what to do next. `mark` ("paused", "running",
    "stopped", with a `reason`) records a person's say between brokers instead of running anything."""
    from planner.execution.roll import RollOptions, roll_folder, roll_step

    if restart is not None and req.restart_command is not None:
        raise BadInput("give a restart command or a restart callable, not both")
    opts = RollOptions(throttle=req.throttle, poll=req.poll, restart_timeout=req.restart_timeout,
                       gate_timeout=req.gate_timeout, lock_wait=req.lock_wait, keep_temporary=req.keep_temporary,
                       pause=req.pause, restart=restart, wait_restart=req.wait_restart, run=req.run,
                       reason=req.reason)

    def relay(p: Any) -> None:
        if progress is not None:
            progress(Progress("roll", p.message, p.done, p.total, p.as_dict()))

    r = roll_step(req.zk, req.plan, opts, restart_command=req.restart_command, command_timeout=req.command_timeout,
                  auth=req.auth, connect_timeout=req.timeout, out=req.out, progress=relay, part=req.part,
                  step=req.step, mark=(mark, reason) if mark is not None else None, no_throttle=req.no_throttle)
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
