"""Read and write snapshot folders (docs/SNAPSHOT.md): the Parquet schemas, the manifest, the fingerprint.

Everything downstream (Spark risk job, optimizer, UI) goes through `read_snapshot`, so a folder from an
incompatible version is refused in one place with a clear error.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from planner.errors import BadInput

FORMAT = "kplan-snapshot/1"

INT_LIST = pa.list_(pa.int32())

PARTITIONS_SCHEMA = pa.schema(
    [
        ("topic", pa.dictionary(pa.int32(), pa.string())),
        ("partition", pa.int32()),
        ("replicas", INT_LIST),
        ("adding_replicas", INT_LIST),
        ("removing_replicas", INT_LIST),
        ("target_replicas", INT_LIST),
        ("has_state", pa.bool_()),
        ("leader", pa.int32()),
        ("leader_epoch", pa.int32()),
        ("isr", INT_LIST),
        ("controller_epoch", pa.int32()),
        ("leader_recovery_state", pa.int8()),
        ("state_version", pa.int32()),
        ("size_bytes", pa.int64()),
        # null when the state znode was read and is valid; otherwise what is wrong with it (lenient snapshots
        # keep such a partition, whose assignment is known, with its state marked unknown)
        ("state_error", pa.string()),
        # each replica's own size (parallel to `replicas`) as its broker's DescribeLogDirs reported it, -1 where
        # that replica could not be read; null when the snapshot read no sizes
        ("replica_sizes", pa.list_(pa.int64())),
    ]
)
# KRaft columns (issue 24), written and read by every snapshot folder (SCHEMAS) and null where unknown. They are
# not in PARTITIONS_SCHEMA / BROKERS_SCHEMA, the columns every in-memory table has (tests and the demo build
# tables from those): `Snapshot.partition_columns` and `read_table` give them as null for such tables.
# - elr, last_known_elr: eligible leader replicas and the last-known ELR (KIP-966, DescribeTopicPartitions);
#   null when unknown (ZooKeeper mode, or a KRaft cluster whose eligible.leader.replicas.version is 0)
PARTITIONS_KRAFT_FIELDS = [pa.field("elr", INT_LIST), pa.field("last_known_elr", INT_LIST)]

TOPICS_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("topic_id", pa.string()),
        ("znode_version", pa.int8()),
        ("partitions", pa.int32()),
        ("replication_factor", pa.int32()),
        ("min_insync_replicas", pa.int32()),
        ("unclean_leader_election", pa.bool_()),
        ("config", pa.string()),
        ("leader_throttled_replicas", pa.string()),
        ("follower_throttled_replicas", pa.string()),
        ("queued_for_deletion", pa.bool_()),
    ]
)

BROKERS_SCHEMA = pa.schema(
    [
        ("broker", pa.int32()),
        ("alive", pa.bool_()),
        ("rack", pa.string()),
        ("host", pa.string()),
        ("port", pa.int32()),
        ("endpoints", pa.list_(pa.string())),
        ("epoch", pa.int64()),
        ("registration_version", pa.int8()),
        ("is_controller", pa.bool_()),
        ("config", pa.string()),
        ("leader_throttle_rate", pa.int64()),
        ("follower_throttle_rate", pa.int64()),
        # from DescribeLogDirs (v4+, Kafka 3.3+), null when unknown: the summed TotalBytes of the broker's log
        # dirs that answered without error, and the bytes in use on them (TotalBytes - UsableBytes)
        ("capacity_bytes", pa.int64()),
        ("disk_used_bytes", pa.int64()),
        ("log_dirs", pa.list_(pa.string())),
        ("log_dir_errors", pa.list_(pa.string())),
        # the planner's maintenance state (planner/maintenance.py): draining | drained | restarting | returning
        # | unknown, null when in service
        ("maintenance", pa.string()),
    ]
)
# - fenced: registered but fenced (DescribeCluster v2; then `alive` is false), null in ZooKeeper mode;
#   in_controlled_shutdown: null while no reader can see it (Kafka's Admin API does not expose it)
BROKERS_KRAFT_FIELDS = [pa.field("fenced", pa.bool_()), pa.field("in_controlled_shutdown", pa.bool_())]

SCHEMAS = {"partitions": pa.schema(list(PARTITIONS_SCHEMA) + PARTITIONS_KRAFT_FIELDS), "topics": TOPICS_SCHEMA,
           "brokers": pa.schema(list(BROKERS_SCHEMA) + BROKERS_KRAFT_FIELDS)}
# Columns added after kplan-snapshot/1 was first written: a folder without them reads as all-null.
OPTIONAL = {"partitions": {"state_error", "replica_sizes", "elr", "last_known_elr"},
            "brokers": {"capacity_bytes", "disk_used_bytes", "log_dirs", "log_dir_errors", "maintenance", "fenced",
                        "in_controlled_shutdown"}}
BACKENDS = ("zookeeper", "kraft")


def backend(manifest: dict[str, Any]) -> str:
    """The cluster backend a snapshot was read from: the manifest's source.backend, "zookeeper" when absent
    (every snapshot written before KRaft support, and every ZooKeeper one)."""
    return str((manifest.get("source") or {}).get("backend") or "zookeeper")


def backend_record(manifest: dict[str, Any]) -> dict[str, str]:
    """What a plan records of its snapshot's backend: {"backend": "kraft"} for a KRaft snapshot, nothing for a
    ZooKeeper one (so every ZooKeeper plan keeps the content, and the id, it always had)."""
    b = backend(manifest)
    return {} if b == "zookeeper" else {"backend": b}

# Rows per row group of partitions.parquet: Spark splits a Parquet file only at row-group boundaries, so a
# million-partition table written as one group would be read by a single task.
PARTITIONS_ROW_GROUP = 65_536


class Snapshot:
    """A snapshot: its manifest, brokers and topics, and its partitions, which a folder loads only when a
    caller asks for them (a million-partition table is often read by Spark, not by this process).

    The one snapshot type: `kplan snapshot` returns it, `read_snapshot` opens a folder as one, and tests build
    in-memory ones (`path` None, partitions given)."""

    def __init__(self, path: Path | None, manifest: dict[str, Any], brokers: pa.Table, topics: pa.Table,
                 partitions: pa.Table | None = None):
        if partitions is None and path is None:
            raise ValueError("an in-memory snapshot needs its partitions")
        self.path = path
        self.manifest = manifest
        self.brokers = brokers
        self.topics = topics
        self._partitions = partitions

    def __repr__(self) -> str:
        return f"Snapshot({str(self.path) if self.path else 'in memory'}, {self.fingerprint})"

    @property
    def in_memory(self) -> bool:
        """True when the partitions exist only in this process (no folder to hand to Spark)."""
        return self.path is None

    @property
    def partitions(self) -> pa.Table:
        if self._partitions is None:
            self._partitions = _read_table(self.path, "partitions")
        return self._partitions

    def partition_columns(self, columns: list[str]) -> pa.Table:
        """Some columns of the partitions, read from the folder alone when the table is not loaded."""
        if self._partitions is not None:
            t = self._partitions
            for col in OPTIONAL["partitions"] & set(columns):
                if col not in t.column_names:    # an in-memory table built without the newer columns
                    t = t.append_column(col, pa.nulls(t.num_rows, SCHEMAS["partitions"].field(col).type))
            return t.select(columns)
        return _read_table(self.path, "partitions", columns)

    @property
    def fingerprint(self) -> str:
        return self.manifest["fingerprint"]

    def replica_matrix(self, column: str = "replicas") -> np.ndarray:
        """The list column as a (partitions × max length) int32 matrix padded with -1."""
        return list_to_matrix(self.partitions.column(column))

    @property
    def broker_ids(self) -> list[int]:
        """Every broker the snapshot knows (registered or named by an assignment), in table order."""
        return self.brokers.column("broker").to_pylist()

    @property
    def alive(self) -> dict[int, bool]:
        return dict(zip(self.broker_ids, self.brokers.column("alive").to_pylist(), strict=True))

    @property
    def racks(self) -> dict[int, str | None]:
        return dict(zip(self.broker_ids, self.brokers.column("rack").to_pylist(), strict=True))


def list_to_matrix(col: pa.ChunkedArray | pa.Array, width: int | None = None) -> np.ndarray:
    """Turn a list<int32> column into a dense int32 matrix padded with -1 (nulls become empty rows)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(arr)
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar([], type=arr.type))
    offsets = arr.offsets.to_numpy()
    offsets = offsets - offsets[0]
    values = arr.flatten().to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    lengths = np.diff(offsets)
    w = int(lengths.max()) if n and width is None else (width or 0)
    out = np.full((n, w), -1, dtype=np.int32)
    if n and len(values):
        rows = np.repeat(np.arange(n), lengths)
        cols = np.arange(len(values)) - np.repeat(offsets[:-1], lengths)
        out[rows, cols] = values
    return out


