"""Bulk reads through a kazoo session, and the change log that makes a multi-read snapshot consistent.

Why this exists: a snapshot reads hundreds of thousands of small znodes. kazoo pays a Python round trip
per request (~2,400 get()/s, ~5,000/s pipelined), so 200,000 partition states would take a minute.
ZooKeeper 3.6+ has `multiRead` (opcode 22: many getData in one request, one response); 1,000 getData in
one request cost about as much as a single get, so 200,000 states take well under a second. kazoo 2.11 does
not expose multiRead or persistent watches (AddWatch, opcode 106), so this module adds the two request
types in kazoo's own request protocol (`serialize`/`deserialize`, submitted through the session's queue):
the session, its auth, chroot and reconnect handling stay kazoo's.

Reads are never atomic across requests, so a reader also needs to know what changed while it read.
`ChangeLog` records the path of every watch event a session receives, in kazoo's connection thread, at the
moment the event arrives. ZooKeeper delivers a session's watch events in order with its responses, so after
a `sync()` round trip (`ChangeLog.barrier`) every change the server applied before answering has been
recorded. With ZooKeeper >= 3.6 one persistent recursive watch per subtree reports every change; older
servers (3.4/3.5, no multiRead either) fall back to pipelined get() with a one-shot watch on every znode read
(and an exists() watch on every znode found missing), which feeds the same log.
"""

from __future__ import annotations

import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.protocol.serialization import Watch, int_struct, multiheader_struct, write_string
from kazoo.protocol.states import KazooState

OP_GET_DATA = 4
OP_ERROR = -1
PERSISTENT_RECURSIVE = 1

ERR_OK = 0
ERR_NONODE = -101
ERR_NOAUTH = -102

_GET_HEADER = multiheader_struct.pack(OP_GET_DATA, False, -1)
_END_HEADER = multiheader_struct.pack(-1, True, -1)
_RESULT_HEAD = struct.Struct("!iBii")  # MultiHeader (type, done, err) + the first int of the result body
_STAT_SIZE = 68
# ZooKeeper's Stat record, big-endian: czxid, mzxid, ctime, mtime, version, cversion, aversion,
# ephemeralOwner, dataLength, numChildren, pzxid.
STAT_DTYPE = np.dtype(
    [("czxid", ">i8"), ("mzxid", ">i8"), ("ctime", ">i8"), ("mtime", ">i8"), ("version", ">i4"),
     ("cversion", ">i4"), ("aversion", ">i4"), ("ephemeral_owner", ">i8"), ("data_length", ">i4"),
     ("num_children", ">i4"), ("pzxid", ">i8")]
)
_NO_STAT = bytes(_STAT_SIZE)

MAX_BATCH_OPS = 1000
MAX_BATCH_BYTES = 256 * 1024  # request size; far below the server's jute.maxbuffer (1 MiB by default)


class BulkReadError(Exception):
    """The server answered a bulk read in a way this module does not understand (a protocol problem)."""


class MultiRead:
    """ZooKeeper 3.6+ `multiRead` of getData operations, as a kazoo request object.

    `deserialize` hands back the raw response; `parse_multiread` decodes it outside kazoo's I/O thread, so
    the session keeps reading the socket while results are decoded.
    """

    type = 22

    __slots__ = ("paths",)

    def __init__(self, paths: Sequence[str]):
        self.paths = paths

    def __repr__(self) -> str:
        return f"MultiRead({len(self.paths)} paths)"

    def serialize(self) -> bytes:
        parts = []
        for p in self.paths:
            b = p.encode("utf-8")
            parts.append(_GET_HEADER + int_struct.pack(len(b)) + b + b"\0")
        parts.append(_END_HEADER)
        return b"".join(parts)

    @staticmethod
    def deserialize(buf: bytes, offset: int) -> tuple[bytes, int]:
        return buf, offset


class AddWatch:
    """ZooKeeper 3.6+ `addWatch` (persistent or persistent-recursive watch), as a kazoo request object."""

    type = 106

    __slots__ = ("path", "mode")

    def __init__(self, path: str, mode: int = PERSISTENT_RECURSIVE):
        self.path = path
        self.mode = mode

    def __repr__(self) -> str:
        return f"AddWatch({self.path!r}, mode={self.mode})"

    def serialize(self) -> bytes:
        return write_string(self.path) + int_struct.pack(self.mode)

    @staticmethod
    def deserialize(buf: bytes, offset: int) -> bool:
        return True


