"""Benchmark of `kplan plan` (issue 5) against Kafka's `--generate`, on synthetic clusters of RF 3 over 3 racks.

Cases (targets from the issue, 2 cores):
  drain 1 broker, and 3 brokers of different racks, 200 brokers / 200,000 partitions  (<= 10 s, <= 2 GiB)
  the same at 1,000,000 partitions                                                     (<= 60 s, <= 6 GiB)
  rebalance of 200 brokers / 200,000 partitions with 10 empty new brokers              (<= 60 s)
and `--generate` (bench/kafka_generate.py) on the same drains: moves, spreads, times side by side.

Every run is a fresh subprocess (`--one ...`) that reads the snapshot folder, plans, writes the plan folder
exactly like `kplan plan` and reports its wall time and peak RSS (ru_maxrss); medians over --repeat runs (1 for
the million-partition cases unless --repeat-large says otherwise). Writes bench/out/plan.json.

    .venv/bin/python bench/bench_plan.py [--quick] [--repeat 3] [--repeat-large 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_plan(snapshot: str, kind: str, brokers: str, out: str) -> dict:
    """Child process: exactly what `kplan plan` does, timed."""
    started = time.perf_counter()
    argv = ["plan", kind, "--snapshot", snapshot, "--out", out, "--quiet"]
    if kind == "drain":
        argv += ["--brokers", brokers]
    from planner import cli

    devnull = open(os.devnull, "w")  # noqa: SIM115 - the summary is not what we time
    real = sys.stdout
    sys.stdout = devnull
    try:
        rc = cli.main(argv)
    finally:
        sys.stdout = real
    wall = time.perf_counter() - started
    doc = json.loads((Path(out) / "plan.json").read_text())
    solve = json.loads((Path(out) / "solve.json").read_text())
    s, a, b = doc["summary"], doc["after"], doc["before"]
    return {"rc": rc, "wall_s": round(wall, 3), "rss_mib": round(_rss_mib(), 1),
            "timings_s": solve["timings_s"], "replica_moves": s["replica_moves"],
            "lower_bound_moves": s["lower_bound_moves"], "bytes_moved": s["bytes_moved"],
            "lower_bound_bytes": s["lower_bound_bytes"],
            "replica_spread_before": b["replica_spread"], "replica_spread_after": a["replica_spread"],
            "leader_spread_before": b["leader_spread"], "leader_spread_after": a["leader_spread"],
            "bytes_dev_pct_after": a.get("bytes_max_deviation_pct"),
            "leadership_changes": s["leadership_changes"],
            "max_topic_leaders_after": s["max_topic_leaders_per_broker_after"],
            "topics_over_ceil": s["topics_over_ceil_partitions_per_broker"],
            "batches": s["batches"], "placement": doc["solver"]["placement"]["method"],
            "leaders": doc["solver"]["leaders"]["method"]}


def one_generate(snapshot: str, brokers: str) -> dict:
    """Child process: Kafka's --generate over the brokers that remain after the drain, all topics."""
    import numpy as np
    from kafka_generate import generate

    from planner.optimizer import from_snapshot
    from planner.snapshot_io import read_snapshot

    started = time.perf_counter()
    pb = from_snapshot(read_snapshot(snapshot))
    drained = {int(x) for x in brokers.split(",")}
    keep = [i for i, b in enumerate(pb.broker_ids.tolist()) if b not in drained and pb.alive[i]]
    ids = [int(pb.broker_ids[i]) for i in keep]
    racks = [pb.rack_names[pb.rack_of[i]] for i in keep] if pb.rack_aware else None
    t0 = time.perf_counter()
    new = generate(pb.topic_of, pb.partition, pb.rf, ids, racks, seed=1)
    gen_s = time.perf_counter() - t0
    old = np.where(pb.replicas >= 0, pb.broker_ids[np.maximum(pb.replicas, 0)], -1)
    added = (new >= 0) & ~(new[:, :, None] == old[:, None, :]).any(axis=2)
    counts = np.zeros(int(pb.broker_ids.max()) + 1, np.int64)
    np.add.at(counts, new[new >= 0], 1)
    leads = np.bincount(new[:, 0], minlength=len(counts))
    c, lc = counts[ids], leads[ids]
    sizes = np.maximum(pb.sizes, 0)
    return {"wall_s": round(time.perf_counter() - started, 3), "generate_s": round(gen_s, 3),
            "rss_mib": round(_rss_mib(), 1), "replica_moves": int(added.sum()),
            "bytes_moved": int((added.sum(axis=1) * sizes).sum()) if pb.sizes_known else None,
            "replica_spread_after": int(c.max() - c.min()), "leader_spread_after": int(lc.max() - lc.min()),
            "partitions_changed": int((new != old).any(axis=1).sum())}


def _child(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, str(Path(__file__)), "--one", *args], capture_output=True, text=True,
                          cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"benchmark child {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(runs: list[dict]) -> dict:
    out = dict(runs[-1])
    for key in ("wall_s", "rss_mib"):
        out[key] = round(statistics.median(r[key] for r in runs), 3)
    out["runs_wall_s"] = [r["wall_s"] for r in runs]
    return out


