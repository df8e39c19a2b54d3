"""The Spark JVMs this process started, found and stopped through /proc (Linux): what is left when a JVM's
launch was interrupted before PySpark kept its handle (Ctrl-C must not leave a JVM behind)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _descendants() -> dict[int, str]:
    """This process's descendants (pid -> command line), from /proc (Linux)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = {}, [os.getpid()]
    while todo:
        me = todo.pop()
        for pid, ppid in parent.items():
            if ppid == me and pid not in out:
                try:
                    out[pid] = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    out[pid] = ""
                todo.append(pid)
    return out


def stop_child_jvms(timeout: float = 20.0) -> None:
    """SIGTERM (then SIGKILL) the Spark JVMs this process started, and wait until they are gone."""
    if not Path("/proc/self/stat").exists():
        return
    jvms = [pid for pid, cmd in _descendants().items() if "org.apache.spark.deploy.SparkSubmit" in cmd]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in jvms:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jvms = [pid for pid in jvms if _running(pid)]
            if not jvms:
                return
            time.sleep(0.1)


def _running(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)   # reap it if it is our child
    except ChildProcessError:
        pass
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"

