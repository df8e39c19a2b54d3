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
