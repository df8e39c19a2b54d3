"""Words for numbers and values in messages: "1 partition", "3 partitions", and JSON values shown as JSON
(true, {"3": 46}), never as Python reprs (True, {'3': 46})."""

from __future__ import annotations

import json
from typing import Any


def count(n: int, noun: str, plural: str | None = None) -> str:
    """'1 partition', '2 partitions' ('1 broker', '0 brokers'); `plural` for irregular nouns."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def size(n: float | None, unknown: str = "?") -> str:
    """Bytes in binary units, as Kafka's and the operating system's tools count them: '512 B', '1.5 KiB',
    '68.7 MiB'; `unknown` for None."""
    if n is None:
        return unknown
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            break
        x /= 1024
    return f"{x:,.0f} B" if unit == "B" else f"{x:,.1f} {unit}"


def show(value: Any, limit: int = 80) -> str:
    """A value from a JSON document or a request, as JSON."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def duration(seconds: float | None, unknown: str = "unknown") -> str:
    """'45 s', '12 min', '3 h 05 min', '2 d 4 h'; `unknown` for None."""
    if seconds is None:
        return unknown
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    m = (s + 30) // 60
    if m < 60:
        return f"{m} min"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m:02d} min"
    d, h = divmod(h, 24)
    return f"{d} d {h} h"


def schedule_line(schedule) -> str:
    """One line for a planner.plan_model.ApplySchedule: the rates data batches copy at and the estimate."""
    data = [b for b in schedule.batches if b.source != "no data"]
    if not data:
        return "no data to copy (leadership only)"
    rates = sorted({b.rate for b in data if b.rate})
    parts = []
    if rates:
        shown = size(rates[0]) + "/s" if len(rates) == 1 else f"{size(rates[0])}/s to {size(rates[-1])}/s"
        src = {b.source for b in data if b.rate}
        parts.append(f"{sum(1 for b in data if b.rate)} data batches at {shown} "
                     f"({'the throttle given' if src == {'throttle'} else 'the plan suggests'})")
    if schedule.unthrottled:
        parts.append(f"{len(schedule.unthrottled)} at FULL SPEED (no throttle)")
    est = f"estimated copy time {duration(schedule.seconds)}" if schedule.seconds is not None else \
        "copy time unknown (a batch has no rate or no known size)"
    return "; ".join(parts) + "; " + est
