"""Benchmark of `kplan plan` against Kafka's `--generate` (and, with --baseline, an older checkout of kplan),
all in one run.

Clusters:
  uniform  synth_cluster: RF 3 over 3 racks, replicas dealt at random (issue 5's cases): 30 brokers / 30k
           partitions, 200 brokers / 200k and 1M partitions, and 200 brokers + 10 empty ones;
  skewed   bench/skewed_cluster.py: 100 brokers on 4 racks, Zipf-sized topics (largest 2,000 partitions),
           RF 1-4 mixed, 6 hot brokers holding up to twice their share, 8 new nearly empty brokers (issue 11),
           200k and 1M partitions.
Cases (targets from issues 5 and 11, 2 cores): drains of 1 and 3 brokers (200k: <= 10 s / 2 GiB; 1M: <= 60 s
/ 6 GiB), rebalances (uniform 200k + 10 empty: <= 60 s; skewed 200k: <= 60 s; skewed 1M: <= 300 s), with the
quality figures: moves against the lower bound, replica / leader spread, topics above ceil(partitions /
brokers), leadership changes (necessary / optional, and what the other leader scope would do).

Every kplan run is a fresh `python -m planner.cli plan ...` child (wall time and its own peak RSS from
wait4); medians over --repeat runs (--repeat-large for the 1M cases). `--generate` (bench/kafka_generate.py,
Kafka's AdminUtils assignment re-implemented) runs on the same snapshot in a child too: over the brokers that
remain (drain) or all registered brokers (rebalance). `--baseline REV|DIR` runs the cases marked for it with
the kplan of that commit (exported with `git archive`, bench/baseline.py) or checkout folder too, alternately
with this checkout run by run, as many runs each (stopped after --baseline-timeout seconds): medians side by
side, their ratio, and whether both made the same plan (moves, spreads). Writes bench/out/plan.json.

    .venv/bin/python bench/bench_plan.py [--quick] [--repeat 3] [--repeat-large 1] [--only skewed]
                                         [--baseline d34e8c8 --baseline-timeout 900]
"""

from __future__ import annotations

import argparse
import json
import os
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

from baseline import baseline_tree  # noqa: E402


# ------------------------------------------------------------------------------------------------ children
def run_kplan(root: Path, argv: list[str], timeout: float | None = None) -> dict:
    """`python -m planner.cli plan ...` with the checkout at `root`: wall, peak RSS, and plan.json figures."""
    out = Path(argv[argv.index("--out") + 1])
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(root)}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "plan", *argv, "--quiet"], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = None if timeout is None else started + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if deadline is not None and time.perf_counter() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            return {"rc": None, "wall_s": round(time.perf_counter() - started, 1), "timed_out": True}
        time.sleep(0.05)
    wall = time.perf_counter() - started
    rc = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if rc != 0:
        raise SystemExit(f"kplan {' '.join(argv)} (in {root}) exited {rc}:\n{err[-3000:]}")
    doc = json.loads((out / "plan.json").read_text())
    solve = json.loads((out / "solve.json").read_text())
    s, a, b = doc["summary"], doc["after"], doc["before"]
    lead = doc.get("leadership") or {}
    data = [x for x in doc["batches"] if x["kind"] == "data"]
    return {"rc": rc, "wall_s": round(wall, 2), "rss_mib": round(usage.ru_maxrss / 1024, 1),
            "timings_s": solve.get("timings_s"), "replica_moves": s["replica_moves"],
            "lower_bound_moves": s["lower_bound_moves"], "excess_over_ceil_mean": s.get("excess_over_ceil_mean"),
            "bytes_moved": s["bytes_moved"], "lower_bound_bytes": s["lower_bound_bytes"],
            "replica_spread_before": b["replica_spread"], "replica_spread_after": a["replica_spread"],
            "leader_spread_before": b["leader_spread"], "leader_spread_after": a["leader_spread"],
            "bytes_dev_pct_after": a.get("bytes_max_deviation_pct"),
            "leadership_changes": s["leadership_changes"],
            "necessary_leadership_changes": s.get("necessary_leadership_changes"),
            "optional_leadership_changes": s.get("optional_leadership_changes"),
            "leader_scope": s.get("leader_scope", "all"), "alternative": lead.get("alternative"),
            "max_topic_leaders_after": s["max_topic_leaders_per_broker_after"],
            "topics_over_ceil": s["topics_over_ceil_partitions_per_broker"],
            "hot_spots": s.get("hot_spots"), "batches": s["batches"],
            "max_suggested_throttle": max((x.get("suggested_throttle_bytes_per_s") or 0 for x in data), default=0)
            if data and "suggested_throttle_bytes_per_s" in data[0] else None,
            "placement": doc["solver"]["placement"]["method"], "leaders": doc["solver"]["leaders"]["method"]}


