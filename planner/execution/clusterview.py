"""The executor's one narrow read interface to the cluster (kafka-kit's `kafkazk.Handler` is the model).

Every read is batched: partition assignments and states of many partitions come back from a few `multiRead`
requests (planner.zkbulk), never one round trip per partition. Reads here never write and never set
watches the caller did not ask for (servers older than 3.6 fall back to pipelined gets).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from planner import codec, zkcolumns
from planner.errors import CodecError, ZkUnavailable
from planner.zkbulk import ERR_NONODE, BulkReader, supports_multiread

log = logging.getLogger(__name__)

Key = tuple[str, int]
T = TypeVar("T")
TRANSIENT = (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError)


class NotConnected(ConnectionLoss):
    """The session is not connected right now: the read was not even sent."""


def retrying(fn: Callable[[], T], patience: float = 60.0,
             on_wait: Callable[[float, BaseException], None] | None = None, max_delay: float = 2.0,
             ready: Callable[[], bool] | None = None) -> T:
    """Run a read again while the connection is being re-established (kazoo reconnects, and after an expired
    session starts a new one); ZkUnavailable once `patience` seconds have passed. `on_wait(seconds waited,
    error)` is called before each new try (the executor says there that ZooKeeper is unreachable, and may
    raise to stop waiting). `ready()` false: the read is not sent at all (kazoo queues a request made while it
    reconnects and its caller waits, without a timeout, until ZooKeeper answers again)."""
    started = time.monotonic()
    deadline = started + patience
    delay = 0.1
    while True:
        try:
            if ready is not None and not ready():
                raise NotConnected("not connected to ZooKeeper")
            return fn()
        except TRANSIENT as e:
            now = time.monotonic()
            if now > deadline:
                raise ZkUnavailable(f"ZooKeeper did not answer for {patience:.0f} s: {e!r}") from None
            log.info("ZooKeeper read interrupted (%r); retrying", e)
            if on_wait is not None:
                on_wait(now - started, e)
            time.sleep(delay)
            delay = min(delay * 2, max_delay)


@dataclass(frozen=True, slots=True)
class PartStatus:
    """One partition as ZooKeeper shows it (replicas None: the topic or partition does not exist)."""

    replicas: tuple[int, ...] | None
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    leader: int = -1
    isr: tuple[int, ...] = ()
    has_state: bool = False

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[int, ...] | None:
        """TRS: the replicas it ends with (the full list minus removing replicas)."""
        if self.replicas is None:
            return None
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def origin(self) -> tuple[int, ...] | None:
        if self.replicas is None:
            return None
        return tuple(r for r in self.replicas if r not in self.adding)


@dataclass(frozen=True)
class AdminZnode:
    """`/admin/reassign_partitions` or `/admin/preferred_replica_election` as found."""

    exists: bool
    data: bytes | None = None
    mzxid: int = 0
    entries: tuple[codec.ReassignEntry, ...] | None = None  # None when malformed
    error: str | None = None


class ClusterView:
    def __init__(self, client: KazooClient, timeout: float = 30.0):
        self.client = client
        mode = "multiread" if supports_multiread(client, min(timeout, 10.0)) else "plain"
        self.reader = BulkReader(client, mode, timeout=timeout)
        # Decoded topic znodes by the zxid of their last write: a waiting loop re-reads the same topics many
        # times and most of them have not changed since the last read.
        self._topic_cache: dict[str, tuple[int, codec.TopicAssignment]] = {}

    # ---------------------------------------------------------------------------------- partitions
    def topics(self, topics: Iterable[str]) -> dict[str, codec.TopicAssignment | CodecError | None]:
        names = sorted(set(topics))
        reads = self.reader.get_many([codec.topic_path(t) for t in names])
        mzxids = reads.stat["mzxid"].tolist() if len(reads) else []
        out: dict[str, codec.TopicAssignment | CodecError | None] = {}
        cache = self._topic_cache
        for t, err, data, mz in zip(names, reads.err.tolist(), reads.data, mzxids, strict=True):
            if err:
                out[t] = None
                cache.pop(t, None)
                continue
            hit = cache.get(t)
            if hit is not None and hit[0] == mz:
                out[t] = hit[1]
                continue
            try:
                ta = codec.decode_topic(t, data)
            except CodecError as e:
                out[t] = e
                continue
            cache[t] = (mz, ta)
            out[t] = ta
        return out

    def partitions(self, keys: Iterable[Key], states: bool = True) -> dict[Key, PartStatus]:
        """Assignment (and, with `states`, leader/ISR) of each partition, in two bulk reads."""
        keys = list(dict.fromkeys(keys))
        topics = self.topics(k[0] for k in keys)
        leader: list[int] = []
        isr_rows: list[tuple[int, ...]] = []
        has: list[bool] = []
        if states:
            # Arrow's JSON reader decodes the state znodes into columns (planner.zkcolumns), not one
            # json.loads per partition.
            cols = zkcolumns.read_states(self.reader, [codec.state_path(t, p) for t, p in keys])
            ok = cols.has_state.copy()
            for row, _problem in cols.bad:
                ok[row] = False
            leader = cols.leader.tolist()
            has = ok.tolist()
            values = cols.isr_values.tolist()
            ends = np.cumsum(cols.isr_len).tolist()
            start = 0
            for end in ends:
                isr_rows.append(tuple(values[start:end]))
                start = end
        out: dict[Key, PartStatus] = {}
        for i, k in enumerate(keys):
            ta = topics.get(k[0])
            if not isinstance(ta, codec.TopicAssignment) or k[1] not in ta.partitions:
                out[k] = PartStatus(None)
                continue
            p = k[1]
            replicas = tuple(ta.partitions[p])
            adding = tuple(ta.adding_replicas.get(p, ())) if ta.adding_replicas else ()
            removing = tuple(ta.removing_replicas.get(p, ())) if ta.removing_replicas else ()
            if states and has[i]:
                out[k] = PartStatus(replicas, adding, removing, leader[i], isr_rows[i], True)
            else:
                out[k] = PartStatus(replicas, adding, removing)
        return out

    def all_partition_keys(self) -> list[Key]:
        """Every partition of every topic (for cluster-wide figures)."""
        try:
            topics = self.client.get_children(codec.TOPICS)
        except NoNodeError:
            return []
        keys: list[Key] = []
        for t, ta in self.topics(topics).items():
            if isinstance(ta, codec.TopicAssignment):
                keys += [(t, p) for p in sorted(ta.partitions)]
        return keys

    # ------------------------------------------------------------------------------------ brokers
    def live_brokers(self) -> set[int]:
        try:
            return {int(i) for i in self.client.get_children(codec.BROKER_IDS) if i.isdigit()}
        except NoNodeError:
            return set()

    # -------------------------------------------------------------------------------------- admin
    def reassignment(self) -> AdminZnode:
        try:
            data, stat = self.client.get(codec.REASSIGN)
        except NoNodeError:
            return AdminZnode(False)
        try:
            entries = tuple(codec.decode_reassignment(data))
            return AdminZnode(True, data, stat.mzxid, entries)
        except CodecError as e:
            return AdminZnode(True, data, stat.mzxid, None, str(e))

    # ------------------------------------------------------------------------------------ configs
    def configs(self, entities: Iterable[str]) -> dict[str, tuple[dict[str, str], int] | None]:
        """`topics/<t>` / `brokers/<id>` -> (override set, znode version), or None when the znode is absent.
        A malformed config znode raises CodecError (never overwrite what cannot be read)."""
        names = sorted(set(entities))
        paths = [f"{codec.CONFIG}/{e}" for e in names]
        reads = self.reader.get_many(paths)
        versions = reads.stat["version"].tolist() if len(reads) else []
        out: dict[str, tuple[dict[str, str], int] | None] = {}
        for e, path, err, data, ver in zip(names, paths, reads.err.tolist(), reads.data, versions, strict=True):
            if err == ERR_NONODE:
                out[e] = None
            elif err:
                raise CodecError(path, f"cannot be read (ZooKeeper error {err})")
            else:
                out[e] = (codec.decode_config(data, path) if data else {}, int(ver))
        return out
