"""The restart roll's narrow cluster interface (kafka-kit's `kafkazk.Handler` is the model): every read and write
the roll (roller.py, rollsteps.py) makes goes through one `RollCluster`, so that one roll runs on either backend:

| the roll needs                          | ZooKeeper (`ZkRollCluster`, here)          | KRaft (`kraftroll.KraftRollCluster`)       |
|-----------------------------------------|--------------------------------------------|--------------------------------------------|
| the one writer                          | the apply lock (kazoo Lock, WriteGate)     | the `__kplan` fence (transactional.id)     |
| the roll record, one state change each  | `/kplan/rolls/<hex>`, versioned set         | key `roll/<hex>`, one transaction          |
| a write with its state (Reorder, Elect) | one multi-op with the record               | the record committed, then the Admin call  |
| partitions, live brokers, min ISR       | ClusterView (topic and state znodes)       | DescribeTopicPartitions, DescribeCluster   |
| the broker restarted                    | a new registration znode (czxid)           | seen fenced or out of its ISRs, then back  |
| temporary replicas in and out           | Executor (under the roll's lock)           | KraftExecutor (under the roll's fence)     |

A `Reorder` (each partition's list in a new order, the same replicas: no data copied) or an `Elect` (a preferred
election) is handed to `save` with the record state that names it. On ZooKeeper both are one transaction; on
KRaft no Admin request can share a transaction with `__kplan`, so the record is committed first and the request
sent after it; a roll resumed in that state sends it again (`resend`): a reorder to the order a partition already
has, and a preferred election of a partition already led by its preferred replica (ELECTION_NOT_NEEDED), change
nothing, so each is submitted exactly once in effect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from planner import codec, maintenance_zk
from planner import maintenance as mt
from planner.errors import SafetyRefusal
from planner.execution import election, preflight, rollgates
from planner.execution import runstate as rs
from planner.execution.clusterview import ClusterView, Key, PartStatus, retrying
from planner.execution.lock import ApplyLock, holder
from planner.execution.planview import RunPlan
from planner.execution.waiter import Waiter
from planner.zkgate import NAMESPACE, Op, WriteGate


@dataclass(frozen=True)
class Reorder:
    """Each partition's replica list in a new order (the same replicas): the controller moves no data."""
    entries: tuple[tuple[Key, tuple[int, ...]], ...]


@dataclass(frozen=True)
class Elect:
    """A preferred-leader election of these partitions."""
    keys: tuple[Key, ...]


Write = Reorder | Elect | Op | tuple[str, Any]   # a ZooKeeper Op / a `__kplan` (key, value): maintenance states


@dataclass(frozen=True)
class Presence:
    """A broker as the cluster shows it now: `up` (registered; on KRaft also unfenced) and `token`, what
    identifies its registration where the backend has one (ZooKeeper: the czxid of /brokers/ids/<id>)."""
    up: bool
    token: int | None = None


class RollCluster(Protocol):
    backend: str
    resends: bool      # a write follows its state's commit (KRaft): a resumed step sends it again

    # the one writer
    def holder(self) -> str | None: ...
    def acquire(self, wait: float) -> None: ...
    def release(self) -> None: ...
    @property
    def held(self) -> bool: ...
    def check_cluster(self) -> None: ...

    # the roll record
    def load(self) -> dict[str, Any] | None: ...
    def save(self, rec: dict[str, Any], writes: Sequence[Write] = ()) -> None: ...
    def resend(self, writes: Sequence[Write]) -> None: ...

    # reads
    def read(self, fn: Callable[[], Any]) -> Any: ...
    def partitions(self, keys: Iterable[Key], states: bool = True) -> dict[Key, PartStatus]: ...
    def live_brokers(self) -> set[int]: ...
    def assignments(self) -> dict[Key, tuple[int, ...]]: ...
    def min_isr(self, topics: Iterable[str]) -> dict[str, int]: ...
    def presence(self, broker: int, watch: bool = False) -> Presence: ...
    def foreign_reassignment(self) -> str | None: ...
    def maintenance(self) -> mt.States: ...
    def maintenance_writes(self, states: mt.States, broker: int, to: str | None, **kw: Any) -> list[Write]: ...

    # the protect / undo phases
    def check_protect(self, plan: RunPlan) -> None: ...
    def execute(self, plan: RunPlan, throttle: int | None, poll: float, stop: Any, relay: Any) -> Any: ...

    # waiting
    def settled(self, what: str, timeout: float) -> bool: ...
    def arm(self) -> None: ...
    def sleep(self) -> None: ...
    def wake(self) -> None: ...


