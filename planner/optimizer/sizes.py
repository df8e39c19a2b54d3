"""Partition sizes from a `--sizes` file: either {"topic-partition": bytes} or the JSON that
`kafka-log-dirs.sh --describe` prints (its banner lines are skipped). A partition's size is its largest
replica, as in the snapshot's size_bytes column."""

from __future__ import annotations

import json
from typing import Any

from planner.errors import BadInput
from planner.text import show


def _split(name: str, where: str) -> tuple[str, int]:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise BadInput(f"{where}: {name!r} is not 'topic-partition'")
    return topic, int(part)


def parse_sizes(text: str, where: str = "sizes file") -> dict[tuple[str, int], int]:
    start = text.find("{")
    if start < 0:
        raise BadInput(f"{where}: no JSON object found")
    try:
        obj: Any = json.JSONDecoder().raw_decode(text[start:])[0]  # banner lines before, nothing after
    except json.JSONDecodeError as e:
        raise BadInput(f"{where}: not valid JSON ({e})") from None
    out: dict[tuple[str, int], int] = {}
    if isinstance(obj, dict) and isinstance(obj.get("brokers"), list):
        for b in obj["brokers"]:
            for d in (b or {}).get("logDirs", []) or []:
                if d.get("error"):
                    continue
                for p in d.get("partitions", []) or []:
                    if p.get("isFuture"):
                        continue
                    key = _split(str(p.get("partition")), where)
                    size = p.get("size")
                    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                        raise BadInput(f"{where}: size of {key[0]}-{key[1]} must be a non-negative integer")
                    out[key] = max(out.get(key, 0), size)
        return out
    if not isinstance(obj, dict):
        raise BadInput(f"{where}: expected an object of \"topic-partition\": bytes")
    for name, size in obj.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise BadInput(f"{where}: size of {name!r} must be a non-negative integer, got {show(size)}")
        key = _split(name, where)
        out[key] = max(out.get(key, 0), size)
    return out
