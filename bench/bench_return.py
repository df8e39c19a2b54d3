"""Benchmark of `kplan plan return` (issue 17 part 3: the way back after a drain) on a generated cluster, with
the nightly rebalance of the same drained cluster beside it (which must give the drained broker nothing).

Cluster: planner.synth, 200 brokers on 3 racks, RF 3, 200k partitions (bench_plan's uniform case), sizes
known. Broker 1 is drained by `kplan plan drain` (its moves applied to the snapshot's assignment, as an apply
would leave it) and recorded `drained` in the snapshot's maintenance section, its state naming the drain's
plan. Then, alternating, each a fresh `python -m planner.cli plan ...` child (process start, imports, snapshot
read, planning, writing; wall time and peak RSS): `plan return --brokers 1` and `plan rebalance`. Medians over
--repeat rounds; checks: every drain move still matches (those not reversed are held back by the rack rule:
synth places replicas without regard to racks), the rebalance adds no replica to broker 1. Writes
bench/out/return.json.

    .venv/bin/python bench/bench_return.py [--partitions 200000] [--repeat 3]
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
    return {"wall_s": round(wall, 2), "rss_mib": round(usage.ru_maxrss / 1024, 1),
            "planner_s": solve["timings_s"]["total"], "replica_moves": doc["summary"]["replica_moves"],
            "onto_1": sum(1 for m in doc["moves"] if 1 in set(m["to"]) - set(m["from"])),
            "maintenance": doc.get("maintenance")}


def drained_snapshot(work: Path, partitions: int) -> tuple[Path, dict]:
    """A snapshot of the synthetic cluster after broker 1's drain, with broker 1 recorded drained."""
    import pyarrow as pa

    from planner import api
    from planner import snapshot_io as sio
    from planner.synth import synth_cluster, to_snapshot

    base = work / "base"
    if not (base / "manifest.json").exists():
        to_snapshot(synth_cluster(brokers=200, partitions=partitions, rf=3, racks=3, partitions_per_topic=100,
                                  seed=7), base)
    run = work / "drain"
    shutil.rmtree(run, ignore_errors=True)
    drain = api.plan_drain(api.DrainRequest(snapshot=base, out=run / "plan", brokers=(1,)))
    snap = sio.read_snapshot(base)
    parts = snap.partitions
    target = {(m.topic, m.partition): list(m.to_replicas) for m in drain.plan.moves}
    topics = parts.column("topic").to_pylist()
    pids = parts.column("partition").to_pylist()
    reps = parts.column("replicas").to_pylist()
    new = [target.get((t, p), r) for t, p, r in zip(topics, pids, reps, strict=True)]
    cols = {n: parts.column(n) for n in parts.column_names}
    cols["replicas"] = pa.array(new, sio.INT_LIST)
    cols["isr"] = pa.array(new, sio.INT_LIST)
    cols["leader"] = pa.array([r[0] for r in new], pa.int32())
    entry = {"broker": 1, "state": "drained", "plan_id": drain.plan_id, "run": str(run), "by": {"user": "bench"},
             "since": "2026-11-25T00:00:00Z", "reason": "bench"}
    manifest = {k: v for k, v in snap.manifest.items() if k != "files"}
    manifest["maintenance"] = [entry]
    manifest["fingerprint"] = sio.assignment_fingerprint(parts.column("topic"), parts.column("partition").to_numpy(),
                                                         cols["replicas"])
    out = work / "drained"
    shutil.rmtree(out, ignore_errors=True)
    sio.write_snapshot(out, manifest, snap.brokers, snap.topics, pa.table(cols))
    return out, {"drain_moves": len(drain.plan.moves), "drain_replica_moves": drain.plan.summary["replica_moves"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = HERE / "out" / "work" / f"return{args.partitions}"
    work.mkdir(parents=True, exist_ok=True)
    load = [uptime()]
    snap, drain = drained_snapshot(work, args.partitions)
    runs: dict[str, list[dict]] = {"return": [], "rebalance": []}
    for _ in range(args.repeat):
        runs["return"].append(run_plan(["return", "--snapshot", str(snap), "--brokers", "1", "--out",
                                        str(work / "return-plan")]))
        runs["rebalance"].append(run_plan(["rebalance", "--snapshot", str(snap), "--out", str(work / "nightly")]))
    load.append(uptime())
    result = {"partitions": args.partitions, "brokers": 200, **drain, "load": load, "runs": runs}
    for name, rs in runs.items():
        result[name] = {"wall_s_median": statistics.median(r["wall_s"] for r in rs),
                        "planner_s_median": statistics.median(r["planner_s"] for r in rs),
                        "rss_mib_max": max(r["rss_mib"] for r in rs), "replica_moves": rs[0]["replica_moves"],
                        "onto_broker_1": rs[0]["onto_1"]}
    undo = runs["return"][0]["maintenance"]["undo"]
    result["return"]["undo"] = undo
    # nothing changed since the drain: every drain move still matches; those not reversed are held back only by
    # the rack rule (synth places replicas without regard to racks, so some pre-drain lists span too few racks)
    assert undo["no_longer_matching"] == 0 and undo["reversed"] + undo["held_back"] == undo["drain_moves"], undo
    assert result["rebalance"]["onto_broker_1"] == 0
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "return.json").write_text(json.dumps(result, indent=1) + "\n")
    for name in ("return", "rebalance"):
        r = result[name]
        print(f"{name:<10} median wall {r['wall_s_median']:.2f} s (planner {r['planner_s_median']:.2f} s), peak RSS "
              f"{r['rss_mib_max']:.0f} MiB, {r['replica_moves']} replica moves, {r['onto_broker_1']} onto broker 1")
    print(f"return undo: {undo}; load {load[0]} -> {load[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
