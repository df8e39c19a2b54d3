"""The ZooKeeper-mode Kafka controller, emulated (docs/KAFKA_ZK.md §2 and §3; Kafka 3.x `KafkaController`,
`ZkPartitionStateMachine`, `ZkReplicaStateMachine`).

It runs inside whichever emulated broker won /controller, uses that broker's ZooKeeper session for every read,
watch and write, and fences every write with the /controller_epoch version, so a controller whose broker died
cannot write. On failover it loads its whole context from ZooKeeper, as Kafka does, and resumes:
- replicas on brokers that are not live leave the ISRs (OfflineReplica), then offline and new partitions are
  elected (clean, then unclean where the topic allows it);
- reassignments resume from /admin/reassign_partitions and from the topic znodes' adding/removing replicas;
- a pending /admin/preferred_replica_election is carried out.

Differences from Kafka that do not change what ZooKeeper ends up holding: work on many partitions is batched
(one write per partition, many per transaction) instead of one request per partition; state reads come from
the in-memory context, which a failed conditional write refreshes from ZooKeeper before retrying. Brokers
stopped together send their ControlledShutdown requests one after another in the order given, each adding
only itself to the shutting-down set (as measured on real Kafka 3.9 brokers). The replicas of several brokers
failing in one event leave the ISRs one broker at a time in Kafka's order, that of a Scala HashMap keyed by
broker id (`election.broker_visit_order`).
Not emulated: topic deletion (queued topics are only kept out of elections and reassignments), adding
partitions to existing topics, log-dir failures, topic ids for topics that have none.

Every method runs on the sandbox's single event loop thread.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType

from planner import codec
from planner.errors import CodecError
from planner.sandbox import election
from planner.sandbox.model import NEW, OFFLINE, ONLINE, Assignment, Part, reassign_to
from planner.sandbox.settings import Timing
from planner.sandbox.zkio import ControllerMoved, Op, UntilConnected, commit_fenced, multi_read

log = logging.getLogger("planner.sandbox.controller")

# Election strategies (kafka.controller.PartitionLeaderElectionStrategy).
OFFLINE_ELECTION = "offline"
SHUTDOWN_ELECTION = "controlled_shutdown"
REASSIGN_ELECTION = "reassign"
PREFERRED_ELECTION = "preferred"

# New leader/ISR for a partition: (leader, leader_epoch, isr, leader_recovery_state).
Lai = tuple[int, int, list[int], int]


class Host(Protocol):
    """What the controller needs from the process hosting it (the sandbox daemon)."""

    timing: Timing

    def post(self, fn: Callable[..., Any], *args: Any) -> None: ...

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> Any: ...

    @property
    def replication(self) -> Any: ...


class BrokerNotAvailable(Exception):
    pass


class Controller:
    def __init__(self, broker_id: int, client: KazooClient, epoch: int, epoch_zk_version: int, host: Host):
        self.broker_id = broker_id
        self.client: Any = UntilConnected(client)   # a request lost with the connection is sent again (zkio)
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self.host = host
        self.active = True
        self.initialized = False
        self.topics: dict[str, dict[int, Part]] = {}
        self.topic_meta: dict[str, tuple[int, str | None]] = {}  # version, topic_id
        self.parts: dict[tuple[str, int], Part] = {}
        self.by_broker: dict[int, set[Part]] = defaultdict(set)
        self.live: dict[int, int] = {}  # registered brokers (incl. shutting down) -> broker epoch (czxid)
        self.shutting_down: set[int] = set()
        self.not_online: set[Part] = set()  # partitions in NEW or OFFLINE state
        self.reassigning: set[Part] = set()
        self.deleting: set[str] = set()
        self.stats: dict[str, int] = defaultdict(int)
        self._rebalance_timer: Any = None
        # Watch callbacks are kept as attributes so kazoo sees the same function each time (no duplicates).
        self._w_brokers = lambda ev: self._post(self._on_broker_change)
        self._w_topics = lambda ev: self._post(self._on_topic_change)
        self._w_deletes = lambda ev: self._post(self._on_topic_deletion)
        self._w_reassign = lambda ev: self._post(self._on_reassign_event, ev.type)
        self._w_preferred = lambda ev: self._post(self._on_preferred_event, ev.type)

    # ------------------------------------------------------------------------------------------ basics
    def _post(self, fn: Callable[..., Any], *args: Any) -> None:
        self.host.post(self._guarded, fn, *args)

    def _guarded(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.active:
            fn(*args)

    def online(self, broker: int) -> bool:
        """`isReplicaOnline`: registered and not shutting down."""
        return broker in self.live and broker not in self.shutting_down

    def lookup(self, topic: str, pid: int) -> Part | None:
        return self.parts.get((topic, pid))

    def resign(self) -> None:
        if not self.active:
            return
        self.active = False
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
        log.info("controller on broker %d (epoch %d) resigned", self.broker_id, self.epoch)

    # ---------------------------------------------------------------------------------------- failover
    def failover(self) -> None:
        started = time.monotonic()
        self._load_context()
        # Replica state machine start-up: replicas on brokers that are not online go OfflineReplica, which
        # takes them out of the ISRs (or the leader away when they led).
        for b in election.broker_visit_order([b for b in self.by_broker if self.by_broker[b] and not self.online(b)]):
            self._remove_replica_from_isr(b, [p for p in self.by_broker[b] if p.has_state])
        # Partition state machine start-up.
        self.not_online.clear()
        for p in self.parts.values():
            if not p.has_state:
                p.state = NEW
            else:
                p.state = ONLINE if self.online(p.leader) else OFFLINE
            if p.state != ONLINE:
                self.not_online.add(p)
        self._trigger_online_partition_state_change()
        resumed = self._process_zk_reassignment()
        self._maybe_resume_reassignments(lambda p: p not in resumed)
        self._process_preferred_election(at_failover=True)
        self.initialized = True
        if self.host.timing.auto_rebalance:
            delay = min(self.host.timing.rebalance_initial_delay, self.host.timing.rebalance_interval)
            self._rebalance_timer = self.host.call_later(delay, self._guarded, self._auto_rebalance)
        log.info("controller on broker %d ready with epoch %d: %d brokers live, %d topics, %d partitions "
                 "(%d reassigning) in %.1fs", self.broker_id, self.epoch, len(self.live), len(self.topics),
                 len(self.parts), len(self.reassigning), time.monotonic() - started)

    def _load_context(self) -> None:
        c = self.client
        # Handlers first, then the source of truth (as Kafka's onControllerFailover does).
        c.exists(codec.REASSIGN, watch=self._w_reassign)
        c.exists(codec.PREFERRED_ELECTION, watch=self._w_preferred)
        ids = c.get_children(codec.BROKER_IDS, watch=self._w_brokers)
        self.live = self._broker_epochs(ids)
        try:
            self.deleting = set(c.get_children(codec.DELETE_TOPICS, watch=self._w_deletes))
        except NoNodeError:
            self.deleting = set()
        topics = c.get_children(codec.TOPICS, watch=self._w_topics)
        self._add_topics(topics)

    def _broker_epochs(self, ids: list[str]) -> dict[int, int]:
        ids = [i for i in ids if i.isdigit()]
        out = {}
        for i, res in zip(ids, multi_read(self.client, [codec.broker_path(int(i)) for i in ids]), strict=True):
            if not isinstance(res, Exception):
                out[int(i)] = res[1].czxid
        return out

    def _add_topics(self, topics: list[str]) -> list[Part]:
        """Read the assignment and partition states of these topics into the context."""
        topics = [t for t in topics if t not in self.topics]
        added: list[Part] = []
        for t, res in zip(topics, multi_read(self.client, [codec.topic_path(t) for t in topics]), strict=True):
            if isinstance(res, Exception):
                continue
            try:
                ta = codec.decode_topic(t, res[0])
            except CodecError as e:
                log.error("ignoring topic %s: %s", t, e)
                continue
            self.topic_meta[t] = (ta.version, ta.topic_id)
            parts = {}
            for pid in sorted(ta.partitions):
                p = Part(t, pid, list(ta.partitions[pid]), list(ta.adding_replicas.get(pid, [])),
                         list(ta.removing_replicas.get(pid, [])))
                parts[pid] = p
                self.parts[(t, pid)] = p
                for r in p.replicas:
                    self.by_broker[r].add(p)
                if p.reassigning:
                    self.reassigning.add(p)
                added.append(p)
            self.topics[t] = parts
        paths = [codec.state_path(p.topic, p.pid) for p in added]
        for p, path, res in zip(added, paths, multi_read(self.client, paths), strict=True):
            self._apply_read_state(p, path, res)
        return added

    def _apply_read_state(self, p: Part, path: str, res: Any) -> None:
        if isinstance(res, Exception):
            p.has_state = False
            return
        try:
            st = codec.decode_partition_state(res[0], path)
        except CodecError as e:
            log.error("%s", e)
            p.has_state = False
            return
        p.set_state(st.leader, st.leader_epoch, list(st.isr), st.leader_recovery_state, st.controller_epoch,
                    res[1].version)

    def _reload_states(self, parts: list[Part]) -> None:
        paths = [codec.state_path(p.topic, p.pid) for p in parts]
        for p, path, res in zip(parts, paths, multi_read(self.client, paths), strict=True):
            self._apply_read_state(p, path, res)

    # ------------------------------------------------------------------------------------------ writes
    def _update(self, parts: Iterable[Part], fn: Callable[[Part], Lai | None], what: str) -> list[Part]:
        """Write fn's new leader/ISR for each partition (skipping None) with the partition's stat version;
        a partition whose write hits a newer version is re-read from ZooKeeper and fn applied again."""
        todo = [p for p in parts if p.has_state]
        written: list[Part] = []
        for _attempt in range(5):
            changes = []
            for p in todo:
                lai = fn(p)
                if lai is not None:
                    changes.append((p, lai))
            if not changes:
                break
            ops = []
            for p, (leader, epoch, isr, lrs) in changes:
                data = codec.encode_partition_state(codec.PartitionState(leader, epoch, self.epoch, isr, lrs))
                ops.append(Op("set", codec.state_path(p.topic, p.pid), data, p.version))
            results = self._commit(ops)
            retry = []
            for (p, (leader, epoch, isr, lrs)), res in zip(changes, results, strict=True):
                if isinstance(res, Exception):
                    retry.append(p)
                else:
                    p.set_state(leader, epoch, isr, lrs, self.epoch, res.version)
                    written.append(p)
            if not retry:
                break
            log.info("%s: %d partition states changed under us, re-reading them", what, len(retry))
            self._reload_states(retry)
            todo = [p for p in retry if p.has_state]
        if written:
            self.stats["state_writes"] += len(written)
            log.info("%s: wrote %d partition states", what, len(written))
            self.host.replication.sync(written)
        return written

    def _commit(self, ops: list[Op]) -> list[Any]:
        try:
            return commit_fenced(self.client, ops, self.epoch_zk_version)
        except ControllerMoved:
            log.warning("controller on broker %d was fenced: /controller_epoch moved", self.broker_id)
            self.resign()
            raise

    def _write_topics(self, topics: Iterable[str]) -> None:
        """`setTopicAssignment`: the whole topic znode from the context (any version, fenced)."""
        ops = []
        for t in sorted(set(topics)):
            version, topic_id = self.topic_meta.get(t, (3, None))
            parts = self.topics[t]
            ta = codec.TopicAssignment(
                partitions={pid: p.replicas for pid, p in parts.items()},
                adding_replicas={pid: p.adding for pid, p in parts.items() if p.adding},
                removing_replicas={pid: p.removing for pid, p in parts.items() if p.removing},
                topic_id=topic_id,
                version=max(version, 2),
            )
            ops.append(Op("set", codec.topic_path(t), codec.encode_topic(ta)))
        for op, res in zip(ops, self._commit(ops), strict=True):
            if isinstance(res, Exception):
                log.error("could not write %s: %r", op.path, res)

    def _set_assignment(self, p: Part, a: Assignment) -> None:
        replicas, adding, removing = a
        for r in p.replicas:
            if r not in replicas:
                self.by_broker[r].discard(p)
        for r in replicas:
            self.by_broker[r].add(p)
        p.replicas, p.adding, p.removing = list(replicas), list(adding), list(removing)

    # ---------------------------------------------------------------------------- state machine pieces
    def _set_partition_state(self, parts: Iterable[Part], state: int) -> None:
        for p in parts:
            p.state = state
            if state == ONLINE:
                self.not_online.discard(p)
            else:
                self.not_online.add(p)

    def _trigger_online_partition_state_change(self) -> None:
        parts = [p for p in self.not_online if p.topic not in self.deleting]
        if parts:
            self._handle_online(sorted(parts, key=lambda p: p.key), OFFLINE_ELECTION)

    def _handle_online(self, parts: list[Part], strategy: str) -> list[Part]:
        """handleStateChanges(partitions, OnlinePartition, strategy): NEW partitions get their first
        leader/ISR, OFFLINE/ONLINE ones an election; the successful ones end ONLINE."""
        new = [p for p in parts if p.state == NEW]
        old = [p for p in parts if p.state != NEW and p.has_state]
        done: list[Part] = []
        if new:
            done += self._initialize_leader_and_isr(new)
        if old:
            done += self._elect(old, strategy)
        self._set_partition_state(done, ONLINE)
        return done

    def _elect(self, parts: list[Part], strategy: str) -> list[Part]:
        online = self.online
        if strategy == OFFLINE_ELECTION:
            no_live_isr = {p.topic for p in parts if not any(online(r) for r in p.isr)}
            unclean = self._unclean_enabled(sorted(no_live_isr))

            def fn(p: Part) -> Lai | None:
                res = election.offline_leader(p.replicas, p.isr, online, unclean.get(p.topic, False))
                if res is None:
                    return None
                leader, isr, recovering = res
                if recovering:
                    self.stats["unclean_elections"] += 1
                return leader, p.epoch + 1, isr, 1 if recovering else p.lrs
        elif strategy == SHUTDOWN_ELECTION:
            def fn(p: Part) -> Lai | None:
                res = election.controlled_shutdown_leader(p.replicas, p.isr, self.live, self.shutting_down)
                return None if res is None else (res[0], p.epoch + 1, res[1], p.lrs)
        elif strategy == REASSIGN_ELECTION:
            def fn(p: Part) -> Lai | None:
                leader = election.reassign_leader(p.target, p.isr, online)
                return None if leader is None else (leader, p.epoch + 1, list(p.isr), p.lrs)
        elif strategy == PREFERRED_ELECTION:
            def fn(p: Part) -> Lai | None:
                leader = election.preferred_leader(p.replicas, p.isr, online)
                return None if leader is None else (leader, p.epoch + 1, list(p.isr), p.lrs)
        else:
            raise ValueError(strategy)
        done = self._update(parts, fn, f"{strategy} election")
        failed = len(parts) - len(done)
        if failed:
            log.info("%s election: no eligible leader for %d partitions", strategy, failed)
        return done

    def _unclean_enabled(self, topics: list[str]) -> dict[str, bool]:
        """Effective unclean.leader.election.enable: topic override, else the dynamic cluster default, else
        the static broker default (read from ZooKeeper at election time, as Kafka's controller does)."""
        if not topics:
            return {}
        paths = [codec.broker_config_path(codec.DEFAULT_BROKER_ENTITY)] + [codec.topic_config_path(t) for t in topics]
        res = multi_read(self.client, paths)

        def value(path: str, r: Any) -> str | None:
            if isinstance(r, Exception):
                return None
            try:
                return codec.decode_config(r[0], path).get("unclean.leader.election.enable")
            except CodecError:
                return None

        default = value(paths[0], res[0])
        base = self.host.timing.unclean_default if default is None else default.strip().lower() == "true"
        out = {}
        for t, path, r in zip(topics, paths[1:], res[1:], strict=True):
            v = value(path, r)
            out[t] = base if v is None else v.strip().lower() == "true"
        return out

    def _initialize_leader_and_isr(self, parts: list[Part]) -> list[Part]:
        """NewPartition -> OnlinePartition: leader = first live replica, ISR = live replicas, epoch 0."""
        ops: list[Op] = []
        chosen: list[tuple[Part, int, list[int]]] = []
        for p in parts:
            live = [r for r in p.replicas if self.online(r)]
            if not live:
                log.info("new partition %s: no assigned replica is alive", p.name)
                continue
            chosen.append((p, live[0], live))
        for t in sorted({p.topic for p, _, _ in chosen}):
            self.client.ensure_path(codec.partitions_path(t))
        for p, _, _ in chosen:
            try:
                self.client.create(f"{codec.partitions_path(p.topic)}/{p.pid}")
            except NodeExistsError:
                pass
        for p, leader, isr in chosen:
            data = codec.encode_partition_state(codec.PartitionState(leader, 0, self.epoch, isr))
            ops.append(Op("create", codec.state_path(p.topic, p.pid), data))
        done = []
        for (p, leader, isr), res in zip(chosen, self._commit(ops), strict=True):
            if isinstance(res, Exception):
                log.error("could not create the state of %s: %r", p.name, res)
                continue
            p.set_state(leader, 0, isr, 0, self.epoch, 0)
            done.append(p)
        if done:
            self.host.replication.sync(done)
        return done

    def _remove_replica_from_isr(self, replica: int, parts: Iterable[Part]) -> list[Part]:
        """OfflineReplica for one broker's replicas (`removeReplicasFromIsr`)."""
        def fn(p: Part) -> Lai | None:
            res = election.without_replica(replica, p.leader, p.isr)
            return None if res is None else (res[0], p.epoch + 1, res[1], p.lrs)
        return self._update(sorted(parts, key=lambda p: p.key), fn, f"replica {replica} offline")

    def _update_leader_epoch(self, parts: Iterable[Part]) -> list[Part]:
        return self._update(parts, lambda p: (p.leader, p.epoch + 1, list(p.isr), p.lrs), "leader epoch bump")

    # ------------------------------------------------------------------------------------------ brokers
    def _on_broker_change(self) -> None:
        ids = self.client.get_children(codec.BROKER_IDS, watch=self._w_brokers)
        current = self._broker_epochs(ids)
        new = sorted(b for b in current if b not in self.live)
        dead = sorted(b for b in self.live if b not in current)
        bounced = sorted(b for b in current if b in self.live and current[b] > self.live[b])
        if not (new or dead or bounced):
            return
        log.info("brokers: new %s, dead %s, bounced %s, live now %s", new, dead, bounced, sorted(current))
        self.stats["broker_changes"] += 1
        if new:
            for b in new:
                self.live[b] = current[b]
            self._on_broker_startup(new)
        if bounced:
            for b in bounced:
                del self.live[b]
            self._on_broker_failure(bounced)
            for b in bounced:
                self.live[b] = current[b]
            self._on_broker_startup(bounced)
        if dead:
            for b in dead:
                del self.live[b]
            self._on_broker_failure(dead)

    def _on_broker_startup(self, brokers: list[int]) -> None:
        self._trigger_online_partition_state_change()
        started = set(brokers)
        self._maybe_resume_reassignments(lambda p: any(r in started for r in p.target))

    def _on_broker_failure(self, dead: list[int]) -> None:
        for b in dead:
            self.shutting_down.discard(b)
        self._on_replicas_offline(dead)

    def _on_replicas_offline(self, dead: list[int]) -> None:
        offline_leader = [p for p in self.parts.values()
                          if p.has_state and not self.online(p.leader) and p.topic not in self.deleting]
        self._set_partition_state(offline_leader, OFFLINE)
        self._trigger_online_partition_state_change()
        # ZkReplicaStateMachine.handleStateChanges groups the offline replicas by broker (those of topics not
        # queued for deletion): the keys of that map, in its iteration order
        offline = {b: [p for p in self.by_broker.get(b, ()) if p.topic not in self.deleting] for b in dead}
        for b in election.broker_visit_order([b for b in dead if offline[b]]):
            self._remove_replica_from_isr(b, offline[b])

    def controlled_shutdown(self, broker: int) -> list[Part]:
        """One ControlledShutdownRequest from `broker` (`doControlledShutdown`); returns the partitions it
        still leads. Each request adds only its own broker to the shutting-down set S, so brokers stopped
        together are handled one request at a time, in arrival order: a leader can move onto a broker that
        is stopping too but has not asked yet, and move again when that one asks.
        The partitions remaining are those with more than one replica still led by the broker (Kafka's
        `partitionLeadersOnBroker`): an RF=1 partition never makes a controlled shutdown fail, it goes
        offline when the broker stops."""
        if broker not in self.live:
            raise BrokerNotAvailable(f"broker {broker} is not registered")
        self.shutting_down.add(broker)
        acted = [p for p in self.by_broker.get(broker, ())
                 if len(p.replicas) > 1 and p.has_state and p.topic not in self.deleting]
        led = sorted((p for p in acted if p.leader == broker), key=lambda p: p.key)
        followed = [p for p in acted if p.leader != broker]
        moved = self._handle_online(led, SHUTDOWN_ELECTION)
        self.stats["controlled_shutdown_moves"] += len(moved)
        shrunk = self._remove_replica_from_isr(broker, followed)
        remaining = [p for p in self.by_broker.get(broker, ())
                     if p.leader == broker and len(p.replicas) > 1 and p.topic not in self.deleting]
        log.info("controlled shutdown of broker %d: %d led partitions moved, %d ISRs shrunk, %d still led",
                 broker, len(moved), len(shrunk), len(remaining))
        return remaining

    # ------------------------------------------------------------------------------------------- topics
    def _on_topic_change(self) -> None:
        topics = set(self.client.get_children(codec.TOPICS, watch=self._w_topics))
        gone = [t for t in self.topics if t not in topics]
        for t in gone:
            for p in self.topics.pop(t).values():
                self.parts.pop(p.key, None)
                self.not_online.discard(p)
                self.reassigning.discard(p)
                for r in p.replicas:
                    self.by_broker[r].discard(p)
                self.host.replication.forget(p)
            self.topic_meta.pop(t, None)
        added = self._add_topics(sorted(t for t in topics if t not in self.topics))
        if gone or added:
            log.info("topics: %d new partitions, deleted topics %s", len(added), gone)
        fresh = [p for p in added if not p.has_state]
        for p in added:
            if p.has_state:
                p.state = ONLINE if self.online(p.leader) else OFFLINE
                if p.state == OFFLINE:
                    self.not_online.add(p)
        if fresh:
            self._set_partition_state(fresh, NEW)
            self._handle_online(fresh, OFFLINE_ELECTION)
        self.host.replication.sync([p for p in added if p.has_state])

    def _on_topic_deletion(self) -> None:
        try:
            self.deleting = set(self.client.get_children(codec.DELETE_TOPICS, watch=self._w_deletes))
        except NoNodeError:
            self.deleting = set()

    # ------------------------------------------------------------------------------------ reassignment
    def _on_reassign_event(self, kind: Any) -> None:
        # Kafka acts only when the znode is created; other events just re-arm the watch. (A znode deleted
        # and created again before the watch is re-armed is noticed here too.)
        if kind == EventType.CREATED:
            self._process_zk_reassignment()
            return
        stat = self.client.exists(codec.REASSIGN, watch=self._w_reassign)
        if kind == EventType.DELETED and stat is not None:
            self._process_zk_reassignment()

    def _process_zk_reassignment(self) -> set[Part]:
        if self.client.exists(codec.REASSIGN, watch=self._w_reassign) is None:
            return set()
        try:
            data, _ = self.client.get(codec.REASSIGN)
        except NoNodeError:
            return set()
        self.stats["reassign_znodes_seen"] += 1
        try:
            entries = codec.decode_reassignment(data)
        except CodecError as e:
            # Kafka's getPartitionReassignment logs "Ignoring partition reassignment due to invalid json"
            # and returns nothing: the znode stays, and blocks every later reassignment.
            self.stats["reassign_znodes_ignored"] += 1
            log.warning("ignoring partition reassignment due to invalid json: %s", e)
            entries = []
        items: list[tuple[Part, Assignment]] = []
        failed: set[tuple[str, int]] = set()
        for e in entries:
            p = self.parts.get((e.topic, e.partition))
            if p is None or e.topic in self.deleting:
                failed.add((e.topic, e.partition))
                continue
            items.append((p, reassign_to(p.origin, list(e.replicas))))
        if items:
            log.info("reassignment of %d partitions submitted through ZooKeeper", len(items))
            self._on_partition_reassignment(items)
        if failed:
            log.warning("reassignment failed for unknown or deleted partitions %s", sorted(failed))
            self._maybe_remove_from_zk_reassignment(lambda tp, reps: tp in failed)
        return {p for p, _ in items}

    def _maybe_resume_reassignments(self, pred: Callable[[Part], bool]) -> None:
        items = [(p, p.assignment) for p in sorted(self.reassigning, key=lambda p: p.key) if pred(p)]
        if items:
            self._on_partition_reassignment(items)

    def _on_partition_reassignment(self, items: list[tuple[Part, Assignment]]) -> None:
        """`onPartitionReassignment` for many partitions at once: phase U, then A (not yet in sync) or B."""
        changed = [(p, a) for p, a in items if p.assignment != (list(a[0]), list(a[1]), list(a[2]))]
        if changed:
            old = {p: list(p.replicas) for p, _ in changed}
            for p, a in changed:
                self._set_assignment(p, a)
            self._write_topics(p.topic for p, _ in changed)
            self.host.replication.sync([p for p, _ in changed])
            for p, _ in changed:
                unneeded = [r for r in old[p] if r not in p.replicas]
                if unneeded:
                    self._stop_removed_replicas({p: unneeded})
        for p, _ in items:
            self.reassigning.add(p)
        incomplete = [p for p, _ in items if p.reassigning and not set(p.target) <= set(p.isr)]
        complete = [p for p, _ in items if not (p.reassigning and not set(p.target) <= set(p.isr))]
        if incomplete:
            self._update_leader_epoch(incomplete)  # A1
            for p in incomplete:  # A2 (and the LeaderAndIsr of A1 restarts the other out-of-sync targets)
                for r in p.target:
                    if r not in p.isr:
                        self.host.replication.start_new(p, r)
        if complete:
            self._complete_reassignments(complete)

    def _stop_removed_replicas(self, removed: dict[Part, list[int]]) -> None:
        by_replica: dict[int, list[Part]] = defaultdict(list)
        for p, reps in removed.items():
            for r in reps:
                by_replica[r].append(p)
        for r in sorted(by_replica):
            self._remove_replica_from_isr(r, by_replica[r])
            for p in by_replica[r]:
                self.host.replication.drop(p, r)

    def _complete_reassignments(self, parts: list[Part]) -> None:
        removing = {p: list(p.removing) for p in parts}
        for p in parts:  # B2
            self._set_assignment(p, (p.target, [], []))
        need_election = [p for p in parts if p.leader not in p.replicas or not self.online(p.leader)]
        keep_leader = [p for p in parts if p.leader in p.replicas and self.online(p.leader)]
        if need_election:  # B3
            self._handle_online(need_election, REASSIGN_ELECTION)
        if keep_leader:
            self._update_leader_epoch(keep_leader)
        self._stop_removed_replicas({p: r for p, r in removing.items() if r})  # B4, B5
        self._write_topics(p.topic for p in parts)  # B6
        done = {p.key: list(p.replicas) for p in parts}
        for p in parts:
            self.reassigning.discard(p)
        self.stats["reassignments_completed"] += len(parts)
        log.info("reassignment completed for %d partitions", len(parts))
        self.host.replication.sync(parts)
        self._maybe_remove_from_zk_reassignment(lambda tp, reps: done.get(tp) == reps)  # B7

    def _maybe_remove_from_zk_reassignment(self, remove: Callable[[tuple[str, int], list[int]], bool]) -> None:
        try:
            data, stat = self.client.get(codec.REASSIGN)
        except NoNodeError:
            return
        try:
            entries = codec.decode_reassignment(data)
        except CodecError:
            entries = []  # Kafka reads an invalid znode as empty here, so it deletes it
        keep = [e for e in entries if not remove((e.topic, e.partition), list(e.replicas))]
        if not keep:
            res = self._commit([Op("delete", codec.REASSIGN)])[0]
            if isinstance(res, Exception) and not isinstance(res, NoNodeError):
                log.error("could not delete %s: %r", codec.REASSIGN, res)
            log.info("no more partitions to reassign: deleted %s", codec.REASSIGN)
            self._post(self._process_zk_reassignment)  # re-arm the watch for the next creation
        elif len(keep) != len(entries):
            self._commit([Op("set", codec.REASSIGN, codec.encode_reassignment(keep))])

    def maybe_complete_reassignments(self, parts: Iterable[Part]) -> None:
        done = [p for p in parts if p in self.reassigning and set(p.target) <= set(p.isr)]
        if done:
            self._on_partition_reassignment([(p, p.assignment) for p in done])

    # --------------------------------------------------------------------------------------- ISR joins
    def alter_partition(self, joins: list[tuple[Part, int]]) -> list[Part]:
        """AlterPartition from partition leaders: add caught-up followers to the ISR. The leader epoch does not
        change; an ISR expansion also ends a RECOVERING state. Rejected (KIP-841) when the new ISR would hold
        a broker that is not online."""
        wanted: dict[Part, list[int]] = defaultdict(list)
        for p, r in joins:
            if p.has_state and p.leader >= 0 and p.leader in self.live and r in p.replicas:
                wanted[p].append(r)

        def fn(p: Part) -> Lai | None:
            new = [r for r in wanted[p] if r not in p.isr]
            if not new or p.leader < 0:
                return None
            isr = p.isr + new
            if not all(self.online(x) for x in isr):
                return None
            return p.leader, p.epoch, isr, 0

        written = self._update(sorted(wanted, key=lambda p: p.key), fn, "ISR expansion")
        self.maybe_complete_reassignments(written)
        return written

    # -------------------------------------------------------------------------------- preferred leaders
    def _on_preferred_event(self, kind: Any) -> None:
        if kind == EventType.CREATED:
            self._process_preferred_election()
            return
        stat = self.client.exists(codec.PREFERRED_ELECTION, watch=self._w_preferred)
        if kind == EventType.DELETED and stat is not None:
            self._process_preferred_election()

    def _process_preferred_election(self, at_failover: bool = False) -> None:
        if self.client.exists(codec.PREFERRED_ELECTION, watch=self._w_preferred) is None:
            return
        try:
            data, _ = self.client.get(codec.PREFERRED_ELECTION)
            wanted = codec.decode_preferred_election(data)
        except NoNodeError:
            return
        except CodecError as e:
            self.stats["preferred_znodes_ignored"] += 1
            log.warning("ignoring preferred replica election: %s", e)
            return
        self.stats["preferred_znodes_seen"] += 1
        parts = [self.parts[k] for k in dict.fromkeys(wanted) if k in self.parts and k[0] not in self.deleting]
        electable = [p for p in parts if p.replicas and p.leader != p.replicas[0]]
        log.info("preferred replica election for %d partitions (%d not led by their preferred replica)%s",
                 len(parts), len(electable), " at failover" if at_failover else "")
        try:
            self._handle_online(electable, PREFERRED_ELECTION)
        finally:
            res = self._commit([Op("delete", codec.PREFERRED_ELECTION)])[0]
            if isinstance(res, Exception) and not isinstance(res, NoNodeError):
                log.error("could not delete %s: %r", codec.PREFERRED_ELECTION, res)
            self._post(self._on_preferred_event, EventType.DELETED)

    def _auto_rebalance(self) -> None:
        try:
            self._check_and_trigger_auto_leader_rebalance()
        finally:
            if self.active:
                self._rebalance_timer = self.host.call_later(self.host.timing.rebalance_interval, self._guarded,
                                                             self._auto_rebalance)

    def _check_and_trigger_auto_leader_rebalance(self) -> None:
        self.stats["rebalance_checks"] += 1
        by_preferred: dict[int, list[Part]] = defaultdict(list)
        for p in self.parts.values():
            if p.replicas and p.topic not in self.deleting:
                by_preferred[p.replicas[0]].append(p)
        candidates: list[Part] = []
        for b, parts in sorted(by_preferred.items()):
            not_preferred = [p for p in parts if p.has_state and p.leader != b]
            if len(not_preferred) / len(parts) > self.host.timing.imbalance_pct / 100:
                candidates += [p for p in not_preferred if election.preferred_leader(p.replicas, p.isr, self.online)]
        if candidates:
            log.info("auto leader rebalance: %d partitions back to their preferred leader", len(candidates))
            self.stats["auto_rebalances"] += 1
            self._handle_online(sorted(candidates, key=lambda p: p.key), PREFERRED_ELECTION)

    # ------------------------------------------------------------------------------------------- views
    def summary(self, min_isr: Callable[[str], int], limit: int = 1000) -> dict[str, Any]:
        offline, under, under_min = [], [], []
        n_offline = n_under = n_under_min = 0
        for p in self.parts.values():
            if not p.has_state:
                continue
            target_rf = len(p.target)
            if p.leader < 0 or p.leader not in self.live:
                n_offline += 1
                if len(offline) < limit:
                    offline.append({"topic": p.topic, "partition": p.pid, "leader": p.leader, "isr": p.isr})
            if len(p.isr) < target_rf:
                n_under += 1
                if len(under) < limit:
                    under.append({"topic": p.topic, "partition": p.pid, "replicas": p.replicas, "isr": p.isr})
            if len(p.isr) < min(min_isr(p.topic), target_rf):
                n_under_min += 1
                if len(under_min) < limit:
                    under_min.append({"topic": p.topic, "partition": p.pid, "isr": p.isr})
        reassigning = []
        for p in sorted(self.reassigning, key=lambda p: p.key)[:limit]:
            waiting = [r for r in p.target if r not in p.isr]
            reassigning.append({"topic": p.topic, "partition": p.pid, "replicas": p.replicas, "adding": p.adding,
                                "removing": p.removing, "isr": p.isr,
                                "stuck_on_dead_brokers": [r for r in waiting if r not in self.live]})
        return {
            "controller": {"broker": self.broker_id, "epoch": self.epoch},
            "topics": len(self.topics),
            "partitions": len(self.parts),
            "offline_count": n_offline,
            "offline": offline,
            "under_replicated_count": n_under,
            "under_replicated": under,
            "under_min_isr_count": n_under_min,
            "under_min_isr": under_min,
            "reassigning_count": len(self.reassigning),
            "reassigning": reassigning,
            "shutting_down": sorted(self.shutting_down),
            "stats": dict(self.stats),
        }
