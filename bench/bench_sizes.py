"""Issue 18's figures at 200,000 partitions on the emulated engine, each side by side in one run, alternating:

1. `kplan snapshot` with sizes and capacity read from the brokers (DescribeLogDirs from all 200 emulated
   brokers) against `kplan snapshot --no-sizes` (what the snapshot read before: ZooKeeper only), on the same
   running sandbox. Target: with sizes <= 2x without.
2. `kplan plan drain` with the disk-capacity constraint against the same drain without it (the snapshot's
   capacity columns nulled: nothing to check), once with room to spare (the constraint only checks) and once
   tight (a `--max-disk-usage` just above the fullest broker, so the placement must be repaired and the batches
   ordered). Target: <= +20 % planning time.

    .venv/bin/python bench/bench_sizes.py [--partitions 200000] [--brokers 200] [--reps 3]

Prints the figures and writes bench/out/sizes.json. Run it under the team lock.
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
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner import snapshot_io as sio  # noqa: E402
from planner.sandbox import Sandbox  # noqa: E402

OUT = ROOT / "bench" / "out"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return took


def without_capacity(src: Path, dst: Path) -> Path:
    """The same snapshot with its capacity columns nulled (checksums rewritten): a plan then checks no disk."""
    snap = sio.read_snapshot(src)
    b = snap.brokers
    for col in ("capacity_bytes", "disk_used_bytes"):
        b = b.set_column(b.schema.get_field_index(col), col, pa.nulls(b.num_rows, pa.int64()))
    m = dict(snap.manifest)
    return sio.write_snapshot(dst, m, b, snap.topics, pq.read_table(src / "partitions.parquet"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=200_000)
    ap.add_argument("--brokers", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-sizes-"))
    kplan = [sys.executable, "-m", "planner.cli"]
    out: dict = {"args": vars(args), "load_before": load()}
    sb = None
    try:
        t = time.perf_counter()
        sb = Sandbox.up(work / "sb", brokers=args.brokers, partitions=args.partitions, rf=3, racks=3,
                        timeout=1800, catch_up_delay=0.1, auto_rebalance=False)
        out["sandbox_up_s"] = round(time.perf_counter() - t, 1)
        print(f"sandbox up: {args.brokers} brokers, {args.partitions} partitions in {out['sandbox_up_s']} s "
              f"(load {load()})", flush=True)
        snaps = {"without sizes": [], "with sizes": []}
        for i in range(args.reps):
            for label, extra in (("without sizes", ["--no-sizes"]), ("with sizes", [])):
                s = timed([*kplan, "snapshot", "--zk", sb.connect_string, "--out", str(work / f"snap-{i}-{label[0]}"),
                           "--force", *extra])
                snaps[label].append(round(s, 2))
                print(f"  snapshot {label:<14} {s:6.2f} s  (load {load()})", flush=True)
        med = {k: statistics.median(v) for k, v in snaps.items()}
        out["snapshot"] = {"runs_s": snaps, "median_s": med,
                           "ratio": round(med["with sizes"] / med["without sizes"], 2), "target_ratio": 2.0}
        print(f"snapshot medians: {med}, ratio {out['snapshot']['ratio']} (target <= 2)", flush=True)
        sb.down()
        sb = None

        with_cap = work / "snap-0-w"
        no_cap = without_capacity(with_cap, work / "snap-nocap")
        snap = sio.read_snapshot(with_cap)
        b = snap.brokers.to_pydict()
        fullest = max(u / c for u, c in zip(b["disk_used_bytes"], b["capacity_bytes"], strict=True))
        drained = b["broker"][0]
        drain = str(drained)
        p = snap.partitions.to_pydict()
        moving = sum(s for reps, s in zip(p["replicas"], p["size_bytes"], strict=True) if drained in reps)
        kept = [(u, c) for x, u, c in zip(b["broker"], b["disk_used_bytes"], b["capacity_bytes"], strict=True)
                if x != drained]
        lo, hi = max(u / c for u, c in kept), 1.0   # tight: the kept brokers' room under the limit is 1.3x what the drain moves
        for _ in range(60):
            mid = (lo + hi) / 2
            room = sum(max(0, mid * c - u) for u, c in kept)
            lo, hi = (mid, hi) if room < 1.3 * moving else (lo, mid)
        tight = f"{hi:.6f}"
        out["capacity"] = {"fullest_used_fraction": round(fullest, 5), "tight_max_disk_usage": tight,
                           "bytes_moved": moving}
        cases = {"without capacity": (no_cap, []), "with capacity (room)": (with_cap, []),
                 "with capacity (tight)": (with_cap, ["--max-disk-usage", tight])}
        plans = {k: [] for k in cases}
        for i in range(args.reps):
            for label, (s, extra) in cases.items():
                took = timed([*kplan, "plan", "drain", "--snapshot", str(s), "--brokers", drain, "--out",
                              str(work / f"plan-{i}"), "--force", "--quiet", *extra])
                plans[label].append(round(took, 2))
                print(f"  plan drain {label:<24} {took:6.2f} s  (load {load()})", flush=True)
        medp = {k: statistics.median(v) for k, v in plans.items()}
        base = medp["without capacity"]
        out["plan"] = {"runs_s": plans, "median_s": medp, "drained": drain,
                       "ratio": {k: round(v / base, 3) for k, v in medp.items()}, "target_ratio": 1.2}
        solve = json.loads((work / f"plan-{args.reps - 1}" / "solve.json").read_text())
        out["plan"]["tight_timings_s"] = solve["timings_s"]
        doc = json.loads((work / f"plan-{args.reps - 1}" / "plan.json").read_text())
        lim = doc["brokers"]["disk_limit_bytes"]
        out["plan"]["tight_fullest_after_vs_limit"] = max(
            u / limit for u, limit, e in zip(doc["after"]["disk_used_bytes"], lim, doc["brokers"]["eligible"],
                                             strict=True) if e)
        print(f"plan medians: {medp}, ratios {out['plan']['ratio']} (target <= 1.2)", flush=True)
        out["load_after"] = load()
    finally:
        if sb is not None:
            sb.down()
        shutil.rmtree(work, ignore_errors=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "sizes.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
