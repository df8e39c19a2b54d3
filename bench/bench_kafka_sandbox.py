"""Real-Kafka sandbox benchmark (target: 3 brokers up in <= 30 s on 2 cores).

Each run is a whole `Sandbox.up(engine="kafka")` from nothing but the cached jars: ZooKeeper start, 3 Kafka
3.9 broker JVMs (256 MiB heaps), registration and controller election, 3 topics x 10 partitions created
through Kafka's admin path, 10 MB produced (acks=all) and every replica back in its ISR. Reported per run:
the whole `up`, and inside it the time to all brokers registered and to the partitions created. Then a
kill of one broker: seconds until the controller reacted (bounded below by the ZooKeeper session timeout).
Medians of --runs; the load average is printed because these 2-core machines are shared. Writes
bench/out/kafka_sandbox.json.

    python bench/bench_kafka_sandbox.py [--runs 3] [--brokers 3] [--session-timeout 6]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from planner.kafka.jars import ensure_jars
from planner.sandbox import Sandbox

HERE = Path(__file__).resolve().parent


def cluster(brokers: int) -> dict:
    ids = list(range(1, brokers + 1))
    topics = []
    for t in range(3):
        parts = [{"replicas": [ids[(p + t + k) % brokers] for k in range(min(3, brokers))], "size_bytes": 1_000_000 // 3}
                 for p in range(10)]
        topics.append({"name": f"bench-{t}", "config": {"min.insync.replicas": "2"}, "partitions": parts})
    return {"brokers": [{"id": i, "rack": f"r{(i - 1) % 3 + 1}"} for i in ids], "topics": topics}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--session-timeout", type=float, default=6)
    args = ap.parse_args()
    jars = ensure_jars()
    print(f"Kafka {jars.version}: {len(jars.manifest['jars'])} jars in {jars.lib}", flush=True)
    runs = []
    for i in range(args.runs):
        d = Path(tempfile.mkdtemp(prefix="kplan-bench-kafka-"))
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        sb = Sandbox.up(d / "sb", cluster=cluster(args.brokers), engine="kafka", zk_heap_mb=256,
                        session_timeout=args.session_timeout, auto_rebalance=False)
        up_s = time.monotonic() - t0
        try:
            figures = sb.info["kafka"]["up"]
            kill = sb.kill([1])
            runs.append({"up_s": round(up_s, 2), "brokers_registered_s": figures["registered_s"],
                         "partitions_created_s": figures["topics_s"], "kafka_up_s": figures["up_s"],
                         "kill_reacted_s": kill["controller_reacted_s"], "load_avg_1m": round(load, 2)})
            print(f"run {i + 1}: {runs[-1]}", flush=True)
        finally:
            sb.down()
            shutil.rmtree(d, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out = {"brokers": args.brokers, "partitions": 30, "kafka_version": jars.version,
           "session_timeout_s": args.session_timeout, "runs": runs, "median": med, "target_up_s": 30}
    print(f"median of {len(runs)}: up {med['up_s']} s (target 30 s), brokers registered after "
          f"{med['brokers_registered_s']} s of the Kafka part, kill reacted after {med['kill_reacted_s']} s "
          f"(session timeout {args.session_timeout} s); load average {med['load_avg_1m']}")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "kafka_sandbox.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0 if med["up_s"] <= 30 else 1


if __name__ == "__main__":
    sys.exit(main())