def matrix_to_list(m: np.ndarray) -> pa.Array:
    """Inverse of list_to_matrix: -1 entries are dropped (they must be trailing)."""
    m = np.asarray(m, dtype=np.int32)
    valid = m >= 0
    lengths = valid.sum(axis=1)
    offsets = np.zeros(len(m) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(m[valid], type=pa.int32()))


def assignment_fingerprint(topics: pa.Array | pa.ChunkedArray, partitions: np.ndarray,
                           replicas: pa.Array | pa.ChunkedArray) -> str:
    """sha256 over `topic\\tpartition\\tr1,r2\\n` lines in (topic, partition) order (docs/SNAPSHOT.md)."""
    t = pc.cast(topics, pa.string()) if pa.types.is_dictionary(topics.type) else topics
    order = pc.sort_indices(pa.table({"t": t, "p": partitions}), sort_keys=[("t", "ascending"),
                                                                            ("p", "ascending")])
    t = pc.take(t, order)
    p = pc.take(pa.array(partitions), order)
    r = pc.take(replicas, order)
    # Join each replica list with commas: cast the values to strings, rebuild the lists, join.
    r = r.combine_chunks() if isinstance(r, pa.ChunkedArray) else r
    r = pc.fill_null(r, pa.scalar([], type=r.type))
    as_str = pa.ListArray.from_arrays(r.offsets, pc.cast(r.flatten(), pa.string()))
    joined = pc.binary_join(as_str, ",")
    lines = pc.binary_join_element_wise(t, pc.cast(p, pa.string()), joined, "\t")
    h = hashlib.sha256()
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    # Hash in chunks to keep memory flat on a million partitions.
    step = 200_000
    for start in range(0, len(lines), step):
        chunk = lines.slice(start, step)
        h.update(("\n".join(chunk.to_pylist()) + "\n").encode())
    return "sha256:" + h.hexdigest()


