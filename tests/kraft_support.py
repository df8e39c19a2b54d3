"""A real KRaft cluster as kplan's KRaft writers find it (tests/test_kraft_apply.py, tests/test_kraft_roll.py)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from planner import kraft_admin as ka
from planner.execution.kraftstore import Store
from planner.kafka.broker import find_brokers
from planner.sandbox import Sandbox


@contextmanager
def kplan_kraft_cluster(folder: Path, cluster: dict, lease: float, **up: Any) -> Iterator[Sandbox]:
    """Brokers up with the transactions' own topic replicated as on a real cluster (the sandbox's default is
    RF 1; the fence's coordinator must survive a broker's restart), and a cluster that has used transactions
    and kplan before: __transaction_state and __kplan exist before the first snapshot, so a plan made from it
    covers them (made after it, a drain's intent check would name them as topics created since the snapshot).
    Every broker is gone afterwards, also when `down` could not run."""
    sb = Sandbox.up(folder, cluster=cluster, engine="kraft", timeout=120, session_timeout=3, auto_rebalance=False,
                    kafka_settings={"transaction.state.log.replication.factor": "3",
                                    "transaction.state.log.min.isr": "2"}, **up)
    try:
        store = Store(sb.bootstrap_servers, lease=lease)
        store.open()
        store.close({"released": True, "holder": {"command": "fixture"}})
        yield sb
    finally:
        if (sb.dir / "sandbox.json").exists():
            sb.down()
        for pid in find_brokers(sb.dir / "kafka"):
            os.kill(pid, signal.SIGKILL)


def admin_call(sb: Sandbox, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(admin, *args, **kwargs)` on an Admin client of its own, closed after."""
    a = ka.connect(sb.bootstrap_servers)
    try:
        return fn(a, *args, **kwargs)
    finally:
        a.close()