@dataclass
class Reads:
    """Results of reading many znodes, aligned with the paths asked for."""

    err: np.ndarray             # int32: 0 ok, ERR_NONODE, ERR_NOAUTH, ...
    data: list[bytes | None]    # None where err != 0
    stat: np.ndarray            # STAT_DTYPE records (zeros where err != 0)

    def __len__(self) -> int:
        return len(self.data)

    @staticmethod
    def concat(parts: list[Reads]) -> Reads:
        if not parts:
            return Reads(np.zeros(0, np.int32), [], np.zeros(0, STAT_DTYPE))
        if len(parts) == 1:
            return parts[0]
        data: list[bytes | None] = []
        for p in parts:
            data.extend(p.data)
        return Reads(np.concatenate([p.err for p in parts]), data, np.concatenate([p.stat for p in parts]))


def parse_multiread(buf: bytes, offset: int, expected: int) -> Reads:
    """Decode a multiRead response of getData results (one result per path, in request order)."""
    data: list[bytes | None] = []
    stats: list[bytes] = []
    errs: list[int] = []
    unpack = _RESULT_HEAD.unpack_from
    end = len(buf) - multiheader_struct.size
    off = offset
    append_data, append_stat, append_err = data.append, stats.append, errs.append
    while off < end:
        typ, done, _err, n = unpack(buf, off)
        off += 13
        if typ == OP_GET_DATA:
            if n < 0:
                append_data(b"")
            else:
                append_data(buf[off:off + n])
                off += n
            append_stat(buf[off:off + _STAT_SIZE])
            off += _STAT_SIZE
            append_err(0)
        elif typ == OP_ERROR:
            append_data(None)
            append_stat(_NO_STAT)
            append_err(n)
        else:
            raise BulkReadError(f"unexpected result type {typ} in a multiRead response")
    if len(data) != expected:
        raise BulkReadError(f"multiRead answered {len(data)} results for {expected} paths")
    stat = np.frombuffer(b"".join(stats), dtype=STAT_DTYPE) if stats else np.zeros(0, STAT_DTYPE)
    return Reads(np.asarray(errs, dtype=np.int32), data, stat)


