"""A live workload on the real-Kafka sandbox: producers, sequence-checking consumers and a partition watcher,
for rehearsals and for every test that claims "nothing lost".

    from planner.sandbox.workload import Workload

    with Workload("run/sb", topics=["orders", "payments"], rate=200) as w:   # a sandbox dir or Sandbox
        ...                                    # apply a plan, kill / stop / start brokers, roll restarts
        w.mark("kill broker 1")                # an event on the report's timeline
        w.summary()                            # live figures (dict)
    report = w.report()                        # the final report (dict, JSON-ready); w.save(path) writes it
    assert report["verdict"]["integrity"]      # 0 lost, 0 duplicated, 0 out of order, all readable
    assert report["verdict"]["availability"]   # no offline / under-min-ISR interval, no failed send

`Workload(sandbox, topics=None, rate=100.0, size=200, delivery_timeout=30.0, samples=False)`: `topics` None means every
topic of the cluster not starting with "__"; `rate` messages per second in all, spread round-robin over every
partition of the topics; `size` bytes per message; `delivery_timeout` seconds a message may take to be
acknowledged before the producer gives up on it (Kafka's delivery.timeout.ms); `samples` adds every
acknowledged message's (send time since the start, latency ms) to the report, for percentiles over any
window (a benchmark's phases). Bad input raises BadInput
(exit 2 in the CLI): an emulated sandbox (no data path), a topic that does not exist, a rate that is not
positive. `stop()` (also on leaving the `with`) ends producing and returns the report; `start()` and
`stop()` can be called directly instead of `with`.

What runs (threads of this process; the client is kafka-python, pinned in pyproject.toml):
- **Producer**: one KafkaProducer with acks=all and enable_idempotence=True set explicitly (kafka-python
  then raises instead of silently dropping idempotence if another setting conflicts), retries left at
  infinite and bounded by delivery.timeout.ms, at most 5 requests in flight, so that a retry never
  reorders nor duplicates. Every message carries this run's id and its partition's sequence number (0, 1,
  2, ... per partition) and is sent to an explicit partition. A send that fails is counted by error type
  and never re-sent by the workload (a re-send is how an application duplicates). Error responses the
  client retried on its own (NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER, lost connections...) are counted
  by type too, from the client's own sender log line.
- **Consumer**: assigned every partition from its log-end offset at the start (no consumer group, so no
  internal topic is created), it checks each message of this run by sequence as it arrives: duplicated
  (a sequence seen twice), out of order (a new sequence below one already seen).
- **Watcher** (planner.sandbox.watcher): every partition's state in ZooKeeper, each interval offline or
  under min ISR with its timestamps.
- **Audit** at stop: once every send is resolved (acknowledged or failed), a fresh consumer reads each
  partition again from the start offset to its end and checks every acknowledged message against the log:
  present exactly once, at the offset its acknowledgement gave, in sequence order. Lost = acknowledged and
  not in the log (or replaced at its offset, e.g. by an unclean election's truncation); unreadable =
  acknowledged on a partition that is offline at the end (the verdict fails: nothing proves it is there).
  The audit, not the live consumer, decides the verdict: a message read live and truncated later is lost.

The report: producer (sent, acknowledged, failed, unresolved, errors and retried errors by type),
consumer (live) and audit figures, produce latency p50/p99/max and throughput per second, the watcher's
intervals, the marks, and a verdict: `integrity` (nothing lost, duplicated, out of order or unreadable) and
`availability` (no partition offline or under min ISR, no send failed), with `problems` in words.
"""

from __future__ import annotations

import json
import logging
import math
import os
import struct
import threading
import time
import uuid
from array import array
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from planner.errors import BadInput, PlannerError
from planner.sandbox.watcher import OFFLINE, UNDER_MIN_ISR, PartitionWatcher

log = logging.getLogger("planner.sandbox.workload")

MAGIC = b"kpw1"
_HEAD = struct.Struct(">4s8sQd")          # magic, run id, partition sequence, send time (epoch s)
MIN_SIZE = _HEAD.size
MAX_SIZE = 1024 * 1024
REPORT_VERSION = 1
SENDER_LOGGER = "kafka.producer.sender"


