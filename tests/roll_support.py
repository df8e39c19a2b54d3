"""What happened to every partition while a roll ran, read from ZooKeeper's own transaction log (not the
product's code, and not sampled: every write the controller and the brokers committed, in zxid order).

ZooKeeper logs each committed transaction in `dataDir/version-2/log.<zxid>` (FileTxnLog: a file header, then
per entry a CRC, the serialized TxnHeader + record, and an end-of-record byte; jute's encoding: big-endian
ints and longs, strings and buffers as a length and bytes). A watch can miss a write that lands before it is
re-armed; the log cannot. `History` starts from the cluster as read at a marker zxid and applies every later
transaction under the test's chroot: topic assignments, partition states, broker registrations (ephemeral
znodes, gone with their session's closeSession) and topic configs.

Kafka 3.9's rules (kafka.cluster.Partition): a partition is **offline** when its leader is -1 or not registered;
**under min ISR** when its registered ISR members are fewer than effectiveMinIsr = min(min.insync.replicas,
replicas) (Partition.effectiveMinIsr: the config's minimum capped by the assignment's size, adding replicas
included; read in the 3.9.2 jar's bytecode).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

CREATE, DELETE, SET_DATA, CHECK, MULTI, CREATE2, CREATE_CONTAINER, CREATE_TTL = 1, 2, 5, 13, 14, 15, 19, 21
CREATE_SESSION, CLOSE_SESSION, ERROR = -10, -11, -1


class _Reader:
    def __init__(self, data: bytes):
        self.b, self.i = data, 0

    def int(self) -> int:
        v = struct.unpack_from(">i", self.b, self.i)[0]
        self.i += 4
        return v

    def long(self) -> int:
        v = struct.unpack_from(">q", self.b, self.i)[0]
        self.i += 8
        return v

    def bool(self) -> bool:
        v = self.b[self.i] != 0
        self.i += 1
        return v

    def buffer(self) -> bytes | None:
        n = self.int()
        if n < 0:
            return None
        v = self.b[self.i: self.i + n]
        self.i += n
        return v

    def string(self) -> str | None:
        v = self.buffer()
        return None if v is None else v.decode("utf-8")

    def acl(self) -> None:
        for _ in range(self.int()):
            self.int()
            self.string()
            self.string()


@dataclass
class Op:
    kind: str                    # create | delete | set | close
    path: str = ""
    data: bytes | None = None
    ephemeral: bool = False


@dataclass
class Txn:
    zxid: int
    time_ms: int
    session: int
    ops: list[Op] = field(default_factory=list)


def _record(t: int, r: _Reader) -> list[Op]:
    if t in (CREATE, CREATE2):
        path, data = r.string(), r.buffer()
        r.acl()
        return [Op("create", path, data, r.bool())]
    if t in (CREATE_CONTAINER, CREATE_TTL):
        path, data = r.string(), r.buffer()
        return [Op("create", path, data)]
    if t == DELETE:
        return [Op("delete", r.string())]
    if t == SET_DATA:
        return [Op("set", r.string(), r.buffer())]
    if t == MULTI:
        ops = []
        for _ in range(r.int()):
            sub, body = r.int(), r.buffer() or b""
            if sub != ERROR:
                ops += _record(sub, _Reader(body))
        return ops
    if t == CLOSE_SESSION:
        return [Op("close")]
    return []


def read_log(folder: Path) -> Iterator[Txn]:
    """Every transaction of every log file in `folder` (ZooKeeper's dataDir/version-2), in zxid order."""
    files = sorted(folder.glob("log.*"), key=lambda f: int(f.name.split(".")[1], 16))
    for f in files:
        b = f.read_bytes()
        r = _Reader(b)
        if r.int() != 0x5A4B4C47:   # "ZKLG"
            raise ValueError(f"{f} is not a ZooKeeper transaction log")
        r.int()
        r.long()
        while r.i + 12 <= len(b):
            r.long()                  # crc
            entry = r.buffer()
            if not entry:
                break                 # the preallocated tail
            r.i += 1                  # end of record
            e = _Reader(entry)
            session, _cxid, zxid, t_ms, kind = e.long(), e.int(), e.long(), e.long(), e.int()
            yield Txn(zxid, t_ms, session, _record(kind, e))


@dataclass
class Interval:
    kind: str
    partition: str
    start_zxid: int
    start_ms: int
    end_zxid: int | None = None
    end_ms: int | None = None
    detail: str = ""


class History:
    """The cluster under `chroot` as read at `start_zxid`, then every later transaction applied in order."""

    def __init__(self, client: KazooClient, log_dir: Path, chroot: str):
        self.zk, self.log_dir, self.chroot = client, log_dir, chroot.rstrip("/")
        self.replicas: dict[tuple[str, int], list[int]] = {}
        self.state: dict[tuple[str, int], dict[str, Any]] = {}
        self.min_isr: dict[str, int] = {}
        self.owner: dict[int, int] = {}      # broker -> session of its registration
        self.open: dict[tuple[str, tuple[str, int]], Interval] = {}
        self.intervals: list[Interval] = []
        self.start_zxid = self.end_zxid = 0
        self.transactions = 0
        self.state_writes = 0
        self.events: list[tuple[int, str, int, str | None]] = []   # (zxid, "maintenance"|"registration", broker, what)

    def marker(self, name: str) -> int:
        """A write of our own: its zxid orders everything before and after it."""
        path = self.zk.create(f"/roll-test-marker-{name}-", b"", sequence=True)
        return self.zk.exists(path).czxid

    def begin(self) -> History:
        self.start_zxid = self.marker("start")
        for t in self.zk.get_children("/brokers/topics"):
            for p, reps in json.loads(self.zk.get(f"/brokers/topics/{t}")[0])["partitions"].items():
                self.replicas[(t, int(p))] = reps
                try:
                    self.state[(t, int(p))] = json.loads(self.zk.get(f"/brokers/topics/{t}/partitions/{p}/state")[0])
                except NoNodeError:
                    pass
            try:
                cfg = json.loads(self.zk.get(f"/config/topics/{t}")[0]).get("config", {})
            except NoNodeError:
                cfg = {}
            self.min_isr[t] = int(cfg.get("min.insync.replicas", 1))
        for b in self.zk.get_children("/brokers/ids"):
            self.owner[int(b)] = self.zk.exists(f"/brokers/ids/{b}").ephemeralOwner
        for k in self.state:
            self._judge(k, self.start_zxid, 0)
        return self

    def end(self) -> list[Interval]:
        self.end_zxid = self.marker("end")
        for txn in read_log(self.log_dir):
            if self.start_zxid < txn.zxid < self.end_zxid:
                self._apply(txn)
        for iv in self.open.values():
            self.intervals.append(iv)
        self.open.clear()
        return self.intervals

    # ----------------------------------------------------------------------------------------- apply
    def _local(self, path: str) -> str | None:
        if path == self.chroot or path.startswith(self.chroot + "/"):
            return path[len(self.chroot):] or "/"
        return None

    def _apply(self, txn: Txn) -> None:
        touched: set[tuple[str, int]] = set()
        everyone = False
        for op in txn.ops:
            if op.kind == "close":
                gone = [b for b, s in self.owner.items() if s == txn.session]
                for b in gone:
                    del self.owner[b]
                    self.events.append((txn.zxid, "registration", b, "left"))
                everyone |= bool(gone)
                continue
            path = self._local(op.path)
            if path is None:
                continue
            self.transactions += 1
            parts = path.strip("/").split("/")
            if parts[:2] == ["brokers", "ids"] and len(parts) == 3:
                if op.kind == "create" and op.ephemeral:
                    self.owner[int(parts[2])] = txn.session
                    self.events.append((txn.zxid, "registration", int(parts[2]), "registered"))
                elif op.kind == "delete":
                    self.owner.pop(int(parts[2]), None)
                    self.events.append((txn.zxid, "registration", int(parts[2]), "left"))
                everyone = True
            elif parts[:2] == ["kplan", "maintenance"] and len(parts) == 3:
                state = json.loads(op.data)["state"] if op.kind in ("create", "set") and op.data else None
                self.events.append((txn.zxid, "maintenance", int(parts[2]), state))
            elif parts[:2] == ["brokers", "topics"] and len(parts) == 3 and op.data:
                for p, reps in json.loads(op.data)["partitions"].items():
                    self.replicas[(parts[2], int(p))] = reps
                    touched.add((parts[2], int(p)))
            elif parts[:2] == ["brokers", "topics"] and len(parts) == 6 and parts[5] == "state" and op.data:
                k = (parts[2], int(parts[4]))
                self.state[k] = json.loads(op.data)
                self.state_writes += 1
                touched.add(k)
            elif parts[:2] == ["config", "topics"] and len(parts) == 3 and op.data:
                self.min_isr[parts[2]] = int(json.loads(op.data).get("config", {}).get("min.insync.replicas", 1))
                touched |= {k for k in self.state if k[0] == parts[2]}
        for k in (self.state if everyone else touched):
            self._judge(k, txn.zxid, txn.time_ms)

    def _judge(self, k: tuple[str, int], zxid: int, t_ms: int) -> None:
        s, reps = self.state.get(k), self.replicas.get(k)
        if s is None or reps is None:
            return
        live = set(self.owner)
        offline = s["leader"] == -1 or s["leader"] not in live
        isr = [b for b in s["isr"] if b in live]
        under = not offline and len(isr) < min(self.min_isr.get(k[0], 1), len(reps))
        for kind, bad in (("offline", offline), ("under_min_isr", under)):
            key = (kind, k)
            if bad and key not in self.open:
                self.open[key] = Interval(kind, f"{k[0]}-{k[1]}", zxid, t_ms,
                                          detail=f"leader {s['leader']} isr {s['isr']} replicas {reps} live {sorted(live)}")
            elif not bad and key in self.open:
                iv = self.open.pop(key)
                iv.end_zxid, iv.end_ms = zxid, t_ms
                self.intervals.append(iv)


def log_dir(zk_server: Any) -> Path:
    return Path(zk_server.data_dir) / "data" / "version-2"


def assignment(client: KazooClient) -> dict[tuple[str, int], list[int]]:
    out = {}
    for t in client.get_children("/brokers/topics"):
        for p, reps in json.loads(client.get(f"/brokers/topics/{t}")[0])["partitions"].items():
            out[(t, int(p))] = reps
    return out


def leaders(client: KazooClient) -> dict[tuple[str, int], int]:
    out = {}
    for (t, p) in assignment(client):
        try:
            out[(t, p)] = json.loads(client.get(f"/brokers/topics/{t}/partitions/{p}/state")[0])["leader"]
        except NoNodeError:
            out[(t, p)] = -1
    return out
