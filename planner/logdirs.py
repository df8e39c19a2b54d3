"""Partition sizes from `kafka-log-dirs.sh --describe` output (ZooKeeper does not know partition sizes).

The file can hold a million partitions times the replication factor, so it is parsed by Arrow's JSON reader
into columns and joined to the snapshot's rows with numpy, never as Python objects per replica.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from planner.errors import BadInput


class Sizes(NamedTuple):
    """Replica sizes from a kafka-log-dirs.sh file, one row per replica: topic, partition, size, broker."""

    topic: pa.Array
    partition: np.ndarray
    size: np.ndarray
    broker: np.ndarray


def read_sizes(path: Path | str) -> Sizes:
    """Replica sizes from `kafka-log-dirs.sh --describe` output (one row per replica, with its broker).

    The tool prints a few status lines before the JSON document; the line that starts with '{' is used. A
    negative size is refused (Kafka never reports one: the file was edited or is not the tool's)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise BadInput(f"sizes file {path}: {e.strerror or e}") from None
    start = 0 if raw.lstrip().startswith(b"{") else raw.find(b"\n{") + 1
    if start == 0 and not raw.lstrip().startswith(b"{"):
        raise BadInput(f"sizes file {path} holds no JSON document (expected kafka-log-dirs.sh --describe output)")
    doc = raw[start:].strip()
    if b"\n" in doc:
        doc = doc.replace(b"\n", b" ").replace(b"\r", b" ")
    try:
        table = pj.read_json(io.BytesIO(doc), read_options=pj.ReadOptions(block_size=len(doc) + 1024))
        brokers = pc.list_flatten(table.column("brokers"))
        broker_ids = pc.struct_field(brokers, "broker")
        dirs_list = pc.struct_field(brokers, "logDirs")
        dirs = pc.list_flatten(dirs_list)
        parts_list = pc.struct_field(dirs, "partitions")
        entries = pc.list_flatten(parts_list)
        if len(entries) == 0:
            return Sizes(pa.array([], pa.string()), np.zeros(0, np.int32), np.zeros(0, np.int64),
                         np.zeros(0, np.int64))
        names = pc.struct_field(entries, "partition")
        size = pc.struct_field(entries, "size")
        dir_of = pc.list_parent_indices(parts_list).to_numpy()
        broker_of_dir = pc.list_parent_indices(dirs_list).to_numpy()
        entry_broker = pc.fill_null(broker_ids, -1).to_numpy(zero_copy_only=False).astype(np.int64)[
            broker_of_dir[dir_of]]
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, IndexError) as e:
        raise BadInput(f"sizes file {path} is not kafka-log-dirs.sh --describe JSON: {e}") from None
    if not pa.types.is_string(names.type) or not pa.types.is_integer(size.type):
        raise BadInput(f"sizes file {path}: expected string partitions and integer sizes")
    m = pc.extract_regex(names, r"^(?P<t>.+)-(?P<p>[0-9]{1,9})$")
    if m.null_count:
        bad = pc.filter(names, pc.is_null(m))[0].as_py()
        raise BadInput(f"sizes file {path}: partition {bad!r} is not <topic>-<partition>")
    sizes = pc.fill_null(size, -1).to_numpy().astype(np.int64)
    negative = np.flatnonzero((sizes < 0) & pc.is_valid(size).to_numpy(zero_copy_only=False))
    if len(negative):
        i = int(negative[0])
        raise BadInput(f"sizes file {path}: partition {names[i].as_py()} on broker {int(entry_broker[i])} has size "
                       f"{int(sizes[i])}: sizes are never negative (edited, or not kafka-log-dirs.sh output?)"
                       + (f"; {len(negative) - 1} more" if len(negative) > 1 else ""))
    topic = pc.struct_field(m, "t")
    part = pc.cast(pc.struct_field(m, "p"), pa.int32()).to_numpy()
    return Sizes(topic, part, sizes, entry_broker)


def foreign_brokers(sizes: Sizes, known: set[int]) -> dict[int, int]:
    """Brokers the file has sizes from that the cluster does not know: broker -> replica sizes from it."""
    ids, n = np.unique(sizes.broker, return_counts=True)
    return {int(b): int(c) for b, c in zip(ids.tolist(), n.tolist(), strict=True) if int(b) not in known}


def merge_sizes(partitions: pa.Table, sizes: Sizes, skip: set[int] = frozenset()) -> tuple[pa.Table, int]:
    """Set size_bytes to the largest replica size per partition. Returns (table, entries not in the snapshot).
    Sizes reported by the brokers in `skip` (not in the cluster) are not used."""
    keep = ~np.isin(sizes.broker, np.array(sorted(skip), dtype=np.int64)) if skip else None
    s_topic, s_part, s_size = sizes.topic, sizes.partition, sizes.size
    if keep is not None:
        s_topic, s_part, s_size = pc.filter(s_topic, pa.array(keep)), s_part[keep], s_size[keep]
    topic_col = partitions.column("topic").combine_chunks()
    dictionary = topic_col.dictionary
    t_idx = pc.fill_null(pc.index_in(s_topic, value_set=dictionary), -1).to_numpy().astype(np.int64)
    known = t_idx >= 0
    row_t = topic_col.indices.to_numpy().astype(np.int64)
    row_key = row_t * 2**32 + partitions.column("partition").to_numpy().astype(np.int64)
    # Rows are sorted by (topic name, partition); dictionary indices follow name order (built that way).
    want = t_idx * 2**32 + s_part.astype(np.int64)
    pos = np.searchsorted(row_key, want)
    pos_c = np.minimum(pos, max(len(row_key) - 1, 0))
    hit = known & (len(row_key) > 0) & (row_key[pos_c] == want) & (s_size >= 0)
    best = np.full(len(row_key), -1, dtype=np.int64)
    np.maximum.at(best, pos_c[hit], s_size[hit])
    col = pa.array(best, pa.int64(), mask=best < 0)
    i = partitions.schema.get_field_index("size_bytes")
    return partitions.set_column(i, "size_bytes", col), int((~hit).sum())


