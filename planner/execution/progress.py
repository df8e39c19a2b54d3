"""Progress of apply / verify / cancel: one small record, given to the caller's callback, persisted in the run
record (ZooKeeper, for another process such as the Airflow UI) and, when asked, in a JSON file written
atomically (temporary name, then rename) so a reader never sees half a file."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from planner.text import size


@dataclass(frozen=True)
class Progress:
    step: str                 # "apply" | "verify" | "cancel"
    message: str
    done: int                 # partitions at their target
    total: int
    state: str = ""
    unit: str | None = None   # e.g. "batch 3" (the one in flight)
    units_done: int = 0
    units_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0
    rate: float | None = None  # bytes/s over this process's run
    eta: float | None = None   # seconds
    elapsed: float = 0.0
    at: float = 0.0            # epoch seconds

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def human_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}"


ZK_DOWN = "zookeeper unreachable"
STOPPING = "stopping"


def line(p: Progress) -> str:
    """The terminal's progress line: partitions done/total, bytes, rate, ETA (or, while ZooKeeper is
    unreachable or a stop is under way, what is happening and what comes next)."""
    if p.state in (ZK_DOWN, STOPPING):
        return f"{p.step}: {p.message}"
    parts = [f"{p.step}: {p.state}" + (f", {p.unit} in flight" if p.unit else ""),
             f"batches {p.units_done}/{p.units_total}",
             f"partitions {p.done:,}/{p.total:,}"]
    if p.bytes_total:
        parts.append(f"{size(p.bytes_done)}/{size(p.bytes_total)}")
    parts.append(f"{size(p.rate)}/s" if p.rate else "rate -")
    parts.append(f"ETA {human_seconds(p.eta)}" if p.eta is not None else "ETA -")
    return " · ".join(parts)


def write_json_atomic(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


class Reporter:
    """Throttles progress output to about once per `every` seconds (always on changes). The progress file, read
    by other processes (the review UI), is rewritten at most once per `every` seconds except when the state
    changes: a plan of hundreds of quick batches would otherwise rewrite it several times a batch."""

    def __init__(self, step: str, callback: Any = None, file: Path | None = None, every: float = 1.0,
                 stamp: dict[str, Any] | None = None):
        self.step = step
        self.stamp = dict(stamp or {})   # written into the file with every record (the plan id: whose it is)
        self.callback = callback
        self.file = file
        self.every = every
        self._last = 0.0
        self._last_key: tuple[Any, ...] | None = None
        self._file_at = -1e18
        self._file_state: str | None = None
        self.latest: Progress | None = None

    def emit(self, p: Progress, force: bool = False) -> bool:
        key = (p.state, p.unit, p.done, p.units_done)
        t = time.monotonic()
        if not force and key == self._last_key and t - self._last < self.every:
            return False
        self._last, self._last_key, self.latest = t, key, p
        if self.file is not None and (p.state != self._file_state or t - self._file_at >= self.every):
            write_json_atomic(self.file, {**self.stamp, **p.as_dict()})
            self._file_at, self._file_state = t, p.state
        if self.callback is not None:
            self.callback(p)
        return True

    def flush(self) -> None:
        """Write the latest progress to the file if a rate-limited emit skipped it."""
        if self.file is not None and self.latest is not None and self._file_at < self._last:
            write_json_atomic(self.file, {**self.stamp, **self.latest.as_dict()})
            self._file_at, self._file_state = self._last, self.latest.state


class Tally:
    """What a run has moved, for its progress: each unit's share of the plan's final moves (a partition counts
    in the last unit that moves it) and the bytes done when this process started (its rate counts only what
    it moved itself)."""

    def __init__(self, final: dict[Any, int], bytes_of: dict[Any, int | None], units: int, started: float):
        self.count = [0] * units
        self.bytes = [0] * units
        for k, u in final.items():
            self.count[u] += 1
            self.bytes[u] += bytes_of[k] or 0
        self.started = started
        self.bytes_at_start: int | None = None

    def done(self, completed: list[bool], unit: int | None = None, unit_done: int = 0) -> tuple[int, int, int]:
        """(partitions, bytes, units) done: the completed units', and `unit_done` partitions of `unit` in flight."""
        done = sum(c for c, ok in zip(self.count, completed, strict=False) if ok)
        nbytes = sum(b for b, ok in zip(self.bytes, completed, strict=False) if ok)
        if unit is not None and unit_done:
            done += unit_done
            nbytes += int(self.bytes[unit] * unit_done / max(1, self.count[unit]))
        if self.bytes_at_start is None:
            self.bytes_at_start = nbytes
        return done, nbytes, sum(completed)

    def rate(self, nbytes: int) -> tuple[float, float | None]:
        """(elapsed seconds, bytes/s moved by this process: None before it moved any)."""
        elapsed = time.monotonic() - self.started
        moved = nbytes - (self.bytes_at_start or 0)
        return elapsed, (moved / elapsed if moved > 0 and elapsed > 0 else None)
