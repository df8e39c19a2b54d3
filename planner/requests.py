"""The requests and outcomes of every step (docs/LIBRARY.md): frozen dataclasses with plain fields.

The ground floor of the library: it imports nothing of the planner, so every layer can take a request as it
is, and planner.api (the facade) re-exports all of it. An Airflow operator builds a request from its
parameters, the CLI from argparse; the same request gives the same result whoever asks.

One name, one meaning, in every request:
    timeout   seconds to wait for ZooKeeper to answer the connection (kafka_timeout: the brokers')
    wait      seconds to wait for the cluster to converge (apply, verify) or for the batch in flight (cancel)
    poll      seconds between checks when no watch fires
The roll's waits are named for what they wait for (restart_timeout, gate_timeout, command_timeout).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.errors import NextStep
    from planner.kafka_admin import KafkaSecurity
    from planner.plan_model import Plan

# bytes/s: the lowest replication throttle an apply or a roll takes (a 1 GiB partition copies in 3 hours at it);
# below it no real batch finishes. Airflow's forms use it as their minimum.
MIN_THROTTLE = 100 * 1024

__all__ = [
    "MIN_THROTTLE", "ApplyOutcome", "ApplyRequest", "BrokerRow", "BrokersRequest", "CancelOutcome", "CancelRequest", "ClearOutcome",
    "ClearRequest", "DrainRequest", "PlanOutcome", "Progress", "ProgressFn", "RebalanceRequest", "RestartRequest",
    "ReturnRequest", "RiskOutcome", "RiskRequest", "RiskSubmit", "RollOutcome", "RollRequest", "SnapshotOutcome",
    "SnapshotRequest", "VerifyOutcome", "VerifyRequest",
]

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


# --------------------------------------------------------------------------------------------------- snapshot
@dataclass(frozen=True)
class SnapshotRequest:
    zk: str | None                            # HOST:PORT[,HOST:PORT...][/chroot]; None with `bootstrap`
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
    # A KRaft cluster, read through the Admin API only (instead of `zk`): HOST:PORT[,HOST:PORT...]; `kafka`
    # and `kafka_timeout` are how to reach it
    bootstrap: str | None = None


@dataclass(frozen=True)
class SnapshotOutcome:
    path: Path
    fingerprint: str
    counts: Mapping[str, int]
    warnings: tuple[Mapping[str, str], ...]
    manifest: Mapping[str, Any] = field(default_factory=_empty, repr=False)
    seconds: float = 0.0


# ------------------------------------------------------------------------------------------------------- risk
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
    # ... or a KRaft cluster's bootstrap servers (read through the Admin API); `kafka`: how to reach its brokers
    # (with zk: how the brokers are asked for sizes), never logged nor in a repr
    bootstrap: str | None = None
    kafka: KafkaSecurity | None = field(default=None, repr=False)


@dataclass(frozen=True)
class RiskOutcome:
    path: Path
    level: str                                # low | medium | high | critical (worst scenario)
    level_by_state: Mapping[str, str]         # "current" and, with a plan, "plan"
    summary: dict[str, Any] = field(repr=False)   # summary.json as written


@dataclass(frozen=True)
class RiskSubmit:
    """How to run a risk request through spark-submit yourself (Airflow's SparkSubmitOperator does)."""

    application: Path                         # the job's spark-submit entry inside the installed package
    args: tuple[str, ...]                     # the request as the entry's arguments
    conf: Mapping[str, str]                   # Spark properties the job is tuned with (log4j, GC, shuffle...)
    driver_memory: str


# ------------------------------------------------------------------------------------------------------- plan
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


# ------------------------------------------------------------------------------------ apply / verify / cancel
@dataclass(frozen=True)
class ApplyRequest:
    zk: str | None                            # ZooKeeper connect string; None with `bootstrap` (KRaft)
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
    # A KRaft cluster (instead of `zk`): its bootstrap servers, reached through the Admin API only; `kafka` the
    # security settings (never logged), `kafka_timeout` seconds for the brokers to answer, `lease` the one-writer
    # fence's lease in seconds (docs/KRAFT.md: Admin writes only this long after the last committed transition)
    bootstrap: str | None = None
    kafka: KafkaSecurity | None = field(default=None, repr=False)
    kafka_timeout: float = 10.0
    lease: float = 30.0


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
    next_steps: tuple[NextStep, ...] = ()     # interrupted: the steps to run next on this plan (resume, cancel)
    reverted: tuple[tuple[str, int], ...] = ()   # state reverted: the partitions a cancel moved back


@dataclass(frozen=True)
class VerifyRequest:
    zk: str | None                            # None with `bootstrap` (KRaft)
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
    # A KRaft cluster (instead of `zk`): its bootstrap servers, reached through the Admin API only; `kafka` the
    # security settings (never logged), `kafka_timeout` seconds for the brokers to answer, `lease` the one-writer
    # fence's lease in seconds (docs/KRAFT.md: Admin writes only this long after the last committed transition)
    bootstrap: str | None = None
    kafka: KafkaSecurity | None = field(default=None, repr=False)
    kafka_timeout: float = 10.0
    lease: float = 30.0


@dataclass(frozen=True)
class VerifyOutcome:
    path: Path | None
    plan_id: str
    converged: bool
    pending: tuple[tuple[str, int], ...] = ()  # partitions not yet at their target
    warnings: tuple[str, ...] = ()
    report: Mapping[str, Any] = field(default_factory=_empty, repr=False)   # report.json as written
    message: str = ""                         # not converged: what stalled and why (NotConverged's text)


@dataclass(frozen=True)
class CancelRequest:
    zk: str | None                            # None with `bootstrap` (KRaft)
    plan: Path
    auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout: float = 10.0                     # ZooKeeper connection timeout
    revert: bool = False                      # move the batch in flight back once it has finished
    wait: float = 300.0                       # seconds to wait for the batch in flight / the running apply
    poll: float = 1.0
    out: Path | None = None                   # apply/ folder (default <run>/apply)
    # A KRaft cluster (instead of `zk`): its bootstrap servers, reached through the Admin API only; `kafka` the
    # security settings (never logged), `kafka_timeout` seconds for the brokers to answer, `lease` the one-writer
    # fence's lease in seconds (docs/KRAFT.md: Admin writes only this long after the last committed transition)
    bootstrap: str | None = None
    kafka: KafkaSecurity | None = field(default=None, repr=False)
    kafka_timeout: float = 10.0
    lease: float = 30.0


@dataclass(frozen=True)
class CancelOutcome:
    plan_id: str
    state: str                                # cancelled | reverted | completed | none (nothing to cancel)
    rolled_back: tuple[tuple[str, int], ...] = ()
    warnings: tuple[str, ...] = ()
    message: str = ""


# ------------------------------------------------------------------------------------------ maintenance state
@dataclass(frozen=True)
class BrokersRequest:
    """The brokers and their maintenance state: read now from ZooKeeper (`zk`) or a KRaft cluster's `__kplan`
    (`bootstrap`), or as a snapshot recorded it (exactly one of the three)."""

    zk: str | None = None
    snapshot: Path | None = None
    auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout: float = 10.0                     # ZooKeeper connection timeout
    bootstrap: str | None = None              # a KRaft cluster (docs/KRAFT.md), with its security settings
    kafka: KafkaSecurity | None = field(default=None, repr=False)
    kafka_timeout: float = 10.0


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


@dataclass(frozen=True)
class ClearRequest:
    """The explicit act that takes brokers out of maintenance (`kplan maintenance clear`), on a ZooKeeper-mode
    cluster (`zk`) or a KRaft one (`bootstrap`: one fenced transaction on `__kplan`)."""

    zk: str | None = None
    brokers: tuple[int, ...] = ()
    state: str | None = None                  # the state the caller means to clear: refused if it is another
    reason: str = ""
    auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout: float = 10.0
    bootstrap: str | None = None              # a KRaft cluster, as for apply (docs/KRAFT.md)
    kafka: KafkaSecurity | None = field(default=None, repr=False)
    kafka_timeout: float = 10.0
    lease: float = 30.0                       # the fence's lease: a lock heartbeat within two leases is live


@dataclass(frozen=True)
class ClearOutcome:
    cleared: tuple[tuple[int, str], ...]      # (broker, the state it had)
    message: str


@dataclass(frozen=True)
class CarryRequest:
    """Copy the maintenance znodes of a cluster migrating from ZooKeeper into its `__kplan` topic."""

    zk: str
    bootstrap: str
    auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout: float = 10.0
    kafka: KafkaSecurity | None = field(default=None, repr=False)
    kafka_timeout: float = 10.0
    lease: float = 30.0


@dataclass(frozen=True)
class CarryOutcome:
    carried: tuple[tuple[int, str], ...]      # (broker, state) written to __kplan
    kept: tuple[tuple[int, str], ...]         # (broker, state) __kplan held already
    message: str


# ------------------------------------------------------------------------------------------------------- roll
@dataclass(frozen=True)
class RollRequest:
    zk: str | None                            # ZooKeeper connect string; None with `bootstrap` (KRaft)
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
    # Set from another thread or a signal handler (the CLI's Ctrl-C / SIGTERM) to stop: the broker in flight
    # finishes its step (gates passed, leadership restored), the roll is recorded as stopped (state "interrupted").
    stop: threading.Event | None = field(default=None, repr=False, compare=False)
    # A KRaft cluster (instead of `zk`), as ApplyRequest's: bootstrap servers (the Admin API only), `kafka` the
    # security settings (never logged), `kafka_timeout`, `lease` the one-writer fence's lease (docs/KRAFT.md)
    bootstrap: str | None = None
    kafka: KafkaSecurity | None = field(default=None, repr=False)
    kafka_timeout: float = 10.0
    lease: float = 30.0


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
