"""Error types a caller can act on (docs/DESIGN.md exit codes: 0 done, 1 refused/not converged, 2 bad input).

Two questions a scheduler asks of any failure, answered by attributes rather than by parsing messages:
- `exit_code`: what `kplan` returns when this error ends a command.
- `retryable`: whether running the same step again, unchanged, may succeed (ZooKeeper down, session lost).
  Bad input and safety refusals are not retryable: the same request fails the same way.

Messages carry facts. What to do next is data, worded by whoever presents it (the CLI as a command line or a
flag, the Airflow layer as a task or a param): `next_steps` names the steps to run next (NextStep, STEPS), a
request's option is named by its field (`max_concurrent_per_broker`, `partial_sizes`), and an error's type says
what would get past it (NoThrottle: a rate, or no_throttle on purpose; WrongPlanKind: roll or apply instead).
"""

from __future__ import annotations

from typing import Any, NamedTuple

# The steps a NextStep may name. Every presenter words each one (the CLI as a command line, the Airflow layer as a
# task or a DAG); tests/test_layering.py checks that both know them all.
STEPS = ("apply", "cancel", "verify", "roll", "brokers", "maintenance clear", "plan drain", "plan return",
         "follow-up drain", "maintenance carry")


class NextStep(NamedTuple):
    """A step to run next and what running it does: on the same plan (`apply`, `cancel`, `verify`, `roll`), or
    on the same cluster (`brokers`: look at the maintenance states; `maintenance clear`, `plan drain`, `plan
    return`, `follow-up drain`: a new snapshot and a drain plan for what is left; `maintenance carry`: a migrating
    cluster's maintenance znodes copied into `__kplan`), for `brokers` when given."""

    step: str
    does: str
    brokers: tuple[int, ...] = ()


class PlannerError(Exception):
    """Base class of every error the planner raises on purpose."""

    exit_code = 1
    retryable = False

    def __init__(self, *args: object, next_steps: tuple[NextStep, ...] = ()):
        super().__init__(*args)
        self.next_steps = tuple(next_steps)


class BadInput(PlannerError):
    """The user's input (arguments, files, connect string, snapshot) is wrong. Nothing was written."""

    exit_code = 2


class NoThrottle(BadInput):
    """Data batches would copy with no replication throttle, and nobody said that was on purpose: give a rate
    (`throttle`), or `no_throttle` to copy at full speed."""


class WrongPlanKind(BadInput):
    """A plan of a kind this step does not carry out: a restart plan is rolled (its temporary replicas, each
    broker's restart with its gates, the undo), every other plan is applied. `kind`: the plan's; `path`: its
    folder."""

    def __init__(self, detail: str, kind: str, path: str):
        super().__init__(detail)
        self.kind = kind
        self.path = path


class NotInstalled(BadInput):
    """The step needs an optional part this install lacks (an extra of pyproject.toml, planner.extras).
    Nothing was written."""


class ZkUnavailable(PlannerError):
    """ZooKeeper could not be reached, or the session was lost while reading: transient, try again.

    Exit code 2 as before (nothing was written and the command did not do its job), but not a BadInput:
    a scheduler retries this one and not those."""

    exit_code = 2
    retryable = True


class KafkaUnavailable(PlannerError):
    """No Kafka broker of the bootstrap servers answered (or the cluster stopped answering while being read):
    transient, like ZkUnavailable. Exit code 2 (nothing was written), retryable."""

    exit_code = 2
    retryable = True


class NotAKafkaCluster(BadInput):
    """The connect string / chroot reaches ZooKeeper but holds no Kafka cluster."""


class CodecError(BadInput):
    """A znode's content does not match Kafka's format. The message names the path and the problem."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class KraftMigration(PlannerError):
    """The cluster is migrating to KRaft (ZooKeeper-to-KRaft migration, KIP-866): ZooKeeper must not be written,
    and from the moment the KRaft controller leads it must not be read either. The message names the migration
    state and what to do; `migration` is the planner.zk_migration.Migration it was refused in (None if unknown)."""

    def __init__(self, *args: object, migration: Any = None, next_steps: tuple[NextStep, ...] = ()):
        super().__init__(*args, next_steps=next_steps)
        self.migration = migration


class SafetyRefusal(PlannerError):
    """A step was refused by a safety rule (stale plan, lock held, reassignment in flight...)."""


class NotConverged(PlannerError):
    """The cluster did not reach the plan's target within the time allowed (verify); it may still get there."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C / SIGTERM stopped a step that writes to the cluster; `detail` says exactly what remains (a batch in
    flight, its throttles) and which command removes it. A KeyboardInterrupt, so it is never caught as an
    error (the CLI exits 130 / 143 with `detail`)."""

    def __init__(self, detail: str, next_steps: tuple[NextStep, ...] = ()):
        super().__init__(detail)
        self.detail = detail
        self.next_steps = tuple(next_steps)


class NotYourTurn(PlannerError):
    """A step of a restart roll asked for before the steps ahead of it are done: wait and ask again (a
    scheduler running the roll as separate tasks defers on it)."""

    retryable = True


class RollStopped(PlannerError):
    """A restart roll stopped (a failed gate, or a person between brokers) before this step: it is not run."""
