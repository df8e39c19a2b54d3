"""Issue 18's figures at 200,000 partitions on the emulated engine, each side by side in one run, alternating:

1. `kplan snapshot` with sizes and capacity read from the brokers (DescribeLogDirs from all 200 emulated
   brokers, each at the endpoint its ZooKeeper registration gives) against `kplan snapshot --no-sizes` (what
   the snapshot read before: ZooKeeper only), on the same running sandbox (the generated cluster, RF 3, 3 racks,
   each broker's disk --disk-tib, 8 TiB: its synthetic sizes fill 45-62 % of that). Target: with sizes <= 2x
   without.
2. Every plan kind that checks disk capacity, with the constraint against the same plan without it (the
   snapshot's capacity columns nulled: nothing to check; sizes stay, so everything else is the same work):
   - `plan drain` of one broker, with room to spare (the default 85 %: the constraint only checks) and tight
     (a `--max-disk-usage` that leaves the kept brokers 1.3x the drain's bytes of room: the placement must be
     repaired and the batches ordered);
   - `plan rebalance`, `plan restart` of one broker and `plan return` of a drained broker (its drain applied to
     the snapshot and recorded `drained`, as bench_return.py does), each with room and tight (a
     `--max-disk-usage` just above the fullest broker's use now).
   Target: <= +20 % planning time. Each plan is a fresh `python -m planner.cli plan ...` child: wall time,
   and the planner's own figure (solve.json `timings_s.total`).

    .venv/bin/python bench/bench_sizes.py [--partitions 200000] [--brokers 200] [--reps 3] [--keep DIR]
                                          [--skip-snapshot SNAPSHOT_DIR]

Prints the figures and writes bench/out/sizes.json. Run it under the team lock. `--keep DIR` keeps the
snapshots (for profiling); `--skip-snapshot DIR` plans from a kept with-sizes snapshot without a sandbox.
"""

from __future__ import annotations

import argparse
import json
import math
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
from planner.sandbox.presets import generated_description  # noqa: E402

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


def drained(src: Path, work: Path, broker: int) -> Path:
    """The snapshot after `broker`'s drain (its plan's lists applied, as an apply leaves them) with the broker
    recorded `drained` by that plan: what `plan return` starts from (bench_return.py's recipe)."""
    from planner import api

    run = work / "drain-for-return"
    drain = api.plan_drain(api.DrainRequest(snapshot=src, out=run / "plan", brokers=(broker,)))
    snap = sio.read_snapshot(src)
    parts = pq.read_table(src / "partitions.parquet")
    target = {(m.topic, m.partition): list(m.to_replicas) for m in drain.plan.moves}
    new = [target.get((t, p), r) for t, p, r in zip(parts.column("topic").to_pylist(),
                                                       parts.column("partition").to_pylist(),
                                                       parts.column("replicas").to_pylist(), strict=True)]
    cols = {n: parts.column(n) for n in parts.column_names}
    cols["replicas"] = pa.array(new, sio.INT_LIST)
    cols["isr"] = pa.array(new, sio.INT_LIST)
    cols["leader"] = pa.array([r[0] for r in new], pa.int32())
    # the moved replicas' own sizes: a new replica holds its partition's size; the snapshot's per-replica column
    # follows the new lists
    rs = [z or [s] * len(r) for z, s, r in zip(parts.column("replica_sizes").to_pylist(),
                                            parts.column("size_bytes").to_pylist(),
                                            parts.column("replicas").to_pylist(), strict=True)]
    size = parts.column("size_bytes").to_pylist()
    old = parts.column("replicas").to_pylist()
    cols["replica_sizes"] = pa.array([[dict(zip(o, z, strict=True)).get(b, s) for b in n] if n != o else z
                                      for o, n, z, s in zip(old, new, rs, size, strict=True)], pa.list_(pa.int64()))
    m = {k: v for k, v in snap.manifest.items() if k != "files"}
    m["maintenance"] = [{"broker": broker, "state": "drained", "plan_id": drain.plan_id, "run": str(run),
                         "by": {"user": "bench"}, "since": "2026-11-25T00:00:00Z", "reason": "bench"}]
    m["fingerprint"] = sio.assignment_fingerprint(parts.column("topic"), parts.column("partition").to_numpy(),
                                                  cols["replicas"])
    # the brokers' disk as the drain left it: what moved off `broker` is on the brokers that took it
    b = snap.brokers.to_pydict()
    used = dict(zip(b["broker"], b["disk_used_bytes"], strict=True))
    for o, n, s in zip(old, new, size, strict=True):
        if n != o:
            for x in set(o) - set(n):
                used[x] -= s
            for x in set(n) - set(o):
                used[x] += s
    brokers = snap.brokers.set_column(snap.brokers.schema.get_field_index("disk_used_bytes"), "disk_used_bytes",
                                      pa.array([used[x] for x in b["broker"]], pa.int64()))
    return sio.write_snapshot(work / "snap-drained", m, brokers, snap.topics, pa.table(cols))


