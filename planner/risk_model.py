"""The drain-risk definitions, in one place: outcomes, effective min ISR, levels, score, scenario names.

Two engines evaluate drains: the numpy reference replay (`planner.replay`) and the Spark job
(planner.spark). Each replays Kafka's election rules in its own way, but neither defines what an
outcome *means*: both hand the same per-partition facts (new leader, new ISR size, RF, ...) to the
expressions below, through a tiny expression language with two evaluators (`eval_numpy`, `to_spark`).
So "under-min-ISR" or "critical" is written exactly once, and a change here changes both engines.

Facts every engine provides per evaluated (scenario, partition) row:
  leader, new_leader          int   leader before / after (-1 = none)
  new_isr_size                int   |ISR| after
  rf                          int   replica-list length (Kafka's assignment size)
  min_isr                     int   the topic's min.insync.replicas (override, else broker default, else 1)
  unclean_allowed             bool  the topic's effective unclean.leader.election.enable
  unclean_taken               bool  the replay took an unclean election
  live_replica_exists         bool  some replica is on a live broker after the scenario
  leader_changes              int   times the leader changed during the scenario (controlled-shutdown moves
                                    one request at a time, then the election when the brokers stopped)
  shutdown_blocked_by         int   the broker whose controlled shutdown this partition makes fail (-1 none)
  order_dependent             bool  left leaderless with several ISR members dying in the scenario: the ISR
                                    keeps the one Kafka visits last if their deaths land in one controller
                                    event (the row's new_isr), else the one noticed last (isr_alternatives)
  failure_mode                bool  the scenario kills (hard failure) rather than stops
  leader_gone                 bool  the partition's leader is one of the brokers going away
Facts per scenario (after the per-row outcomes are summed):
  the OUTCOMES counts, plus survivors (live brokers left), leaders_total and leader_max (leader counts
  over the survivors, the whole cluster counted, not only evaluated partitions), failed_shutdowns (the
  brokers some row blocks) and unavailable_window_s (failure mode: the ZooKeeper session timeout, during
  which the partitions the killed brokers led answer nobody).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from planner.errors import BadInput

# ------------------------------------------------------------------------------------ expressions


class Expr:
    """A node of the outcome language. Operators build trees; `eval_numpy` / `to_spark` evaluate them."""

    def _op(self, op: str, *others: Any) -> Op:
        return Op(op, (self, *(_wrap(o) for o in others)))

    def __and__(self, o: Any) -> Op:
        return self._op("and", o)

    def __or__(self, o: Any) -> Op:
        return self._op("or", o)

    def __invert__(self) -> Op:
        return self._op("not")

    def __lt__(self, o: Any) -> Op:
        return self._op("lt", o)

    def __le__(self, o: Any) -> Op:
        return self._op("le", o)

    def __gt__(self, o: Any) -> Op:
        return self._op("gt", o)

    def __ge__(self, o: Any) -> Op:
        return self._op("ge", o)

    def __eq__(self, o: Any) -> Op:  # type: ignore[override]
        return self._op("eq", o)

    def __ne__(self, o: Any) -> Op:  # type: ignore[override]
        return self._op("ne", o)

    def __add__(self, o: Any) -> Op:
        return self._op("add", o)

    def __sub__(self, o: Any) -> Op:
        return self._op("sub", o)

    def __mul__(self, o: Any) -> Op:
        return self._op("mul", o)

    __hash__ = object.__hash__


class Col(Expr):
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Lit(Expr):
    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


class Op(Expr):
    def __init__(self, op: str, args: tuple[Expr, ...]):
        self.op = op
        self.args = args

    def __repr__(self) -> str:
        return f"{self.op}({', '.join(map(repr, self.args))})"


def _wrap(v: Any) -> Expr:
    return v if isinstance(v, Expr) else Lit(v)


def col(name: str) -> Col:
    return Col(name)


def least(a: Any, b: Any) -> Op:
    return Op("least", (_wrap(a), _wrap(b)))


def where(cond: Any, a: Any, b: Any) -> Op:
    return Op("where", (_wrap(cond), _wrap(a), _wrap(b)))


_NP: dict[str, Callable[..., Any]] = {
    "and": np.logical_and, "or": np.logical_or, "not": np.logical_not,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal, "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "least": np.minimum, "where": np.where,
}


def eval_numpy(e: Expr, env: Mapping[str, Any]) -> Any:
    """Evaluate over numpy arrays (int64 arithmetic, so counts times weights never overflow)."""
    if isinstance(e, Col):
        v = env[e.name]
        return v.astype(np.int64) if isinstance(v, np.ndarray) and v.dtype.kind in "iu" else v
    if isinstance(e, Lit):
        return e.value
    assert isinstance(e, Op)
    return _NP[e.op](*(eval_numpy(a, env) for a in e.args))


def to_spark(e: Expr, resolve: Callable[[str], Any] | None = None) -> Any:
    """Build the equivalent pyspark Column. `resolve(name)` maps a fact name to a Column (default F.col).

    pyspark is imported here, not at module level: the planner never needs Spark to import this module.
    """
    from pyspark.sql import functions as F

    from planner.spark.columns import sql_type

    resolve = resolve or F.col
    if isinstance(e, Col):
        return resolve(e.name)
    if isinstance(e, Lit):
        return F.lit(e.value)
    assert isinstance(e, Op)
    a = [to_spark(x, resolve) for x in e.args]
    match e.op:
        case "and":
            return a[0] & a[1]
        case "or":
            return a[0] | a[1]
        case "not":
            return ~a[0]
        case "lt":
            return a[0] < a[1]
        case "le":
            return a[0] <= a[1]
        case "gt":
            return a[0] > a[1]
        case "ge":
            return a[0] >= a[1]
        case "eq":
            return a[0] == a[1]
        case "ne":
            return a[0] != a[1]
        case "add":
            return a[0].cast(sql_type("long")) + a[1].cast(sql_type("long"))
        case "sub":
            return a[0].cast(sql_type("long")) - a[1].cast(sql_type("long"))
        case "mul":
            return a[0].cast(sql_type("long")) * a[1].cast(sql_type("long"))
        case "least":
            return F.least(a[0], a[1])
        case "where":
            return F.when(a[0], a[1]).otherwise(a[2])
    raise ValueError(f"unknown op {e.op}")


# ------------------------------------------------------------------------------- Kafka version rule
EFFECTIVE_MIN_ISR_SINCE = (3, 7)
DEFAULT_KAFKA_VERSION = "3.7"
SUPPORTED_KAFKA = ((2, 4), (3, 9))


def parse_kafka_version(text: str) -> tuple[int, int]:
    """'3.7', '3.6.1', '2.8' -> (major, minor). ZooKeeper mode exists only in 2.x and 3.x."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*", str(text))
    if not m:
        raise BadInput(f"kafka_version {text!r} is not a version like 3.7 or 3.6.1")
    v = (int(m.group(1)), int(m.group(2)))
    if not (2, 0) <= v < (4, 0):
        raise BadInput(f"Kafka {text} has no ZooKeeper mode (it exists in 2.x and 3.x only)")
    if not SUPPORTED_KAFKA[0] <= v <= SUPPORTED_KAFKA[1]:
        raise BadInput(f"Kafka {text.strip()} is outside the ZooKeeper-mode releases 2.4 to 3.9 this planner "
                       "models (KIP-455 reassignment; docs/KAFKA_ZK.md)")
    return v


