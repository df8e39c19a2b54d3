"""Partition sizes from `kafka-log-dirs.sh --describe` output (ZooKeeper does not know partition sizes).

The file can hold a million partitions times the replication factor, so it is parsed by Arrow's JSON reader
into columns and joined to the snapshot's rows with numpy, never as Python objects per replica.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from planner.errors import BadInput


def read_sizes(path: Path | str) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Partition sizes from `kafka-log-dirs.sh --describe` output: (topic, partition, largest replica size).

    The tool prints a few status lines before the JSON document; the line that starts with '{' is used."""
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
        dirs = pc.list_flatten(pc.struct_field(brokers, "logDirs"))
        entries = pc.list_flatten(pc.struct_field(dirs, "partitions"))
        if len(entries) == 0:
            return pa.array([], pa.string()), np.zeros(0, np.int32), np.zeros(0, np.int64)
        names = pc.struct_field(entries, "partition")
        size = pc.struct_field(entries, "size")
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, IndexError) as e:
        raise BadInput(f"sizes file {path} is not kafka-log-dirs.sh --describe JSON: {e}") from None
    if not pa.types.is_string(names.type) or not pa.types.is_integer(size.type):
        raise BadInput(f"sizes file {path}: expected string partitions and integer sizes")
    m = pc.extract_regex(names, r"^(?P<t>.+)-(?P<p>[0-9]{1,9})$")
    if m.null_count:
        bad = pc.filter(names, pc.is_null(m))[0].as_py()
        raise BadInput(f"sizes file {path}: partition {bad!r} is not <topic>-<partition>")
    topic = pc.struct_field(m, "t")
    part = pc.cast(pc.struct_field(m, "p"), pa.int32()).to_numpy()
    sizes = pc.fill_null(size, -1).to_numpy()
    return topic, part, sizes.astype(np.int64)


def merge_sizes(partitions: pa.Table, sizes: tuple[pa.Array, np.ndarray, np.ndarray]) -> tuple[pa.Table, int]:
    """Set size_bytes to the largest replica size per partition. Returns (table, entries not in the snapshot)."""
    s_topic, s_part, s_size = sizes
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