def fullest(snap_dir: Path, skip: int | None = None) -> float:
    b = sio.read_snapshot(snap_dir).brokers.to_pydict()
    return max(u / c for x, u, c in zip(b["broker"], b["disk_used_bytes"], b["capacity_bytes"], strict=True)
               if x != skip)


def tight_drain(snap_dir: Path, drained_id: int) -> tuple[str, int]:
    """A --max-disk-usage leaving the kept brokers 1.3x the drain's bytes of room under it."""
    snap = sio.read_snapshot(snap_dir)
    b = snap.brokers.to_pydict()
    p = snap.partitions.to_pydict()
    moving = sum(s for reps, s in zip(p["replicas"], p["size_bytes"], strict=True) if drained_id in reps)
    kept = [(u, c) for x, u, c in zip(b["broker"], b["disk_used_bytes"], b["capacity_bytes"], strict=True)
            if x != drained_id]
    lo, hi = max(u / c for u, c in kept) + 1e-6, 1.0     # never below a kept broker's use now
    for _ in range(60):
        mid = (lo + hi) / 2
        room = sum(max(0, mid * c - u) for u, c in kept)
        lo, hi = (mid, hi) if room < 1.3 * moving else (lo, mid)
    return f"{math.ceil(hi * 1e6) / 1e6:.6f}", moving    # rounded up: printing must not drop it below


