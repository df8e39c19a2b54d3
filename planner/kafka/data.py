"""Data in the real sandbox: produce bytes into partitions, read log-end offsets, measure log dirs on disk.

Producing goes through kafka-python (pinned in pyproject.toml): a pure-Python client, so filling partitions
costs no JVM start. Records are written with acks=all to an explicit partition each, so every partition gets
exactly the bytes asked of it. Sizes on disk are read from the brokers' log dirs (the `.log` segment files
of each `<topic>-<partition>` folder), which is what `kafka-log-dirs --describe` reports too.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from planner.errors import PlannerError

log = logging.getLogger("planner.kafka.data")

RECORD_BYTES = 32 * 1024


class DataError(PlannerError):
    """Producing or reading data from the real brokers failed."""


def _quiet_client_logs() -> None:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)


def produce(bootstrap: str, sizes: Mapping[tuple[str, int], int], record_bytes: int = RECORD_BYTES,
            timeout: float = 120) -> dict[tuple[str, int], int]:
    """Write `sizes[(topic, partition)]` payload bytes into each partition (acks=all); returns the record
    counts written. Raises DataError naming the partitions that failed."""
    from kafka import KafkaProducer

    _quiet_client_logs()
    todo = {k: int(v) for k, v in sizes.items() if int(v) > 0}
    if not todo:
        return {}
    payload = os.urandom(record_bytes)  # incompressible; compression is off anyway
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=5,
                             batch_size=512 * 1024, max_request_size=4 * 1024 * 1024,
                             retries=20, request_timeout_ms=30000,
                             max_block_ms=int(timeout * 1000))
    counts: dict[tuple[str, int], int] = {}
    futures = []
    try:
        for (topic, part), n in sorted(todo.items()):
            records = 0
            left = n
            while left > 0:
                chunk = payload if left >= record_bytes else payload[:left]
                futures.append(((topic, part), producer.send(topic, value=chunk, partition=part)))
                left -= len(chunk)
                records += 1
            counts[(topic, part)] = records
        producer.flush(timeout=timeout)
        failed: dict[tuple[str, int], str] = {}
        for key, fut in futures:
            if not fut.is_done:
                failed.setdefault(key, "not acknowledged in time")
            elif fut.failed():
                failed.setdefault(key, repr(fut.exception))
        if failed:
            names = ", ".join(f"{t}-{p}: {e}" for (t, p), e in sorted(failed.items())[:10])
            raise DataError(f"producing to {len(failed)} partitions failed: {names}")
    finally:
        producer.close(timeout=10)
    return counts


def log_end_offsets(bootstrap: str, partitions: Iterable[tuple[str, int]], timeout: float = 30
                    ) -> dict[tuple[str, int], int]:
    """Log-end offsets (the offset the next record gets) of online partitions, from their leaders."""
    from kafka import KafkaConsumer, TopicPartition

    _quiet_client_logs()
    tps = [TopicPartition(t, p) for t, p in partitions]
    if not tps:
        return {}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None, enable_auto_commit=False,
                             request_timeout_ms=int(timeout * 1000) + 1000)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                ends = consumer.end_offsets(tps)
                break
            except Exception as e:  # kafka-python raises KafkaTimeoutError and friends while leaders move
                if time.monotonic() > deadline:
                    raise DataError(f"could not read log-end offsets: {e!r}") from None
                time.sleep(0.2)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): int(off) for tp, off in ends.items()}


def partition_dir_sizes(log_dir: Path) -> dict[tuple[str, int], int]:
    """Bytes of the `.log` segments of every partition folder in one broker log dir."""
    out: dict[tuple[str, int], int] = {}
    try:
        entries = list(os.scandir(log_dir))
    except OSError:
        return out
    for e in entries:
        if not e.is_dir():
            continue
        topic, sep, part = e.name.rpartition("-")
        if not sep or not part.isdigit() or "." in part:
            continue  # not a partition folder (or a "-delete" / "-future" one)
        total = 0
        for f in os.scandir(e.path):
            if f.name.endswith(".log"):
                total += f.stat().st_size
        out[(topic, int(part))] = total
    return out


def log_dirs_report(log_dirs: Mapping[int, Path]) -> dict[str, Any]:
    """The sizes on disk in the format of `kafka-log-dirs.sh --describe` (what `kplan snapshot --sizes`
    reads), one entry per replica found on each broker."""
    brokers = []
    for b, d in sorted(log_dirs.items()):
        parts = [{"partition": f"{t}-{p}", "size": size, "offsetLag": 0, "isFuture": False}
                 for (t, p), size in sorted(partition_dir_sizes(d).items())]
        brokers.append({"broker": b, "logDirs": [{"logDir": str(d), "error": None, "partitions": parts}]})
    return {"version": 1, "brokers": brokers}