def _snapshot(work: Path, name: str, **kw) -> str:
    from planner.synth import synth_cluster, to_snapshot

    path = work / name
    if not (path / "manifest.json").exists():
        t = time.perf_counter()
        to_snapshot(synth_cluster(**kw), path)
        print(f"  (generated {name} in {time.perf_counter() - t:.1f}s)", flush=True)
    return str(path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--repeat-large", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="skip the million-partition cases")
    ap.add_argument("--work", type=Path, default=HERE / "out" / "work")
    args = ap.parse_args()
    if args.one:
        mode, *rest = args.one
        res = one_plan(*rest) if mode == "plan" else one_generate(*rest)
        print(json.dumps(res))
        return 0

    args.work.mkdir(parents=True, exist_ok=True)
    cases = [
        ("drain 1 broker", "200k", "drain", "1", 10, 2048),
        ("drain 3 brokers (3 racks)", "200k", "drain", "1,2,3", 10, 2048),
        ("rebalance +10 empty brokers", "200k+10", "rebalance", "", 60, None),
    ]
    if not args.quick:
        cases += [("drain 1 broker", "1M", "drain", "1", 60, 6144),
                  ("drain 3 brokers (3 racks)", "1M", "drain", "1,2,3", 60, 6144)]
    print("generating snapshots (synth_cluster: RF 3, 3 racks, sizes known)", flush=True)
    snaps = {"200k": _snapshot(args.work, "s200k", brokers=200, partitions=200_000, rf=3, racks=3, seed=1),
             "200k+10": _snapshot(args.work, "s200k_new10", brokers=200, partitions=200_000, rf=3, racks=3,
                                  empty_brokers=10, seed=2)}
    if not args.quick:
        snaps["1M"] = _snapshot(args.work, "s1m", brokers=200, partitions=1_000_000, rf=3, racks=3, seed=3)
    results = []
    for label, size, kind, brokers, target_s, target_mib in cases:
        reps = args.repeat_large if size == "1M" else args.repeat
        print(f"\n== {label}, {size} partitions ({reps} run(s))", flush=True)
        out_dir = args.work / f"plan_{size}_{kind}_{brokers.replace(',', '-') or 'all'}"
        runs = []
        for _ in range(reps):
            shutil.rmtree(out_dir, ignore_errors=True)   # each run plans into a new folder, as a user would
            runs.append(_child(["plan", snaps[size], kind, brokers or "-", str(out_dir)]))
        plan = _median(runs)
        row = {"case": label, "partitions": size, "kind": kind, "brokers": brokers, "kplan": plan,
               "target_wall_s": target_s, "target_rss_mib": target_mib,
               "meets_time": plan["wall_s"] <= target_s,
               "meets_memory": target_mib is None or plan["rss_mib"] <= target_mib}
        if kind == "drain":
            gen = _median([_child(["generate", snaps[size], brokers]) for _ in range(reps)])
            row["kafka_generate"] = gen
        results.append(row)
        _print_row(row)
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "plan.json").write_text(json.dumps({"machine": {"cpus": os.cpu_count()},
                                                        "results": results}, indent=2) + "\n")
    print(f"\nwrote {HERE / 'out' / 'plan.json'}")
    return 0 if all(r["meets_time"] and r["meets_memory"] for r in results) else 1


def _print_row(row: dict) -> None:
    p = row["kplan"]
    t = p["timings_s"]
    print(f"  kplan     wall {p['wall_s']:.2f}s (runs {p['runs_wall_s']}), peak RSS {p['rss_mib']:.0f} MiB "
          f"[target {row['target_wall_s']}s"
          + (f", {row['target_rss_mib']} MiB" if row["target_rss_mib"] else "") + "]")
    print("            " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))
    print(f"            moves {p['replica_moves']} (lower bound {p['lower_bound_moves']}), replica spread "
          f"{p['replica_spread_before']} -> {p['replica_spread_after']}, leader spread "
          f"{p['leader_spread_before']} -> {p['leader_spread_after']}, leadership changes "
          f"{p['leadership_changes']}, max topic leaders/broker {p['max_topic_leaders_after']}, batches "
          f"{p['batches']}" + (f", bytes dev {p['bytes_dev_pct_after']}%" if p["bytes_dev_pct_after"] else ""))
    g = row.get("kafka_generate")
    if g:
        print(f"  --generate wall {g['wall_s']:.2f}s (algorithm {g['generate_s']:.2f}s): moves {g['replica_moves']} "
              f"({g['partitions_changed']} partitions changed), replica spread {g['replica_spread_after']}, "
              f"leader spread {g['leader_spread_after']}")
        if p["bytes_moved"] and g["bytes_moved"]:
            print(f"            bytes moved: kplan {p['bytes_moved'] / 2**40:.1f} TiB vs --generate "
                  f"{g['bytes_moved'] / 2**40:.1f} TiB")


if __name__ == "__main__":
    sys.exit(main())
