"""Issue 25: the rebalance's replica spread on varied clusters, beside kafka-utils and Kafka's `--generate`, and
its time against an older kplan, in one run.

Part 1, the table. Clusters from bench/skewed_cluster.py (Zipf-sized topics, RF 1-4 mixed, hot and new brokers,
rack-aware placement), each loaded into the project's sandbox (`kplan sandbox up --cluster`, emulated engine: a
real ZooKeeper), snapshotted from that ZooKeeper with `kplan snapshot --no-sizes` (sizes unknown, so the
rebalance counts replicas, as a new user gets it), then planned by:
  - kplan (this checkout) and, with --baseline DIR, an older kplan checkout: `kplan plan rebalance`;
  - kafka-utils (`kafka-cluster-manager rebalance --replication-groups --brokers --leaders`, default balancer,
    no movement limits, replication groups = the brokers' racks through bench/kafka_utils_rack.py), reading the
    same ZooKeeper, from the throwaway venv given with --kafka-utils (it is not a project dependency);
  - Kafka's `kafka-reassign-partitions.sh --generate` (bench/kafka_generate.py, AdminUtils re-implemented).
The 100-broker / 200k-partition cluster is snapshotted directly (no sandbox) and kafka-utils is not run on it
(--kafka-utils-max-partitions, default 30,000: it took 160-196 s at 30k partitions in the issue).

Every figure of the table is computed here from the tools' outputs (reassignment files) and the snapshot,
never taken from kplan's summary: replica moves (replicas on a broker that did not hold them), replica spread
and leader spread (preferred leaders) over the registered brokers, topics with more preferred leaders on one
broker than ceil(partitions / brokers), partitions on fewer racks than min(RF, racks) (rack violations). kplan's
own lower bound and reachable spread are shown beside them.

Part 2, the timings (--perf): `kplan plan rebalance` (count and bytes balance) on bench_plan's skewed 200k and
1M clusters (and, with --uniform-1m, a count rebalance of its uniform 1M cluster), this checkout and
--baseline alternated, --repeat runs each, medians; load average recorded.

    .venv/bin/python bench/bench_rebalance_spread.py --baseline /tmp/kplan-main --kafka-utils /tmp/ku-venv \
        [--perf] [--repeat 3] [--repeat-large 1] [--repeat-large-bytes N] [--uniform-1m] [--no-table]
Writes bench/out/rebalance_spread.json.
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
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_plan import _child_generate, _snapshot, run_kplan  # noqa: E402
from skewed_cluster import skewed_cluster  # noqa: E402

# (label, brokers, racks, partitions, seed)
STATES = [
    ("6 brokers / 2k, seed 1", 6, 3, 2_000, 1),
    ("6 brokers / 2k, seed 2", 6, 3, 2_000, 2),
    ("12 brokers / 8k, seed 6", 12, 3, 8_000, 6),
    ("20 brokers / 10k, seed 7", 20, 5, 10_000, 7),
    ("30 brokers / 30k, seed 3", 30, 4, 30_000, 3),
    ("30 brokers / 30k, seed 4", 30, 4, 30_000, 4),
    ("30 brokers / 30k, seed 5", 30, 3, 30_000, 5),
    ("100 brokers / 200k, seed 11", 100, 4, 200_000, 11),
]


def make_cluster(brokers: int, racks: int, partitions: int, seed: int):
    return skewed_cluster(brokers=brokers, racks=racks, partitions=partitions, new_brokers=max(1, brokers // 10),
                          hot_brokers=max(1, brokers // 15), max_topic=max(50, partitions // 100), seed=seed,
                          sizes=False)


# ------------------------------------------------------------------------------------------- figures
def load_state(snapshot: Path) -> dict:
    """Brokers (id -> rack), registered brokers and the assignment {(topic, partition): replicas}."""
    from planner.optimizer import from_snapshot
    from planner.snapshot_io import read_snapshot

    pb = from_snapshot(read_snapshot(snapshot))
    ids = pb.broker_ids.tolist()
    racks = {b: (pb.rack_names[q] if q >= 0 else None) for b, q in zip(ids, pb.rack_of.tolist(), strict=True)}
    alive = {b for b, a in zip(ids, pb.alive.tolist(), strict=True) if a}
    reps = np.where(pb.replicas >= 0, pb.broker_ids[np.maximum(pb.replicas, 0)], -1)
    assign = {(pb.topic_names[t], int(n)): [int(b) for b in r if b >= 0]
              for t, n, r in zip(pb.topic_of.tolist(), pb.partition.tolist(), reps.tolist(), strict=True)}
    return {"racks": racks, "alive": alive, "assign": assign}


def apply_reassignment(assign: dict, path: Path) -> dict:
    """The assignment after a Kafka-format reassignment file ({"partitions": [{topic, partition, replicas}]})."""
    out = dict(assign)
    doc = json.loads(path.read_text()) if path.exists() else {"partitions": []}
    for x in doc.get("partitions", []):
        key = (x["topic"], int(x["partition"]))
        if key not in out:
            raise SystemExit(f"{path}: unknown partition {key}")
        out[key] = [int(b) for b in x["replicas"]]
    return out


def figures(state: dict, final: dict) -> dict:
    """The table's columns, from the assignments alone."""
    alive = sorted(state["alive"])
    racks = state["racks"]
    before = state["assign"]
    moves = sum(len(set(final[k]) - set(before[k])) for k in before)
    rep = dict.fromkeys(alive, 0)
    lead = dict.fromkeys(alive, 0)
    per_tb: dict[tuple[str, int], int] = {}
    n_t: dict[str, int] = {}
    n_racks = len({racks[b] for b in alive if racks[b] is not None})
    violations = 0
    for (t, _p), r in final.items():
        n_t[t] = n_t.get(t, 0) + 1
        for b in r:
            if b in rep:
                rep[b] += 1
        if r and r[0] in lead:
            lead[r[0]] += 1
            per_tb[(t, r[0])] = per_tb.get((t, r[0]), 0) + 1
        if len(set(r)) != len(r):
            violations += 1
        elif n_racks > 1 and len({racks[b] for b in r if racks.get(b) is not None}) < min(len(r), n_racks):
            violations += 1
    over = {t for (t, _b), n in per_tb.items() if n > math.ceil(n_t[t] / len(alive))}
    return {"replica_moves": moves, "replica_spread": max(rep.values()) - min(rep.values()),
            "replica_min_max": [min(rep.values()), max(rep.values())],
            "leader_spread": max(lead.values()) - min(lead.values()), "topics_over_ceil": len(over),
            "rack_violations": violations}