# ------------------------------------------------------------------------------ from the brokers themselves
def replica_sizes_from_brokers(partitions: pa.Table, report: dict) -> tuple[pa.Table, dict[str, int]]:
    """Each replica's size as its own broker reported it (planner.kafka_admin.describe_log_dirs), set as the
    `replica_sizes` column (parallel to `replicas`, -1 where that replica was not read) and `size_bytes` = the
    largest replica read (so a replica on a broker that did not answer takes its size from another replica of
    the partition; unknown only when none could be read). Future logs (an intra-broker move in progress) and
    logs of partitions the broker is not assigned are not sizes of a replica and are left out."""
    from planner.snapshot_io import list_to_matrix

    n = partitions.num_rows
    reps = list_to_matrix(partitions.column("replicas"))
    rsize = np.full(reps.shape, -1, dtype=np.int64)
    b_ids, topics, parts, sizes = [], [], [], []
    for b, rec in report.items():
        if rec.status != "ok" or not len(rec.sizes):
            continue
        keep = ~np.asarray(rec.future, dtype=bool)
        b_ids.append(np.full(int(keep.sum()), b, dtype=np.int64))
        topics.extend(rec.topics if keep.all() else (t for t, k in zip(rec.topics, keep.tolist(), strict=True) if k))
        parts.append(np.asarray(rec.partitions, dtype=np.int64)[keep])
        sizes.append(np.asarray(rec.sizes, dtype=np.int64)[keep])
    stray = 0
    if b_ids and n:
        b_arr = np.concatenate(b_ids)
        p_arr = np.concatenate(parts)
        s_arr = np.concatenate(sizes)
        topic_col = partitions.column("topic").combine_chunks()
        t_idx = pc.fill_null(pc.index_in(pa.array(topics, pa.string()), value_set=topic_col.dictionary), -1)
        t_idx = t_idx.to_numpy().astype(np.int64)
        row_t = topic_col.indices.to_numpy().astype(np.int64)
        row_key = row_t * 2**32 + partitions.column("partition").to_numpy().astype(np.int64)
        want = t_idx * 2**32 + p_arr
        pos = np.minimum(np.searchsorted(row_key, want), n - 1)
        hit = (t_idx >= 0) & (row_key[pos] == want)
        slot_match = reps[pos] == b_arr[:, None]
        on = hit & slot_match.any(axis=1)
        stray = int((~on).sum())
        slot = np.argmax(slot_match, axis=1)
        rsize[pos[on], slot[on]] = s_arr[on]
    valid = reps >= 0
    known = (rsize >= 0) & valid
    best = np.where(known, rsize, -1).max(axis=1) if reps.shape[1] else np.full(n, -1, np.int64)
    filled = int(((best >= 0) & (valid & ~known).any(axis=1)).sum())
    offsets = partitions.column("replicas").combine_chunks().offsets
    values = rsize[valid]
    col = pa.ListArray.from_arrays(pa.array(np.asarray(offsets) - np.asarray(offsets)[0], pa.int32()),
                                   pa.array(values, pa.int64()))
    out = partitions.set_column(partitions.schema.get_field_index("size_bytes"), "size_bytes",
                                pa.array(best, pa.int64(), mask=best < 0))
    out = out.set_column(out.schema.get_field_index("replica_sizes"), "replica_sizes", col)
    figures = {"replicas_read": int(known.sum()), "replicas_unread": int((valid & ~known).sum()),
               "partitions_filled_from_other_replicas": filled, "partitions_size_unknown": int((best < 0).sum()),
               "entries_not_in_assignment": stray}
    return out, figures


def disk_from_brokers(brokers: pa.Table, report: dict) -> pa.Table:
    """capacity_bytes / disk_used_bytes (summed over a broker's log dirs that answered without error, null
    when none did or the broker's Kafka is older than 3.3: DescribeLogDirs v4), log_dirs, log_dir_errors."""
    cap, used, dirs, errs = [], [], [], []
    for b in brokers.column("broker").to_pylist():
        rec = report.get(b)
        ds = rec.dirs if rec is not None and rec.status == "ok" else []
        good = [d for d in ds if not d["error"]]
        known = good and all(d["total_bytes"] >= 0 and d["usable_bytes"] >= 0 for d in good)
        cap.append(sum(d["total_bytes"] for d in good) if known else None)
        used.append(sum(d["total_bytes"] - d["usable_bytes"] for d in good) if known else None)
        dirs.append([d["dir"] for d in ds] if rec is not None and rec.status == "ok" else None)
        errs.append([f"{d['dir']}: {d['error']}" for d in ds if d["error"]] if rec is not None and rec.status == "ok"
                    else None)
    t = brokers
    for name, values, typ in (("capacity_bytes", cap, pa.int64()), ("disk_used_bytes", used, pa.int64()),
                              ("log_dirs", dirs, pa.list_(pa.string())),
                              ("log_dir_errors", errs, pa.list_(pa.string()))):
        t = t.set_column(t.schema.get_field_index(name), name, pa.array(values, typ))
    return t
