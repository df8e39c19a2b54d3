"""Znode data -> columns: partition states and topic assignments decoded in bulk into numpy/Arrow arrays.

A snapshot of a million partitions must not build a million Python objects. Partition state JSON goes through
Arrow's JSON reader (C++, several threads) straight into typed columns; topic znodes go through json.loads and
are validated and converted for all topics at once with C-level iteration. Anything irregular falls back to
planner.codec, one znode at a time, so malformed data is reported exactly as the codec reports it: with the
znode's path and what is wrong.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from planner import codec, zkbulk
from planner.errors import CodecError

JSON_CHUNK = 200_000   # partition states per Arrow JSON parse (fewer, larger calls are much faster)

# ------------------------------------------------------------------------------------ partition states
_STATE_SCHEMA = pa.schema([("leader", pa.int32()), ("leader_epoch", pa.int32()),
                           ("controller_epoch", pa.int32()), ("isr", pa.list_(pa.int32())),
                           ("leader_recovery_state", pa.int8())])
_STATE_PARSE = pj.ParseOptions(explicit_schema=_STATE_SCHEMA, unexpected_field_behavior="ignore")
_STATE_REQUIRED = ("leader", "leader_epoch", "controller_epoch", "isr")


@dataclass
class StateColumns:
    """Decoded partition states for a list of paths (row i = path i), as arrays."""

    has_state: np.ndarray      # bool
    leader: np.ndarray         # int32, -1 when no state
    leader_epoch: np.ndarray   # int32
    controller_epoch: np.ndarray
    leader_recovery_state: np.ndarray  # int8
    state_version: np.ndarray  # int32 (stat version)
    isr_len: np.ndarray        # int32
    isr_values: np.ndarray     # int32, concatenated in row order
    bad: list[tuple[int, str]] = field(default_factory=list)   # (row, problem)
    denied: list[int] = field(default_factory=list)             # rows whose read was refused (NOAUTH)

    @staticmethod
    def concat(parts: list[StateColumns]) -> StateColumns:
        if len(parts) == 1:
            return parts[0]
        bad: list[tuple[int, str]] = []
        denied: list[int] = []
        base = 0
        for p in parts:
            bad.extend((base + i, m) for i, m in p.bad)
            denied.extend(base + i for i in p.denied)
            base += len(p.has_state)
        cat = np.concatenate
        return StateColumns(cat([p.has_state for p in parts]), cat([p.leader for p in parts]),
                            cat([p.leader_epoch for p in parts]), cat([p.controller_epoch for p in parts]),
                            cat([p.leader_recovery_state for p in parts]), cat([p.state_version for p in parts]),
                            cat([p.isr_len for p in parts]), cat([p.isr_values for p in parts]), bad, denied)


def _decode_one_state(blob: bytes | None, path: str) -> tuple[int, int, int, int, list[int]]:
    st = codec.decode_partition_state(blob, path)
    for name, v in (("leader", st.leader), ("leader_epoch", st.leader_epoch),
                    ("controller_epoch", st.controller_epoch), ("leader_recovery_state", st.leader_recovery_state)):
        if not -(2**31) <= v < 2**31 or (name == "leader_recovery_state" and not -128 <= v < 128):
            raise CodecError(path, f"{name} {v} is out of range")
    if any(not 0 <= b < 2**31 for b in st.isr):
        raise CodecError(path, f"isr {st.isr} holds a broker id out of range")
    return st.leader, st.leader_epoch, st.controller_epoch, st.leader_recovery_state, st.isr


def decode_state_blobs(blobs: list[bytes], path_of: Callable[[int], str]
                        ) -> tuple[pa.Table, list[tuple[int, str]]]:
    """Decode state JSON blobs into a table with _STATE_SCHEMA (one row per blob). Well-formed blobs go
    through Arrow's JSON reader in bulk (C++, several threads, no Python objects); a batch it refuses is
    split in halves until the offending blobs are decoded one by one by the codec, whose errors name the
    path. Returns (table, [(index, problem)]); rows of bad blobs hold nulls."""
    parts: list[pa.Table] = []
    bad: list[tuple[int, str]] = []
    for a in range(0, len(blobs), JSON_CHUNK):
        _decode_chunk(blobs[a:a + JSON_CHUNK], a, path_of, parts, bad)
    if not parts:
        return _STATE_SCHEMA.empty_table(), bad
    table = pa.concat_tables(parts).combine_chunks()
    i = table.schema.get_field_index("leader_recovery_state")  # absent = 0 (only unclean elections write 1)
    return table.set_column(i, _STATE_SCHEMA.field(i), pc.fill_null(table.column(i), 0)), bad


def _decode_chunk(chunk: list[bytes], base: int, path_of: Callable[[int], str], parts: list[pa.Table],
                  bad: list[tuple[int, str]]) -> None:
    table = None
    joined = b"\n".join(chunk)
    # One blob per line: an empty blob or one with a line break would shift the rows.
    if b"" not in chunk and b"\r" not in joined and joined.count(b"\n") == len(chunk) - 1:
        try:
            table = pj.read_json(io.BytesIO(joined), parse_options=_STATE_PARSE)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            table = None
        if table is not None and table.num_rows != len(chunk):
            table = None
    if table is None:
        if len(chunk) > 1000:
            half = len(chunk) // 2
            _decode_chunk(chunk[:half], base, path_of, parts, bad)
            _decode_chunk(chunk[half:], base + half, path_of, parts, bad)
            return
        rows, chunk_bad = _decode_individually(chunk, lambda j: path_of(base + j))
        bad.extend((base + j, m) for j, m in chunk_bad)
        parts.append(rows)
        return
    table = table.combine_chunks()
    incomplete = pc.is_null(table.column("leader"))
    for col in _STATE_REQUIRED[1:]:
        incomplete = pc.or_(incomplete, pc.is_null(table.column(col)))
    isr = table.column("isr")
    if isr.num_chunks:
        # an isr like [1, null] or [-1]: find the rows that hold such an element
        arr = isr.chunk(0)
        flat = pc.list_flatten(arr)
        odd = pc.fill_null(pc.less(flat, 0), True).to_numpy(zero_copy_only=False)
        if odd.any():
            any_odd = np.zeros(len(chunk), dtype=bool)
            any_odd[pc.list_parent_indices(arr).to_numpy()[odd]] = True
            incomplete = pc.or_(incomplete, pa.array(any_odd))
    idx = np.flatnonzero(incomplete.to_numpy(zero_copy_only=False))
    if len(idx):
        # Missing keys or odd values: decode those rows one by one (the codec names the problem).
        rows, fixed_bad = _decode_individually([chunk[i] for i in idx], lambda j: path_of(base + int(idx[j])))
        bad.extend((base + int(idx[j]), m) for j, m in fixed_bad)
        table = _replace_rows(table, idx, rows)
    parts.append(table)


def _decode_individually(blobs: Sequence[bytes | None], path_of: Callable[[int], str]
                         ) -> tuple[pa.Table, list[tuple[int, str]]]:
    cols: dict[str, list] = {f.name: [] for f in _STATE_SCHEMA}
    bad: list[tuple[int, str]] = []
    for j, blob in enumerate(blobs):
        try:
            leader, epoch, ctrl, lrs, isr = _decode_one_state(blob, path_of(j))
        except CodecError as e:
            bad.append((j, e.problem))
            leader = epoch = ctrl = lrs = isr = None
        cols["leader"].append(leader)
        cols["leader_epoch"].append(epoch)
        cols["controller_epoch"].append(ctrl)
        cols["leader_recovery_state"].append(lrs)
        cols["isr"].append(isr)
    return pa.table(cols, schema=_STATE_SCHEMA), bad


def _replace_rows(table: pa.Table, idx: np.ndarray, rows: pa.Table) -> pa.Table:
    """`table` with rows `idx` replaced by `rows` (same schema)."""
    keep = np.ones(table.num_rows, dtype=bool)
    keep[idx] = False
    order = np.concatenate([np.flatnonzero(keep), idx])
    merged = pa.concat_tables([table.filter(pa.array(keep)), rows]).combine_chunks()
    return merged.take(pa.array(np.argsort(order, kind="stable")))


def read_states(reader: zkbulk.BulkReader, paths: list[str]) -> StateColumns:
    """Read and decode the partition state znodes at `paths` (row i = paths[i]). Decoding runs segment by
    segment as results arrive, while later requests are still being answered."""
    segments: list[StateColumns] = []
    batch: list[zkbulk.Reads] = []
    first = 0
    pending = 0
    for start, reads in reader.iter_many(paths):
        if not batch:
            first = start
        batch.append(reads)
        pending += len(reads)
        if pending >= JSON_CHUNK:
            segments.append(_states_from_reads(zkbulk.Reads.concat(batch), paths, first))
            batch, pending = [], 0
    if batch:
        segments.append(_states_from_reads(zkbulk.Reads.concat(batch), paths, first))
    if not segments:
        segments.append(_states_from_reads(zkbulk.Reads.concat([]), paths, 0))
    return StateColumns.concat(segments)


def _states_from_reads(reads: zkbulk.Reads, paths: list[str], base: int) -> StateColumns:
    """StateColumns for paths[base : base + len(reads)] (row numbers local to the segment)."""
    n = len(reads)
    ok = reads.err == zkbulk.ERR_OK
    has_idx = np.flatnonzero(ok)
    blobs = [reads.data[i] for i in has_idx.tolist()]
    table, bad_local = decode_state_blobs(blobs, lambda j: paths[base + int(has_idx[j])])
    leader = np.full(n, -1, dtype=np.int32)
    epoch = np.full(n, -1, dtype=np.int32)
    ctrl = np.full(n, -1, dtype=np.int32)
    lrs = np.zeros(n, dtype=np.int8)
    version = np.full(n, -1, dtype=np.int32)
    isr_len = np.zeros(n, dtype=np.int32)
    if len(has_idx):
        leader[has_idx] = pc.fill_null(table.column("leader"), -1).to_numpy()
        epoch[has_idx] = pc.fill_null(table.column("leader_epoch"), -1).to_numpy()
        ctrl[has_idx] = pc.fill_null(table.column("controller_epoch"), -1).to_numpy()
        lrs[has_idx] = pc.fill_null(table.column("leader_recovery_state"), 0).to_numpy()
        version[has_idx] = reads.stat["version"][has_idx]
        isr = table.column("isr").combine_chunks()
        isr = pc.fill_null(isr, pa.scalar([], type=isr.type))
        isr_len[has_idx] = pc.list_value_length(isr).to_numpy()
        isr_values = isr.flatten().to_numpy().astype(np.int32, copy=False)
    else:
        isr_values = np.zeros(0, dtype=np.int32)
    bad = [(int(has_idx[j]), m) for j, m in bad_local]
    denied = np.flatnonzero(reads.err == zkbulk.ERR_NOAUTH).tolist()
    other = np.flatnonzero((reads.err != zkbulk.ERR_OK) & (reads.err != zkbulk.ERR_NONODE)
                           & (reads.err != zkbulk.ERR_NOAUTH))
    bad.extend((int(i), f"read failed with ZooKeeper error {int(reads.err[i])}") for i in other)
    return StateColumns(ok, leader, epoch, ctrl, lrs, version, isr_len, isr_values, bad, denied)


def state_paths(names: Sequence[str], tidx: np.ndarray, part: np.ndarray) -> list[str]:
    prefixes = [f"{codec.TOPICS}/{n}/partitions/" for n in names]
    return [f"{prefixes[t]}{p}/state" for t, p in zip(tidx.tolist(), part.tolist(), strict=True)]



# ---------------------------------------------------------------------------------------------- topics
def parse_topic(name: str, data: bytes | None, path: str
                 ) -> tuple[int, str | None, list, list, dict[int, list[int]], dict[int, list[int]]]:
    """(version, topic_id, partition keys, replica lists, adding, removing) of a topic znode.

    The common case (no reassignment in progress) only gets its top level checked here; the partition
    keys and replica lists of all topics are validated and converted together by `topic_rows`. Anything
    unusual goes through codec.decode_topic, which checks every detail and names the problem."""
    try:
        obj = json.loads(data) if data else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("partitions"), dict) and not obj.get("adding_replicas") \
            and not obj.get("removing_replicas"):
        version = obj.get("version", 1)
        topic_id = obj.get("topic_id")
        if type(version) is int and (topic_id is None or isinstance(topic_id, str)):
            parts = obj["partitions"]
            return version, topic_id, list(parts), list(parts.values()), {}, {}
    ta = codec.decode_topic(name, data, path)
    return (ta.version, ta.topic_id, [str(p) for p in ta.partitions], list(ta.partitions.values()),
            ta.adding_replicas, ta.removing_replicas)


def topic_rows(keys: list, values: list) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(partition ids, replica list lengths, replicas concatenated) for many partitions at once, or None
    when any key is not a partition number or any replica is not a broker id (C-level iteration only)."""
    if not (all(map(str.isdigit, keys)) and all(map(str.isascii, keys))
            and set(map(type, values)) <= {list} and set(map(type, chain.from_iterable(values))) <= {int}):
        return None
    lengths = np.fromiter(map(len, values), dtype=np.int32, count=len(values))
    try:
        ids = np.fromiter(map(int, keys), dtype=np.int64, count=len(keys))
        flat = np.fromiter(chain.from_iterable(values), dtype=np.int64, count=int(lengths.sum()))
    except OverflowError:
        return None
    if (ids >= 2**31).any() or (flat < 0).any() or (flat >= 2**31).any():
        return None
    return ids, lengths, flat.astype(np.int32)


def list_array(lengths: np.ndarray, values: np.ndarray) -> pa.ListArray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=pa.int32()))


def duplicate_rows(lengths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Rows whose list names a value twice."""
    n = len(lengths)
    if n == 0 or len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    width = int(lengths.max())
    m = np.full((n, width), -1, dtype=np.int64)
    rows = np.repeat(np.arange(n), lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    cols = np.arange(len(values)) - np.repeat(offsets, lengths)
    m[rows, cols] = values
    m.sort(axis=1)
    dup = (m[:, 1:] == m[:, :-1]) & (m[:, 1:] >= 0)
    return np.flatnonzero(dup.any(axis=1))