def rack_violations_before(state: dict) -> int:
    return figures(state, state["assign"])["rack_violations"]


# ------------------------------------------------------------------------------------------- runners
def kplan_plan(root: Path, snapshot: Path, out: Path) -> dict:
    r = run_kplan(root, ["rebalance", "--snapshot", str(snapshot), "--out", str(out)])
    doc = json.loads((out / "plan.json").read_text())
    s = doc["summary"]
    r["summary_bound"] = {k: s.get(k) for k in ("lower_bound_moves", "lower_bound_basis", "target_replica_band",
                                                 "reachable_replica_spread", "replica_spread_reason")}
    return r


def kafka_utils(venv: Path, zk: str, work: Path) -> dict:
    """kafka-cluster-manager's proposed plan (not applied) for the cluster in ZooKeeper `zk`."""
    conf = work / "ku"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "sandbox.yaml").write_text(f'clusters:\n  sandbox:\n    broker_list: ["127.0.0.1:9092"]\n'
                                       f'    zookeeper: "{zk}"\nlocal_config:\n  cluster: sandbox\n')
    plan = conf / "proposed.json"
    plan.unlink(missing_ok=True)
    cmd = [str(venv / "bin" / "kafka-cluster-manager"), "--cluster-type", "sandbox", "--discovery-base-path",
           str(conf), "--group-parser", f"{HERE}:kafka_utils_rack", "--write-to-file", str(plan), "rebalance",
           "--replication-groups", "--brokers", "--leaders", "--max-partition-movements", "10000000",
           "--max-leader-changes", "10000000"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"kafka-cluster-manager exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return {"wall_s": round(wall, 1), "plan": str(plan)}


def sandbox(cluster, work: Path) -> tuple[Path, str]:
    """Start an emulated sandbox holding `cluster`; returns (its folder, ZooKeeper connect string)."""
    from planner.synth import to_description

    desc = work / "cluster.json"
    desc.write_text(json.dumps(to_description(cluster)))
    d = work / "sandbox"
    subprocess.run([sys.executable, "-m", "planner.cli", "sandbox", "down", "--dir", str(d)], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "planner.cli", "sandbox", "up", "--dir", str(d), "--cluster", str(desc)],
                   check=True, capture_output=True, timeout=1800)
    zk = json.loads((d / "sandbox.json").read_text())["connect"]
    return d, zk