def effective_min_isr(kafka_version: str) -> Expr:
    """docs/KAFKA_ZK.md §2: min(min.insync.replicas, RF) on Kafka >= 3.7, plain min.insync.replicas before."""
    if parse_kafka_version(kafka_version) >= EFFECTIVE_MIN_ISR_SINCE:
        return least(col("min_isr"), col("rf"))
    return col("min_isr")


# ------------------------------------------------------------------------------------- outcomes
_offline = col("new_leader") < 0
_online = ~_offline

# Per (scenario, partition) outcome flags, in the order the tables show them. The health states of an
# online partition (under-min-ISR, at-min-ISR, under-replicated) are not counted for offline partitions:
# offline already says more (it rejects every read and write).
OUTCOMES: dict[str, Expr] = {
    "offline": _offline,
    "under_min_isr": _online & (col("new_isr_size") < col("eff_min_isr")),
    "at_min_isr": _online & (col("new_isr_size") == col("eff_min_isr")),
    "under_replicated": _online & (col("new_isr_size") < col("rf")),
    "unclean_taken": col("unclean_taken"),
    # offline only because the topic forbids unclean election (a live, out-of-sync replica exists)
    "would_need_unclean": _offline & ~col("unclean_allowed") & col("live_replica_exists"),
    # leadership went from one broker to another (clients reconnect; not counted when it went offline)
    "leadership_moved": (col("leader") >= 0) & _online & (col("new_leader") != col("leader")),
    "rf1_hit": col("rf") == 1,
    "was_offline": col("leader") < 0,
    # the leader moved twice or more (e.g. onto a drained broker that had not asked yet, then away again)
    "moved_twice": col("leader_changes") >= 2,
    # this partition makes a broker's controlled shutdown fail: retries, then an unclean stop
    "blocks_shutdown": col("shutdown_blocked_by") >= 0,
    # which dead ISR member the ISR keeps depends on whether the deaths land in one event: see isr_alternatives
    "isr_order_dependent": col("order_dependent"),
    # failure mode: led by a killed broker, so unavailable until its ZooKeeper session expires
    "unavailable_until_expiry": col("failure_mode") & col("leader_gone"),
}

