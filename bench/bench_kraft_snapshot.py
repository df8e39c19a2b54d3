"""KRaft snapshot scaling (issue 24: a KRaft cluster of 200k partitions snapshots in <= 10 s), this checkout beside
a baseline commit, alternated in one run.

One `kraft` sandbox (1 controller + --brokers brokers, --heap MiB each, no data), grown step by step to each size
of --sizes (topics of 100 partitions, replication factor --rf, replicas spread round-robin so that no broker
holds more than ~12.5k logs: this machine's fd limit (20,000) and vm.max_map_count bound a broker's logs), created
through the Admin API; each size measured once every broker holds all its logs. At each size the whole
`take_snapshot(None, out, bootstrap=...)` (connect, DescribeTopicPartitions pages, DescribeConfigs, the
consistency re-read, DescribeLogDirs of every broker, assembly, Parquet) runs --runs times for each side,
alternating baseline and this checkout, each side in its own warm Python process (PYTHONPATH = its tree, this
venv's packages); the phases are the times of the snapshot's own progress messages. Both sides' partition
tables are compared at each size (they must be equal). Medians, ratios and the load average are printed and
written to bench/out/kraft_snapshot.json.

    /work/team/heavy --bench python bench/bench_kraft_snapshot.py [--sizes 12000,50000,100000,200000]
        [--brokers 16] [--rf 1] [--runs 3] [--baseline 86b619d]
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

from baseline import baseline_tree, env_for

from planner import kraft_admin as ka
from planner.sandbox import Sandbox

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PER_TOPIC = 100

# A warm process that snapshots on request: one JSON line in (bootstrap, out), one out (seconds, phases, counts).
WORKER = r"""
import json, sys, time, shutil
from pathlib import Path
from planner.snapshot import take_snapshot
for line in sys.stdin:
    req = json.loads(line)
    marks = []
    t0 = time.perf_counter()
    def say(message, *args, **kwargs):
        marks.append([round(time.perf_counter() - t0, 4), str(message)[:90]])
    snap = take_snapshot(None, Path(req["out"]), bootstrap=req["bootstrap"], progress=say)
    s = time.perf_counter() - t0
    m = snap.manifest
    print(json.dumps({"s": s, "marks": marks, "partitions": m["counts"]["partitions"],
                      "rounds": m["consistency"]["rounds"], "consistent": m["consistency"]["consistent"]}),
          flush=True)
"""


class Worker:
    def __init__(self, tree: Path):
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER], cwd=tree, env=env_for(tree), text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def snapshot(self, bootstrap: str, out: Path) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"bootstrap": bootstrap, "out": str(out)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the snapshot worker died")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(60)


def grow(sb: Sandbox, have: int, want: int, brokers: int, rf: int) -> None:
    from kafka.admin import NewTopic

    admin = ka.connect(sb.bootstrap_servers, timeout=120)
    try:
        topics = []
        for t in range(have // PER_TOPIC, want // PER_TOPIC):
            assignment = {p: [(t * PER_TOPIC + p + k) % brokers + 1 for k in range(rf)] for p in range(PER_TOPIC)}
            topics.append(NewTopic(f"bench-{t:05d}", -1, -1, replica_assignments=assignment))
        for i in range(0, len(topics), 20):
            admin.create_topics(topics[i:i + 20], timeout_ms=300_000)
    finally:
        admin.close()
    sb.wait_settled(1200)
    # every replica's log created on its broker (measuring while they still create them would time their CPU)
    deadline = time.monotonic() + 1200
    while True:
        a = ka.connect(sb.bootstrap_servers, timeout=120)
        try:
            got = sum(len(t["partitions"]) for r in a.describe_log_dirs() for d in r["log_dirs"]
                      for t in d["topics"] if t["name"].startswith("bench-"))
        finally:
            a.close()
        if got >= want * rf or time.monotonic() > deadline:
            return
        time.sleep(2)


def table(path: Path) -> list:
    import pyarrow.parquet as pq

    t = pq.read_table(path / "partitions.parquet",
                      columns=["topic", "partition", "replicas", "leader", "leader_epoch", "isr", "elr",
                               "last_known_elr"])
    return sorted(zip(*[t.column(c).to_pylist() for c in t.column_names], strict=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="12000,50000,100000,200000")
    ap.add_argument("--brokers", type=int, default=16)
    ap.add_argument("--rf", type=int, default=1)
    ap.add_argument("--heap", type=int, default=384)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", default="86b619d")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="kplan-bench-kraft-"))
    base = baseline_tree(args.baseline, work)
    out: dict = {"load_before": load_before, "baseline": args.baseline, "brokers": args.brokers, "rf": args.rf,
                 "heap_mb": args.heap, "sizes": {}}
    sb = Sandbox.up(work / "sb", cluster={"brokers": [{"id": i, "rack": f"r{(i - 1) % 3 + 1}"}
                                                      for i in range(1, args.brokers + 1)], "topics": []},
                    engine="kraft", broker_heap_mb=args.heap, data_bytes=0, timeout=600)
    sides = {"baseline": Worker(base), "new": Worker(REPO)}
    try:
        have = 0
        for n in sizes:
            started = time.monotonic()
            grow(sb, have, n, args.brokers, args.rf)
            have = n
            row: dict = {"created_s": round(time.monotonic() - started, 1), "load": os.getloadavg()[0]}
            runs: dict[str, list] = {k: [] for k in sides}
            for r in range(args.runs):
                for name in (("baseline", "new") if r % 2 == 0 else ("new", "baseline")):
                    dest = work / f"{name}-{n}-{r}"
                    got = sides[name].snapshot(sb.bootstrap_servers, dest)
                    runs[name].append(got)
                    if r == args.runs - 1:
                        row.setdefault("tables", {})[name] = dest
                    else:
                        shutil.rmtree(dest)
            same = table(row["tables"]["baseline"]) == table(row["tables"]["new"])
            for d in row.pop("tables").values():
                shutil.rmtree(d)
            for name, got in runs.items():
                row[name] = {"s": [round(g["s"], 3) for g in got], "median_s": round(statistics.median(
                    g["s"] for g in got), 3), "rounds": [g["rounds"] for g in got],
                    "partitions": got[-1]["partitions"], "marks": got[-1]["marks"]}
            row["ratio"] = round(row["baseline"]["median_s"] / row["new"]["median_s"], 2)
            row["same_partitions_table"] = same
            out["sizes"][n] = row
            print(json.dumps({"size": n, "partitions": row["new"]["partitions"], "created_s": row["created_s"],
                              "baseline_s": row["baseline"]["s"], "new_s": row["new"]["s"],
                              "baseline_median_s": row["baseline"]["median_s"],
                              "new_median_s": row["new"]["median_s"], "ratio": row["ratio"],
                              "same_partitions_table": same, "load": round(row["load"], 2)}), flush=True)
            for name in sides:
                print(f"  {name} phases (s since start, last run): " + "; ".join(
                    f"{t} {m[:48]}" for t, m in row[name]["marks"]), flush=True)
    finally:
        for w in sides.values():
            w.close()
        sb.down()
        shutil.rmtree(work, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    print(f"load {load_before[0]:.2f} -> {out['load_after'][0]:.2f}")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "kraft_snapshot.json").write_text(json.dumps(out, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
