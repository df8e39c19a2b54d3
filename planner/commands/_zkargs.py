"""Arguments shared by several commands: the cluster (connect string, credentials), rates, broker lists, and the
progress line."""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any

from planner.errors import BadInput


def add_zk(p: argparse.ArgumentParser) -> None:
    p.add_argument("--zk", required=True, metavar="HOST:PORT[/chroot]",
                   help="ZooKeeper connect string, with Kafka's chroot if it has one (e.g. zk1:2181/kafka)")
    p.add_argument("--zk-auth-env", metavar="VAR",
                   help="environment variable holding digest credentials user:password "
                   "(default: KPLAN_ZK_AUTH when set)")
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for ZooKeeper to answer the connection (default 10)")


def rate(text: str) -> int:
    """Bytes per second: 50000000, 50MB, 50MiB (optionally followed by /s)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)(i?b)?(/s)?\s*", text, re.IGNORECASE)
    if m and int(m.group(1)) == 0:
        raise argparse.ArgumentTypeError("a throttle of 0 would stall the copy (to copy without a throttle, say "
                                         "--no-throttle)")
    if not m or int(m.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate in bytes/s (e.g. 50000000, 50MB, 40MiB)")
    base = 1024 if (m.group(3) or "").lower() == "ib" else 1000
    return int(m.group(1)) * base ** " kmgt".index((m.group(2) or " ").lower())



def said(text: str, next_steps: Any, args: argparse.Namespace) -> str:
    """A library message followed by its next steps (errors.NextStep) as the command lines that run them on the
    same cluster and plan: "text. `kplan cancel --zk Z --plan P` waits for it; `kplan apply ...` resumes"."""
    if not next_steps:
        return text
    where = f"--zk {getattr(args, 'zk', None) or 'ZK'} --plan {getattr(args, 'plan', None) or 'P'}"
    return text + ". " + "; ".join(f"`kplan {s.step} {where}` {s.does}" for s in next_steps)


def broker_list(text: str) -> list[int]:
    """--brokers 1,2,3 -> [1, 2, 3] (plan drain / return / restart, maintenance clear)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise BadInput("--brokers is empty: name at least one broker id")
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise BadInput(f"--brokers {text!r}: broker ids are integers, comma separated") from None


class ProgressLine:
    """The terminal's progress line: rewritten in place on a terminal, one line every `every` s otherwise."""

    def __init__(self, stream: Any = None, every: float = 10.0):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every
        self._last = 0.0
        self._key: Any = None
        self._width = 0
        self.state: str | None = None   # the state last shown (the apply's signal handler asks)

    def __call__(self, p: Any) -> None:
        from planner.execution.progress import Progress, line

        text = line(Progress(**p.detail)) if getattr(p, "detail", None) else p.message
        self.state = (getattr(p, "detail", None) or {}).get("state")
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
            self.stream.flush()
            return
        detail = getattr(p, "detail", None) or {}
        key = (detail.get("state"), detail.get("unit"))
        now = time.monotonic()
        if key != self._key or now - self._last >= self.every:
            self._key, self._last = key, now
            print(text, file=self.stream, flush=True)

    def end(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