def run_plan(argv: list[str], out_dir: Path) -> dict:
    shutil.rmtree(out_dir, ignore_errors=True)
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "planner.cli", "plan", *argv, "--out", str(out_dir), "--force",
                           "--quiet"], cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - t
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        if done.returncode == 2 and "disk capacity" in last:
            return {"wall_s": round(took, 2), "infeasible": last[:400]}
        raise SystemExit(f"kplan plan {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    solve = json.loads((out_dir / "solve.json").read_text())
    doc = json.loads((out_dir / "plan.json").read_text())
    res = {"wall_s": round(took, 2), "planner_s": round(solve["timings_s"]["total"], 3),
           "timings_s": solve["timings_s"], "bytes_moved": doc["summary"].get("bytes_moved"),
           "replica_moves": doc["summary"].get("replica_moves")}
    lim = (doc.get("brokers") or {}).get("disk_limit_bytes")
    after = (doc.get("after") or {}).get("disk_used_bytes")
    if lim and after:
        res["fullest_after_vs_limit"] = round(max(u / x for u, x in zip(after, lim, strict=True)
                                                  if u is not None and x), 6)
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=200_000)
    ap.add_argument("--brokers", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--disk-tib", type=float, default=8.0, help="each broker's log-dir capacity (8 TiB)")
    ap.add_argument("--keep", type=Path, help="keep the snapshots here")
    ap.add_argument("--skip-snapshot", type=Path, help="plan from this with-sizes snapshot; no sandbox")
    ap.add_argument("--only", help="comma-separated plan kinds (drain,rebalance,restart,return)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-sizes-"))
    kplan = [sys.executable, "-m", "planner.cli"]
    out: dict = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                 "load_before": load()}
    sb = None
    try:
        if args.skip_snapshot:
            with_cap = args.skip_snapshot
        else:
            # the generated cluster's synthetic sizes put 3.6-4.9 TiB on each broker at 200k partitions: disks of
            # --disk-tib (8 TiB: 45-62 % used) leave the default 85 % limit room, as a cluster in service has
            desc = generated_description(args.brokers, 3, args.partitions, 3, 0)
            for b in desc["brokers"]:
                b["disk_bytes"] = int(args.disk_tib * (1 << 40))
            t = time.perf_counter()
            sb = Sandbox.up(work / "sb", cluster=desc, timeout=1800, catch_up_delay=0.1, auto_rebalance=False)
            out["sandbox_up_s"] = round(time.perf_counter() - t, 1)
            print(f"sandbox up: {args.brokers} brokers, {args.partitions} partitions in {out['sandbox_up_s']} s "
                  f"(load {load()})", flush=True)
            snaps: dict[str, list[float]] = {"without sizes": [], "with sizes": []}
            for i in range(args.reps):
                for label, tag, extra in (("without sizes", "zk", ["--no-sizes"]), ("with sizes", "sizes", [])):
                    s = timed([*kplan, "snapshot", "--zk", sb.connect_string, "--out",
                               str(work / f"snap-{i}-{tag}"), "--force", *extra])
                    snaps[label].append(round(s, 2))
                    print(f"  snapshot {label:<14} {s:6.2f} s  (load {load()})", flush=True)
            med = {k: statistics.median(v) for k, v in snaps.items()}
            out["snapshot"] = {"runs_s": snaps, "median_s": med,
                               "ratio": round(med["with sizes"] / med["without sizes"], 2), "target_ratio": 2.0}
            m = json.loads((work / "snap-0-sizes" / "manifest.json").read_text())
            out["snapshot"]["log_dirs"] = {k: m["log_dirs"][k] for k in ("brokers_answered", "replicas_read",
                                                                         "api_versions")}
            print(f"snapshot medians: {med}, ratio {out['snapshot']['ratio']} (target <= 2)", flush=True)
            sb.down()
            sb = None
            with_cap = work / "snap-0-sizes"

        b = sio.read_snapshot(with_cap).brokers.to_pydict()
        subject = b["broker"][0]
        drained_snap = drained(with_cap, work, subject)
        no_cap = without_capacity(with_cap, work / "snap-nocap")
        drained_no_cap = without_capacity(drained_snap, work / "snap-drained-nocap")
        tight, moving = tight_drain(with_cap, subject)
        near = f"{fullest(with_cap) + 1e-6:.6f}"
        near_drained = f"{fullest(drained_snap) + 1e-6:.6f}"
        out["capacity"] = {"subject_broker": subject, "fullest_used_fraction": fullest(with_cap),
                           "tight_drain_max_disk_usage": tight, "drain_bytes": moving,
                           "tight_other_max_disk_usage": near, "tight_return_max_disk_usage": near_drained}
        who = ["--brokers", str(subject)]
        kinds = {
            "drain": {"without capacity": (no_cap, ["drain", *who]), "with capacity (room)": (with_cap, ["drain", *who]),
                      "with capacity (tight)": (with_cap, ["drain", *who, "--max-disk-usage", tight])},
            "rebalance": {"without capacity": (no_cap, ["rebalance"]), "with capacity (room)": (with_cap, ["rebalance"]),
                          "with capacity (tight)": (with_cap, ["rebalance", "--max-disk-usage", near])},
            "restart": {"without capacity": (no_cap, ["restart", *who]),
                        "with capacity (room)": (with_cap, ["restart", *who]),
                        "with capacity (tight)": (with_cap, ["restart", *who, "--max-disk-usage", near])},
            "return": {"without capacity": (drained_no_cap, ["return", *who]),
                       "with capacity (room)": (drained_snap, ["return", *who]),
                       "with capacity (tight)": (drained_snap, ["return", *who, "--max-disk-usage", near_drained])},
        }
        if args.only:
            kinds = {k: v for k, v in kinds.items() if k in args.only.split(",")}
        runs = {k: {label: [] for label in v} for k, v in kinds.items()}
        for _ in range(args.reps):
            for kind, cases in kinds.items():
                for label, (snap, argv) in cases.items():
                    r = run_plan([argv[0], "--snapshot", str(snap), *argv[1:]], work / f"plan-{kind}")
                    runs[kind][label].append(r)
                    print(f"  plan {kind:<9} {label:<24} {r['wall_s']:6.2f} s  planner "
                          f"{r.get('planner_s', float('nan')):6.2f} s  {r.get('infeasible', '')}"
                          f"  (load {load()})", flush=True)
        out["plan"] = {}
        for kind, cases in runs.items():
            fig: dict = {"runs": cases, "median_wall_s": {}, "median_planner_s": {}}
            for label, rs in cases.items():
                ok = [r for r in rs if "infeasible" not in r]
                fig["median_wall_s"][label] = statistics.median(r["wall_s"] for r in rs)
                if ok:
                    fig["median_planner_s"][label] = statistics.median(r["planner_s"] for r in ok)
            base_w = fig["median_wall_s"]["without capacity"]
            base_p = fig["median_planner_s"].get("without capacity")
            fig["ratio_wall"] = {k: round(v / base_w, 3) for k, v in fig["median_wall_s"].items()}
            if base_p:
                fig["ratio_planner"] = {k: round(v / base_p, 3) for k, v in fig["median_planner_s"].items()}
            out["plan"][kind] = fig
            print(f"plan {kind}: wall medians {fig['median_wall_s']}, ratios {fig['ratio_wall']} (target <= 1.2); "
                  f"planner ratios {fig.get('ratio_planner')}", flush=True)
        out["load_after"] = load()
    finally:
        if sb is not None:
            sb.down()
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for d in work.glob("snap-*"):
                if d.is_dir() and not (args.keep / d.name).exists():
                    shutil.copytree(d, args.keep / d.name)
        shutil.rmtree(work, ignore_errors=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "sizes.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "plan"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
