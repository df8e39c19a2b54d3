"""Comparing a Spark risk run with the numpy reference replay (ZooKeeper rules: planner.replay; KRaft rules:
planner.replay_kraft): every partition of every scenario, and every scenario figure."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from planner import risk_model as rm


def assert_same(spark_dir: Path, ref: Any, columns: list[str] = rm.ROW_COLUMNS) -> None:
    """The Spark job's partitions.parquet and scenarios.parquet in `spark_dir` equal the reference's rows and
    scenarios (`ref.rows`, `ref.scenarios`), column by column; the first differing row is named."""
    got = pq.read_table(Path(spark_dir) / "partitions.parquet").select(columns)
    want = ref.rows.select(columns)
    assert got.num_rows == want.num_rows
    keys = [(k, "ascending") for k in rm.ROW_KEY]
    got, want = got.cast(want.schema).sort_by(keys), want.sort_by(keys)
    for c in columns:
        if not got.column(c).equals(want.column(c)):
            a, b = got.column(c).to_pylist(), want.column(c).to_pylist()
            i = next(i for i in range(len(a)) if a[i] != b[i])
            raise AssertionError(f"column {c} differs: spark {got.slice(i, 1).to_pylist()} vs "
                                 f"reference {want.slice(i, 1).to_pylist()}")
    gs = pq.read_table(Path(spark_dir) / "scenarios.parquet").to_pylist()
    ws = ref.scenarios.to_pylist()
    assert len(gs) == len(ws)
    for g, w in zip(gs, ws, strict=True):
        for k in rm.SCENARIO_COLUMNS:
            same = math.isclose(g[k], w[k], rel_tol=1e-12) if isinstance(w[k], float) else g[k] == w[k]
            assert same, f"{w['name']}: {k} spark {g[k]} vs reference {w[k]}"
