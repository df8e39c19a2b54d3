"""The restart roll on a KRaft cluster: `KraftRollCluster`, the roll's narrow interface (rollcluster.RollCluster)
over the Admin API, fenced by `__kplan` (kraftstore). roller.py and rollsteps.py run unchanged on it.

- **The record**: key `roll/<plan hex>` of `__kplan` (the ZooKeeper roll's `kplan-roll/1` JSON), each state change
  one transaction with the lock's heartbeat, under the fence (one transactional.id per cluster: a later kplan's
  initTransactions fences this one; Admin writes only within the lease of the last commit).
- **A write and its state**: the state is committed first, then the Admin request sent (AlterPartitionReassignments
  for a reordering, ElectLeaders PREFERRED for an election); a roll resumed in that state sends it again, which
  changes nothing when it had been sent (rollcluster's docstring): exactly once in effect.
- **Leadership off a broker**: the replay's demotion as on ZooKeeper: each partition it leads gets its list
  reordered so that another in-sync replica comes first (AlterPartitionReassignments to the same replicas in
  another order: ReplicationControlManager.changePartitionReassignment finds nothing adding or removing and
  only sets the target replicas, PartitionChangeBuilder.setTargetReplicas, the leader unchanged), then
  ElectLeaders PREFERRED (ReplicationControlManager.electLeader, PartitionChangeBuilder Election.PREFERRED: the
  first replica, if it is in the ISR and its broker is unfenced). Controlled shutdown would move it too
  (handleBrokerInControlledShutdown), but only once the broker is already stopping, and to whichever ISR
  member the builder picks; the roll moves it before, to the replica the demotion chose.
- **Registered and unfenced**: DescribeCluster v2 with fenced brokers (KIP-1073). A broker is fenced at the end
  of its controlled shutdown and when its heartbeats stop (ReplicationControlManager.processBrokerHeartbeat
  SHUTDOWN_NOW and maybeFenceOneStaleBroker -> handleBrokerFenced, BrokerHeartbeatManager's session), and
  unfenced once it registered again and caught up with the metadata log (handleBrokerUnfenced). The Admin API
  shows no registration epoch, so the restart is seen as the broker fenced, gone or (once the roll ran the
  restart) out of its ISRs, and then unfenced again.
- **Temporary replicas in and out**: KraftExecutor's batches, throttles and run record under the roll's fence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from planner import maintenance as mt
from planner import maintenance_kraft
from planner.errors import KafkaUnavailable, SafetyRefusal
from planner.execution import preflight
from planner.execution import runstate as rs
from planner.execution.clusterview import Key, PartStatus
from planner.execution.kraftcluster import AdminCluster
from planner.execution.kraftstore import LOCK, Store, describe, holder_alive
from planner.execution.planview import RunPlan
from planner.execution.rollcluster import Elect, Presence, Reorder, Write

log = logging.getLogger(__name__)

READ_PATIENCE = 30.0   # seconds a read is tried again while the brokers do not answer


def roll_key(plan_hex: str) -> str:
    return f"roll/{plan_hex}"


class KraftRollCluster:
    backend = "kraft"
    resends = True

    def __init__(self, store: Store, plan: Any, poll: float, lease: float, bootstrap: str = ""):
        self.store = store
        self.plan = plan
        self.poll = poll
        self.lease = lease
        self.bootstrap = bootstrap
        self.hex = plan.id.split(":", 1)[-1]
        self.key = roll_key(self.hex)
        self.admin = AdminCluster(store.admin(), self._guard)
        self.ident = rs.identity("roll", plan.id)
        self.rec: dict[str, Any] | None = None

    # ----------------------------------------------------------------------------------------- writer
    def holder(self) -> str | None:
        self.store.read()
        lock = self.store.get(LOCK)
        return describe(lock) if holder_alive(lock, self.lease) else None

    def acquire(self, wait: float) -> None:
        """Take the fence (initTransactions: any earlier holder is fenced from here on), after waiting up to
        `wait` seconds for a live holder to finish."""
        limit = time.monotonic() + wait
        while (who := self.holder()) is not None:
            if time.monotonic() >= limit:
                raise SafetyRefusal(f"another kplan holds this cluster's lock ({who}). Only one roll or apply may "
                                    "write at a time; nothing was written")
            time.sleep(min(1.0, self.poll))
        self.store.open()

    def release(self) -> None:
        if self.store.holding:
            self.store.close(self._lock_doc(released=True))

    @property
    def held(self) -> bool:
        return self.store.holding

    def check_cluster(self) -> None:
        """Nothing more: the session checked the cluster is KRaft (kraftsteps.session)."""

    def _lock_doc(self, released: bool = False) -> dict[str, Any]:
        return {"holder": self.ident, "heartbeat": time.time(), "released": released}

    # ----------------------------------------------------------------------------------------- record
    def load(self) -> dict[str, Any] | None:
        from planner.execution.rollrecord import FORMAT

        self.store.read()
        doc = self.store.get(self.key)
        if doc is None:
            return None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise SafetyRefusal(f"{self.key} on __kplan: not a {FORMAT} roll record; nothing was written")
        return doc

    def save(self, rec: dict[str, Any], writes: Sequence[Write] = ()) -> None:
        """One transaction: the record, the lock's heartbeat and any maintenance state; then each Admin write it
        names, within the lease."""
        self.rec = rec
        extra = {w[0]: w[1] for w in writes if isinstance(w, tuple)}
        self.store.transact({LOCK: self._lock_doc(), self.key: rec, **extra})
        self._send([w for w in writes if isinstance(w, Reorder | Elect)])

    def resend(self, writes: Sequence[Write]) -> None:
        log.info("resumed in a state whose write may not have been sent: sending it again (idempotent)")
        self._send(list(writes))

    def _send(self, writes: list[Write]) -> None:
        for w in writes:
            if isinstance(w, Reorder):
                self.admin.reassign(dict(w.entries), f"roll of {self.plan.id[:19]}: {len(w.entries)} lists reordered")
            elif isinstance(w, Elect):
                answers = self.admin.elect_preferred(list(w.keys), "roll")
                errors = {k: e for k, e in answers.items() if e}
                if errors:   # the gates that follow judge the leaders; the reasons go to the log
                    log.info("preferred election: %d partitions not elected: %s", len(errors),
                             preflight.listing([f"{preflight.name(k)} ({e})" for k, e in errors.items()]))
                self._seen_elected([k for k in w.keys if k in answers and not answers[k]])

    def _seen_elected(self, keys: list[Key]) -> None:
        """Until the brokers' metadata shows what the controller elected (ElectLeaders answers once the controller
        committed it; DescribeTopicPartitions reads a broker's metadata cache, which may trail it), at most
        METADATA_LAG: what the roll reads next (is the broker still leading anything?) is then the election's."""
        from planner.execution.kraftexec import METADATA_LAG

        limit = time.monotonic() + METADATA_LAG
        while keys and time.monotonic() < limit:
            now = self.partitions(keys)
            keys = [k for k in keys if now[k].replicas and now[k].leader != now[k].replicas[0]]
            if keys:
                time.sleep(min(self.poll, 0.2))

    def _guard(self) -> None:
        """Before every Admin write: a new holder's initial wait, a heartbeat commit when a third of the lease is
        gone, then the lease itself (kraftstore.Store.guard)."""
        self.store.wait_initial()
        if not self.store.fresh():
            self._heartbeat()
        self.store.guard()

    def _heartbeat(self) -> None:
        self.store.transact({LOCK: self._lock_doc(), **({self.key: self.rec} if self.rec is not None else {})})

    # ----------------------------------------------------------------------------------------- reads
    def read(self, fn: Callable[[], Any]) -> Any:
        """A read again while the brokers do not answer (the one the Admin client asked may be the one
        restarting), for up to READ_PATIENCE seconds; then KafkaUnavailable (the roll stops, resumable)."""
        from kafka.errors import KafkaError

        limit = time.monotonic() + READ_PATIENCE
        delay = 0.2
        while True:
            try:
                return fn()
            except (KafkaUnavailable, KafkaError) as e:
                if time.monotonic() > limit:
                    raise KafkaUnavailable(f"the brokers did not answer for {READ_PATIENCE:.0f} s "
                                           f"({type(e).__name__})") from None
                log.info("Admin API read failed (%s); trying again", type(e).__name__)
                time.sleep(delay)
                delay = min(2 * delay, 2.0)

    def partitions(self, keys: Iterable[Key], states: bool = True) -> dict[Key, PartStatus]:
        keys = list(keys)
        return self.read(lambda: self.admin.partitions(keys, states))

    def live_brokers(self) -> set[int]:
        return self.read(self.admin.live_brokers)

    def assignments(self) -> dict[Key, tuple[int, ...]]:
        every = self.read(lambda: self.admin.partitions(None, states=False))
        return {k: s.replicas for k, s in every.items() if s.replicas is not None}

    def min_isr(self, topics: Iterable[str]) -> dict[str, int]:
        """Each topic's min.insync.replicas in effect (DescribeConfigs answers the topic's value, its override
        or the broker's default)."""
        topics = sorted(set(topics))
        got = self.read(lambda: self.admin.configs("topic", topics, ["min.insync.replicas"]))
        return {t: int(v.get("min.insync.replicas", ("1", None))[0] or 1) for t, v in got.items()}

    def presence(self, broker: int, watch: bool = False) -> Presence:
        from planner import kraft_admin as ka

        info = self.read(lambda: ka.brokers(self.admin.admin)).get(broker)
        return Presence(info is not None and not info["fenced"])

    def registrations(self, brokers: Iterable[int]) -> dict[int, dict[str, Any]]:
        """Host and port of each broker (a restart command's {host} and {port})."""
        from planner import kraft_admin as ka

        known = self.read(lambda: ka.brokers(self.admin.admin))
        return {b: {"host": known[b]["host"], "port": known[b]["port"]} for b in brokers if b in known}

    def foreign_reassignment(self) -> str | None:
        moving = self.read(lambda: self.admin.reassignments(None))
        if not moving:
            return None
        shown = preflight.listing([f"{preflight.name(k)} (adding {v.get('adding_replicas')}, removing "
                                   f"{v.get('removing_replicas')})" for k, v in sorted(moving.items())], 10)
        return f"{len(moving)} partitions are being reassigned (ListPartitionReassignments): {shown}"

    def maintenance(self) -> mt.States:
        """The brokers' maintenance states, `__kplan` read to its end (planner/maintenance_kraft.py)."""
        return maintenance_kraft.read_all(self.store)

    def maintenance_writes(self, states: mt.States, broker: int, to: str | None, **kw: Any) -> list[Write]:
        """`broker` to `restarting` (or back in service) as `__kplan` records for the step's own transaction
        (`save`), checked against the one table (maintenance.TRANSITIONS: only this roll's plan may)."""
        return list(maintenance_kraft.set_ops(states, [broker], mt.RESTART, to, **kw).items())

    # ---------------------------------------------------------------------------------- protect / undo
    def _executor(self, plan: RunPlan, throttle: int | None = None, stop: Any = None, relay: Any = None) -> Any:
        from planner.execution.kraftexec import KraftExecutor, KraftOptions

        return KraftExecutor(self.store, plan, KraftOptions(throttle=throttle, poll=self.poll, lease=self.lease,
                                                            stop=stop, bootstrap=self.bootstrap, held=True),
                             relay, "roll")

    def check_protect(self, plan: RunPlan) -> None:
        ex = self._executor(plan)
        self.store.read()
        rec = ex._load()
        ex._check_run(rec)
        ex.preflight(rec)

    def execute(self, plan: RunPlan, throttle: int | None, poll: float, stop: Any, relay: Any) -> Any:
        return self._executor(plan, throttle, stop, relay).apply()

    # ----------------------------------------------------------------------------------------- waiting
    def settled(self, what: str, timeout: float) -> bool:
        """True: the Admin API answers once the controller has the request (no admin znode to wait for)."""
        return True

    def arm(self) -> None:
        """Nothing to watch on KRaft: the waits poll."""

    def sleep(self) -> None:
        """One poll interval; a heartbeat commit first when a third of the lease is gone (a holder whose lock
        record ages past two leases would be taken for dead by the next kplan)."""
        if self.store.holding and not self.store.fresh():
            self._heartbeat()
        time.sleep(self.poll)

    def wake(self) -> None:
        """Nothing: no watch to end a wait early."""
