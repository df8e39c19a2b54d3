"""The planning problem as plain arrays, built from a Snapshot (the one adapter between files and solvers).

Brokers are addressed by *index* (0..B-1, in broker-id order) everywhere inside the optimizer; ids come back
only when a plan is written. A replica matrix is int32 (partitions x max RF) padded with -1, slot order kept:
slot 0 is the preferred leader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from planner.errors import BadInput
from planner.maintenance import Entry, from_manifest
from planner.snapshot_io import Snapshot, list_to_matrix
from planner.text import count

MAX_RACKS = 64  # rack sets are uint64 bitmasks
DEFAULT_MAX_DISK_USAGE = 0.85  # of a broker's log dirs' capacity, after the plan and at every batch boundary


@dataclass
class Problem:
    broker_ids: np.ndarray        # int32 (B,), ascending
    alive: np.ndarray             # bool (B,), registered in /brokers/ids
    rack_of: np.ndarray           # int32 (B,), index into rack_names, -1 = no rack
    rack_names: list[str]
    topic_names: list[str]        # (T,)
    topic_of: np.ndarray          # int32 (P,)
    partition: np.ndarray         # int32 (P,)
    replicas: np.ndarray          # int32 (P, R) broker indices, -1 padded
    sizes: np.ndarray             # int64 (P,), -1 = unknown
    excluded_topic: np.ndarray    # bool (T,)
    in_flight: np.ndarray         # bool (P,), a reassignment is running for it
    rack_aware: bool
    isr: np.ndarray | None = None  # int32 (P, I) broker indices of the in-sync replicas, -1 padded
    leader: np.ndarray | None = None  # int32 (P,) broker index of the current leader, -1 none / unknown
    warnings: list[str] = field(default_factory=list)
    unknown_state: np.ndarray | None = None   # bool (P,): the state znode was malformed (lenient snapshot)
    # Disk (docs/PLAN.md "Disk capacity"): per broker, the summed TotalBytes of its log dirs and the bytes in
    # use on them (TotalBytes - UsableBytes: everything on the volumes, not only Kafka's), -1 = unknown; the
    # most a plan may fill a broker to is max_disk_usage x capacity_bytes (planner.optimizer.capacity).
    capacity_bytes: np.ndarray | None = None   # int64 (B,), -1 unknown
    disk_used_bytes: np.ndarray | None = None  # int64 (B,), -1 unknown
    max_disk_usage: float = DEFAULT_MAX_DISK_USAGE
    replica_sizes: np.ndarray | None = None    # int64 (P, R) each replica's own size, -1 unknown / no replica

    def __post_init__(self) -> None:
        b = len(self.broker_ids)
        if self.capacity_bytes is None:
            self.capacity_bytes = np.full(b, -1, dtype=np.int64)
        if self.disk_used_bytes is None:
            self.disk_used_bytes = np.full(b, -1, dtype=np.int64)
        if self.replica_sizes is None:
            self.replica_sizes = np.full(self.replicas.shape, -1, dtype=np.int64)
    # bool (B,): brokers in maintenance (planner/maintenance.py, as the snapshot read it): no plan gives them a
    # replica or preferred leadership, except the plan that owns their state (make_plan lifts it for a return)
    maintenance: np.ndarray | None = None
    maintenance_entries: dict[int, Entry] = field(default_factory=dict)   # by broker id (also brokers the
    #                                                                     snapshot has no row for: down and empty)

    @property
    def num_brokers(self) -> int:
        return len(self.broker_ids)

    @property
    def num_partitions(self) -> int:
        return len(self.partition)

    @property
    def rf(self) -> np.ndarray:
        return self._cached("rf", (self.replicas,), lambda: (self.replicas >= 0).sum(axis=1).astype(np.int32))

    def _cached(self, name: str, inputs: tuple, make):
        """A figure derived from arrays the Problem never changes in place, computed once per set of input
        arrays (the planner reads `rf` and `fixed` thousands of times on paths over every partition)."""
        cache = self.__dict__.setdefault("_derived", {})
        key = tuple(id(x) for x in inputs)
        hit = cache.get(name)
        if hit is None or hit[0] != key:
            hit = (key, make())
            cache[name] = hit
        return hit[1]

    @property
    def sizes_known(self) -> bool:
        return self._cached("sizes_known", (self.sizes,),
                            lambda: bool(len(self.sizes)) and bool((self.sizes >= 0).all()))

    @property
    def topic_start(self) -> np.ndarray:
        """(T + 1,) the first row of each topic (rows are grouped by topic, in topic order), then P."""
        return self._cached("topic_start", (self.topic_of,),
                            lambda: np.searchsorted(self.topic_of, np.arange(len(self.topic_names) + 1)))

    @property
    def fixed(self) -> np.ndarray:
        """Partitions the plan must not touch at all (not even their replica order)."""
        def make() -> np.ndarray:
            fixed = self.excluded_topic[self.topic_of] | self.in_flight | (self.rf == 0)
            return fixed if self.unknown_state is None else fixed | self.unknown_state
        return self._cached("fixed", (self.replicas, self.excluded_topic, self.topic_of, self.in_flight,
                                      self.unknown_state), make)

    @property
    def in_maintenance(self) -> np.ndarray:
        """(B,) bool: brokers in maintenance (all False when the snapshot recorded none)."""
        return self.maintenance if self.maintenance is not None else np.zeros(self.num_brokers, dtype=bool)

    def receivers(self, drained: np.ndarray) -> np.ndarray:
        """(B,) bool: brokers a plan may give replicas and preferred leadership: registered, not drained by it,
        not in maintenance."""
        return self.alive & ~drained & ~self.in_maintenance

    def rack_bits(self) -> np.ndarray:
        """uint64 (B,): the broker's rack as a one-bit mask (0 when it has no rack or racks are ignored)."""
        bits = np.zeros(self.num_brokers, dtype=np.uint64)
        if self.rack_aware:
            known = self.rack_of >= 0
            bits[known] = np.left_shift(np.uint64(1), self.rack_of[known].astype(np.uint64))
        return bits

    def broker_index(self, ids: list[int]) -> np.ndarray:
        pos = np.searchsorted(self.broker_ids, ids)
        pos = np.minimum(pos, len(self.broker_ids) - 1)
        bad = [b for b, i in zip(ids, pos.tolist(), strict=True) if self.broker_ids[i] != b]
        if bad:
            raise BadInput(f"unknown broker(s) {bad}: the snapshot knows {self._ids_text()}")
        return pos.astype(np.int32)

    def _ids_text(self) -> str:
        ids = self.broker_ids.tolist()
        return ", ".join(map(str, ids)) if len(ids) <= 20 else f"{len(ids)} brokers {ids[0]}..{ids[-1]}"

    def names(self, rows: np.ndarray, limit: int = 10) -> str:
        """'t-0, t-3, ... (+12 more)' for error messages."""
        rows = np.asarray(rows)
        shown = [f"{self.topic_names[self.topic_of[i]]}-{self.partition[i]}" for i in rows[:limit].tolist()]
        more = f" (+{len(rows) - limit} more)" if len(rows) > limit else ""
        return ", ".join(shown) + more