class ZkRollCluster:
    """The roll on a ZooKeeper-mode cluster: `/kplan/rolls/<hex>` under the apply lock, every write a fenced
    WriteGate transaction with the record (planner.zkgate stays the only ZooKeeper writer)."""

    backend = "zookeeper"
    resends = False

    def __init__(self, client: KazooClient, plan: Any, poll: float):
        from planner.execution.rollrecord import roll_path

        self.client = client
        self.plan = plan
        self.gate = WriteGate(client)
        self.view = ClusterView(client)
        self.lock = ApplyLock(self.gate, "roll", plan.id)
        self.hex = plan.id.split(":", 1)[-1]
        self.path = roll_path(self.hex)
        self.version = -1
        self.waiter = Waiter(client, poll)

    # ----------------------------------------------------------------------------------------- writer
    def holder(self) -> str | None:
        return holder(self.client)

    def acquire(self, wait: float) -> None:
        self.lock.acquire(wait)

    def release(self) -> None:
        self.lock.release()

    @property
    def held(self) -> bool:
        return self.lock.held

    def check_cluster(self) -> None:
        self.read(lambda: preflight.check_cluster(self.client))

    # ----------------------------------------------------------------------------------------- record
    def load(self) -> dict[str, Any] | None:
        import json

        from planner.execution.rollrecord import FORMAT

        try:
            data, stat = self.read(lambda: self.client.get(self.path))
        except NoNodeError:
            return None
        try:
            doc = json.loads(data)
        except ValueError:
            raise SafetyRefusal(f"{self.path}: the roll record is not valid JSON; nothing was written") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise SafetyRefusal(f"{self.path}: not a {FORMAT} roll record; nothing was written")
        self.version = stat.version
        return doc

    def _op(self, w: Write) -> Op:
        if isinstance(w, Reorder):
            return Op("create", codec.REASSIGN, codec.encode_reassignment(
                [codec.ReassignEntry(k[0], k[1], reps) for k, reps in w.entries]))
        if isinstance(w, Elect):
            return Op("create", codec.PREFERRED_ELECTION, election.request(list(w.keys)))
        assert isinstance(w, Op)
        return w

    def save(self, rec: dict[str, Any], writes: Sequence[Write] = ()) -> None:
        from planner.execution.rollrecord import ROLLS

        data = codec.dumps(rec)
        if self.version < 0:
            ops = [Op("create", p) for p in (NAMESPACE, ROLLS) if self.read(lambda p=p: self.client.exists(p)) is None]
            ops.append(Op("create", self.path, data))
        else:
            ops = [Op("set", self.path, data, self.version)]
        try:
            results = self.gate.commit(ops + [self._op(w) for w in writes])
        except BadVersionError:
            raise SafetyRefusal(f"{self.path} was changed by another process while this roll held the lock; "
                                "stopping") from None
        self.version = 0 if self.version < 0 else results[len(ops) - 1].version

    def resend(self, writes: Sequence[Write]) -> None:
        """Nothing: on ZooKeeper a write was made in the transaction that recorded its state."""

    # ----------------------------------------------------------------------------------------- reads
    def read(self, fn: Callable[[], Any]) -> Any:
        return retrying(fn)

    def partitions(self, keys: Iterable[Key], states: bool = True) -> dict[Key, PartStatus]:
        keys = list(keys)
        return self.read(lambda: self.view.partitions(keys, states=states))

    def live_brokers(self) -> set[int]:
        return self.read(self.view.live_brokers)

    def assignments(self) -> dict[Key, tuple[int, ...]]:
        try:
            topics = self.read(lambda: self.client.get_children(codec.TOPICS))
        except NoNodeError:
            return {}
        out: dict[Key, tuple[int, ...]] = {}
        for t, ta in self.read(lambda: self.view.topics(topics)).items():
            if isinstance(ta, codec.TopicAssignment):
                for p, reps in ta.partitions.items():
                    out[(t, p)] = tuple(reps)
        return out

    def min_isr(self, topics: Iterable[str]) -> dict[str, int]:
        topics = set(topics)
        return self.read(lambda: rollgates.min_isr(self.view, topics))

    def presence(self, broker: int, watch: bool = False) -> Presence:
        st = self.read(lambda: self.client.exists(codec.broker_path(broker), watch=self.waiter.wake if watch else None))
        return Presence(st is not None, st.czxid if st is not None else None)

    def foreign_reassignment(self) -> str | None:
        z = self.read(self.view.reassignment)
        return preflight.describe_foreign(z) if z.exists else None

    def maintenance(self) -> mt.States:
        return self.read(lambda: maintenance_zk.read_all(self.client))

    def maintenance_writes(self, states: mt.States, broker: int, to: str | None, **kw: Any) -> list[Write]:
        return list(maintenance_zk.set_ops(states, [broker], mt.RESTART, to, **kw))

    # ---------------------------------------------------------------------------------- protect / undo
    def check_protect(self, plan: RunPlan) -> None:
        run = self.read(lambda: rs.load(self.client, self.hex))
        self.read(lambda: preflight.check(self.client, self.view, plan, run))

    def execute(self, plan: RunPlan, throttle: int | None, poll: float, stop: Any, relay: Any) -> Any:
        from planner.execution.executor import Executor, Options

        return Executor(self.client, plan, Options(throttle=throttle, poll=poll, stop=stop), relay, "roll",
                        lock=self.lock).apply()

    # ----------------------------------------------------------------------------------------- waiting
    def settled(self, what: str, timeout: float) -> bool:
        """Until the admin znode of `what` ("reassign" / "election") is gone (the controller took it)."""
        return self.waiter.until_absent(codec.REASSIGN if what == "reassign" else codec.PREFERRED_ELECTION, timeout)

    def arm(self) -> None:
        """Wake the next sleep when /admin/reassign_partitions changes (a reordering completing)."""
        self.waiter.arm(codec.REASSIGN)

    def sleep(self) -> None:
        self.waiter.sleep()

    def wake(self) -> None:
        self.waiter.wake()