# Per-row severity: the order in which "worst partitions" are listed.
SEVERITY: Expr = where(
    col("offline") | col("unclean_taken"), 4,
    where(col("under_min_isr"), 3, where(col("at_min_isr"), 2, where(col("under_replicated"), 1, 0))),
)

LEVELS = ("low", "medium", "high", "critical")
LEADER_SKEW_LIMIT = (3, 2)  # survivors' max leader count > 3/2 of the ideal (integer test, no float ties)

# Level over a scenario's counts (issue 4): critical = any offline partition or unclean election;
# high = any under-min-ISR; medium = at-min-ISR partitions or survivors' leader load > 1.5x the ideal
# (ideal = leaders_total / survivors); low otherwise.
_skewed = (col("leader_max") * col("survivors") * LEADER_SKEW_LIMIT[1]
           > col("leaders_total") * LEADER_SKEW_LIMIT[0]) & (col("leaders_total") > 0)
LEVEL_RANK: Expr = where(
    (col("offline") > 0) | (col("unclean_taken") > 0), 3,
    where(col("under_min_isr") > 0, 2, where((col("at_min_isr") > 0) | _skewed, 1, 0)),
)

# Score: orders scenarios inside a level (the level always dominates: scenarios sort by (level, score)).
SCORE: Expr = (
    (col("offline") + col("unclean_taken")) * 10_000
    + col("under_min_isr") * 100
    + col("at_min_isr") * 10
    + col("under_replicated")
)

COUNTED = list(OUTCOMES)  # every outcome flag is summed per scenario

# ------------------------------------------------------------------------------------- scenarios
MODES = ("controlled", "failure")
KINDS = ("drain", "rolling", "restart", "rack", "broker")
# the kinds a request names (listed first in reports, with their worst partitions); the others are the sweep
REQUESTED_KINDS = ("drain", "rolling", "restart")
STATES = ("current", "plan")


