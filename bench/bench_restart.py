"""Benchmark of `kplan plan restart` (issue 17: the restart plan for one broker of a generated 200k-partition
cluster in <= 5 s), with the bytes it copies beside what a full drain of the same brokers copies, both planned
in the same run, alternating.

Cluster: bench/skewed_cluster.py at 200k partitions (100 brokers on 4 racks, Zipf-sized topics, RF 1-4 mixed:
about 10 % of the partitions RF 1, hot and new brokers, log-normal sizes), written as a snapshot folder.
Cases: a restart of one broker (broker 1, the controller: last in its roll), of one hot broker, of three
brokers, and (once, not a target) of every broker. Each plan is a fresh `python -m planner.cli plan ...`
child: wall time (process start, imports, snapshot read, planning, writing) and its own peak RSS; the
planner's own figure is solve.json's `timings_s.total`. For each restart the drain of the same brokers runs
right after it (`kplan plan drain`), so the two are measured side by side under the same load. Medians over
--repeat rounds. Writes bench/out/restart.json.

    .venv/bin/python bench/bench_restart.py [--repeat 3] [--quick]
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

TARGET_S = 5.0


def uptime() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_plan(argv: list[str]) -> dict:
    out = Path(argv[argv.index("--out") + 1])
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "plan", *argv, "--quiet"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"kplan plan {' '.join(argv)} failed:\n{proc.stderr.read().decode()[-3000:]}")
    doc = json.loads((out / "plan.json").read_text())
    solve = json.loads((out / "solve.json").read_text())
    s = doc["summary"]
    rec = {"wall_s": round(wall, 2), "rss_mib": round(usage.ru_maxrss / 1024, 1),
           "planner_s": solve["timings_s"]["total"], "replica_moves": s["replica_moves"],
           "partitions": s["partitions_moved"], "bytes": s["bytes_moved"]}
    if doc["kind"] == "restart":
        rec.update(leaders_to_move=s["leaders_to_move"], cannot_move=s["cannot_move"],
                   reasons=doc["protection"]["reasons"], drain_replicas_named=s["drain_replicas"],
                   drain_bytes_named=s["drain_bytes"], worst_before=s["worst_level_before"],
                   worst_after=s["worst_level_after"], timings_s=solve["timings_s"])
    return rec


def median(runs: list[dict]) -> dict:
    out = dict(runs[-1])
    for k in ("wall_s", "rss_mib", "planner_s"):
        out[k] = round(statistics.median(r[k] for r in runs), 2)
        out[k + "_range"] = [min(r[k] for r in runs), max(r[k] for r in runs)]
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="one round, no roll of every broker")
    args = p.parse_args()
    from skewed_cluster import skewed_cluster

    from planner.synth import to_snapshot

    work = HERE / "out" / "work-restart"
    work.mkdir(parents=True, exist_ok=True)
    snap = work / "skewed200k"
    if not (snap / "manifest.json").exists():
        to_snapshot(skewed_cluster(partitions=200_000, seed=11), snap)
    load_before = uptime()
    cases = [("broker 1 (the controller)", "1"), ("broker 7 (hot)", "7"), ("brokers 2,3,4", "2,3,4")]
    rounds = 1 if args.quick else args.repeat
    results: dict[str, dict[str, list[dict]]] = {label: {"restart": [], "drain": []} for label, _ in cases}
    for r in range(rounds):
        for label, brokers in cases:
            for kind in ("restart", "drain") if r % 2 == 0 else ("drain", "restart"):
                rec = run_plan([kind, "--snapshot", str(snap), "--brokers", brokers, "--out", str(work / kind)])
                results[label][kind].append(rec)
                print(f"round {r + 1} {label} {kind}: {rec['wall_s']} s wall, {rec['planner_s']} s planner, "
                      f"{rec['replica_moves']} replicas, {rec['bytes']} bytes", flush=True)
    summary = {}
    for label, brokers in cases:
        rs, dr = median(results[label]["restart"]), median(results[label]["drain"])
        summary[label] = {"brokers": brokers, "restart": rs, "drain": dr,
                          "bytes_ratio": round(rs["bytes"] / dr["bytes"], 4) if dr["bytes"] else None,
                          "target_s": TARGET_S, "met": rs["wall_s"] <= TARGET_S}
    every = None
    if not args.quick:
        every = run_plan(["restart", "--snapshot", str(snap), "--brokers", ",".join(map(str, range(1, 101))),
                          "--out", str(work / "every")])
        print(f"roll of every broker: {every['wall_s']} s wall, {every['replica_moves']} replicas", flush=True)
    load_after = uptime()
    out = {"cluster": "skewed 200k (bench/skewed_cluster.py, seed 11): 100 brokers, 4 racks, RF 1-4",
           "rounds": rounds, "load_before": load_before, "load_after": load_after, "cases": summary,
           "every_broker": every}
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "restart.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nload {load_before} -> {load_after}")
    print(f"{'case':<28} {'restart wall':>13} {'planner':>8} {'temp replicas':>14} {'bytes':>16} "
          f"{'drain wall':>11} {'drain replicas':>15} {'drain bytes':>16} {'ratio':>7}")
    for label, s in summary.items():
        rs, dr = s["restart"], s["drain"]
        print(f"{label:<28} {rs['wall_s']:>11.2f} s {rs['planner_s']:>6.2f} s {rs['replica_moves']:>14} "
              f"{rs['bytes']:>16,} {dr['wall_s']:>9.2f} s {dr['replica_moves']:>15} {dr['bytes']:>16,} "
              f"{s['bytes_ratio']:>7.4f}" + ("" if s["met"] else "  OVER TARGET"))
    return 0 if all(s["met"] for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
