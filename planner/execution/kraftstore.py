"""The KRaft backend's one writer: the `__kplan` compacted topic, a transactional producer's epoch, and a lease
(docs/KRAFT.md "The one-writer fence"). A KRaft cluster has no lock znode, so:

1. **The records, exactly single-writer.** `__kplan` (1 partition, RF min(3, brokers), min ISR min(2, RF),
   `cleanup.policy=compact`) holds, keyed, the lock (`lock`), each run record (`run/<plan hex>`), its throttle
   record (`throttles/<plan hex>`), cancel requests (`cancel/<plan hex>`) and the brokers' maintenance states
   (`maintenance/<id>`). Every writer, on any host, uses the transactional.id `kplan-<cluster id>`:
   `initTransactions` (InitProducerId, KIP-98) bumps the producer epoch, aborts the previous holder's open
   transaction and makes the coordinator reject the older epoch from then on (PRODUCER_FENCED, KIP-588;
   Kafka's TransactionCoordinator.handleInitProducerId). Each state transition is one transaction; the
   records are read with `read_committed` to the end before anything is decided.
2. **Cluster writes, bounded by a lease.** A writer sends an Admin request only within `lease` seconds (its
   own monotonic clock) of the *start* of its last successful commit (`guard`); a new writer waits `lease`
   after its `initTransactions` returned before its first Admin request, unless the last committed lock says
   the previous holder released it (a released holder promised nothing more). The old writer's last
   successful commit started before the new one's InitProducerId was answered, so the old writer's Admin
   writes end before the new one's begin, with no clock shared between hosts.

A cancel request is the one record written without the fence (by `kplan cancel`, an idempotent producer): it
asks, it decides nothing; the holder reads it. Nothing here logs a config or a credential.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from planner.errors import BadInput, KafkaUnavailable, SafetyRefusal

log = logging.getLogger(__name__)

TOPIC = "__kplan"
LOCK = "lock"
INIT_WAIT = 60.0   # seconds initTransactions may block (open)


def run_key(plan_hex: str) -> str:
    return f"run/{plan_hex}"


def throttles_key(plan_hex: str) -> str:
    return f"throttles/{plan_hex}"


def cancel_key(plan_hex: str) -> str:
    return f"cancel/{plan_hex}"


def maintenance_key(broker: int) -> str:
    return f"maintenance/{broker}"


class Unreadable:
    """A record whose value is not JSON: kept as its bytes, so that one bad record does not stop the read (a
    maintenance entry reads as `unknown`, planner/maintenance_kraft.py; any other key's reader says it)."""

    def __init__(self, data: bytes):
        self.data = data

    def __repr__(self) -> str:
        return f"Unreadable({self.data[:40]!r})"


def _decode(value: bytes) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return Unreadable(value)


class Fenced(SafetyRefusal):
    """Another kplan took the fence (a newer producer epoch): this one must write nothing more."""


class LeaseExpired(SafetyRefusal):
    """Too long since this writer's last commit: an Admin write now could follow a newer writer's."""


def _client_config(security: Any) -> dict[str, Any]:
    return security.client_config() if security is not None else {}


class Store:
    """`__kplan` of one cluster: read (read_committed) by anyone; written by the fence holder only (`open`)."""

    def __init__(self, bootstrap: str, security: Any = None, timeout: float = 10.0, lease: float = 30.0,
                 admin: Any = None):
        self.bootstrap = bootstrap
        self.servers = [s.strip() for s in bootstrap.split(",") if s.strip()]
        self.security = security
        self.timeout = timeout
        self.lease = float(lease)
        self._admin = admin
        self.cluster_id: str | None = None
        self.values: dict[str, Any] = {}          # key -> decoded JSON (None: deleted), as last read
        self._consumer: Any = None
        self._producer: Any = None
        self.anchor: float | None = None          # monotonic start of the last successful commit
        self.not_before = 0.0                     # monotonic: no Admin write before (a new writer's wait)
        self.commits = 0
        self.avoid: set[int] = set()              # brokers `__kplan` is not created on (a drain's)
        self._offset = 0                          # the next offset of `__kplan` to read
        self._exists = False
        self._lock = threading.Lock()

    # ---------------------------------------------------------------------------------------- setup
    def admin(self) -> Any:
        if self._admin is None:
            from planner import kraft_admin as ka

            self._admin = ka.connect(self.bootstrap, _client_config(self.security), self.timeout)
        return self._admin

    def ensure_topic(self) -> None:
        """Create `__kplan` if it is missing (compacted, RF min(3, brokers), min ISR min(2, RF)), on unfenced
        brokers outside `avoid` (a drain's brokers: the record must not land on what is being emptied)."""
        from kafka.admin import NewTopic
        from kafka.errors import TopicAlreadyExistsError

        from planner import kraft_admin as ka

        admin = self.admin()
        if self._exists or TOPIC in set(ka.topic_names(admin)):
            self._exists = True
            return
        up = sorted(b for b, info in ka.brokers(admin).items() if not info["fenced"])
        pick = [b for b in up if b not in self.avoid] or up
        rf = max(1, min(3, len(pick)))
        config = {"cleanup.policy": "compact", "min.insync.replicas": str(min(2, rf))}
        try:
            admin.create_topics([NewTopic(TOPIC, replica_assignments={0: pick[:rf]}, topic_configs=config)])
            log.info("created %s (RF %d, compacted): kplan's lock, run records and maintenance states", TOPIC, rf)
        except TopicAlreadyExistsError:
            pass

    def identify(self) -> str:
        if self.cluster_id is None:
            d = self.admin().describe_cluster()
            self.cluster_id = str(d.get("cluster_id") or "")
            if not self.cluster_id:
                raise KafkaUnavailable(f"the cluster at {self.bootstrap} did not say its cluster id")
        return self.cluster_id

    @property
    def transactional_id(self) -> str:
        return f"kplan-{self.identify()}"

    # ----------------------------------------------------------------------------------------- read
    def read(self, exists: bool | None = None) -> dict[str, Any]:
        """Read `__kplan` to its end with read_committed (what committed transactions and cancel requests left);
        `values` holds every key's latest value. The first call reads from the start, later ones what is new.
        `exists`: whether `__kplan` exists, when the caller knows already (the snapshot's own topic list), so
        that no Metadata request of every topic is sent to find out.
        A consumer that fails (its partition's leader moved, and kafka-python's ListOffsets kept asking the old
        one: seen when a drain's leadership batch moved `__kplan`'s leader) is replaced by a new one at the same
        offset, once."""
        from kafka.errors import KafkaError

        from planner import kraft_admin as ka

        if exists is not None and not self._exists:
            if not exists:
                return self.values
            self._exists = True
        if self._consumer is None and not self._exists:
            if TOPIC not in set(ka.topic_names(self.admin())):
                return self.values        # nothing recorded yet (the topic is made by the first writer)
            self._exists = True
        try:
            return self._read_once()
        except (KafkaError, KafkaUnavailable) as e:
            log.info("reading %s failed (%s); reading again with a new consumer at offset %d", TOPIC,
                     type(e).__name__, self._offset)
            self._close_consumer()
            return self._read_once()

    def _read_once(self) -> dict[str, Any]:
        from kafka import KafkaConsumer, TopicPartition

        tp = TopicPartition(TOPIC, 0)
        if self._consumer is None:
            self._consumer = KafkaConsumer(bootstrap_servers=self.servers, group_id=None, enable_auto_commit=False,
                                           isolation_level="read_committed", auto_offset_reset="earliest",
                                           request_timeout_ms=int(max(self.timeout, 5) * 1000) + 5000,
                                           **_client_config(self.security))
            self._consumer.assign([tp])
            self._consumer.seek(tp, self._offset)
        c = self._consumer
        wait = max(self.timeout, 10.0)
        limit = time.monotonic() + wait
        end = c.end_offsets([tp], timeout_ms=int(wait * 1000) // 2)[tp]
        while c.position(tp) < end:
            for recs in c.poll(timeout_ms=200).values():
                for r in recs:
                    key = r.key.decode() if r.key is not None else None
                    if key is None:
                        continue
                    self.values[key] = None if r.value is None else _decode(r.value)
            self._offset = c.position(tp)
            if time.monotonic() > limit:
                raise KafkaUnavailable(f"{TOPIC} could not be read to its end within {wait:g}s "
                                       f"(at offset {c.position(tp)} of {end})")
        self._offset = c.position(tp)
        return self.values

    def close_reader(self) -> None:
        """Close the read_committed consumer only (a reader that borrowed the Admin client keeps it)."""
        self._close_consumer()

    def _close_consumer(self) -> None:
        c, self._consumer = self._consumer, None
        if c is not None:
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass

    def get(self, key: str) -> Any:
        return self.values.get(key)

    # ---------------------------------------------------------------------------------------- fence
    def open(self) -> None:
        """Take the fence: initTransactions with this cluster's transactional.id (fencing any earlier holder),
        then read `__kplan` to its end. Admin writes wait `lease` unless the last lock was released."""
        from kafka import KafkaProducer

        self.ensure_topic()
        tid = self.transactional_id
        # initTransactions waits while the coordinator aborts a dead holder's open transaction, whose markers go
        # to partitions a drain may be moving under a throttle: 10 s timed out there (a resumed drain on real
        # brokers), so it gets INIT_WAIT
        self._producer = KafkaProducer(bootstrap_servers=self.servers, transactional_id=tid, acks="all",
                                       enable_idempotence=True, max_block_ms=int(max(self.timeout, INIT_WAIT) * 1000),
                                       transaction_timeout_ms=int(min(900.0, max(60.0, 3 * self.lease)) * 1000),
                                       **_client_config(self.security))
        self._producer.init_transactions()
        fenced_at = time.monotonic()
        self.read()
        lock = self.get(LOCK)
        released = lock is None or lock.get("released")
        self.not_before = fenced_at if released else fenced_at + self.lease
        self.anchor = fenced_at
        log.info("took the fence (transactional.id %s)%s", tid,
                 "" if released else f"; the previous holder did not release it: no Admin write for {self.lease:g}s")

    @property
    def holding(self) -> bool:
        return self._producer is not None

    def transact(self, records: Mapping[str, Any]) -> None:
        """One transaction: each key's new value (None deletes it). Raises Fenced once another writer took over."""
        from kafka.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError

        if self._producer is None:
            raise SafetyRefusal("kplan does not hold the fence on this cluster: nothing written")
        started = time.monotonic()
        p = self._producer
        with self._lock:
            try:
                p.begin_transaction()
                for key, value in records.items():
                    data = None if value is None else json.dumps(value, sort_keys=True, default=str).encode()
                    p.send(TOPIC, key=key.encode(), value=data, partition=0)
                p.commit_transaction()
            except (ProducerFencedError, InvalidProducerEpochError) as e:
                self._dead()
                raise Fenced(f"another kplan took over this cluster's fence ({type(e).__name__}: a newer "
                             "producer epoch); this one writes nothing more") from None
            except KafkaError as e:
                if "Fenced" in type(e).__name__ or "PRODUCER_FENCED" in str(e):
                    self._dead()
                    raise Fenced(f"another kplan took over this cluster's fence ({type(e).__name__}); this one "
                                 "writes nothing more") from None
                try:
                    p.abort_transaction()
                except Exception:  # noqa: BLE001 - the commit's error is the one to report
                    self._dead()
                raise KafkaUnavailable(f"{TOPIC}: a transaction failed ({type(e).__name__})") from None
        self.anchor = started
        self.commits += 1
        for key, value in records.items():
            self.values[key] = value

    def _dead(self) -> None:
        p, self._producer = self._producer, None
        if p is not None:
            try:
                p.close(timeout=0)
            except Exception:  # noqa: BLE001
                pass

    def guard(self, stop: Callable[[], bool] | None = None) -> None:
        """Right before an Admin write: a new writer's initial wait, then the lease. Raises LeaseExpired when
        the last successful commit started more than `lease` seconds ago (commit first, then write)."""
        if self._producer is None:
            raise Fenced("kplan does not hold the fence on this cluster: no Admin write")
        self.wait_initial(stop)
        if self.anchor is None or time.monotonic() - self.anchor > self.lease:
            raise LeaseExpired(f"more than {self.lease:g}s since this kplan's last committed transition on "
                               f"{TOPIC}: no Admin write until the next one commits")

    def wait_initial(self, stop: Callable[[], bool] | None = None) -> None:
        """A new writer that took the fence from one that did not release it: until one lease after its
        initTransactions returned (its own monotonic clock), no Admin write."""
        if self.not_before > time.monotonic():
            log.info("waiting %.1fs (one lease) before the first Admin write: the previous holder did not release "
                     "the lock", self.not_before - time.monotonic())
        while time.monotonic() < self.not_before:
            if stop is not None and stop():
                raise KeyboardInterrupt("stop requested during the fence's initial wait")
            time.sleep(max(0.0, min(0.2, self.not_before - time.monotonic())))

    def fresh(self) -> bool:
        """Is a third of the lease left? (the holder commits a heartbeat before it runs out)"""
        return self.anchor is not None and time.monotonic() - self.anchor < self.lease / 3

    # ------------------------------------------------------------------------------------- requests
    def request(self, key: str, value: Any) -> None:
        """A record written without the fence (a cancel request): an idempotent producer, acks=all."""
        from kafka import KafkaProducer

        self.ensure_topic()
        p = KafkaProducer(bootstrap_servers=self.servers, acks="all", enable_idempotence=True,
                          max_block_ms=int(max(self.timeout, 10) * 1000), **_client_config(self.security))
        try:
            p.send(TOPIC, key=key.encode(), value=json.dumps(value, sort_keys=True).encode(), partition=0).get(
                timeout=max(self.timeout, 10))
            p.flush()
        finally:
            p.close()

    def close(self, release: dict[str, Any] | None = None) -> None:
        """`release`: the lock's last record (committed before the producer closes)."""
        try:
            if release is not None and self._producer is not None:
                try:
                    self.transact({LOCK: release})
                except Exception as e:  # noqa: BLE001 - a fenced / unreachable holder cannot release
                    log.info("the lock was not released (%s): the next kplan waits one lease", e)
        finally:
            self._dead()
            self._close_consumer()
            if self._admin is not None:
                try:
                    self._admin.close()
                except Exception:  # noqa: BLE001
                    pass
                self._admin = None


def holder_alive(lock: Mapping[str, Any] | None, lease: float, now: float | None = None) -> bool:
    """A lock record names a holder that may still be writing: not released, and its last heartbeat (wall
    clock, the holder's) within two leases, or on this host with its pid alive. A liveness hint only, for
    refusing politely: safety comes from the fence, never from this clock."""
    import os
    import socket

    if not lock or lock.get("released"):
        return False
    h = lock.get("holder") or {}
    if h.get("host") == socket.gethostname() and isinstance(h.get("pid"), int):
        try:
            os.kill(h["pid"], 0)
        except ProcessLookupError:
            return False            # gone from this host: dead (a stopped or hung one is judged by its heartbeat)
        except PermissionError:
            pass
    beat = lock.get("heartbeat")
    return isinstance(beat, int | float) and (now or time.time()) - beat < 2 * lease


def describe(lock: Mapping[str, Any] | None) -> str:
    h = (lock or {}).get("holder") or {}
    return (f"kplan {h.get('command', '?')} of plan {h.get('plan_id', '?')} (pid {h.get('pid')} on {h.get('host')}, "
            f"user {h.get('user')}, since {h.get('since')})")


def check_lease(lease: float) -> None:
    if not lease > 0:
        raise BadInput(f"the lease must be a positive number of seconds, got {lease}")