@dataclass(frozen=True)
class Scenario:
    """One evaluated situation: `brokers` go away at once (mode controlled = graceful stop, failure = kill).

    A rolling sequence is several scenarios sharing `sequence`: step k takes `brokers` away from the state
    left by steps 1..k-1 once their brokers came back (see planner.replay.return_brokers). A restart
    sequence (kind "restart", a restart plan's roll) is several steps too, but each starts from the plan's
    state with the step's broker demoted first (planner.replay.demote): the roll's gates restore that state
    between brokers. `state` says which assignment is evaluated: the snapshot's ("current") or the plan's
    target ("plan").
    """

    id: int
    kind: str
    mode: str
    brokers: tuple[int, ...]
    state: str = "current"
    rack: str | None = None
    sequence: int = -1
    step: int = 0
    steps: int = 0
    drain: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return scenario_name(self)


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(b) for b in ids)


def scenario_name(s: Scenario) -> str:
    match s.kind:
        case "broker":
            body = f"broker {s.brokers[0]}"
        case "rack":
            body = f"rack {s.rack}"
        case "drain":
            body = f"drain rack {s.rack} ({_ids(s.brokers)})" if s.rack else f"drain {_ids(s.brokers)}"
        case "rolling":
            what = f"rack {s.rack}" if s.rack else _ids(s.drain)
            body = f"rolling {what} step {s.step}/{s.steps} (broker {_ids(s.brokers)})"
        case "restart":
            body = f"restart {_ids(s.drain)} step {s.step}/{s.steps} (broker {_ids(s.brokers)}, demoted)"
        case _:
            body = f"{s.kind} {_ids(s.brokers)}"
    prefix = "after plan: " if s.state == "plan" else ""
    return f"{prefix}{body} [{s.mode}]"


def level_name(rank: int) -> str:
    return LEVELS[int(rank)]


# ------------------------------------------------------------------------------------ table columns
# partitions.parquet (one row per evaluated scenario x partition), in this order, from both engines.
ROW_KEY = ["scenario_id", "topic", "partition"]
ROW_STATE = ["replicas", "rf", "eff_min_isr", "leader", "isr", "new_leader", "new_isr"]
# returned_leader: rolling steps only (null otherwise), the leader once the step's brokers came back.
# demoted_from: restart steps only (null otherwise), where the demotion moved the leadership off the step's
# broker: the leader before it (the row's `leader` is the one the broker stopped under).
# leader_changes, shutdown_blocked_by: the facts above; clean_return: for leaderless rows, the brokers whose
# return brings the partition back cleanly: the ISR's members (new_isr), then isr_alternatives; all of them,
# surely. isr_alternatives: for order_dependent rows, the other brokers the ISR keeps instead of new_isr's
# if the deaths land in separate controller events (empty otherwise).
ROW_EXTRA = ["leader_changes", "shutdown_blocked_by", "clean_return", "isr_alternatives", "demoted_from"]
ROW_COLUMNS = ROW_KEY + ROW_STATE + list(OUTCOMES) + ["severity", "returned_leader"] + ROW_EXTRA

# zookeeper.session.timeout.ms in Kafka 3.x: how long a killed broker's partitions stay unanswered
DEFAULT_SESSION_TIMEOUT_S = 18.0

# scenarios.parquet
SCENARIO_INFO = ["scenario_id", "name", "kind", "mode", "state", "brokers", "rack", "sequence", "step", "steps"]
SCENARIO_COUNTS = ["evaluated"] + COUNTED
SCENARIO_LOAD = ["survivors", "leaders_total", "leader_max", "leader_ideal", "leader_ratio"]
SCENARIO_FAILURE = ["failed_shutdowns", "unavailable_window_s"]
SCENARIO_COLUMNS = SCENARIO_INFO + SCENARIO_COUNTS + SCENARIO_LOAD + SCENARIO_FAILURE + ["level", "level_rank",
                                                                                       "score"]

WORST_PER_SCENARIO = 5

