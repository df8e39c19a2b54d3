"""Bulk ZooKeeper I/O for the emulated controller.

Reads: ZooKeeper 3.6+ `multiRead` (planner.zkbulk) fetches up to a thousand znodes in one round trip; one
request per znode costs a select() round in kazoo's connection thread each, and reading 100,000 partition
states that way takes ~20 s instead of ~2 s.

Writes: like Kafka's controller, every write is a multi-op transaction that first checks the version of
/controller_epoch (a controller that lost its election cannot write), and partition states are set with the
version read last (a conditional set). Many writes share one transaction and several transactions are in
flight at once.

A request lost with the connection is sent again once ZooKeeper answers, reads and writes alike, as Kafka's
controller does (KafkaZkClient.retryRequestsUntilConnected: the requests answered CONNECTIONLOSS are sent
again after ZooKeeperClient.waitUntilConnected()). Without it, a write in flight when ZooKeeper went away
was lost with the event that made it: a reassignment submitted just before was never carried out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS, BadVersionError, ConnectionLoss, NoNodeError
from kazoo.protocol.states import ZnodeStat

from planner import codec
from planner.zkbulk import BulkReader

MAX_TXN_OPS = 1000
MAX_TXN_BYTES = 512 * 1024
IN_FLIGHT = 4

log = logging.getLogger("planner.sandbox.zkio")
T = TypeVar("T")


def until_connected(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs), sent again while it fails with ConnectionLoss (it was in flight when the connection
    dropped). kazoo holds a request made while it reconnects until ZooKeeper answers, so the new try waits
    there: Kafka's waitUntilConnected. An expired session (SessionExpiredError) is not retried: the broker's
    session handling takes over, as Kafka's controller resigns on expiry."""
    while True:
        try:
            return fn(*args, **kwargs)
        except ConnectionLoss:
            log.info("a ZooKeeper request was lost with the connection; sending it again once connected")


class UntilConnected:
    """The controller's view of a KazooClient: its reads (get, exists, get_children) are sent again when lost
    with the connection (until_connected); everything else is the client's own."""

    _RETRIED = frozenset({"get", "exists", "get_children"})

    def __init__(self, client: KazooClient):
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name in self._RETRIED:
            return lambda *args, **kwargs: until_connected(attr, *args, **kwargs)
        return attr


def multi_read(client: KazooClient, paths: Sequence[str], timeout: float = 60.0) -> list[Any]:
    """getData for every path: a list of (data, stat) or the exception for that path (e.g. NoNodeError).

    The multiRead request itself is planner.zkbulk's (shared with the snapshot); this adapts its columnar
    result to the per-znode shape the controller's code reads."""
    raw = getattr(client, "_client", client)   # BulkReader talks to kazoo's connection itself
    reads = until_connected(lambda: BulkReader(raw, "multiread", timeout=timeout).get_many(list(paths)))
    return [EXCEPTIONS[err]() if err else (data, ZnodeStat._make(st))
            for err, data, st in zip(reads.err.tolist(), reads.data, reads.stat.tolist(), strict=True)]


@dataclass(frozen=True, slots=True)
class Op:
    """One write: kind is 'set', 'create' or 'delete'; version -1 means any version."""

    kind: str
    path: str
    data: bytes = b""
    version: int = -1


class ControllerMoved(Exception):
    """The /controller_epoch version check failed: another controller was elected since."""


def commit_fenced(client: KazooClient | UntilConnected, ops: Sequence[Op], epoch_zk_version: int,
                  timeout: float = 60.0) -> list[Any]:
    """Run the ops in fenced transactions; returns one result per op: a ZnodeStat (set), a path (create),
    True (delete), or the exception of the op when its transaction failed (the op that failed carries its own
    error, e.g. BadVersionError; the others of that transaction RolledBackError). Raises ControllerMoved."""
    results: list[Any] = [None] * len(ops)
    batches: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for i, op in enumerate(ops):
        cost = len(op.path) + len(op.data) + 32
        if cur and (len(cur) >= MAX_TXN_OPS or size + cost > MAX_TXN_BYTES):
            batches.append(cur)
            cur, size = [], 0
        cur.append(i)
        size += cost
    if cur:
        batches.append(cur)
    pending: list[tuple[list[int], Any]] = []
    moved = False

    def submit(idx: list[int]) -> Any:
        txn = client.transaction()
        txn.check(codec.CONTROLLER_EPOCH, epoch_zk_version)
        for i in idx:
            op = ops[i]
            if op.kind == "set":
                txn.set_data(op.path, op.data, version=op.version)
            elif op.kind == "create":
                txn.create(op.path, op.data)
            elif op.kind == "delete":
                txn.delete(op.path, version=op.version)
            else:
                raise ValueError(op.kind)
        return txn.commit_async()

    def drain(limit: int) -> None:
        nonlocal moved
        while len(pending) > limit:
            idx, res = pending.pop(0)
            # a transaction lost with the connection is sent again (it may have been applied before the answer
            # was lost: then its conditional sets fail with BadVersionError, as they would in Kafka, and the
            # caller reads those znodes again)
            out = until_connected(_answer, [res], idx)
            check, rest = out[0], out[1:]
            if isinstance(check, (BadVersionError, NoNodeError)):
                moved = True
                for i in idx:
                    results[i] = check
                continue
            for i, r in zip(idx, rest, strict=True):
                results[i] = r

    def _answer(res: list[Any], idx: list[int]) -> Any:
        """The first try's answer, or a new try's once the first was lost (res[0] is replaced)."""
        try:
            return res[0].get(timeout=timeout)
        except ConnectionLoss:
            res[0] = submit(idx)
            raise

    for idx in batches:
        pending.append((idx, submit(idx)))
        drain(IN_FLIGHT)
    drain(0)
    if moved:
        raise ControllerMoved("/controller_epoch changed: another controller was elected")
    return results