class WorkloadError(PlannerError):
    """The workload could not start or finish (brokers unreachable, a partition without a leader at start)."""


# ------------------------------------------------------------------------------------------- sequences
class Sequences:
    """Per partition: what was sent, acknowledged (at which offset) and read (at which offsets)."""

    def __init__(self, partitions: list[tuple[str, int]]):
        self.keys = partitions
        self.next = [0] * len(partitions)                       # next sequence to send
        self.acked = [array("q") for _ in partitions]           # seq -> acknowledged offset, -1 unknown
        self.failed = [array("b") for _ in partitions]          # seq -> 1 when the send failed

    def allocate(self, i: int) -> int:
        seq = self.next[i]
        self.next[i] += 1
        self.acked[i].append(-1)
        self.failed[i].append(0)
        return seq


class Checker:
    """Reads of one pass over the partitions: duplicates, order, offsets (the live consumer and the audit)."""

    def __init__(self, n: int):
        self.seen = [array("q") for _ in range(n)]      # seq -> offset first read at, -1 never
        self.max_seq = [-1] * n
        self.read = 0
        self.duplicated = 0
        self.out_of_order = 0
        self.foreign = 0
        self.examples: dict[str, list[str]] = defaultdict(list)

    def see(self, i: int, seq: int, offset: int, name: str) -> None:
        seen = self.seen[i]
        if seq >= len(seen):
            seen.extend([-1] * (seq + 1 - len(seen)))
        self.read += 1
        if seen[seq] >= 0:
            self.duplicated += 1
            self._example("duplicated", f"{name} seq {seq} at offsets {seen[seq]} and {offset}")
            return
        seen[seq] = offset
        if seq < self.max_seq[i]:
            self.out_of_order += 1
            self._example("out_of_order", f"{name} seq {seq} at offset {offset} after seq {self.max_seq[i]}")
        else:
            self.max_seq[i] = seq

    def _example(self, kind: str, text: str) -> None:
        if len(self.examples[kind]) < 10:
            self.examples[kind].append(text)


