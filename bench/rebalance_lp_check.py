"""A check, not a benchmark: that the plan's LP bound of the whole goal (planner/optimizer/lp_bound.py) is never
above what a plan achieved. Plans each generated cluster (the property test's 36 of tests/test_rebalance_spread.py,
or bench_rebalance_larger's 18) as a count rebalance, then computes the LP on the plan's band for every cluster,
not only where the plan itself does (more than 1 % over its flow bounds), with the pair limit raised to 60,000,
and flags any bound above the plan's moves.

    .venv/bin/python bench/rebalance_lp_check.py prop|larger
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    which = sys.argv[1] if len(sys.argv) > 1 else "prop"
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(1, str(HERE.parent / "tests"))
    import numpy as np
    from rebalance_support import generate, random_shape

    import planner.optimizer.lp_bound as lpb
    from planner.optimizer import Params, from_snapshot, make_plan
    from planner.optimizer.witness import leader_cap0
    from planner.plan_format import plan_document
    from planner.snapshot_io import read_snapshot
    from planner.synth import to_snapshot

    if which == "prop":
        rng = np.random.default_rng(25)
        sets = [(f"p{i}", random_shape(rng, per_broker=(60, 160), max_brokers=20)) for i in range(36)]
    else:
        sets = []
        for seed in (7, 8):
            rng = np.random.default_rng(seed)
            sets += [(f"{seed}:{i}", random_shape(rng, per_broker=(400, 1000), max_brokers=24)) for i in range(1, 10)]
    lpb.PAIR_LIMIT = 60_000
    bad = 0
    for name, shape in sets:
        with tempfile.TemporaryDirectory() as tmp:
            to_snapshot(generate(shape), Path(tmp) / "s")
            pb = from_snapshot(read_snapshot(Path(tmp) / "s"))
        doc = plan_document(make_plan(pb, Params("rebalance", balance="count")), {}, {})
        s = doc["summary"]
        moves, lb = s["replica_moves"], s["lower_bound_moves"]
        lo, hi = s["target_replica_band"]
        eligible = pb.alive.copy()
        t = time.perf_counter()
        lp = lpb.goal_lp_bound(pb, eligible, lo, hi, leader_cap0(pb, eligible)) if lpb.applies(pb, eligible) \
            else "n/a (replicas on a gone broker)"
        took = time.perf_counter() - t
        wrong = lb > moves or (isinstance(lp, int) and lp > moves)
        bad += wrong
        print(f"{name}: moves {moves:,}, the plan's bound {lb:,} ({s['lower_bound_basis']}), x{moves / max(1, lb):.4f};"
              f" LP of the whole goal {lp} ({took:.1f} s){'  BOUND ABOVE MOVES' if wrong else ''}", flush=True)
    print(f"{bad} of {len(sets)} with a bound above the plan's moves (LP None: infeasible for the plan's band and "
          "caps, or over 60,000 pairs)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
