"""The apply lock: kazoo's Lock recipe in the planner's namespace, held for a whole apply (and by cancel and
verify while they write), so two automations can never move partitions at once.

The contender znodes carry the holder's identity (command, plan, host, pid, user, since), so a refusal names
who holds the lock. Once held, the lock's ephemeral znode is the write gate's fence: if the ZooKeeper session
expires, the znode goes and every later fenced transaction fails instead of writing.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError

from planner.errors import SafetyRefusal
from planner.execution.runstate import LOCK_PATH, describe_holder, identity
from planner.zkgate import WriteGate

log = logging.getLogger(__name__)

_SEQ = re.compile(r"(\d{10})$")


def holder(client: KazooClient) -> str | None:
    """Who holds the lock now (None when nobody does). Read-only: never creates the lock path."""
    try:
        children = client.get_children(LOCK_PATH)
    except NoNodeError:
        return None
    nodes = sorted((m.group(1), c) for c in children if (m := _SEQ.search(c)))
    for _, node in nodes:
        try:
            data, _ = client.get(f"{LOCK_PATH}/{node}")
        except NoNodeError:
            continue
        return describe_holder(data)
    return None


class ApplyLock:
    def __init__(self, gate: WriteGate, command: str, plan_id: str):
        self.gate = gate
        self.command = command
        self.plan_id = plan_id
        self._lock: Any = None  # kazoo's Lock, made by the gate

    @property
    def held(self) -> bool:
        return self._lock is not None

    def acquire(self, wait: float = 0.0) -> None:
        """Take the lock, waiting up to `wait` seconds; SafetyRefusal naming the holder otherwise. In a dry run
        nothing is created: the fence is a placeholder and a held lock becomes a warning for the caller."""
        if self.gate.dry_run:
            self.gate.fence = f"{LOCK_PATH}/(dry-run)"
            return
        ident = json.dumps(identity(self.command, self.plan_id), separators=(",", ":"))
        lock = self.gate.lock(LOCK_PATH, ident)
        try:
            got = lock.acquire(blocking=wait > 0, timeout=wait if wait > 0 else None)
        except LockTimeout:
            got = False
        if not got:
            who = holder(self.gate.client) or "a holder that just left"
            raise SafetyRefusal(f"another kplan holds the lock {LOCK_PATH}: {who}. Only one apply/cancel may write "
                                f"at a time; nothing was written" + (f" (waited {wait:.0f} s)" if wait else ""))
        self._lock = lock
        self.gate.fence = f"{lock.path}/{lock.node}"
        log.info("holding %s as %s", self.gate.fence, ident)

    def try_acquire(self) -> bool:
        try:
            self.acquire(0.0)
            return True
        except SafetyRefusal:
            return False

    def reacquire(self, wait: float = 0.0) -> None:
        """After the session expired: the old znode is gone; take the lock again (or refuse naming who has it)."""
        self.release()
        self.acquire(wait)

    def release(self) -> None:
        lock, self._lock = self._lock, None
        self.gate.fence = None
        if lock is None:
            return
        if not self.gate.client.connected:
            # ZooKeeper unreachable: kazoo would retry the delete for seconds; the ephemeral znode goes with the
            # session (when the session expires, or when this process closes it once ZooKeeper answers)
            log.info("lock %s not released: ZooKeeper is unreachable (the znode goes with the session)",
                        f"{lock.path}/{lock.node}")
            return
        try:
            lock.release()
        except KazooException as e:  # session gone: its ephemeral znode went with it
            log.info("lock release: %r (the znode goes with the session)", e)