def _percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in 0..100)."""
    k = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[k - 1]


class _RetryCounter(logging.Handler):
    """Counts the error responses kafka-python's sender retried on its own, by error type, for one producer
    (its client id): the sender logs each retry as "Got error produce response on topic-partition %s,
    retrying (%s attempts left): %s%s" with the error class name as the 4th argument (kafka-python 3.0.12,
    kafka/producer/sender.py _dispatch_error)."""

    def __init__(self, client_id: str):
        super().__init__(logging.WARNING)
        self.tag = f"client_id={client_id} "
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if not args or self.tag not in str(args[0]):
            return
        if record.msg.startswith("%s: Got error produce response") and len(args) >= 4:
            self.counts[str(args[3])] += 1
        elif record.msg.startswith("%s: Got %s on topic-partition") and len(args) >= 2:
            self.counts[str(args[1])] += 1


# --------------------------------------------------------------------------------------------- workload
class Workload:
    """Producers, consumers and a watcher on a real-Kafka sandbox (see the module docstring)."""

    def __init__(self, sandbox: Any, topics: list[str] | None = None, rate: float = 100.0, size: int = 200,
                 delivery_timeout: float = 30.0, samples: bool = False):
        from planner.sandbox.api import Sandbox

        try:
            rate = float(rate)
        except (TypeError, ValueError):
            raise BadInput(f"rate must be a positive number of messages per second, got {rate!r}") from None
        if not rate > 0 or math.isinf(rate):
            raise BadInput(f"rate must be a positive number of messages per second, got {rate:g}")
        if not MIN_SIZE <= int(size) <= MAX_SIZE:
            raise BadInput(f"message size must be {MIN_SIZE} to {MAX_SIZE} bytes, got {size}")
        if not delivery_timeout > 0:
            raise BadInput(f"delivery timeout must be positive, got {delivery_timeout:g}")
        sb = sandbox if isinstance(sandbox, Sandbox) else Sandbox(sandbox)
        if sb.engine not in ("kafka", "kraft"):
            raise BadInput(f"the sandbox in {sb.dir} runs the {sb.engine} engine, which has no data path (no "
                           "broker serves produce or fetch requests): start one with --engine kafka or kraft")
        self.sandbox = sb
        self.rate = rate
        self.size = int(size)
        self.delivery_timeout = float(delivery_timeout)
        self.keep_samples = bool(samples)
        self._samples: list[tuple[float, float]] = []   # (send time - start, ms), when asked for
        self.topics, self.partitions = self._resolve_topics(topics)
        self.run_id = os.urandom(8)
        self.client_id = f"kplan-workload-{self.run_id.hex()}"
        self.seq = Sequences(self.partitions)
        self.live = Checker(len(self.partitions))
        self.audit: Checker | None = None
        self.start_offsets: list[int] = []
        self.end_offsets: dict[int, int] = {}
        self.unreadable: list[int] = []
        self._index = {k: i for i, k in enumerate(self.partitions)}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._producer: Any = None
        self._consumer: Any = None
        self._watcher: PartitionWatcher | None = None
        self._retries = _RetryCounter(self.client_id)
        self._saved_logger: tuple[int, bool] | None = None
        self._errors: Counter[str] = Counter()
        self._error_examples: dict[str, str] = {}
        self._sent = self._acked = self._failed = 0
        self._latency: dict[int, list[float]] = defaultdict(list)   # second of sending -> ms
        self._per_second: dict[int, Counter[str]] = defaultdict(Counter)
        self._marks: list[dict[str, Any]] = []
        self._behind_s = 0.0
        self._pid_resets = 0
        self._unknown_leaders = 0
        self._thread_errors: list[str] = []
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self._report: dict[str, Any] | None = None

    # ------------------------------------------------------------------------------------ set-up
    def _resolve_topics(self, topics: list[str] | None) -> tuple[list[str], list[tuple[str, int]]]:
        if self.sandbox.engine == "kraft":   # no ZooKeeper: the topics and partitions through the Admin API
            from planner import kraft_admin as ka

            admin = ka.connect(self.sandbox.bootstrap_servers)
            try:
                parts_of = {}
                for t, p in ka.describe_topic_partitions(admin):
                    if p >= 0:
                        parts_of.setdefault(t, []).append(p)
            finally:
                admin.close()
            return self._chosen(topics, sorted(parts_of), lambda t: sorted(parts_of[t]))
        from planner import codec
        from planner import zk as zkmod

        with zkmod.session(self.sandbox.connect_string) as client:
            existing = sorted(client.get_children(codec.TOPICS)) if client.exists(codec.TOPICS) else []
            return self._chosen(topics, existing, lambda t: sorted(
                codec.decode_topic(t, client.get(codec.topic_path(t))[0]).partitions))

    def _chosen(self, topics: list[str] | None, existing: list[str], partitions: Any
                ) -> tuple[list[str], list[tuple[str, int]]]:
        """The topics asked for (None: every topic not starting with "__"), checked, and their partitions."""
        if topics is None:
            chosen = [t for t in existing if not t.startswith("__")]
            if not chosen:
                raise BadInput(f"the sandbox in {self.sandbox.dir} has no topic to produce to; name one "
                               "with --topics after creating it")
        else:
            chosen = list(dict.fromkeys(topics))
            if not chosen:
                raise BadInput("give at least one topic")
            missing = [t for t in chosen if t not in existing]
            if missing:
                shown = ", ".join(existing[:10]) + (f" (+{len(existing) - 10} more)" if len(existing) > 10 else "")
                raise BadInput(f"topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                               f"do{'' if len(missing) > 1 else 'es'} not exist in the sandbox "
                               f"(its topics: {shown or 'none'})")
        parts = []
        for t in chosen:
            parts.extend((t, p) for p in partitions(t))
        return chosen, parts

    def __enter__(self) -> Workload:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        if self._report is None and self.started_at is not None:
            self.stop()

    def start(self, timeout: float = 60) -> Workload:
        """Connect, read the start offsets, start the watcher, the consumer and the producer; returns once
        all three run."""
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        if self.started_at is not None:
            raise WorkloadError("this workload was already started")
        bootstrap = self.sandbox.bootstrap_servers.split(",")
        self._install_retry_counter()
        try:
            if self.sandbox.engine == "kraft":
                from planner.sandbox.admin_watcher import AdminPartitionWatcher

                self._watcher = AdminPartitionWatcher(self.sandbox.bootstrap_servers, self.topics).start()
            else:
                self._watcher = PartitionWatcher(self.sandbox.connect_string).start()
            self._consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                           client_id=self.client_id + "-consumer", auto_offset_reset="earliest",
                                           request_timeout_ms=30000, fetch_max_wait_ms=100)
            tps = [TopicPartition(t, p) for t, p in self.partitions]
            self._consumer.assign(tps)
            ends = self._end_offsets(self._consumer, tps, timeout)
            self.start_offsets = [ends[tp] for tp in tps]
            for tp, off in zip(tps, self.start_offsets, strict=True):
                self._consumer.seek(tp, off)
            ms = int(self.delivery_timeout * 1000)
            self._producer = KafkaProducer(
                bootstrap_servers=bootstrap, client_id=self.client_id, acks="all", enable_idempotence=True,
                max_in_flight_requests_per_connection=5, linger_ms=0, delivery_timeout_ms=ms,
                request_timeout_ms=max(1000, min(30000, ms * 3 // 4)), max_block_ms=int(timeout * 1000),
                retry_backoff_ms=100)
            self._recover_by_epoch_bump(self._producer)
            self._survive_unknown_leader(self._producer)
        except BaseException:
            self._close_clients()
            raise
        self.started_at = time.time()
        for name, target in (("consumer", self._consume), ("producer", self._produce)):
            th = threading.Thread(target=self._guard, args=(name, target), name=f"kplan-workload-{name}",
                                  daemon=True)
            th.start()
            self._threads.append(th)
        log.info("workload on %d partitions of %s at %g msg/s", len(self.partitions), ", ".join(self.topics),
                 self.rate)
        return self

    def _recover_by_epoch_bump(self, producer: Any) -> None:
        """Work around a kafka-python 3.0.12 bug that stops an idempotent producer for good.

        When a batch that was already sent expires (delivery timeout: its partition went offline, or acks=all
        waited for a dead follower), the client's sender calls `TransactionManager.reset_producer_id()`,
        which clears the producer id but leaves the state READY, so `init_producer_id()` never asks for a
        new one and nothing is sent again (seen: every later send unresolved after the first expired batch).
        Kafka's Java client (3.9, TransactionManager.handleFailedBatch) bumps the idempotent producer's epoch
        for such a batch instead (KIP-360), and resets only through `resetIdempotentProducerId()`, which also
        returns to UNINITIALIZED. Here the reset is replaced by kafka-python's own epoch bump, the path it
        takes for the other recoverable sequence errors; `producer_id_resets` in the report counts them."""
        tm = getattr(producer, "_transaction_manager", None)
        if tm is None or tm.is_transactional():
            return

        def reset_as_bump() -> None:
            with self._lock:
                self._pid_resets += 1
            log.info("idempotent producer: an expired batch had been sent; bumping the producer epoch")
            tm.bump_producer_id_and_epoch()

        tm.reset_producer_id = reset_as_bump

    def _survive_unknown_leader(self, producer: Any) -> None:
        """Work around a kafka-python 3.0.12 bug that stops an idempotent producer's I/O thread for good.

        When a broker leaves, a metadata response can list the brokers without it while a partition still names
        it as leader (the controller has not moved that leadership yet). The sender then asks to connect to the
        leader of a partition with data (`Sender._send_producer_data` -> `maybe_connect`), the connection manager
        raises UnknownBrokerIdError, and since that is not NodeNotReadyError it escapes `run_once` before the
        client polls: no metadata refresh, no expiry, nothing sent or failed again, every later send
        unresolved (seen: the seed incident's restart, tests/test_roll_kafka.py, 1 run in 3 on a busy machine).
        Kafka's Java client cannot get there (a partition's leader is a Node of the same immutable Cluster,
        and NetworkClient.ready() on a node it cannot reach just says no). Here an unknown leader is a node
        that is not ready: ask for fresh metadata and carry on; `unknown_leader_skips` in the report counts
        them."""
        from kafka.errors import UnknownBrokerIdError

        client = getattr(getattr(producer, "_sender", None), "_client", None)
        metadata = getattr(producer, "_metadata", None)
        if client is None or metadata is None or not hasattr(client, "maybe_connect"):
            return
        connect = client.maybe_connect

        def maybe_connect(node_id: Any, **kwargs: Any) -> Any:
            try:
                return connect(node_id, **kwargs)
            except UnknownBrokerIdError:
                with self._lock:
                    self._unknown_leaders += 1
                metadata.request_update()
                return None

        client.maybe_connect = maybe_connect

    def _install_retry_counter(self) -> None:
        lg = logging.getLogger(SENDER_LOGGER)
        self._saved_logger = (lg.level, lg.propagate)
        lg.addHandler(self._retries)
        lg.setLevel(logging.WARNING)
        lg.propagate = False    # counted here; the client's own warnings are not the workload's output

    def _end_offsets(self, consumer: Any, tps: list[Any], timeout: float) -> dict[Any, int]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return consumer.end_offsets(tps)
            except Exception as e:  # noqa: BLE001 - kafka-python raises KafkaTimeoutError & co while leaders move
                if time.monotonic() > deadline:
                    offline = self._watcher.now()[OFFLINE] if self._watcher else []
                    names = ", ".join(f"{o['topic']}-{o['partition']}" for o in offline[:10])
                    raise WorkloadError("could not read the log-end offsets of the workload's partitions "
                                        f"within {timeout:.0f}s ({e!r})"
                                        + (f"; offline now: {names}" if names else "")) from None
                time.sleep(0.2)

    def _guard(self, name: str, target: Any) -> None:
        try:
            target()
        except Exception as e:  # noqa: BLE001 - a dead thread must show in the report, not vanish
            log.exception("workload %s thread failed", name)
            with self._lock:
                self._thread_errors.append(f"{name}: {e!r}")

    # ------------------------------------------------------------------------------------ producing
    def _produce(self) -> None:
        assert self.started_at is not None
        pad = b"\0" * (self.size - MIN_SIZE)
        interval = 1.0 / self.rate
        n = len(self.partitions)
        t0 = time.monotonic()
        i = 0
        while not self._stop.is_set():
            due = t0 + i * interval
            wait = due - time.monotonic()
            if wait > 0:
                if self._stop.wait(wait):   # pacing the sends; stop() ends the wait at once
                    break
            elif wait < -1.0:   # over a second behind (a blocked send): skip ahead, and say so in the report
                with self._lock:
                    self._behind_s += -wait
                t0 += -wait
            k = i % n
            i += 1
            topic, part = self.partitions[k]
            with self._lock:
                seq = self.seq.allocate(k)
                self._sent += 1
                sent_wall = time.time()
                self._per_second[int(sent_wall - self.started_at)]["sent"] += 1
            sent_mono = time.monotonic()
            value = _HEAD.pack(MAGIC, self.run_id, seq, sent_wall) + pad
            try:
                fut = self._producer.send(topic, value=value, partition=part)
            except Exception as e:  # noqa: BLE001 - a send refused at once is a failed send like any other
                self._on_error(k, seq, sent_wall, e)
                continue
            fut.add_callback(self._on_ack, k, seq, sent_wall, sent_mono)
            fut.add_errback(self._on_error, k, seq, sent_wall)

    def _on_ack(self, k: int, seq: int, sent_wall: float, sent_mono: float, md: Any) -> None:
        ms = (time.monotonic() - sent_mono) * 1000
        now = time.time()
        with self._lock:
            self.seq.acked[k][seq] = md.offset
            self._acked += 1
            second = int(sent_wall - self.started_at) if self.started_at else 0
            self._latency[second].append(ms)
            if self.keep_samples:
                self._samples.append((round(sent_wall - self.started_at, 4), round(ms, 2)))
            self._per_second[int(now - self.started_at) if self.started_at else 0]["acked"] += 1

    def _on_error(self, k: int, seq: int, sent_wall: float, exc: BaseException) -> None:
        name = type(exc).__name__
        now = time.time()
        with self._lock:
            self.seq.failed[k][seq] = 1
            self._failed += 1
            self._errors[name] += 1
            self._error_examples.setdefault(name, f"{self.partitions[k][0]}-{self.partitions[k][1]}: {exc}"[:300])
            self._per_second[int(now - self.started_at) if self.started_at else 0]["failed"] += 1

    # ------------------------------------------------------------------------------------ consuming
    def _consume(self) -> None:
        consumer = self._consumer
        while not self._stop.is_set():
            batches = consumer.poll(timeout_ms=200)
            for tp, records in batches.items():
                self._check(self.live, tp, records)

    def _check(self, checker: Checker, tp: Any, records: list[Any]) -> None:
        i = self._index[(tp.topic, tp.partition)]
        name = f"{tp.topic}-{tp.partition}"
        for r in records:
            v = r.value
            if v is None or len(v) < MIN_SIZE or v[:4] != MAGIC or v[4:12] != self.run_id:
                checker.foreign += 1
                continue
            _, _, seq, _ = _HEAD.unpack_from(v)
            with self._lock:
                checker.see(i, seq, r.offset, name)

    # ------------------------------------------------------------------------------------ reading
    def mark(self, label: str) -> None:
        """Put an event on the report's timeline (e.g. "kill broker 1", "apply started")."""
        t = time.time()
        with self._lock:
            self._marks.append({"t": round(t - (self.started_at or t), 3), "at": round(t, 3), "label": str(label)})

    def summary(self) -> dict[str, Any]:
        """Live figures: sends, acknowledgements, failures, reads, the last full second's latency, and what
        the watcher shows now."""
        now = time.time()
        with self._lock:
            last = int(now - self.started_at) - 1 if self.started_at else -1
            lat = sorted(self._latency.get(last, []))
            out = {
                "elapsed_s": round(now - self.started_at, 1) if self.started_at else 0.0,
                "sent": self._sent, "acked": self._acked, "failed": self._failed,
                "in_flight": self._sent - self._acked - self._failed, "consumed": self.live.read,
                "duplicated": self.live.duplicated, "out_of_order": self.live.out_of_order,
                "errors": dict(self._errors), "retried": dict(self._retries.counts),
                "p50_ms": round(_percentile(lat, 50), 1) if lat else None,
                "p99_ms": round(_percentile(lat, 99), 1) if lat else None,
                "thread_errors": list(self._thread_errors),
            }
        if self._watcher is not None:
            w = self._watcher.now()
            done = self._watcher.intervals()
            out["offline_now"] = [f"{x['topic']}-{x['partition']}" for x in w[OFFLINE]]
            out["under_min_isr_now"] = [f"{x['topic']}-{x['partition']}" for x in w[UNDER_MIN_ISR]]
            out["intervals"] = len(done) + len(w[OFFLINE]) + len(w[UNDER_MIN_ISR])
        return out

    # ------------------------------------------------------------------------------------ stopping
    def stop(self, timeout: float | None = None) -> dict[str, Any]:
        """Stop producing, wait until every send is acknowledged or failed (at most the delivery timeout),
        audit every partition, stop the watcher; returns the report."""
        if self._report is not None:
            return self._report
        if self.started_at is None:
            raise WorkloadError("this workload was never started")
        timeout = self.delivery_timeout + 30 if timeout is None else timeout
        self._stop.set()
        for th in self._threads:
            th.join(timeout)
        self.stopped_at = time.time()
        try:
            self._producer.flush(timeout=self.delivery_timeout + 5)
        except Exception as e:  # noqa: BLE001 - unresolved sends are reported, not raised
            log.warning("the producer did not resolve every send: %r", e)
        self._audit(timeout)
        report = self._build_report()
        self._close_clients()
        self._report = report
        return report

    def abort(self) -> None:
        """Stop everything at once, without waiting for acknowledgements and without a report."""
        self._stop.set()
        for th in self._threads:
            th.join(5)
        self._close_clients()

    @property
    def stopped(self) -> bool:
        return self._report is not None

    def _audit(self, timeout: float) -> None:
        """Read every partition again from its start offset to its end; the verdict's source."""
        from kafka import KafkaConsumer, TopicPartition

        assert self._watcher is not None
        offline = {(o["topic"], o["partition"]) for o in self._watcher.now()[OFFLINE]}
        self.unreadable = [i for i, k in enumerate(self.partitions) if k in offline]
        idx = [i for i in range(len(self.partitions)) if i not in set(self.unreadable)]
        self.audit = Checker(len(self.partitions))
        if not idx:
            return
        tps = {i: TopicPartition(*self.partitions[i]) for i in idx}
        consumer = KafkaConsumer(bootstrap_servers=self.sandbox.bootstrap_servers.split(","), group_id=None,
                                 enable_auto_commit=False, client_id=self.client_id + "-audit",
                                 auto_offset_reset="earliest", fetch_max_wait_ms=100, max_poll_records=5000)
        try:
            consumer.assign(list(tps.values()))
            ends = self._end_offsets(consumer, list(tps.values()), timeout)
            for i, tp in tps.items():
                self.end_offsets[i] = ends[tp]
                consumer.seek(tp, self.start_offsets[i])
            left = {i for i in idx if self.end_offsets[i] > self.start_offsets[i]}
            deadline = time.monotonic() + timeout
            while left and time.monotonic() < deadline:
                for tp, records in consumer.poll(timeout_ms=500).items():
                    self._check(self.audit, tp, records)
                left = {i for i in left if consumer.position(tps[i]) < self.end_offsets[i]}
            if left:
                # not read to the end in time: what was not read cannot be shown to be there
                self.unreadable.extend(sorted(left))
                log.warning("audit: %d partitions not read to their end within %.0fs", len(left), timeout)
        finally:
            consumer.close()

    def _close_clients(self) -> None:
        for c in (self._producer, self._consumer):
            if c is not None:
                try:
                    c.close(timeout=5) if c is self._producer else c.close()
                except Exception:  # noqa: BLE001 - closing is best effort; the report is already built
                    log.debug("closing a workload client failed", exc_info=True)
        self._producer = self._consumer = None
        if self._watcher is not None:
            self._watcher.stop()
        lg = logging.getLogger(SENDER_LOGGER)
        lg.removeHandler(self._retries)
        if self._saved_logger is not None:
            lg.setLevel(self._saved_logger[0])
            lg.propagate = self._saved_logger[1]
            self._saved_logger = None

    # ------------------------------------------------------------------------------------ the report
    def _build_report(self) -> dict[str, Any]:
        assert self.audit is not None and self._watcher is not None and self.started_at is not None
        self._watcher.stop()
        intervals = self._watcher.intervals()
        audit = self.audit
        unreadable = set(self.unreadable)
        lost = lost_unreadable = unacked_written = moved = acked_total = 0
        lost_examples: list[str] = []
        per_partition = []
        with self._lock:
            for i, (t, p) in enumerate(self.partitions):
                acked, failed, seen = self.seq.acked[i], self.seq.failed[i], audit.seen[i]
                n_acked = p_lost = 0
                for seq in range(len(acked)):
                    off = acked[seq]
                    at = seen[seq] if seq < len(seen) else -1
                    if off >= 0:
                        n_acked += 1
                        if i in unreadable:
                            lost_unreadable += 1
                        elif at < 0:
                            p_lost += 1
                            if len(lost_examples) < 10:
                                lost_examples.append(f"{t}-{p} seq {seq} (acknowledged at offset {off})")
                        elif at != off:
                            moved += 1
                            p_lost += 1
                            if len(lost_examples) < 10:
                                lost_examples.append(f"{t}-{p} seq {seq} acknowledged at offset {off}, "
                                                     f"found at {at}")
                    elif at >= 0:
                        unacked_written += 1   # failed or unresolved, yet written: not a loss
                lost += p_lost
                acked_total += n_acked
                per_partition.append({"topic": t, "partition": p, "sent": len(acked), "acked": n_acked,
                                      "failed": int(sum(failed)), "lost": p_lost,
                                      "start_offset": self.start_offsets[i],
                                      "end_offset": self.end_offsets.get(i), "unreadable": i in unreadable})
            seconds = self._seconds()
            producer = {"sent": self._sent, "acked": self._acked, "failed": self._failed,
                        "unresolved": self._sent - self._acked - self._failed,
                        "errors": dict(self._errors), "error_examples": dict(self._error_examples),
                        "retried": dict(self._retries.counts), "behind_s": round(self._behind_s, 2),
                        "producer_id_resets": self._pid_resets, "unknown_leader_skips": self._unknown_leaders}
            live = {"consumed": self.live.read, "duplicated": self.live.duplicated,
                    "out_of_order": self.live.out_of_order, "foreign": self.live.foreign,
                    "examples": dict(self.live.examples)}
            marks = list(self._marks)
            thread_errors = list(self._thread_errors)
        all_lat = sorted(x for v in self._latency.values() for x in v)
        audit_doc = {"read": audit.read, "lost": lost, "moved": moved, "duplicated": audit.duplicated,
                     "out_of_order": audit.out_of_order, "unreadable_partitions": sorted(
                         f"{self.partitions[i][0]}-{self.partitions[i][1]}" for i in unreadable),
                     "acked_on_unreadable": lost_unreadable, "unacknowledged_but_written": unacked_written,
                     "lost_examples": lost_examples, "examples": dict(audit.examples)}
        offline = [x for x in intervals if x["kind"] == OFFLINE]
        under = [x for x in intervals if x["kind"] == UNDER_MIN_ISR]
        problems = []
        if lost:
            problems.append(f"{lost} acknowledged messages lost ({moved} replaced at their offset)")
        if audit.duplicated:
            problems.append(f"{audit.duplicated} messages duplicated")
        if audit.out_of_order:
            problems.append(f"{audit.out_of_order} messages out of order")
        if unreadable:
            problems.append(f"{len(unreadable)} partitions unreadable at the end ({lost_unreadable} acknowledged "
                            "messages on them unverified)")
        if producer["unresolved"]:
            problems.append(f"{producer['unresolved']} sends neither acknowledged nor failed at the end")
        if thread_errors:
            problems.append("workload threads failed: " + "; ".join(thread_errors))
        integrity = not problems
        if offline:
            problems.append(f"{len(offline)} offline intervals on {len({(x['topic'], x['partition']) for x in offline})}"
                            f" partitions, longest {max(x['duration_s'] for x in offline):.1f}s")
        if under:
            problems.append(f"{len(under)} under-min-ISR intervals, longest {max(x['duration_s'] for x in under):.1f}s")
        if self._failed:
            problems.append(f"{self._failed} sends failed: " + ", ".join(f"{k} {v}" for k, v in
                                                                          sorted(self._errors.items())))
        availability = not (offline or under or self._failed)
        return {
            "version": REPORT_VERSION, "run_id": self.run_id.hex(), "sandbox": str(self.sandbox.dir),
            "topics": self.topics, "partitions": len(self.partitions), "rate": self.rate,
            "message_bytes": self.size, "delivery_timeout_s": self.delivery_timeout,
            "started_at": round(self.started_at, 3), "stopped_at": round(self.stopped_at or time.time(), 3),
            "duration_s": round((self.stopped_at or time.time()) - self.started_at, 3),
            "producer": producer, "consumer": live, "audit": audit_doc,
            "latency_ms": {"p50": _r(all_lat, 50), "p99": _r(all_lat, 99), "max": round(all_lat[-1], 1) if all_lat
                           else None},
            "seconds": seconds, "intervals": intervals,
            "offline_intervals": len(offline), "under_min_isr_intervals": len(under),
            "watcher": self._watcher.stats(), "marks": marks, "per_partition": per_partition,
            **({"samples": sorted(self._samples)} if self.keep_samples else {}),
            "verdict": {"integrity": integrity, "availability": availability, "problems": problems},
        }

    def _seconds(self) -> list[dict[str, Any]]:
        keys = sorted(set(self._latency) | set(self._per_second))
        out = []
        for s in keys:
            lat = sorted(self._latency.get(s, []))
            c = self._per_second.get(s, Counter())
            out.append({"t": s, "sent": c.get("sent", 0), "acked": c.get("acked", 0), "failed": c.get("failed", 0),
                        "p50_ms": _r(lat, 50), "p99_ms": _r(lat, 99),
                        "max_ms": round(lat[-1], 1) if lat else None, "latency_samples": len(lat)})
        return out

    def report(self) -> dict[str, Any]:
        """The final report (after stop; stops first if still running)."""
        return self._report if self._report is not None else self.stop()

    def save(self, path: str | Path) -> Path:
        """Write the report as JSON (a temporary file renamed into place)."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(json.dumps(self.report(), indent=2) + "\n")
        os.replace(tmp, path)
        return path


def _r(sorted_values: list[float], q: float) -> float | None:
    return round(_percentile(sorted_values, q), 1) if sorted_values else None
