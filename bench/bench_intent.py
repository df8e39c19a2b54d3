"""Benchmark a drain's intent check (issue 19: the drained brokers host and lead nothing, cluster-wide) at
200,000 partitions, against a real local ZooKeeper.

The synthetic cluster (200 brokers, RF 3, 4 racks) is loaded with planner.loader; a drain plan of one broker
is made by the optimizer from a snapshot of it (so its partitions are exactly that broker's), and then, side
by side in one process, each measured `--runs` times (median):
- `read`: verify's cluster-wide read it already made before issue 19 (every topic and partition state, in
  bulk: ClusterView.partitions over all keys);
- `evaluate`: what verify adds on top: the intent from those statuses;
- `apply`: apply's final-state check (planner.execution.intent.drain_intent: the read and the evaluation).
The check must say `holds: false` (nothing was applied), naming exactly the drained broker's partitions: it is
checked against the snapshot's own count.

    .venv/bin/python bench/bench_intent.py [--partitions 200000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner import api, loader, synth  # noqa: E402
from planner import zk as zkmod  # noqa: E402
from planner.execution.clusterview import ClusterView  # noqa: E402
from planner.execution.intent import drain_intent, facts  # noqa: E402
from planner.execution.steps import load_plan  # noqa: E402
from planner.intent import evaluate  # noqa: E402
from planner.zkserver import ZooKeeperServer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kplan-bench-intent-"))
    c = synth.synth_cluster(brokers=200, partitions=args.partitions, rf=3, racks=4, seed=7)
    desc = synth.to_description(c)
    server = ZooKeeperServer(work / "zk", heap_mb=3072, jute_maxbuffer=32 * 1024 * 1024).start()
    try:
        connect = server.connect_string + "/kafka"
        client = zkmod.connect(connect, timeout=30)
        loader.load_cluster(client, desc, progress=lambda m: None)
        api.snapshot(api.SnapshotRequest(zk=connect, out=work / "snap"))
        api.plan_drain(api.DrainRequest(snapshot=work / "snap", out=work / "plan", brokers=(1,)))
        plan = load_plan(work / "plan")
        view = ClusterView(client)
        times: dict[str, list[float]] = {"read": [], "evaluate": [], "apply": []}
        for _ in range(args.runs):
            t = time.perf_counter()
            every = view.partitions(view.all_partition_keys())
            times["read"].append(time.perf_counter() - t)
            t = time.perf_counter()
            rows = ((k[0], k[1], s.replicas, s.leader if s.has_state else None) for k, s in every.items()
                    if s.replicas is not None)
            intent = evaluate(facts(plan), rows)
            times["evaluate"].append(time.perf_counter() - t)
            view = ClusterView(client)   # no cached topics: apply's check runs once, in a fresh view
            t = time.perf_counter()
            again = drain_intent(view, plan)
            times["apply"].append(time.perf_counter() - t)
            assert again is not None and again["remaining_count"] == intent["remaining_count"] == len(plan.moves)
            assert not intent["holds"]
        client.stop()
        client.close()
    finally:
        server.stop()
    out = {k: {"median_s": round(statistics.median(v), 3), "runs": [round(x, 3) for x in v]} for k, v in times.items()}
    out["partitions"] = args.partitions
    out["remaining"] = intent["remaining_count"]
    print(json.dumps(out, indent=1))
    (ROOT / "bench" / "out").mkdir(exist_ok=True)
    (ROOT / "bench" / "out" / "intent.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