ROW_TYPES = {
    "scenario_id": pa.int32(), "topic": pa.string(), "partition": pa.int32(), "replicas": pa.list_(pa.int32()),
    "rf": pa.int32(), "eff_min_isr": pa.int32(), "leader": pa.int32(), "isr": pa.list_(pa.int32()),
    "new_leader": pa.int32(), "new_isr": pa.list_(pa.int32()),
    **{k: pa.bool_() for k in OUTCOMES}, "severity": pa.int8(), "returned_leader": pa.int32(),
    "leader_changes": pa.int32(), "shutdown_blocked_by": pa.int32(), "clean_return": pa.list_(pa.int32()),
    "isr_alternatives": pa.list_(pa.int32()), "demoted_from": pa.int32(),
}

SCENARIO_TYPES = {
    "scenario_id": pa.int32(), "name": pa.string(), "kind": pa.string(), "mode": pa.string(),
    "state": pa.string(), "brokers": pa.list_(pa.int32()), "rack": pa.string(), "sequence": pa.int32(),
    "step": pa.int32(), "steps": pa.int32(), "evaluated": pa.int64(),
    **{k: pa.int64() for k in COUNTED},
    "survivors": pa.int32(), "leaders_total": pa.int64(), "leader_max": pa.int64(),
    "leader_ideal": pa.float64(), "leader_ratio": pa.float64(),
    "failed_shutdowns": pa.list_(pa.int32()), "unavailable_window_s": pa.float64(),
    "level": pa.string(), "level_rank": pa.int8(), "score": pa.int64(),
}


def leader_load(counts: np.ndarray, survivors: np.ndarray) -> dict[str, float | int]:
    """Survivors' leader load: `counts` = leaders per broker id after the scenario (whole cluster),
    `survivors` = mask of the live brokers left. Ideal = leaders_total / survivors."""
    c = counts[survivors]
    n = int(survivors.sum())
    total = int(c.sum())
    mx = int(c.max(initial=0))
    ideal = total / n if n else 0.0
    return {"survivors": n, "leaders_total": total, "leader_max": mx, "leader_ideal": ideal,
            "leader_ratio": (mx / ideal) if ideal else 0.0}


def unavailable_window(mode: str, session_timeout_s: float) -> float:
    """Failure mode: the killed brokers' partitions answer nobody until their ZooKeeper sessions expire
    (then they are re-elected, or stay offline). A controlled shutdown has no such window: leaders move
    while the broker still serves, and what cannot move goes offline when the broker stops."""
    return float(session_timeout_s) if mode == "failure" else 0.0


def scenario_table(info: list[dict]) -> pa.Table:
    """scenarios.parquet from per-scenario numbers ({"scenario": Scenario, counts..., load...,
    failed_shutdowns, unavailable_window_s}): the level and score are evaluated here, from LEVEL_RANK and
    SCORE, for both engines."""
    n = len(info)
    env = {k: np.asarray([rec[k] for rec in info], dtype=np.int64 if k != "leader_ideal" else float)
           for k in SCENARIO_COUNTS + ["survivors", "leaders_total", "leader_max", "leader_ideal"]}
    ranks = np.broadcast_to(eval_numpy(LEVEL_RANK, env), n).astype(int).tolist() if n else []
    scores = np.broadcast_to(eval_numpy(SCORE, env), n).astype(np.int64).tolist() if n else []
    cols: dict[str, list] = {c: [] for c in SCENARIO_COLUMNS}
    for rec, rank, score in zip(info, ranks, scores, strict=True):
        s: Scenario = rec["scenario"]
        vals = {"scenario_id": s.id, "name": s.name, "kind": s.kind, "mode": s.mode, "state": s.state,
                "brokers": list(s.brokers), "rack": s.rack, "sequence": s.sequence, "step": s.step,
                "steps": s.steps, "level": level_name(rank), "level_rank": rank, "score": score}
        vals.update({k: rec[k] for k in SCENARIO_COUNTS + SCENARIO_LOAD + SCENARIO_FAILURE})
        for c in SCENARIO_COLUMNS:
            cols[c].append(vals[c])
    return pa.table({c: pa.array(v, SCENARIO_TYPES[c]) for c, v in cols.items()})
