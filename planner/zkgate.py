"""The write gate: the only module of the product (everything outside the emulated sandbox and its loader)
that writes to ZooKeeper.

Why one gate: the step that writes is where tools hurt people. docs/DESIGN.md's safety rules allow exactly
- `/admin/reassign_partitions` and `/admin/preferred_replica_election`: **created** only. Kafka's controller
  acts on these znodes only when they are created; a later data change is ignored and deleting them loses the
  controller's watch (KafkaController re-arms it only after deleting the znode itself), so the gate never
  sets or deletes them;
- `/config/topics/<topic>` and `/config/brokers/<id>|<default>`: created or set, each write followed (in the
  same transaction) by its sequential `/config/changes/config_change_` notification, as Kafka's
  AdminZkClient.changeEntityConfig does;
- the planner's own namespace `/kplan/...` (lock, run state, progress, cancel requests).
Anything else raises `GateViolation` before a byte is sent. `tests/test_zkgate.py` walks planner/ and proves
no other module calls a kazoo write, and records every request a full apply/verify/cancel sends.

Fencing: once the apply lock is held, `fence` names the lock's ephemeral znode and every fenced
transaction starts with a `check` of it. If the session expired and the lock went with it, the transaction
fails as a whole (`FenceLost`) and nothing of it is applied: a process that lost the lock cannot write.

Dry run: with `dry_run=True` nothing is sent; every write is recorded in `writes` (and handed to `on_write`)
and the gate keeps an overlay of what it would have written so that read-modify-write code (throttles) sees
its own simulated writes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, RolledBackError, ZookeeperError
from kazoo.recipe.lock import Lock

from planner.errors import PlannerError, SafetyRefusal, ZkUnavailable

log = logging.getLogger(__name__)

NAMESPACE = "/kplan"
CONFIG_CHANGE_PREFIX = "/config/changes/config_change_"

# Writes the product may make: (path pattern, allowed operations).
_TOPIC = r"[a-zA-Z0-9._-]{1,249}"
ALLOWED: tuple[tuple[re.Pattern[str], frozenset[str]], ...] = (
    (re.compile(r"/admin/reassign_partitions"), frozenset({"create"})),
    (re.compile(r"/admin/preferred_replica_election"), frozenset({"create"})),
    (re.compile(rf"/config/topics/{_TOPIC}"), frozenset({"create", "set"})),
    (re.compile(r"/config/brokers/(?:\d+|<default>)"), frozenset({"create", "set"})),
    (re.compile(re.escape(CONFIG_CHANGE_PREFIX)), frozenset({"create_sequential"})),
    (re.compile(re.escape(NAMESPACE) + r"(?:/[A-Za-z0-9._:-]+)*"), frozenset({"create", "set", "delete"})),
)

MAX_TXN_OPS = 1000
MAX_TXN_BYTES = 900 * 1024  # ZooKeeper's default jute.maxbuffer is 1 MiB per request


class GateViolation(SafetyRefusal):
    """A write outside the allowed paths/operations was attempted (a bug): nothing was written."""


class FenceLost(PlannerError):
    """The apply lock's znode is gone (session expired): the fenced transaction was not applied."""

    exit_code = 1
    retryable = True


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a transaction. kind: create | create_sequential | set | delete | check."""

    kind: str
    path: str
    data: bytes = b""
    version: int = -1

    def describe(self) -> str:
        text = self.data.decode("utf-8", "replace")
        ver = f" (version {self.version})" if self.version >= 0 and self.kind in ("set", "delete") else ""
        return f"{self.kind} {self.path}{ver}" + (f" {text}" if text else "")


def check_write(kind: str, path: str) -> None:
    """Raise GateViolation unless `kind` on `path` is one of the allowed writes."""
    if not isinstance(path, str) or not path.startswith("/") or "//" in path or path.endswith("/") \
            or any(part in (".", "..") for part in path.split("/")[1:]):
        raise GateViolation(f"refusing to write to {path!r}: not a normalized ZooKeeper path")
    for pattern, kinds in ALLOWED:
        if pattern.fullmatch(path):
            if kind in kinds:
                return
            raise GateViolation(f"refusing to {kind} {path}: only {', '.join(sorted(kinds))} allowed there")
    raise GateViolation(f"refusing to {kind} {path}: outside the paths kplan may write "
                        f"(/admin/reassign_partitions, /admin/preferred_replica_election, /config/topics|brokers/*, "
                        f"/config/changes, {NAMESPACE}/...)")


def _cost(op: Op) -> int:
    return len(op.path) + len(op.data) + 48


class WriteGate:
    """Every ZooKeeper write of apply/verify/cancel goes through one of these."""

    def __init__(self, client: KazooClient, *, dry_run: bool = False,
                 on_write: Callable[[Op], None] | None = None, timeout: float = 30.0):
        self.client = client
        self.dry_run = dry_run
        self.on_write = on_write
        self.timeout = timeout
        self.fence: str | None = None
        self.writes: list[Op] = []
        self.transactions = 0
        self.txn_of: list[int] = []   # dry run: the transaction each recorded write belongs to
        self._overlay: dict[str, bytes | None] = {}  # dry run: path -> data written (None: deleted)
        self._seq = 0

    # ------------------------------------------------------------------------------------------ reads
    def overlay(self, path: str) -> tuple[bool, bytes | None]:
        """(True, data) when a dry run has (notionally) written `path`; data None when it was deleted."""
        if path in self._overlay:
            return True, self._overlay[path]
        return False, None

    # ----------------------------------------------------------------------------------------- writes
    def commit(self, ops: Sequence[Op], *, fenced: bool = True) -> list[Any]:
        """One atomic transaction. Returns one result per op (kazoo's: path for create, ZnodeStat for set,
        True for delete/check). Raises the failing op's kazoo error (e.g. BadVersionError, NodeExistsError),
        FenceLost when the lock znode is gone, GateViolation before sending anything disallowed."""
        ops = list(ops)
        for op in ops:
            if op.kind != "check":
                check_write(op.kind, op.path)
        if fenced and self.fence is None:
            raise GateViolation("a fenced write was attempted without holding the apply lock")
        size = sum(_cost(op) for op in ops)
        if len(ops) > MAX_TXN_OPS or size > MAX_TXN_BYTES:
            raise SafetyRefusal(f"a single ZooKeeper transaction of {len(ops)} operations / {size} bytes would "
                                f"exceed the server's request limit (jute.maxbuffer, 1 MiB by default); "
                                "nothing was written")
        if self.dry_run:
            return self._record(ops)
        for op in ops:
            if op.kind != "check":
                log.debug("zk write: %s", op.describe()[:300])
        txn = self.client.transaction()
        if fenced:
            txn.check(self.fence, -1)
        for op in ops:
            if op.kind == "create":
                txn.create(op.path, op.data)
            elif op.kind == "create_sequential":
                txn.create(op.path, op.data, sequence=True)
            elif op.kind == "set":
                txn.set_data(op.path, op.data, version=op.version)
            elif op.kind == "delete":
                txn.delete(op.path, version=op.version)
            elif op.kind == "check":
                txn.check(op.path, op.version)
            else:
                raise GateViolation(f"unknown write kind {op.kind!r}")
        try:
            results = txn.commit_async().get(timeout=self.timeout)
        except ZookeeperError as e:
            raise ZkUnavailable(f"ZooKeeper rejected a transaction: {e!r}") from None
        except Exception as e:  # connection loss, timeout: nothing is known to have been applied
            if isinstance(e, PlannerError):
                raise
            raise ZkUnavailable(f"ZooKeeper transaction did not complete: {e!r}") from None
        if fenced:
            head, results = results[0], results[1:]
            if isinstance(head, NoNodeError):
                raise FenceLost(f"the apply lock {self.fence} is gone (ZooKeeper session expired?); "
                                "nothing of the transaction was applied")
        for r in results:
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                raise r
        for op in ops:
            if op.kind != "check" and self.on_write:
                self.on_write(op)
        return results

    def commit_groups(self, groups: Sequence[Sequence[Op]], *, fenced: bool = True) -> list[Any]:
        """Many writes in as few transactions as the request limit allows; each group (e.g. a config write
        and its change notification) stays inside one transaction, so it is applied whole or not at all."""
        results: list[Any] = []
        cur: list[Op] = []
        size = 0
        for g in groups:
            cost = sum(_cost(op) for op in g)
            if cur and (len(cur) + len(g) > MAX_TXN_OPS - 1 or size + cost > MAX_TXN_BYTES - 256):
                results += self.commit(cur, fenced=fenced)
                cur, size = [], 0
            cur.extend(g)
            size += cost
        if cur:
            results += self.commit(cur, fenced=fenced)
        return results

    def _record(self, ops: list[Op]) -> list[Any]:
        self.transactions += 1
        out: list[Any] = []
        for op in ops:
            if op.kind == "check":
                out.append(True)
                continue
            path = op.path
            if op.kind == "create_sequential":
                path = f"{op.path}{self._seq:010d}"
                self._seq += 1
            self._overlay[path] = None if op.kind == "delete" else op.data
            self.writes.append(op)
            self.txn_of.append(self.transactions)
            if self.on_write:
                self.on_write(op)
            out.append(path if op.kind.startswith("create") else True)
        return out

    # ------------------------------------------------------------------------------------------ lock
    def lock(self, path: str, identifier: str) -> Lock:
        """kazoo's Lock recipe on a path inside the planner's namespace (its znodes are the recipe's)."""
        check_write("create", path)
        return Lock(self.client, path, identifier=identifier)