def table(args, work: Path) -> list[dict]:
    rows = []
    for label, brokers, racks, partitions, seed in STATES:
        if args.only and args.only not in label:
            continue
        print(f"\n== {label} ({racks} racks); load average {os.getloadavg()[0]:.1f}", flush=True)
        w = work / label.replace(" ", "").replace("/", "_").replace(",", "_")
        w.mkdir(parents=True, exist_ok=True)
        cluster = make_cluster(brokers, racks, partitions, seed)
        use_ku = args.kafka_utils is not None and partitions <= args.kafka_utils_max_partitions
        sb = None
        snap = w / "snapshot"
        shutil.rmtree(snap, ignore_errors=True)
        try:
            if use_ku:
                sb, zk = sandbox(cluster, w)
                subprocess.run([sys.executable, "-m", "planner.cli", "snapshot", "--zk", zk, "--out", str(snap),
                                "--no-sizes"], check=True, capture_output=True)
            else:
                _snapshot(w, "snapshot", lambda c=cluster: c)
            state = load_state(snap)
            row = {"state": label, "brokers": brokers, "racks": racks, "partitions": partitions, "seed": seed,
                   "rack_violations_before": rack_violations_before(state),
                   "replica_spread_before": figures(state, state["assign"])["replica_spread"]}
            runs = [("kplan", ROOT)] + ([("kplan_baseline", args.baseline.resolve())] if args.baseline else [])
            for name, root in runs:
                out = w / f"plan_{name}"
                r = kplan_plan(root, snap, out)
                row[name] = {"wall_s": r["wall_s"], **figures(state, apply_reassignment(state["assign"],
                                                                                       out / "reassignment.json"))}
                if name == "kplan":
                    row["kplan_bound"] = r["summary_bound"]
            if use_ku:
                ku = kafka_utils(args.kafka_utils, zk, w)
                row["kafka_utils"] = {"wall_s": ku["wall_s"],
                                      **figures(state, apply_reassignment(state["assign"], Path(ku["plan"])))}
            else:
                row["kafka_utils"] = None
            gen = _child_generate(str(snap), "-")
            row["kafka_generate"] = {k: gen.get(k) for k in ("wall_s", "replica_moves", "replica_spread_after",
                                                             "leader_spread_after", "topics_over_ceil")}
        finally:
            if sb is not None:
                subprocess.run([sys.executable, "-m", "planner.cli", "sandbox", "down", "--dir", str(sb)],
                               capture_output=True)
        rows.append(row)
        _print_row(row)
    return rows


def _cell(x: dict | None) -> str:
    if not x:
        return "-"
    return (f"{x['replica_moves']:,} moves, spread {x['replica_spread']}, leaders {x['leader_spread']}, "
            f"topics>ceil {x['topics_over_ceil']}, rack viol. {x['rack_violations']}, {x['wall_s']} s")


def _print_row(row: dict) -> None:
    b = row.get("kplan_bound") or {}
    print(f"  before: spread {row['replica_spread_before']}, rack violations {row['rack_violations_before']}")
    print(f"  kplan:      {_cell(row.get('kplan'))}; bound {b.get('lower_bound_moves')} ({b.get('lower_bound_basis')})"
          f", reachable spread {b.get('reachable_replica_spread')}")
    print(f"  baseline:   {_cell(row.get('kplan_baseline'))}")
    print(f"  kafka-utils:{_cell(row.get('kafka_utils'))}")
    g = row.get("kafka_generate") or {}
    print(f"  --generate: {g.get('replica_moves')} moves, spread {g.get('replica_spread_after')}, "
          f"leaders {g.get('leader_spread_after')}, topics>ceil {g.get('topics_over_ceil')}", flush=True)