def _check_schema(name: str, table: pa.Table) -> pa.Table:
    want = SCHEMAS[name]
    for col in OPTIONAL.get(name, ()):
        if col not in table.column_names:
            table = table.append_column(col, pa.nulls(table.num_rows, want.field(col).type))
    missing = [f.name for f in want if f.name not in table.column_names]
    if missing:
        raise BadInput(f"{name}.parquet lacks columns {missing}: not a {FORMAT} snapshot")
    try:
        return table.select(want.names).cast(want)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise BadInput(f"{name}.parquet does not match the {FORMAT} schema: {e}") from None


def write_snapshot(out: Path | str, manifest: dict[str, Any], brokers: pa.Table, topics: pa.Table,
                   partitions: pa.Table) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = dict(manifest)
    manifest["format"] = FORMAT
    # Overwriting a folder: drop the old manifest first, so a failure below leaves it visibly incomplete
    # instead of an old manifest next to new tables.
    (out / "manifest.json").unlink(missing_ok=True)
    files = {}
    for name, table in (("brokers", brokers), ("topics", topics), ("partitions", partitions)):
        table = _check_schema(name, table)
        f = out / f"{name}.parquet"
        pq.write_table(table, f, compression="zstd",
                       row_group_size=PARTITIONS_ROW_GROUP if name == "partitions" else None)
        files[f.name] = file_sha256(f)
    manifest["files"] = files    # checked on every read: an edited or damaged table is refused
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    tmp.replace(out / "manifest.json")  # the manifest last: a folder with a manifest is complete
    return out


def file_sha256(f: Path) -> str:
    """"sha256:<hex>" of a file's bytes, read in blocks (a million-partition table is tens of MB)."""
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def verify_files(path: Path, manifest: dict[str, Any]) -> None:
    """Every table the manifest records a checksum for has exactly those bytes (docs/SNAPSHOT.md)."""
    files = manifest.get("files")
    if files is None:
        return   # written before checksums were recorded
    if not isinstance(files, dict):
        raise BadInput(f"{path / 'manifest.json'}: 'files' must map file names to checksums")
    for name in (f"{n}.parquet" for n in SCHEMAS):
        f = path / name
        if not f.is_file():
            raise BadInput(f"{path} lacks {name}")
        want = files.get(name)
        if want is None:
            raise BadInput(f"{path / 'manifest.json'} records no checksum for {name}")
        if file_sha256(f) != want:
            raise BadInput(f"{f}: checksum does not match the manifest (the file was edited or is damaged); "
                           "take the snapshot again")