def one_generate(snapshot: str, brokers: str) -> dict:
    """Child process: Kafka's --generate over the brokers that remain after the drain ("-": all registered
    brokers, a rebalance), all topics."""
    import numpy as np
    from kafka_generate import generate

    from planner.optimizer import from_snapshot
    from planner.snapshot_io import read_snapshot

    started = time.perf_counter()
    pb = from_snapshot(read_snapshot(snapshot))
    drained = {int(x) for x in brokers.split(",")} if brokers != "-" else set()
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
    T = len(pb.topic_names)
    key = pb.topic_of.astype(np.int64) * len(counts) + new[:, 0]
    _, per = np.unique(key, return_counts=True)
    k_t = np.unique(key) // len(counts)
    top = np.zeros(T, np.int64)
    np.maximum.at(top, k_t, per)
    ceil_t = -(-np.bincount(pb.topic_of, minlength=T) // len(ids))
    valid = new >= 0
    by = np.bincount(new[valid], weights=np.broadcast_to(sizes[:, None], new.shape)[valid], minlength=len(counts))
    by = by[ids]
    return {"wall_s": round(time.perf_counter() - started, 3), "generate_s": round(gen_s, 3),
            "replica_moves": int(added.sum()),
            "bytes_moved": int((added.sum(axis=1) * sizes).sum()) if pb.sizes_known else None,
            "replica_spread_after": int(c.max() - c.min()), "leader_spread_after": int(lc.max() - lc.min()),
            "bytes_dev_pct_after": round(100 * float(np.abs(by - by.mean()).max() / by.mean()), 2)
            if pb.sizes_known else None,
            "leadership_changes": int((new[:, 0] != old[:, 0]).sum()),
            "topics_over_ceil": int((top > ceil_t).sum()),
            "partitions_changed": int((new != old).any(axis=1).sum())}


def _child_generate(snapshot: str, brokers: str) -> dict:
    done = subprocess.run([sys.executable, str(Path(__file__)), "--one", "generate", snapshot, brokers],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"--generate child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(runs: list[dict]) -> dict:
    out = dict(runs[-1])
    for key in ("wall_s", "rss_mib"):
        out[key] = round(statistics.median(r[key] for r in runs), 2)
    out["runs_wall_s"] = [r["wall_s"] for r in runs]
    return out


# --------------------------------------------------------------------------------------------- snapshots
def _snapshot(work: Path, name: str, make) -> str:
    """The snapshot `name` in `work`, generated the first time."""
    from planner.synth import to_snapshot

    path = work / name
    if not (path / "manifest.json").exists():
        t = time.perf_counter()
        to_snapshot(make(), path)
        print(f"  (generated {name} in {time.perf_counter() - t:.1f}s)", flush=True)
    return str(path)


def _snapshots(work: Path, quick: bool, wanted: set[str]) -> dict[str, str]:
    """The snapshots of the cases that will run (`wanted`; the 1M ones only without --quick)."""
    from skewed_cluster import skewed_cluster

    from planner.synth import synth_cluster

    makers = {
        "u30k": ("s30k", lambda: synth_cluster(brokers=30, partitions=30_000, rf=3, racks=3, seed=4)),
        "u200k": ("s200k", lambda: synth_cluster(brokers=200, partitions=200_000, rf=3, racks=3, seed=1)),
        "u200k+10": ("s200k_new10", lambda: synth_cluster(brokers=200, partitions=200_000, rf=3, racks=3,
                                                          empty_brokers=10, seed=2)),
        "k200k": ("skewed200k", lambda: skewed_cluster(partitions=200_000, seed=11)),
        "u1m": ("s1m", lambda: synth_cluster(brokers=200, partitions=1_000_000, rf=3, racks=3, seed=3)),
        "k1m": ("skewed1m", lambda: skewed_cluster(partitions=1_000_000, seed=11)),
    }
    return {key: _snapshot(work, name, make) for key, (name, make) in makers.items()
            if key in wanted and not (quick and key.endswith("1m"))}


# the plan figures a baseline must match for "the same plan"
SAME_PLAN = ("replica_moves", "lower_bound_moves", "bytes_moved", "replica_spread_after", "leader_spread_after",
             "topics_over_ceil", "leadership_changes", "batches")

# (label, snapshot, kind, drained brokers, extra argv, target s, target MiB, baseline?)
CASES = [
    ("drain 2 brokers, 30 brokers / 30k", "u30k", "drain", "1,2", [], 10, 2048, True),
    ("drain 1 broker, 200k", "u200k", "drain", "1", [], 10, 2048, False),
    ("drain 3 brokers (3 racks), 200k", "u200k", "drain", "1,2,3", [], 10, 2048, False),
    ("rebalance +10 empty brokers, 200k", "u200k+10", "rebalance", "", [], 60, None, True),
    ("drain 1 broker, skewed 200k", "k200k", "drain", "1", [], 10, 2048, True),
    ("rebalance, skewed 200k (bytes)", "k200k", "rebalance", "", [], 60, None, True),
    ("rebalance --balance count, skewed 200k", "k200k", "rebalance", "", ["--balance", "count"], 60, None, True),
    ("drain 1 broker, 1M", "u1m", "drain", "1", [], 60, 6144, False),
    ("drain 3 brokers (3 racks), 1M", "u1m", "drain", "1,2,3", [], 60, 6144, False),
    ("rebalance, skewed 1M (bytes)", "k1m", "rebalance", "", [], 300, None, False),
    ("rebalance --balance count, skewed 1M", "k1m", "rebalance", "", ["--balance", "count"], 300, None, False),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--repeat-large", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="skip the million-partition cases")
    ap.add_argument("--only", help="run only the cases whose label contains this text")
    ap.add_argument("--baseline", help="an older kplan (a commit or a checkout folder) to run the cases marked for "
                    "it with, alternately with this one")
    ap.add_argument("--baseline-timeout", type=float, default=900)
    ap.add_argument("--work", type=Path, default=HERE / "out" / "work")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_generate(*args.one[1:])))
        return 0

    args.work.mkdir(parents=True, exist_ok=True)
    print("generating snapshots (uniform: synth_cluster, RF 3, 3 racks; skewed: bench/skewed_cluster.py)",
          flush=True)
    wanted = {snap for label, snap, *_ in CASES if not args.only or args.only in label}
    snaps = _snapshots(args.work, args.quick, wanted)
    base = baseline_tree(args.baseline, args.work) if args.baseline else None
    load = os.getloadavg()
    results = []
    for label, snap, kind, brokers, extra, target_s, target_mib, with_base in CASES:
        if snap not in snaps or (args.only and args.only not in label):
            continue
        large = snap.endswith("1m")
        reps = args.repeat_large if large else args.repeat
        print(f"\n== {label} ({reps} run(s)); load average {os.getloadavg()[0]:.1f}", flush=True)
        out_dir = args.work / f"plan_{snap}_{kind}_{brokers.replace(',', '-') or 'all'}_{'_'.join(extra)}"
        argv = [kind, "--snapshot", snaps[snap], "--out", str(out_dir), *extra]
        if kind == "drain":
            argv += ["--brokers", brokers]
        base_argv = [x if x != str(out_dir) else str(out_dir) + "_baseline" for x in argv]
        now_runs, base_runs = [], []
        for _ in range(reps):   # alternating, run by run
            now_runs.append(run_kplan(ROOT, argv))
            if base is not None and with_base:
                base_runs.append(run_kplan(base, base_argv, args.baseline_timeout))
        plan = _median(now_runs)
        row = {"case": label, "snapshot": snap, "kind": kind, "brokers": brokers, "argv": extra, "kplan": plan,
               "target_wall_s": target_s, "target_rss_mib": target_mib,
               "meets_time": plan["wall_s"] <= target_s,
               "meets_memory": target_mib is None or plan["rss_mib"] <= target_mib,
               "load_average_1m": round(os.getloadavg()[0], 1)}
        row["kafka_generate"] = _child_generate(snaps[snap], brokers or "-")
        if base_runs:
            row["baseline"] = b = _median(base_runs) if not any(r.get("timed_out") for r in base_runs) \
                else base_runs[-1]
            if not b.get("timed_out"):
                row["ratio_wall_now_over_baseline"] = round(plan["wall_s"] / b["wall_s"], 3)
                row["same_plan_as_baseline"] = all(plan[k] == b[k] for k in SAME_PLAN)
        results.append(row)
        _print_row(row)
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "plan.json").write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": [round(x, 1) for x in load]},
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
        "baseline": str(args.baseline) if args.baseline else None, "results": results}, indent=2) + "\n")
    print(f"\nwrote {HERE / 'out' / 'plan.json'}")
    return 0 if all(r["meets_time"] and r["meets_memory"] for r in results) else 1


