"""Issue 25's larger generated count rebalances: the 18 clusters of tests/rebalance_support.random_shape with
400-1000 partitions per broker and up to 24 brokers (seeds 7 and 8, nine each: 2-21k partitions), each planned
once as a count rebalance (sizes unknown), one row each: moves and the plan's bound, replica spread (and the
best the plan says the racks and level leaders allow), leader spread, topics over ceil(partitions / brokers),
CPU seconds of the plan and of leader_cut's exchanges.

    .venv/bin/python bench/bench_rebalance_larger.py [--root OTHER_CHECKOUT] [--seeds 7,8] [--only 7:9,8:6]

--root plans with another checkout's planner (e.g. main before a change, from `git archive`); the clusters come
from this checkout's tests/rebalance_support.py either way. `--only seed:index` (1-based) picks clusters.
Figures are computed from the plan document (its summary and `after`), not checked independently here: the
property test (tests/test_rebalance_spread.py) does that for the clusters it holds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=Path, default=HERE.parent)
    ap.add_argument("--seeds", default="7,8")
    ap.add_argument("--only", help="seed:index pairs (index 1-based), comma-separated")
    args = ap.parse_args()
    sys.path.insert(0, str(args.root.resolve()))
    sys.path.insert(1, str(HERE.parent / "tests"))
    import numpy as np
    from rebalance_support import generate, random_shape

    import planner.optimizer.rebalance as rb
    from planner.optimizer import Params, from_snapshot, make_plan
    from planner.plan_format import plan_document
    from planner.snapshot_io import read_snapshot
    from planner.synth import to_snapshot

    cut = [0.0]
    mend = rb.mend_leader_cut

    def timed(*a, **k):
        t = time.process_time()
        try:
            return mend(*a, **k)
        finally:
            cut[0] += time.process_time() - t

    rb.mend_leader_cut = timed
    only = {tuple(int(x) for x in p.split(":")) for p in args.only.split(",")} if args.only else None
    print("seed:index brokers racks partitions | moves bound ratio | replica spread (best) | leader spread | "
          "topics over ceil | cpu s (cut s)")
    for seed in (int(s) for s in args.seeds.split(",")):
        rng = np.random.default_rng(seed)
        for index in range(1, 10):
            shape = random_shape(rng, per_broker=(400, 1000), max_brokers=24)
            if only and (seed, index) not in only:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                to_snapshot(generate(shape), Path(tmp) / "s")
                pb = from_snapshot(read_snapshot(Path(tmp) / "s"))
                cut[0] = 0.0
                t = time.process_time()
                doc = plan_document(make_plan(pb, Params("rebalance", balance="count")), {}, {})
                cpu = time.process_time() - t
            s, a = doc["summary"], doc["after"]
            lb = s["lower_bound_moves"]
            print(f"{seed}:{index} {shape.brokers} {shape.racks} {shape.partitions:,} | {s['replica_moves']:,} "
                  f"{lb:,} {s['replica_moves'] / max(1, lb):.4f} | {a['replica_spread']} "
                  f"({s['reachable_replica_spread']}) | {a['leader_spread']} | "
                  f"{s['topics_over_ceil_partitions_per_broker']} | {cpu:.2f} ({cut[0]:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