def rack_masks(replicas: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """uint64 (P,): the set of racks a replica matrix spans."""
    m = np.where(replicas >= 0, bits[np.maximum(replicas, 0)], np.uint64(0))
    return np.bitwise_or.reduce(m, axis=1) if m.shape[1] else np.zeros(len(m), dtype=np.uint64)


def _int_column(table, name: str, order: np.ndarray) -> np.ndarray:
    """An int64 column as an array in `order`, nulls (and a column the table lacks) as -1."""
    if name not in table.column_names:
        return np.full(len(order), -1, dtype=np.int64)
    return pc.fill_null(table.column(name), -1).to_numpy().astype(np.int64)[order]


def from_snapshot(snap: Snapshot, sizes: dict[tuple[str, int], int] | None = None,
                  exclude_topics: str | None = None, rack_aware: bool | None = None,
                  max_disk_usage: float = DEFAULT_MAX_DISK_USAGE) -> Problem:
    """Arrays from a snapshot. `sizes` overrides the snapshot's size_bytes (and its per-replica sizes);
    `rack_aware=None` means "on when any registered broker has a rack"."""
    if not (0 < max_disk_usage <= 1):
        raise BadInput(f"max_disk_usage must be a fraction in (0, 1], got {max_disk_usage}")
    b = snap.brokers
    broker_ids = b.column("broker").to_numpy().astype(np.int32)
    order = np.argsort(broker_ids, kind="stable")
    broker_ids = broker_ids[order]
    alive = b.column("alive").to_numpy(zero_copy_only=False).astype(bool)[order]
    racks_raw = [b.column("rack").to_pylist()[i] for i in order.tolist()]
    rack_names = sorted({r for r in racks_raw if r is not None})
    rack_pos = {r: i for i, r in enumerate(rack_names)}
    rack_of = np.array([rack_pos.get(r, -1) if r is not None else -1 for r in racks_raw], dtype=np.int32)
    warnings: list[str] = []
    if rack_aware is None:
        rack_aware = bool(rack_names)
    if rack_aware and len(rack_names) > MAX_RACKS:
        raise BadInput(f"{len(rack_names)} racks: rack-aware planning supports at most {MAX_RACKS}; "
                       "plan with rack_aware=False")
    if rack_aware and (rack_of[alive] < 0).any():
        missing = broker_ids[alive & (rack_of < 0)].tolist()
        warnings.append(f"brokers {missing} have no rack: they count for no rack in rack coverage")

    parts = snap.partitions
    tcol = parts.column("topic").combine_chunks()
    if hasattr(tcol, "dictionary"):
        dict_names = tcol.dictionary.to_pylist()
        codes = tcol.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    else:
        dict_names, codes = np.unique(np.asarray(tcol.to_pylist(), dtype=object), return_inverse=True)
        dict_names = list(dict_names)
        codes = codes.astype(np.int32)
    # Topic indices in name order, so the problem does not depend on the dictionary's order.
    name_order = np.argsort(np.asarray(dict_names, dtype=object), kind="stable")
    remap = np.empty(len(dict_names), dtype=np.int32)
    remap[name_order] = np.arange(len(dict_names), dtype=np.int32)
    topic_names = [dict_names[i] for i in name_order.tolist()]
    topic_of = remap[codes] if len(codes) else codes
    partition = parts.column("partition").to_numpy().astype(np.int32)
    ids_matrix = snap.replica_matrix()
    replicas = np.full(ids_matrix.shape, -1, dtype=np.int32)
    valid = ids_matrix >= 0
    pos = np.searchsorted(broker_ids, ids_matrix[valid])
    replicas[valid] = pos.astype(np.int32)
    if len(pos) and (pos >= len(broker_ids)).any() | (broker_ids[np.minimum(pos, len(broker_ids) - 1)]
                                                       != ids_matrix[valid]).any():
        raise BadInput("the snapshot names brokers in assignments that brokers.parquet lacks")

    isr_ids = snap.replica_matrix("isr")
    isr = np.full(isr_ids.shape, -1, dtype=np.int32)
    iv = isr_ids >= 0
    ipos = np.minimum(np.searchsorted(broker_ids, isr_ids[iv]), max(0, len(broker_ids) - 1))
    isr[iv] = np.where(broker_ids[ipos] == isr_ids[iv], ipos, -1) if len(broker_ids) else -1

    lead_ids = parts.column("leader").to_numpy(zero_copy_only=False).astype(np.int64)
    lpos = np.minimum(np.searchsorted(broker_ids, lead_ids), max(0, len(broker_ids) - 1))
    leader = np.where((lead_ids >= 0) & (broker_ids[lpos] == lead_ids), lpos, -1).astype(np.int32) \
        if len(broker_ids) else np.full(len(lead_ids), -1, np.int32)

    n = len(partition)
    size_arr = pc.fill_null(parts.column("size_bytes"), -1).to_numpy().astype(np.int64)
    rep_sizes = np.full(replicas.shape, -1, dtype=np.int64)
    if "replica_sizes" in parts.column_names and parts.column("replica_sizes").null_count < n:
        rs = parts.column("replica_sizes").combine_chunks()
        rs = pc.fill_null(rs, pa.scalar([], type=rs.type))
        lengths = pc.list_value_length(rs).to_numpy(zero_copy_only=False)
        vals = pc.fill_null(rs.flatten(), -1).to_numpy().astype(np.int64)
        rows_r = np.repeat(np.arange(n), lengths)
        cols_r = np.arange(len(vals)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        keep = cols_r < replicas.shape[1]
        rep_sizes[rows_r[keep], cols_r[keep]] = vals[keep]
    if sizes is not None:
        rep_sizes[:] = -1
        size_arr = np.full(n, -1, dtype=np.int64)
        index = {(topic_names[t], p): i for i, (t, p) in enumerate(zip(topic_of.tolist(), partition.tolist(),
                                                                         strict=True))}
        for key, value in sizes.items():
            i = index.get(key)
            if i is not None:
                size_arr[i] = max(size_arr[i], int(value))
        unknown = int((size_arr < 0).sum())
        if sizes and unknown == n:
            raise BadInput("the sizes file names none of the snapshot's partitions (made for another cluster?)")
        if unknown:
            warnings.append(f"sizes file has no size for {count(unknown, 'partition')}: planning by replica count")

    excluded = np.zeros(len(topic_names), dtype=bool)
    if exclude_topics:
        try:
            rx = re.compile(exclude_topics)
        except re.error as e:
            raise BadInput(f"exclude_topics {exclude_topics!r} is not a valid regular expression: {e}") from None
        excluded = np.array([rx.fullmatch(t) is not None for t in topic_names], dtype=bool)
        if not excluded.any():
            raise BadInput(f"exclude_topics {exclude_topics!r} matches no topic of the snapshot (a full match of "
                           "the topic name is needed); nothing would be protected")

    adding = list_to_matrix(parts.column("adding_replicas"))
    removing = list_to_matrix(parts.column("removing_replicas"))
    target_null = parts.column("target_replicas").is_null().to_numpy(zero_copy_only=False)
    in_flight = ~target_null
    if adding.shape[1]:
        in_flight |= (adding >= 0).any(axis=1)
    if removing.shape[1]:
        in_flight |= (removing >= 0).any(axis=1)
    if in_flight.any():
        warnings.append(f"{count(int(in_flight.sum()), 'partition')} being reassigned: the plan leaves them as "
                        "they are")
    unknown_state = np.zeros(n, dtype=bool)
    if "state_error" in parts.column_names:
        unknown_state = parts.column("state_error").is_valid().to_numpy(zero_copy_only=False)
        if unknown_state.any():
            warnings.append(f"{count(int(unknown_state.sum()), 'partition')} with an unknown state (malformed state znode): "
                            "the plan leaves them as they are")

    entries = from_manifest(snap.manifest.get("maintenance"))
    if not entries and "maintenance" in b.column_names:   # a manifest without the section: the column's states
        entries = {int(i): Entry(int(i), st) for i, st in zip(b.column("broker").to_pylist(),
                                                               b.column("maintenance").to_pylist(), strict=True)
                   if st is not None}
    in_maintenance = np.isin(broker_ids, np.array(sorted(entries), dtype=np.int64))

    # Rows sorted by (topic, partition) so results never depend on the file's row order.
    order_p = np.lexsort((partition, topic_of))
    return Problem(
        broker_ids=broker_ids, alive=alive, rack_of=rack_of, rack_names=rack_names, topic_names=topic_names,
        topic_of=topic_of[order_p], partition=partition[order_p], replicas=replicas[order_p],
        sizes=size_arr[order_p], excluded_topic=excluded, in_flight=in_flight[order_p],
        rack_aware=bool(rack_aware), isr=isr[order_p], leader=leader[order_p], warnings=warnings,
        unknown_state=unknown_state[order_p],
        capacity_bytes=_int_column(b, "capacity_bytes", order),
        disk_used_bytes=_int_column(b, "disk_used_bytes", order),
        max_disk_usage=float(max_disk_usage), replica_sizes=rep_sizes[order_p],
        maintenance=in_maintenance,
        maintenance_entries=entries,
    )