def _fmt_plan(p: dict) -> str:
    if p.get("timed_out"):
        return f"no plan after {p['wall_s']:.0f}s (stopped)"
    lead = f"leadership changes {p['leadership_changes']}"
    if p.get("necessary_leadership_changes") is not None:
        lead += f" ({p['necessary_leadership_changes']} necessary, {p['optional_leadership_changes']} optional, " \
                f"scope {p['leader_scope']})"
    return (f"wall {p['wall_s']:.2f}s, peak RSS {p['rss_mib']:.0f} MiB; moves {p['replica_moves']} (lower bound "
            f"{p['lower_bound_moves']}), replica spread {p['replica_spread_before']} -> {p['replica_spread_after']}"
            f", leader spread {p['leader_spread_before']} -> {p['leader_spread_after']}, topics above ceil "
            f"{p['topics_over_ceil']} (max {p['max_topic_leaders_after']}/broker), {lead}"
            + (f", bytes dev {p['bytes_dev_pct_after']}%" if p.get("bytes_dev_pct_after") is not None else ""))


def _print_row(row: dict) -> None:
    p = row["kplan"]
    print(f"  kplan      {_fmt_plan(p)}  [target {row['target_wall_s']}s"
          + (f", {row['target_rss_mib']} MiB" if row["target_rss_mib"] else "") + f"; runs {p['runs_wall_s']}]")
    if p.get("timings_s"):
        print("             " + ", ".join(f"{k} {v:.2f}s" for k, v in p["timings_s"].items()))
    alt = p.get("alternative")
    if alt:
        print(f"             with scope {alt['scope']}: {alt['leadership_changes']} leadership changes "
              f"({alt['optional']} optional), leader spread {alt['leader_spread_after']}, topics above ceil "
              f"{alt['topics_over_ceil_partitions_per_broker']}")
    if row.get("baseline"):
        b = row["baseline"]
        print(f"  baseline   {_fmt_plan(b)}" + (f"  [runs {b['runs_wall_s']}]" if "runs_wall_s" in b else ""))
        if "ratio_wall_now_over_baseline" in row:
            print(f"             now / baseline: wall x{row['ratio_wall_now_over_baseline']:.2f}, same plan: "
                  f"{row['same_plan_as_baseline']}")
    g = row["kafka_generate"]
    print(f"  --generate algorithm {g['generate_s']:.2f}s: moves {g['replica_moves']} ({g['partitions_changed']} "
          f"partitions changed), replica spread {g['replica_spread_after']}, leader spread "
          f"{g['leader_spread_after']}, topics above ceil {g['topics_over_ceil']}, leadership changes "
          f"{g['leadership_changes']}" + (f", bytes dev {g['bytes_dev_pct_after']}%" if g["bytes_dev_pct_after"]
                                          is not None else ""))
    if p.get("bytes_moved") and g.get("bytes_moved"):
        print(f"             bytes moved: kplan {p['bytes_moved'] / 2**40:.2f} TiB vs --generate "
              f"{g['bytes_moved'] / 2**40:.2f} TiB")


if __name__ == "__main__":
    sys.exit(main())