# ------------------------------------------------------------------------------------------- timings
def perf(args, work: Path) -> list[dict]:
    snaps = {"skewed 200k": _snapshot(work, "skewed200k", lambda: skewed_cluster(partitions=200_000, seed=11))}
    if not args.quick:
        snaps["skewed 1M"] = _snapshot(work, "skewed1m", lambda: skewed_cluster(partitions=1_000_000, seed=11))
    if args.uniform_1m:
        # bench_plan.py's uniform 1M state (its drains' cluster: 200 brokers, RF 3 over 3 racks, dealt at random)
        from planner.synth import synth_cluster

        snaps["uniform 1M"] = _snapshot(work, "s1m", lambda: synth_cluster(brokers=200, partitions=1_000_000, rf=3,
                                                                           racks=3, seed=3))
    rows = []
    for name, snap in snaps.items():
        for balance in (("count",) if name.startswith("uniform") else ("count", "bytes")):
            if balance not in args.balances.split(","):
                continue
            reps = args.repeat_large if name.endswith("1M") else args.repeat
            if name.endswith("1M") and balance == "bytes" and args.repeat_large_bytes is not None:
                reps = args.repeat_large_bytes
            runs: dict[str, list[dict]] = {"new": [], "old": []}
            load0 = os.getloadavg()[0]
            for _ in range(reps):
                for who, root in (("new", ROOT), ("old", args.baseline.resolve())):
                    out = work / f"perf_{who}"
                    runs[who].append(run_kplan(root, ["rebalance", "--snapshot", snap, "--out", str(out),
                                                      "--balance", balance]))
            row = {"cluster": name, "balance": balance, "runs": reps, "load_before": round(load0, 2),
                   "load_after": round(os.getloadavg()[0], 2)}
            for who, rs in runs.items():
                row[who] = {"wall_s_median": statistics.median(r["wall_s"] for r in rs),
                            "wall_s": [r["wall_s"] for r in rs],
                            "placement_s_median": statistics.median((r["timings_s"] or {}).get("placement", 0)
                                                                    for r in rs),
                            "replica_moves": rs[-1]["replica_moves"], "lower_bound": rs[-1]["lower_bound_moves"],
                            "replica_spread_after": rs[-1]["replica_spread_after"],
                            "leader_spread_after": rs[-1]["leader_spread_after"],
                            "topics_over_ceil": rs[-1]["topics_over_ceil"],
                            "bytes_dev_pct_after": rs[-1]["bytes_dev_pct_after"]}
            rows.append(row)
            print(f"\n== {name} {balance}: " + "; ".join(
                f"{who} median {row[who]['wall_s_median']} s {row[who]['wall_s']} (placement "
                f"{row[who]['placement_s_median']} s), moves {row[who]['replica_moves']}, spread "
                f"{row[who]['replica_spread_after']}, bytes dev {row[who]['bytes_dev_pct_after']}%"
                for who in ("new", "old")) + f"; load {row['load_before']} -> {row['load_after']}", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, help="an older kplan checkout, alternated with this one")
    ap.add_argument("--kafka-utils", type=Path, help="a venv with kafka-utils installed (kafka-cluster-manager)")
    ap.add_argument("--kafka-utils-max-partitions", type=int, default=30_000)
    ap.add_argument("--perf", action="store_true", help="also time count and bytes rebalances, new vs baseline")
    ap.add_argument("--no-table", action="store_true")
    ap.add_argument("--only", help="table: only the states whose label contains this text")
    ap.add_argument("--quick", action="store_true", help="timings: skip the 1M cluster")
    ap.add_argument("--uniform-1m", action="store_true",
                    help="timings: also a count rebalance of bench_plan's uniform 1M cluster (200 brokers, RF 3, 3 "
                         "racks, dealt at random)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--balances", default="count,bytes", help="timings: which balances to time (count,bytes)")
    ap.add_argument("--repeat-large", type=int, default=1)
    ap.add_argument("--repeat-large-bytes", type=int, help="runs of the 1M bytes rebalance (default --repeat-large)")
    ap.add_argument("--work", type=Path, default=HERE / "out" / "spread")
    args = ap.parse_args()
    if args.perf and not args.baseline:
        ap.error("--perf needs --baseline")
    args.work = args.work.resolve()     # the baseline runs in its own checkout: a relative path would miss
    args.work.mkdir(parents=True, exist_ok=True)
    result = {"machine": {"cpus": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}}
    if not args.no_table:
        result["table"] = table(args, args.work)
    if args.perf:
        result["perf"] = perf(args, args.work)
    result["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "rebalance_spread.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {HERE / 'out' / 'rebalance_spread.json'}")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
