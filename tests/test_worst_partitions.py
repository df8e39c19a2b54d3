"""The summary's worst partitions, read from a partitions.parquet folder in two passes (planner.spark.aggregate):
checked against a plain sort of every row, on a folder whose kept rows sit in several files, past the first
batch of a file, and out of file order. No Spark: the folder is written here as Spark lays it out."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from planner import risk_model as rm
from planner.spark.aggregate import WORST_COLUMNS, worst_partitions


def _rows(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    cols: dict[str, pa.Array] = {}
    for name, t in rm.ROW_TYPES.items():
        if pa.types.is_list(t):
            cols[name] = pa.array([[int(i % 7)] for i in range(n)], t)
        elif pa.types.is_boolean(t):
            cols[name] = pa.array(rng.random(n) < 0.1)
        else:
            cols[name] = pa.array(np.zeros(n, np.int64), t) if name != "topic" else pa.array(["x"] * n)
    cols["scenario_id"] = pa.array(rng.integers(0, 12, n), pa.int32())
    cols["severity"] = pa.array(rng.choice([0, 1, 2, 3, 4], n, p=[0.5, 0.3, 0.15, 0.045, 0.005]), pa.int8())
    cols["topic"] = pa.array([f"t{v:02d}" for v in rng.integers(0, 40, n)])
    cols["partition"] = pa.array(np.arange(n), pa.int32())          # unique: the order is total
    cols["new_leader"] = pa.array(np.arange(n) % 1000, pa.int32())
    cols["new_isr"] = pa.array([[int(i), int(i) + 1] for i in range(n)], pa.list_(pa.int32()))
    return pa.table(cols)


def test_the_worst_rows_of_the_listed_scenarios_in_order_from_several_files(tmp_path):
    rows = _rows(150_000, seed=7)
    folder = tmp_path / "partitions.parquet"
    folder.mkdir()
    # two part files, the second written first in the table's order: rows reach past a file's first batch
    pq.write_table(rows.slice(130_000), folder / "part-00000.snappy.parquet", row_group_size=8_000)
    pq.write_table(rows.slice(0, 130_000), folder / "part-00001.snappy.parquet", row_group_size=40_000)
    (folder / "_SUCCESS").write_text("")
    (folder / ".part-00000.snappy.parquet.crc").write_bytes(b"not parquet")
    sid = rows.column("scenario_id").to_numpy()
    sev = rows.column("severity").to_numpy()
    severities = {s: [int(((sid == s) & (sev == lvl)).sum()) for lvl in (1, 2, 3, 4)] for s in range(12)}
    listed = [3, 0, 11, 7, 12]     # 12 has no rows; 1, 2, ... are not listed
    got = worst_partitions(folder, severities, listed)

    everything = rows.select(["scenario_id", "topic", "partition", "severity", "new_isr"]).to_pylist()
    want = []
    for s in sorted(listed):
        mine = sorted((r for r in everything if r["scenario_id"] == s and r["severity"] >= 1),
                      key=lambda r: (-r["severity"], r["topic"], r["partition"]))
        want += mine[:rm.WORST_PER_SCENARIO]
    assert got.column_names == WORST_COLUMNS
    assert got.select(["scenario_id", "topic", "partition", "severity", "new_isr"]).to_pylist() == want
    # the wide columns come from the same rows (new_isr is [partition, partition + 1] on every row)
    assert all(r["new_isr"] == [r["partition"], r["partition"] + 1] for r in got.to_pylist())
    assert len(want) == 4 * rm.WORST_PER_SCENARIO


def test_no_listed_scenario_or_no_row_gives_an_empty_table_of_the_columns(tmp_path):
    rows = _rows(1_000, seed=1)
    folder = tmp_path / "partitions.parquet"
    folder.mkdir()
    pq.write_table(rows, folder / "part-00000.snappy.parquet")
    assert worst_partitions(folder, {}, []).column_names == WORST_COLUMNS
    assert worst_partitions(folder, {}, []).num_rows == 0
    # listed, but no row of it at severity 1 or more
    none = worst_partitions(folder, {50: [0, 0, 0, 0]}, [50])
    assert none.num_rows == 0 and none.column_names == WORST_COLUMNS