def _batches(paths: Sequence[str]) -> Iterable[tuple[int, int]]:
    """Index ranges of at most MAX_BATCH_OPS paths and about MAX_BATCH_BYTES of request each."""
    if not paths:
        return
    longest = max(map(len, paths)) + 16
    step = max(1, min(MAX_BATCH_OPS, MAX_BATCH_BYTES // longest))
    for a in range(0, len(paths), step):
        yield a, min(a + step, len(paths))


def _noop_watch(event) -> None:
    """One-shot watches need a callable; the event itself is recorded by ChangeLog."""


class ChangeLog:
    """Every watch event path a session receives, recorded as it arrives (see the module docstring).

    Paths are relative to the session's chroot. `lost` is set when the connection was interrupted: watch
    events may have been missed then, so a caller that needs the log must not trust it any more.
    """

    def __init__(self, client: KazooClient):
        self.client = client
        self._paths: set[str] = set()
        self._lock = threading.Lock()
        self.lost = False
        conn = client._connection
        original = conn._read_watch_event

        def recording_read_watch_event(buffer, offset):
            event, _ = Watch.deserialize(buffer, offset)
            with self._lock:
                self._paths.add(client.unchroot(event.path))
            return original(buffer, offset)

        conn._read_watch_event = recording_read_watch_event
        client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if state != KazooState.CONNECTED:
            self.lost = True

    def watch_recursive(self, paths: Iterable[str], timeout: float) -> None:
        """Persistent recursive watches (ZooKeeper >= 3.6); raises if the server does not know AddWatch."""
        results = []
        for p in paths:
            ar = self.client.handler.async_result()
            self.client._call(AddWatch(_chrooted(self.client, p)), ar)
            results.append(ar)
        for ar in results:
            ar.get(timeout=timeout)

    def barrier(self, timeout: float) -> tuple[set[str], int]:
        """Round trip through the server; returns (paths changed since the last barrier, server zxid)."""
        self.client.sync_async("/").get(timeout=timeout)
        with self._lock:
            paths, self._paths = self._paths, set()
        return paths, int(self.client.last_zxid)


def _chrooted(client: KazooClient, path: str) -> str:
    if not client.chroot:
        return path
    return client.chroot if path == "/" else client.chroot + path


def supports_multiread(client: KazooClient, timeout: float) -> bool:
    """True when the server answers a one-op multiRead (ZooKeeper >= 3.6). Older servers answer
    UNIMPLEMENTED and drop the connection; kazoo reconnects the same session."""
    ar = client.handler.async_result()
    client._call(MultiRead([_chrooted(client, "/")]), ar)
    try:
        buf, off = ar.get(timeout=timeout)
        parse_multiread(buf, off, 1)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not available", the fallback is always correct
        return False


class BulkReader:
    """Reads many znodes through one session.

    mode "multiread": batches of getData in multiRead requests, a few in flight at once.
    mode "plain": pipelined get() with a one-shot watch on each znode (exists() watch when missing), so the
    session's ChangeLog sees later changes; for servers without multiRead/AddWatch.
    """

    def __init__(self, client: KazooClient, mode: str, timeout: float = 60.0, window: int = 16,
                 progress: Callable[[int], None] | None = None):
        if mode not in ("multiread", "plain"):
            raise ValueError(f"unknown read mode {mode!r}")
        self.client = client
        self.mode = mode
        self.timeout = timeout
        self.window = window
        self.progress = progress
        self.reads = 0

    @property
    def watches(self) -> bool:
        return self.mode == "plain"

    def get_many(self, paths: Sequence[str]) -> Reads:
        return Reads.concat([r for _, r in self.iter_many(paths)])

    def iter_many(self, paths: Sequence[str]) -> Iterator[tuple[int, Reads]]:
        """Yield (index of the first path, results) batch by batch, in order, so a caller can decode early
        batches while later ones are still on the wire."""
        if not paths:
            return
        self.reads += len(paths)
        if self.mode == "multiread":
            yield from self._multiread(paths)
        else:
            yield 0, self._plain(paths)

    def _multiread(self, paths: Sequence[str]) -> Iterator[tuple[int, Reads]]:
        chroot = self.client.chroot or ""
        pending: deque[tuple[object, int, int]] = deque()
        done = 0
        for a, b in _batches(paths):
            ar = self.client.handler.async_result()
            batch = [chroot + p for p in paths[a:b]] if chroot else paths[a:b]
            self.client._call(MultiRead(batch), ar)
            pending.append((ar, a, b - a))
            while len(pending) > self.window or (pending and pending[0][0].ready()):
                ar0, a0, n0 = pending.popleft()
                buf, off = ar0.get(timeout=self.timeout)
                done += n0
                yield a0, parse_multiread(buf, off, n0)
            if self.progress:
                self.progress(done)
        while pending:
            ar0, a0, n0 = pending.popleft()
            buf, off = ar0.get(timeout=self.timeout)
            done += n0
            if self.progress:
                self.progress(done)
            yield a0, parse_multiread(buf, off, n0)

    def _plain(self, paths: Sequence[str]) -> Reads:
        n = len(paths)
        errs = np.zeros(n, dtype=np.int32)
        data: list[bytes | None] = [None] * n
        stat = np.zeros(n, dtype=STAT_DTYPE)
        missing: list[int] = []
        window = 1000
        pending: list[tuple[int, object]] = []

        def collect() -> None:
            i, ar = pending.pop(0)
            try:
                value, st = ar.get(timeout=self.timeout)
            except NoNodeError:
                errs[i] = ERR_NONODE
                missing.append(i)
                return
            except NoAuthError:
                errs[i] = ERR_NOAUTH
                return
            data[i] = value if value is not None else b""
            stat[i] = (st.czxid, st.mzxid, st.ctime, st.mtime, st.version, st.cversion, st.aversion,
                       st.ephemeralOwner, st.dataLength, st.numChildren, st.pzxid)

        for i, p in enumerate(paths):
            pending.append((i, self.client.get_async(p, watch=_noop_watch)))
            if len(pending) > window:
                collect()
            if self.progress and i % 10_000 == 0:
                self.progress(i)
        while pending:
            collect()
        # getData sets no watch on a missing znode; exists() does, so its creation is seen too.
        checks = [(i, self.client.exists_async(paths[i], watch=_noop_watch)) for i in missing]
        for i, ar in checks:
            if ar.get(timeout=self.timeout) is not None:
                # Created between the two calls: read it now (its watch is set by this get).
                try:
                    value, st = self.client.get(paths[i], watch=_noop_watch)
                except NoNodeError:
                    continue
                errs[i] = 0
                data[i] = value if value is not None else b""
                stat[i] = (st.czxid, st.mzxid, st.ctime, st.mtime, st.version, st.cversion, st.aversion,
                           st.ephemeralOwner, st.dataLength, st.numChildren, st.pzxid)
        if self.progress:
            self.progress(n)
        return Reads(errs, data, stat)

    def children(self, path: str) -> list[str] | None:
        """Children of `path` (None when it does not exist). Raises NoAuthError when reading is denied."""
        while True:
            try:
                if self.watches:
                    return self.client.get_children(path, watch=_noop_watch)
                return self.client.get_children(path)
            except NoNodeError:
                # exists() leaves a watch on the missing znode; if it appeared meanwhile, list it after all.
                if not self.watches or self.client.exists(path, watch=_noop_watch) is None:
                    return None
