"""KRaft snapshot scaling (issue 24; target at 200k partitions <= 10 s, not reachable in this sandbox yet).

One `kraft` sandbox (1 controller + 3 brokers, 512 MiB heaps, no data), grown step by step to each size of
--sizes (topics of 100 partitions, RF 3, created through the Admin API); at each size `kplan snapshot
--bootstrap-server` is timed --runs times (the whole snapshot: connect, DescribeTopicPartitions pages,
DescribeConfigs, re-read until two reads agree, DescribeLogDirs, assembly, Parquet), and, apart, one
DescribeTopicPartitions sweep of every partition. Medians; per-partition cost and the linear extrapolation
to 200k are printed with the load average (the machine is shared). Writes bench/out/kraft_snapshot.json.

    /work/team/heavy --bench python bench/bench_kraft_snapshot.py [--sizes 1000,4000,12000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from planner import kraft_admin as ka
from planner.sandbox import Sandbox
from planner.snapshot import take_snapshot

HERE = Path(__file__).resolve().parent
PER_TOPIC = 100


def grow(sb: Sandbox, have: int, want: int) -> int:
    from kafka.admin import NewTopic

    admin = ka.connect(sb.bootstrap_servers, timeout=60)
    try:
        topics = []
        for t in range(have // PER_TOPIC, want // PER_TOPIC):
            assignment = {p: [(p + t + k) % 3 + 1 for k in range(3)] for p in range(PER_TOPIC)}
            topics.append(NewTopic(f"bench-{t:05d}", -1, -1, replica_assignments=assignment))
        for i in range(0, len(topics), 20):
            admin.create_topics(topics[i:i + 20], timeout_ms=120_000)
    finally:
        admin.close()
    sb.wait_settled(600)
    # every replica's log created on its broker (the brokers create them after the controller did the
    # partitions; measuring while they still do would time their CPU, not the snapshot)
    want_replicas = want * 3
    deadline = time.monotonic() + 600
    while True:
        a = ka.connect(sb.bootstrap_servers, timeout=60)
        try:
            got = sum(len(t["partitions"]) for r in a.describe_log_dirs() for d in r["log_dirs"]
                      for t in d["topics"] if t["name"].startswith("bench-"))
        finally:
            a.close()
        if got >= want_replicas or time.monotonic() > deadline:
            return want
        time.sleep(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,4000,12000")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="kplan-bench-kraft-"))
    out: dict = {"load_before": load_before, "sizes": {}}
    sb = Sandbox.up(work / "sb", cluster={"brokers": [{"id": i, "rack": f"r{i}"} for i in (1, 2, 3)], "topics": []},
                    engine="kraft", broker_heap_mb=512, data_bytes=0, timeout=300)
    try:
        have = 0
        for n in sizes:
            started = time.monotonic()
            have = grow(sb, have, n)
            created_s = time.monotonic() - started
            snaps, sweeps = [], []
            for r in range(args.runs):
                t0 = time.monotonic()
                snap = take_snapshot(None, work / f"s{n}-{r}", bootstrap=sb.bootstrap_servers,
                                     progress=lambda m: None)
                snaps.append(time.monotonic() - t0)
                admin = ka.connect(sb.bootstrap_servers)
                t0 = time.monotonic()
                parts = ka.describe_topic_partitions(admin)
                sweeps.append(time.monotonic() - t0)
                admin.close()
                shutil.rmtree(work / f"s{n}-{r}")
            assert snap.manifest["counts"]["partitions"] >= n and len(parts) >= n
            row = {"partitions": snap.manifest["counts"]["partitions"], "created_s": round(created_s, 1),
                   "snapshot_s": [round(x, 3) for x in snaps], "snapshot_median_s": round(statistics.median(snaps), 3),
                   "dtp_sweep_median_s": round(statistics.median(sweeps), 3),
                   "rounds": snap.manifest["consistency"]["rounds"]}
            out["sizes"][n] = row
            print(json.dumps(row), flush=True)
    finally:
        sb.down()
        shutil.rmtree(work, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    big = out["sizes"][sizes[-1]]
    per = big["snapshot_median_s"] / big["partitions"]
    out["per_partition_ms"] = round(per * 1000, 4)
    out["extrapolated_200k_s"] = round(per * 200_000, 1)
    print(f"load {load_before[0]:.2f} -> {out['load_after'][0]:.2f}; {out['per_partition_ms']} ms/partition at "
          f"{big['partitions']}: linear extrapolation to 200k = {out['extrapolated_200k_s']} s")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "kraft_snapshot.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
