"""The risk job's aggregation, on the driver from the partitions.parquet the job wrote: the rows summed per
scenario in one streaming pass over their narrow columns (numpy, Arrow batches: no second Spark query and no
read back into Spark), the states' baseline from the snapshot (numpy, with the same outcome expressions), then the
per-scenario figures (planner.risk_model's leader load, levels and score), and the worst partitions the summary
lists (two more passes: the columns that order the rows, then the wide columns up to the last row kept)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from planner import risk as risk_lib
from planner import risk_model as rm

_BASELINE = ["offline", "under_min_isr", "at_min_isr", "under_replicated", "rf1_hit"]
SEVERITY_COUNTS = ["_sev1", "_sev2", "_sev3", "_sev4"]
FLAGS = rm.COUNTED + SEVERITY_COUNTS
# partitions.parquet's columns the sums read (one-shot rows; restart and rolling rows add one each)
_SUMMED = ["scenario_id", "leader", "new_leader", "severity", "shutdown_blocked_by", *rm.COUNTED]


def rows_dataset(path: Path | str) -> ds.Dataset:
    """partitions.parquet as Spark wrote it (a folder of part files; '_' and '.' files are not data)."""
    # pages read through a 1 MiB buffer and decoded as read, not whole column chunks buffered first: the
    # driver's memory stays flat
    opts = ds.ParquetFragmentScanOptions(pre_buffer=False, use_buffered_stream=True, buffer_size=1 << 20)
    fmt = ds.ParquetFileFormat(default_fragment_scan_options=opts)
    return ds.dataset(str(path), format=fmt)


class _Tally:
    """Integer sums per (row key, broker id) over batches: a dense matrix over the broker ids seen so far
    (ids are any int: a registered broker's, or an unregistered id a partition still names)."""

    def __init__(self, keys: int) -> None:
        self.ids = np.zeros(0, np.int64)
        self.m = np.zeros((keys, 0), np.int64)

    def add(self, key: np.ndarray, broker: np.ndarray, sign: int) -> None:
        """+sign at (key[i], broker[i]) for every i with broker[i] >= 0 (-1: no broker, as Spark's `b >= 0`)."""
        keep = broker >= 0
        key, broker = key[keep], broker[keep].astype(np.int64)
        if not broker.size:
            return
        new = np.setdiff1d(np.unique(broker), self.ids, assume_unique=True)
        if new.size:
            ids = np.union1d(self.ids, new)
            m = np.zeros((self.m.shape[0], ids.size), np.int64)
            m[:, np.searchsorted(ids, self.ids)] = self.m
            self.ids, self.m = ids, m
        flat = key.astype(np.int64) * self.ids.size + np.searchsorted(self.ids, broker)
        self.m += sign * np.bincount(flat, minlength=self.m.size).reshape(self.m.shape)


def _ints(batch: pa.RecordBatch, name: str) -> tuple[np.ndarray, np.ndarray]:
    """An int column as (values with nulls as 0, validity)."""
    c = batch.column(name)
    return pc.fill_null(c, 0).to_numpy().astype(np.int64), pc.is_valid(c).to_numpy(zero_copy_only=False)


def _moves(tally: _Tally, key: np.ndarray, new: tuple[np.ndarray, np.ndarray], old: tuple[np.ndarray, np.ndarray],
           rows: np.ndarray | None = None) -> None:
    """A leadership change per row where both are known and differ: +1 on the new leader, -1 on the old one."""
    (n, n_ok), (o, o_ok) = new, old
    m = n_ok & o_ok & (n != o)
    if rows is not None:
        m &= rows
    tally.add(key[m], n[m], 1)
    tally.add(key[m], o[m], -1)


def row_sums(prepared: risk_lib.Prepared, path: Path | str) -> dict[str, np.ndarray]:
    """The rows of partitions.parquet summed, keyed (sid, b) as `aggregates` documents (without the baseline)."""
    n = max((s.id for s in prepared.scenarios), default=-1) + 1
    later = [(a.id, b.id) for a in prepared.scenarios for b in prepared.scenarios
             if a.kind == b.kind == "rolling" and a.sequence == b.sequence and a.step < b.step]
    restart = any(s.kind == "restart" for s in prepared.scenarios)
    cols = _SUMMED + (["demoted_from"] if restart else []) + (["returned_leader"] if later else [])
    evaluated = np.zeros(n, np.int64)
    flags = np.zeros((len(FLAGS), n), np.int64)
    # keys [0, n): a scenario's own leadership changes; [n, 2n): a rolling step's returned leaders, carried
    # into every later step of its sequence below
    tally = _Tally(2 * n)
    blocked: set[tuple[int, int]] = set()
    # a few batches in flight (of the narrow columns only): the driver's memory stays flat at any size
    batches = rows_dataset(path).to_batches(columns=cols, batch_size=65_536, batch_readahead=2, fragment_readahead=1)
    for batch in batches:
        sid = batch.column("scenario_id").to_numpy().astype(np.int64)
        evaluated += np.bincount(sid, minlength=n)
        for i, k in enumerate(rm.COUNTED):
            f = pc.fill_null(batch.column(k), False).to_numpy(zero_copy_only=False)
            flags[i] += np.bincount(sid[f], minlength=n)
        sev = pc.fill_null(batch.column("severity"), 0).to_numpy()
        for i in range(1, 5):
            flags[len(rm.COUNTED) + i - 1] += np.bincount(sid[sev == i], minlength=n)
        leader = _ints(batch, "leader")
        _moves(tally, sid, _ints(batch, "new_leader"), leader)
        if restart:   # the demotion moved leadership before the broker stopped (demoted_from -> leader)
            _moves(tally, sid, leader, _ints(batch, "demoted_from"))
        if later:
            _moves(tally, sid + n, _ints(batch, "returned_leader"), leader)
        by, by_ok = _ints(batch, "shutdown_blocked_by")
        m = by_ok & (by >= 0)   # broker `by`'s controlled shutdown fails in this scenario
        blocked.update(zip(sid[m].tolist(), by[m].tolist(), strict=True))
    moves = tally.m[:n].copy()
    for j, k in later:
        moves[k] += tally.m[n + j]
    has = evaluated > 0
    s_cnt = np.nonzero(has)[0]
    s_mv, b_mv = np.nonzero(moves)
    bl = sorted(blocked)
    sid_all = np.concatenate([s_cnt, s_mv, np.array([s for s, _ in bl], np.int64)])
    b_all = np.concatenate([np.full(s_cnt.size, -2), tally.ids[b_mv], np.array([-3 - b for _, b in bl], np.int64)])
    d_all = np.concatenate([evaluated[has], moves[s_mv, b_mv], np.zeros(len(bl), np.int64)])
    out = {"sid": sid_all, "b": b_all, "d": d_all}
    zeros = np.zeros(s_mv.size + len(bl), np.int64)
    for i, k in enumerate(FLAGS):
        out[k] = np.concatenate([flags[i][has], zeros])
    return out


def _lists(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A list<int> column as (values, row index of each value); a null list is empty."""
    arr = pc.fill_null(col, pa.scalar([], type=col.type)).combine_chunks()
    return (arr.flatten().to_numpy(zero_copy_only=False).astype(np.int64),
            pc.list_parent_indices(arr).to_numpy(zero_copy_only=False).astype(np.int64))


def baseline_sums(prepared: risk_lib.Prepared) -> dict[str, np.ndarray]:
    """sid = -1 - state, b = leader: each state's leader counts before any scenario, plus its baseline health
    (offline, under-min-ISR, ... with planner.risk_model's outcome definitions), from the snapshot's columns
    and, for the state after the plan, its targets (replicas = ISR = target, leader = target[0]): the
    partitions the job evaluates (load_partitions), summed on the driver."""
    info = prepared.info
    t = info.partition_columns(["topic", "partition", "replicas", "isr", "leader", "state_error"])
    t = t.filter(pc.is_null(t.column("state_error")))   # a partition whose state is unknown is never scored
    topic = t.column("topic")
    topic = pc.cast(topic, pa.string()) if pa.types.is_dictionary(topic.type) else topic
    topics = info.topics
    at = pc.index_in(topic, value_set=pc.cast(topics.column("topic"), pa.string()))
    min_isr = pc.fill_null(pc.take(pc.cast(topics.column("min_insync_replicas"), pa.int64()), at), 1).to_numpy()
    unclean = pc.fill_null(pc.take(topics.column("unclean_leader_election"), at), False).to_numpy(zero_copy_only=False)
    n = t.num_rows
    dead = np.array(sorted(b for b, ok in info.alive.items() if not ok), np.int64)
    states = [("current", t.column("replicas"), t.column("isr"), pc.fill_null(t.column("leader"), -1).to_numpy())]
    if prepared.plan_entries is not None:
        keys = pc.binary_join_element_wise(topic, pc.cast(t.column("partition"), pa.string()), "\t")
        row = pc.index_in(keys, value_set=pa.array([f"{e.topic}\t{e.partition}" for e in prepared.plan_entries],
                                                   pa.string()))
        target = pc.take(pa.array([list(e.replicas) for e in prepared.plan_entries], pa.list_(pa.int32())), row)
        moved = pc.is_valid(row)
        first = pc.fill_null(pc.list_element(pc.fill_null(target, pa.scalar([-1], pa.list_(pa.int32()))), 0), -1)
        states.append(("plan", pc.if_else(moved, target, t.column("replicas")), pc.if_else(moved, target, t.column("isr")),
                       np.where(moved.to_numpy(zero_copy_only=False), first.to_numpy(), states[0][3])))
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("sid", "b", "d", *FLAGS)}
    for i, (_, replicas, isr, leader) in enumerate(states):
        # as it is: a leader that is not registered leads nothing, ISR members not registered are not in sync
        members, owner = _lists(isr)
        if dead.size:   # the distinct members that are not dead (Spark's array_except)
            live = ~np.isin(members, dead)
            pairs = np.unique(np.stack([owner[live], members[live]]), axis=1)
            isr_size = np.bincount(pairs[0], minlength=n)
        else:
            isr_size = np.bincount(owner, minlength=n)
        env = {"leader": leader, "new_leader": np.where(np.isin(leader, dead), -1, leader), "new_isr_size": isr_size,
               "rf": pc.list_value_length(pc.fill_null(replicas, pa.scalar([], type=replicas.type))).to_numpy(),
               "min_isr": min_isr, "unclean_allowed": unclean, "unclean_taken": np.zeros(n, bool),
               "live_replica_exists": np.ones(n, bool)}
        env["eff_min_isr"] = rm.eval_numpy(rm.effective_min_isr(prepared.kafka_version), env)
        b, inv = np.unique(leader, return_inverse=True)
        out["sid"].append(np.full(b.size, -1 - i))
        out["b"].append(b)
        out["d"].append(np.bincount(inv, minlength=b.size))
        for k in FLAGS:
            flag = np.broadcast_to(rm.eval_numpy(rm.OUTCOMES[k], env), n) if k in _BASELINE else np.zeros(n, bool)
            out[k].append(np.bincount(inv[flag], minlength=b.size))
    return {k: np.concatenate(v).astype(np.int64) for k, v in out.items()}


def aggregates(prepared: risk_lib.Prepared, rows_path: Path | str,
               baseline: dict[str, np.ndarray] | None = None) -> pa.Table:
    """The sums `finish` reads, keyed (sid, b):
      sid >= 0, b = -2   a scenario's evaluated count and outcome counts
      sid >= 0, b >= 0   a scenario's leader-count change on broker b (new leader +1, old leader -1; for
                         rolling steps also the changes earlier steps left once their brokers returned,
                         for restart steps also the demotion's)
      sid >= 0, b <= -3  broker -3 - b's controlled shutdown fails in this scenario (some partition blocks it)
      sid = -1 - state   b = leader: the state's leader counts before any scenario, plus its baseline
                         health (offline, under-min-ISR, ... with the same outcome definitions).
    The rows from partitions.parquet at `rows_path` (row_sums), the baseline from the snapshot (baseline_sums,
    or `baseline`: its result computed before)."""
    a, b = row_sums(prepared, rows_path), baseline if baseline is not None else baseline_sums(prepared)
    pa.default_memory_pool().release_unused()
    return pa.table({k: pa.array(np.concatenate([a[k], b[k]]), pa.int32() if k in ("sid", "b") else pa.int64())
                     for k in ("sid", "b", "d", *FLAGS)})


def finish(prepared: risk_lib.Prepared, agg: pa.Table) -> tuple[pa.Table, dict[str, dict[str, int]],
                                                                 dict[int, list[int]]]:
    """Per-scenario numbers from the aggregated table (a few thousand rows, driver side): counts, the
    survivors' leader load (risk_model.leader_load), level and score (risk_model.scenario_table)."""
    sid = agg.column("sid").to_numpy()
    b = agg.column("b").to_numpy()
    d = agg.column("d").to_numpy()
    flag = {k: agg.column(k).to_numpy() for k in rm.COUNTED + SEVERITY_COUNTS}
    info = prepared.info
    size = max([*info.broker_ids, int(b.max(initial=0)), *(x for s in prepared.scenarios for x in s.brokers)]) + 2
    alive = np.zeros(size, dtype=bool)
    alive[[x for x, ok in info.alive.items() if ok]] = True
    base_counts, baseline = {}, {}
    for i, state in enumerate(rm.STATES):
        m = sid == -1 - i
        if not m.any():
            continue
        lead = m & (b >= 0)
        base_counts[state] = np.bincount(b[lead], weights=d[lead], minlength=size).astype(np.int64)
        baseline[state] = {"partitions": int(d[m].sum()), **{k: int(flag[k][m].sum()) for k in _BASELINE}}
        baseline[state]["rf1"] = baseline[state].pop("rf1_hit")
    order = np.argsort(sid, kind="stable")
    sid_sorted = sid[order]
    records, severities = [], {}
    for s in prepared.scenarios:
        lo, hi = np.searchsorted(sid_sorted, [s.id, s.id + 1])
        idx = order[lo:hi]
        cnt = idx[b[idx] == -2]
        rec: dict[str, Any] = {"scenario": s, "evaluated": int(d[cnt].sum())}
        rec.update({k: int(flag[k][cnt].sum()) for k in rm.COUNTED})
        severities[s.id] = [int(flag[k][cnt].sum()) for k in SEVERITY_COUNTS]
        mv = idx[b[idx] >= 0]
        counts = base_counts.get(s.state, np.zeros(size, dtype=np.int64)) + np.bincount(b[mv], weights=d[mv], minlength=size).astype(np.int64)
        survivors = alive.copy()
        survivors[list(s.brokers)] = False
        rec.update(rm.leader_load(counts, survivors))
        rec["failed_shutdowns"] = sorted({int(-3 - x) for x in b[idx] if x <= -3})
        rec["unavailable_window_s"] = rm.unavailable_window(s.mode, prepared.session_timeout_s)
        records.append(rec)
    return rm.scenario_table(records), baseline, severities


WORST_SCENARIOS = 20
WORST_COLUMNS = ["scenario_id", "topic", "partition", "replicas", "leader", "isr", "new_leader", "new_isr",
                 "severity", *rm.OUTCOMES, "leader_changes", "shutdown_blocked_by", "clean_return", "isr_alternatives"]


_ORDER = ["scenario_id", "severity", "topic", "partition"]


def worst_partitions(rows_path: Path | str, severities: dict[int, list[int]], scenario_ids: list[int],
                     k: int = rm.WORST_PER_SCENARIO) -> pa.Table:
    """Top k rows by (severity desc, topic, partition) of each listed scenario, severity >= 1, read from
    partitions.parquet in two passes. The first reads only the columns that order the rows (the topic as its
    dictionary codes) and keeps, per listed scenario, the rows at or above the severity where its k worst are found
    (known from the severity counts), then the k first of them. The second reads the wide columns of each file
    only up to its last kept row: the rows are ordered by topic within a file, so the kept ones are usually
    near its start. At 1M partitions (10.6 M rows) the filtered scan of every row's wide columns this replaces took
    1.8-2.9 s; these two passes 0.3 s, the same 100 rows."""
    floors: dict[int, list[int]] = {}
    for sid in scenario_ids:
        hist = severities.get(sid, [0, 0, 0, 0])  # rows with severity 1..4
        floors.setdefault(next((lvl for lvl in (4, 3, 2, 1) if sum(hist[lvl - 1:]) >= k), 1), []).append(sid)
    data = rows_dataset(rows_path)   # its files: the part files of Spark's folder (or the one file)
    files, schema = data.files, data.schema
    if not floors or not files:
        return schema.empty_table().select(WORST_COLUMNS)
    floor_of = np.full(max(scenario_ids) + 1, 127, np.int64)   # severity never reaches 127: not listed
    for t, ids in floors.items():
        floor_of[ids] = t
    picked: list[pa.Table] = []
    for i, f in enumerate(files):
        start = 0
        reader = pq.ParquetFile(f, read_dictionary=["topic"], pre_buffer=False, buffer_size=1 << 20)
        for batch in reader.iter_batches(batch_size=65_536, columns=_ORDER):
            sid = batch.column("scenario_id").to_numpy(zero_copy_only=False).astype(np.int64)
            sev = pc.fill_null(batch.column("severity"), 0).to_numpy(zero_copy_only=False).astype(np.int64)
            known = (sid >= 0) & (sid < floor_of.size)
            keep = np.zeros(sid.size, bool)
            keep[known] = sev[known] >= floor_of[sid[known]]
            at = np.nonzero(keep)[0]
            if at.size:
                rows = batch.take(pa.array(at))
                topic = rows.column("topic")
                topic = pc.cast(topic, pa.string()) if pa.types.is_dictionary(topic.type) else topic
                picked.append(pa.table({"scenario_id": rows.column("scenario_id"), "severity": rows.column("severity"),
                                        "topic": topic, "partition": rows.column("partition"),
                                        "_file": pa.array(np.full(at.size, i, np.int64)),
                                        "_row": pa.array(at + start)}))
            start += batch.num_rows
    if not picked:
        return schema.empty_table().select(WORST_COLUMNS)
    t = pa.concat_tables(picked).sort_by([("scenario_id", "ascending"), ("severity", "descending"),
                                          ("topic", "ascending"), ("partition", "ascending")])
    sid = t.column("scenario_id").to_numpy()
    first = np.ones(sid.size, bool)
    first[k:] = sid[k:] != sid[:-k] if sid.size > k else True
    t = t.filter(pa.array(first))
    where = t.column("_file").to_numpy()
    row = t.column("_row").to_numpy()
    parts: list[pa.Table] = []
    order: list[np.ndarray] = []
    for i in np.unique(where):
        mine = np.nonzero(where == i)[0]
        mine = mine[np.argsort(row[mine], kind="stable")]   # in file order
        wanted, last, start = row[mine], int(row[mine].max()), 0
        batches = []
        for batch in pq.ParquetFile(files[i], pre_buffer=False, buffer_size=1 << 20).iter_batches(
                batch_size=65_536, columns=WORST_COLUMNS):
            batches.append(batch.take(pa.array(wanted[(wanted >= start) & (wanted < start + batch.num_rows)] - start)))
            start += batch.num_rows
            if start > last:
                break
        parts.append(pa.Table.from_batches(batches))
        order.append(mine)
    # back in the sorted order of the selection
    out = pa.concat_tables(parts)
    out = out.take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
    pa.default_memory_pool().release_unused()
    return out


def listed_scenarios(table: pa.Table) -> list[int]:
    """Scenarios whose worst partitions the summary lists: the requested ones (drain, rolling steps, both
    states) and the WORST_SCENARIOS worst of the sweep (partitions.parquet holds every row)."""
    rows = table.select(["scenario_id", "kind", "level_rank", "score"]).to_pylist()
    requested = [r["scenario_id"] for r in rows if r["kind"] in rm.REQUESTED_KINDS]
    sweep = sorted((r for r in rows if r["kind"] not in rm.REQUESTED_KINDS),
                   key=lambda r: (-r["level_rank"], -r["score"], r["scenario_id"]))
    return requested + [r["scenario_id"] for r in sweep[:WORST_SCENARIOS]]

