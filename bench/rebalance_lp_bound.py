"""A one-off lower bound for a count rebalance's whole goal: the LP relaxation of placement and leadership
together, written from the rules apart from the optimizer, for one of bench_rebalance_larger's clusters.

    .venv/bin/python bench/rebalance_lp_bound.py 8:6 [--band LOW,HIGH] [--solver GLOP]

Variables per partition p and eligible broker b: x (a replica of p on b) and y (p led from b), both in [0, 1].
Constraints: sum_b x = p's replicas; the rack rule (min(RF, racks, racks it spans now) racks: where that is RF,
at most one replica per rack; where it is every rack, at least one on each); y <= x and sum_b y = 1; per topic
and broker sum y <= ceil(partitions / brokers); per broker sum y within floor / ceil of the partitions per broker
(leader spread <= 1) and sum x within the band (default: the plan's own target band). Minimized: replicas on
brokers the partition did not have. Every plan that meets the goal is a feasible point, so the optimum (rounded
up) is a lower bound on its moves; "infeasible" proves that no plan meets the goal in that band. Slow (the model
is built in Python: ~3 min for 8,240 partitions on 10 brokers), hence not in CI. Registered brokers only;
fixed (excluded-topic) partitions are not supported.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cluster", help="seed:index (1-based) of bench_rebalance_larger's clusters")
    ap.add_argument("--band", help="LOW,HIGH replica counts per broker (default: the plan's target band)")
    ap.add_argument("--solver", default="GLOP")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(1, str(HERE.parent / "tests"))
    import numpy as np
    from ortools.linear_solver import pywraplp
    from rebalance_support import generate, random_shape

    from planner.optimizer import Params, from_snapshot, make_plan
    from planner.plan_format import plan_document
    from planner.snapshot_io import read_snapshot
    from planner.synth import to_snapshot

    seed, index = (int(v) for v in args.cluster.split(":"))
    rng = np.random.default_rng(seed)
    for _ in range(index):
        shape = random_shape(rng, per_broker=(400, 1000), max_brokers=24)
    with tempfile.TemporaryDirectory() as tmp:
        to_snapshot(generate(shape), Path(tmp) / "s")
        pb = from_snapshot(read_snapshot(Path(tmp) / "s"))
    if pb.fixed.any():
        raise SystemExit("fixed partitions are not modelled")
    doc = plan_document(make_plan(pb, Params("rebalance", balance="count")), {}, {})
    s = doc["summary"]
    lo, hi = (int(v) for v in args.band.split(",")) if args.band else s["target_replica_band"]
    e_idx = [int(b) for b in range(pb.num_brokers) if pb.alive[b]]
    E = len(e_idx)
    racks = {b: int(pb.rack_of[b]) for b in e_idx}
    rack_ids = sorted({q for q in racks.values() if q >= 0}) if pb.rack_aware else []
    topics = pb.topic_of.astype(int).tolist()
    n_t: dict[int, int] = {}
    for t in topics:
        n_t[t] = n_t.get(t, 0) + 1
    cap = {t: math.ceil(n / E) for t, n in n_t.items()}
    solver = pywraplp.Solver.CreateSolver(args.solver)
    obj = solver.Objective()
    count: dict[int, list] = {b: [] for b in e_idx}
    lead: dict[int, list] = {b: [] for b in e_idx}
    per_tb: dict[tuple[int, int], list] = {}
    n_led = 0
    started = time.perf_counter()
    for p, t in enumerate(topics):
        orig = [int(b) for b in pb.replicas[p] if b >= 0]
        if any(b not in count for b in orig):
            raise SystemExit(f"partition {p} has a replica on an unregistered broker: not modelled")
        x = {b: solver.NumVar(0, 1, "") for b in e_idx}
        y = {b: solver.NumVar(0, 1, "") for b in e_idx}
        solver.Add(sum(x.values()) == len(orig))
        solver.Add(sum(y.values()) == 1)
        n_led += 1
        for b in e_idx:
            solver.Add(y[b] <= x[b])
            if b not in orig:
                obj.SetCoefficient(x[b], 1)
            count[b].append(x[b])
            lead[b].append(y[b])
            per_tb.setdefault((t, b), []).append(y[b])
        if rack_ids:
            need = min(len(orig), len(rack_ids), len({racks[b] for b in orig if racks[b] >= 0}))
            for q in rack_ids:
                on_q = [x[b] for b in e_idx if racks[b] == q]
                if need >= len(orig):
                    solver.Add(sum(on_q) <= 1)
                elif need >= len(rack_ids):
                    solver.Add(sum(on_q) >= 1)
    for b in e_idx:
        solver.Add(sum(count[b]) >= lo)
        solver.Add(sum(count[b]) <= hi)
        solver.Add(sum(lead[b]) >= n_led // E)
        solver.Add(sum(lead[b]) <= -(-n_led // E))
    for (t, _b), ys in per_tb.items():
        solver.Add(sum(ys) <= cap[t])
    obj.SetMinimization()
    built = time.perf_counter() - started
    status = solver.Solve()
    took = time.perf_counter() - started - built
    print(f"{args.cluster}: {shape.brokers} brokers, {shape.partitions:,} partitions, band [{lo:,}, {hi:,}]; "
          f"the plan: {s['replica_moves']:,} moves, its bound {s['lower_bound_moves']:,}")
    if status == pywraplp.Solver.INFEASIBLE:
        print(f"LP infeasible: no placement in that band has level leaders within the caps (built {built:.0f} s, "
              f"solved {took:.0f} s)")
    elif status == pywraplp.Solver.OPTIMAL:
        lb = math.ceil(solver.Objective().Value() - 1e-6)
        print(f"LP optimum {solver.Objective().Value():.3f}: every plan meeting the goal moves >= {lb:,}; the plan "
              f"is at {s['replica_moves'] / max(1, lb):.4f}x of it (built {built:.0f} s, solved {took:.0f} s)")
    else:
        print(f"solver status {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