def verify_fingerprint(path: Path, manifest: dict[str, Any]) -> None:
    """The manifest's fingerprint is recomputed from the partitions table on every read: plans and risk copy it,
    and the files' checksums do not cover the manifest itself (docs/SNAPSHOT.md). ~0.06 s at 200k partitions."""
    t = _read_table(path, "partitions", ["topic", "partition", "replicas"])
    got = assignment_fingerprint(t.column("topic"), t.column("partition").to_numpy(), t.column("replicas"))
    want = manifest.get("fingerprint")
    if got != want:
        raise BadInput(f"{path / 'manifest.json'}: its fingerprint {want} is not the fingerprint of the snapshot's "
                       f"partitions ({got}): the manifest was edited or belongs to other tables; take the snapshot "
                       "again")


def read_manifest(path: Path | str) -> dict[str, Any]:
    """The manifest of a complete snapshot folder of this format, or BadInput saying what is wrong."""
    path = Path(path)
    if not path.is_dir():
        raise BadInput(f"snapshot folder {path} does not exist")
    mf = path / "manifest.json"
    if not mf.exists():
        raise BadInput(f"{path} has no manifest.json: not a snapshot (or an unfinished one)")
    try:
        manifest = json.loads(mf.read_text())
    except json.JSONDecodeError as e:
        raise BadInput(f"{mf} is not valid JSON: {e}") from None
    fmt = manifest.get("format")
    if fmt != FORMAT:
        raise BadInput(f"{path} is a snapshot of format {fmt!r}; this version reads {FORMAT!r}")
    return manifest


def _read_table(path: Path, name: str, columns: list[str] | None = None) -> pa.Table:
    f = path / f"{name}.parquet"
    try:
        if columns is not None:
            have = set(pq.read_schema(f).names)
            table = pq.read_table(f, columns=[c for c in columns if c in have])
        else:
            table = pq.read_table(f)
    except (pa.ArrowInvalid, OSError) as e:
        raise BadInput(f"{f} cannot be read as Parquet ({_first_line(e)}): the snapshot is damaged; take it "
                       "again") from None
    if columns is not None:
        for col in OPTIONAL.get(name, ()):
            if col in columns and col not in table.column_names:
                table = table.append_column(col, pa.nulls(table.num_rows, SCHEMAS[name].field(col).type))
        want = pa.schema([SCHEMAS[name].field(c) for c in columns])
        try:
            return table.select(columns).cast(want)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise BadInput(f"{name}.parquet does not match the {FORMAT} schema: {_first_line(e)}") from None
    return _check_schema(name, table)


def read_table(path: Path | str, name: str) -> pa.Table:
    """One table of a snapshot folder (brokers, topics or partitions), checked against the schema but not
    against the manifest's checksum: for a quick look (the CLI's summary) at a folder just written."""
    return _read_table(Path(path), name)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def read_snapshot(path: Path | str, lazy: bool = True) -> Snapshot:
    """Open a snapshot folder: manifest, brokers and topics checked and loaded; partitions checked (schema)
    and loaded on first use (`lazy=False`: now)."""
    path = Path(path)
    manifest = read_manifest(path)
    verify_files(path, manifest)
    verify_fingerprint(path, manifest)
    tables = {}
    for name in SCHEMAS:
        f = path / f"{name}.parquet"
        if not f.is_file():
            raise BadInput(f"{path} lacks {name}.parquet")
        if name == "partitions" and lazy:
            try:
                have = pq.read_schema(f)
            except (pa.ArrowInvalid, OSError) as e:
                raise BadInput(f"{f} is not a Parquet file ({_first_line(e)})") from None
            missing = [c for c in SCHEMAS[name].names if c not in have.names and c not in OPTIONAL.get(name, ())]
            if missing:
                raise BadInput(f"{name}.parquet lacks columns {missing}: not a {FORMAT} snapshot")
            continue
        tables[name] = _read_table(path, name)
    return Snapshot(path, manifest, tables["brokers"], tables["topics"], tables.get("partitions"))
