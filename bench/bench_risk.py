"""Benchmark: the drain-risk sweep (every single broker + every rack, both modes) with the Spark job, and the
numpy reference replay on the same data.

    .venv/bin/python bench/bench_risk.py [--sizes 200000,1000000] [--runs 3,2] [--master local[2]]

For each size: a synthetic cluster (200 brokers, 3 racks, RF 3) written as a snapshot folder; then
`kplan risk --snapshot D --out D2 --all-brokers --all-racks --mode both` as a child process, timed from
launch to exit (JVM start included), with the peak RSS of the JVM (psutil over the java processes under
it) and of the whole process tree; then the reference replay (planner.replay) in a child process, timed the
same way. Prints medians and writes bench/out/risk.json. Targets (issue 4): 200k <= 45 s and <= 4 GiB,
1M <= 120 s, growth 200k -> 1M about linear.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

GiB = 1024 ** 3


def measure(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Run cmd; wall time and peak RSS (java processes / whole tree), sampled every 50 ms."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = {"java": 0, "tree": 0}
    cpu: dict[int, float] = {}  # last seen user+system CPU seconds of each java process
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            java = tree = 0
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    tree += rss
                    if "java" in p.name():
                        java += rss
                        t = p.cpu_times()
                        cpu[p.pid] = t.user + t.system
                except psutil.NoSuchProcess:
                    pass
            peak["java"] = max(peak["java"], java)
            peak["tree"] = max(peak["tree"], tree)
            done.wait(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = proc.communicate()
    wall = time.monotonic() - started
    done.set()
    t.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-4000:]}")
    return {"wall_s": wall, "jvm_peak_rss": peak["java"], "tree_peak_rss": peak["tree"], "jvm_cpu_s": sum(cpu.values()),
            "stdout": out}


REFERENCE = """
import json, sys, time
from pathlib import Path
from planner import api, replay, risk, snapshot_io
t = time.monotonic()
req = api.RiskRequest(snapshot=Path(sys.argv[1]), out=Path(sys.argv[2]), all_brokers=True, all_racks=True)
prepared = risk.prepare(req)
state = replay.ClusterState.from_snapshot(snapshot_io.read_snapshot(sys.argv[1]))
res = replay.replay(state, prepared.scenarios, prepared.kafka_version)
res.scenarios.to_pandas().to_json(sys.argv[2] + "/reference_scenarios.json", orient="records")
print(json.dumps({"evaluated": res.rows.num_rows, "replay_s": time.monotonic() - t}))
"""


def one_size(n: int, runs: int, master: str, work: Path) -> dict:
    from planner import synth

    snap = work / f"snap-{n}"
    c = synth.synth_cluster(brokers=200, partitions=n, rf=3, racks=3, seed=42, partitions_per_topic=100)
    synth.to_snapshot(c, snap)
    env = {**os.environ, "SPARK_MASTER": master}
    spark_runs, ref_runs = [], []
    agree = None
    for i in range(runs):
        out = work / f"risk-{n}-{i}"
        r = measure([sys.executable, "-m", "planner.cli", "risk", "--snapshot", str(snap), "--out", str(out),
                     "--all-brokers", "--all-racks", "--mode", "both", "--json"], env)
        summary = json.loads(r.pop("stdout"))
        r["evaluated"] = summary["evaluated"]
        r["scenarios"] = len(summary["scenarios"])
        r["job_s"] = summary["elapsed_s"]
        spark_runs.append(r)
        print(f"  {n:>9,} spark run {i + 1}: {r['wall_s']:.1f}s, JVM CPU {r['jvm_cpu_s']:.0f}s, JVM peak "
              f"{r['jvm_peak_rss'] / GiB:.2f} GiB, load {os.getloadavg()[0]:.1f}", flush=True)
        if i == 0:
            q = measure([sys.executable, "-c", REFERENCE, str(snap), str(out)])
            ref = json.loads(q.pop("stdout"))
            q.update(ref)
            ref_runs.append(q)
            agree = _agree(out)
            print(f"  {n:>9,} reference: {q['wall_s']:.1f}s, peak {q['tree_peak_rss'] / GiB:.2f} GiB, "
                  f"scenario figures agree: {agree}", flush=True)
        shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(snap, ignore_errors=True)
    wall = statistics.median(r["wall_s"] for r in spark_runs)
    evaluated = spark_runs[0]["evaluated"]
    ref_wall = statistics.median(r["wall_s"] for r in ref_runs)
    return {
        "partitions": n, "brokers": 200, "racks": 3, "rf": 3, "scenarios": spark_runs[0]["scenarios"],
        "evaluated_partition_scenarios": evaluated, "runs": runs, "master": master,
        "spark_wall_s_median": wall, "spark_wall_s": [r["wall_s"] for r in spark_runs],
        "spark_job_s": [r["job_s"] for r in spark_runs],
        "jvm_cpu_s": [r["jvm_cpu_s"] for r in spark_runs],
        "jvm_peak_rss_gib": max(r["jvm_peak_rss"] for r in spark_runs) / GiB,
        "tree_peak_rss_gib": max(r["tree_peak_rss"] for r in spark_runs) / GiB,
        "rate_per_s": evaluated / wall,
        "reference_wall_s": ref_wall, "reference_peak_rss_gib": ref_runs[0]["tree_peak_rss"] / GiB,
        "reference_evaluated": ref_runs[0]["evaluated"], "spark_over_reference": wall / ref_wall,
        "agree": agree,
    }


def _agree(out: Path) -> bool:
    """The Spark job's scenarios.parquet and the reference's scenario table hold the same counts."""
    import pyarrow.parquet as pq

    from planner import risk_model as rm

    got = pq.read_table(out / "scenarios.parquet").to_pylist()
    want = json.loads((out / "reference_scenarios.json").read_text())
    keys = ["scenario_id", "evaluated", *rm.COUNTED, "survivors", "leaders_total", "leader_max", "level"]
    return len(got) == len(want) and all(g[k] == w[k] for g, w in zip(got, want, strict=True) for k in keys)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200000,1000000")
    ap.add_argument("--runs", default="3,2", help="runs per size (medians are reported)")
    ap.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[2]"))
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    runs = [int(x) for x in args.runs.split(",")]
    runs += [runs[-1]] * (len(sizes) - len(runs))
    load = os.getloadavg()
    print(f"bench_risk: sizes {sizes}, runs {runs}, master {args.master}, load average {load[0]:.1f}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="kplan-bench-risk-"))
    results = []
    try:
        for n, r in zip(sizes, runs, strict=True):
            results.append(one_size(n, r, args.master, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{'partitions':>10} {'scen':>5} {'part-scen':>10} {'spark s':>8} {'JVM GiB':>8} {'rate/s':>10} "
          f"{'ref s':>7} {'spark/ref':>9} {'agree':>6}")
    for r in results:
        print(f"{r['partitions']:>10,} {r['scenarios']:>5} {r['evaluated_partition_scenarios']:>10,} "
              f"{r['spark_wall_s_median']:>8.1f} {r['jvm_peak_rss_gib']:>8.2f} {r['rate_per_s']:>10,.0f} "
              f"{r['reference_wall_s']:>7.1f} {r['spark_over_reference']:>9.2f} {str(r['agree']):>6}")
    growth = None
    if len(results) >= 2:
        a, b = results[0], results[-1]
        growth = {"partitions_x": b["partitions"] / a["partitions"],
                  "spark_time_x": b["spark_wall_s_median"] / a["spark_wall_s_median"],
                  "reference_time_x": b["reference_wall_s"] / a["reference_wall_s"]}
        print(f"growth {a['partitions']:,} -> {b['partitions']:,}: partitions x{growth['partitions_x']:.1f}, "
              f"Spark time x{growth['spark_time_x']:.2f}, reference time x{growth['reference_time_x']:.2f}")
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "risk.json").write_text(json.dumps({"load_average_at_start": load, "results": results,
                                               "growth": growth, "cores": os.cpu_count()}, indent=2) + "\n")
    print(f"wrote {out / 'risk.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
