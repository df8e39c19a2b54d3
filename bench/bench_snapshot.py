"""Benchmark `kplan snapshot` against a real local ZooKeeper.

For each scale (200 brokers / 200,000 partitions / RF 3, then 1,000,000 partitions) a fresh ZooKeeper is
started, the synthetic cluster is loaded with planner.loader (its brokers stay registered while the loading
session lives), and `kplan snapshot` runs as a child process, timed wall-clock, with the peak RSS of its whole
process tree (worker processes included) sampled every 20 ms. Each snapshot is checked against the cluster
it was loaded from (fingerprint computed independently by planner.synth, partition count).

    .venv/bin/python bench/bench_snapshot.py            # everything (~5 minutes on 2 cores)
    .venv/bin/python bench/bench_snapshot.py --quick    # 200k only, multiRead only
    .venv/bin/python bench/bench_snapshot.py --quick --runs 5 --baseline d34e8c8   # side by side with a commit

`--baseline REV|DIR`: every run of this checkout is followed by one of that commit's kplan (exported with `git
archive`, bench/baseline.py) or checkout folder, on the same ZooKeeper, checked the same way: medians side by
side and their ratio. Prints a table and writes bench/out/snapshot.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from baseline import baseline_tree, env_for  # noqa: E402

from planner import loader, synth  # noqa: E402
from planner import zk as zkmod  # noqa: E402
from planner.zkserver import ZooKeeperServer  # noqa: E402

OUT = ROOT / "bench" / "out"


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_snapshot(connect: str, out: Path, workers: int, read_mode: str, root: Path = ROOT) -> dict:
    """`kplan snapshot` of the checkout at `root` as a child: wall, peak RSS of its process tree, manifest."""
    # --no-sizes: the brokers loaded here are registrations only, with nothing listening (bench_sizes.py measures
    # the snapshot with sizes read from the brokers, on the emulated engine)
    cmd = [sys.executable, "-m", "planner.cli", "snapshot", "--zk", connect, "--out", str(out), "--no-sizes",
           "--workers", str(workers), "--read-mode", read_mode]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=root, env=env_for(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    ps = psutil.Process(proc.pid)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            try:
                peak = max(peak, tree_rss(ps))
            except psutil.Error:
                pass
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - started
    stop.set()
    sampler.join()
    if proc.returncode:
        raise SystemExit(f"snapshot failed ({proc.returncode}):\n{stderr}\n{stdout}")
    manifest = json.loads((out / "manifest.json").read_text())
    return {"wall_s": round(wall, 3), "peak_rss_mib": round(peak / 2**20, 1), "manifest": manifest}


def bench_scale(partitions: int, runs: int, variants: list[tuple[str, int, int]], heap_mb: int,
                base: Path | None = None) -> list[dict]:
    print(f"\n== {partitions:,} partitions, 200 brokers, RF 3", flush=True)
    c = synth.synth_cluster(brokers=200, partitions=partitions, rf=3, racks=4, seed=7, shrunk_isr_fraction=0.02,
                            moved_leader_fraction=0.05)
    work = Path(tempfile.mkdtemp(prefix=f"kplan-bench-{partitions}-"))
    expected_fp = json.loads((synth.to_snapshot(c, work / "expected") / "manifest.json").read_text())["fingerprint"]
    desc = synth.to_description(c)
    del c
    server = ZooKeeperServer(work / "zk", heap_mb=heap_mb, jute_maxbuffer=32 * 1024 * 1024)
    server.start()
    results = []
    try:
        connect = server.connect_string + "/kafka"
        client = zkmod.connect(connect, timeout=30)
        try:
            t = time.monotonic()
            loaded = loader.load_cluster(client, desc, progress=lambda m: None)
            load_s = time.monotonic() - t
            del desc
            gc.collect()
            print(f"loaded {loaded.znodes:,} znodes in {load_s:.1f} s", flush=True)
            for read_mode, workers, n_runs in variants:
                n_runs = n_runs or runs
                samples: dict[str, list[dict]] = {"now": [], "baseline": []}
                for i in range(n_runs):
                    for label, root in [("now", ROOT)] + ([("baseline", base)] if base else []):   # alternating
                        r = run_snapshot(connect, work / f"snap-{label}-{read_mode}-{workers}-{i}", workers,
                                         read_mode, root)
                        m = r.pop("manifest")
                        assert m["fingerprint"] == expected_fp, "snapshot does not match the loaded cluster"
                        assert m["counts"]["partitions"] == partitions and m["consistency"]["consistent"]
                        samples[label].append(r)
                        print(f"  {label:8s} {read_mode:9s} workers={workers} run {i + 1}/{n_runs}: "
                              f"{r['wall_s']:.2f} s, peak RSS {r['peak_rss_mib']:.0f} MiB", flush=True)
                row = {"partitions": partitions, "brokers": 200, "rf": 3, "read_mode": read_mode, "workers": workers,
                       "runs": n_runs, **_stats(samples["now"]), "load_s": round(load_s, 1), "znodes": loaded.znodes,
                       "load_average_1m": round(os.getloadavg()[0], 2)}
                if base:
                    row["baseline"] = _stats(samples["baseline"])
                    row["ratio_now_over_baseline"] = round(row["median_s"] / row["baseline"]["median_s"], 3)
                results.append(row)
        finally:
            client.stop()
            client.close()
    finally:
        server.stop()
        subprocess.call(["rm", "-rf", str(work)])
    return results


def _stats(samples: list[dict]) -> dict:
    walls = [s["wall_s"] for s in samples]
    return {"median_s": round(statistics.median(walls), 3), "min_s": min(walls), "max_s": max(walls),
            "walls_s": walls, "peak_rss_mib": max(s["peak_rss_mib"] for s in samples)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200k partitions with multiRead only")
    ap.add_argument("--runs", type=int, default=3, help="runs per variant at 200k (median reported)")
    ap.add_argument("--partitions", type=int, default=200_000, help="the first scale (a smaller one for a try)")
    ap.add_argument("--baseline", help="a commit (or a checkout folder) whose kplan runs alternately with this one")
    args = ap.parse_args()
    load = os.getloadavg()
    base = baseline_tree(args.baseline, OUT / "work") if args.baseline else None
    results = bench_scale(args.partitions, args.runs,
                          [("multiread", 1, 0)] + ([] if args.quick else [("multiread", 2, 2), ("plain", 1, 1)]),
                          heap_mb=3072, base=base)
    if not args.quick:
        results += bench_scale(1_000_000, 2, [("multiread", 1, 2), ("multiread", 2, 1)], heap_mb=6144, base=base)
    print("\n| partitions | read mode | workers | runs | median s | min s | max s | peak RSS MiB |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['partitions']:,} | {r['read_mode']} | {r['workers']} | {r['runs']} | {r['median_s']:.2f} | "
              f"{r['min_s']:.2f} | {r['max_s']:.2f} | {r['peak_rss_mib']:.0f} |")
        if "baseline" in r:
            b = r["baseline"]
            print(f"| {args.baseline} | | | | {b['median_s']:.2f} | {b['min_s']:.2f} | {b['max_s']:.2f} | "
                  f"{b['peak_rss_mib']:.0f} |  now / baseline x{r['ratio_now_over_baseline']:.2f}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "snapshot.json").write_text(json.dumps({
        "benchmark": "kplan snapshot from a local ZooKeeper 3.9 (pyspark jars)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "memory_gib": round(psutil.virtual_memory().total / 2**30, 1)},
        "target": "200 brokers / 200,000 partitions / RF 3: <= 20 s wall, <= 2 GiB RSS on 2 cores",
        "baseline": args.baseline, "load_average_at_start": [round(x, 2) for x in load],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "results": results,
    }, indent=2) + "\n")
    print(f"\nwrote {OUT / 'snapshot.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
