"""What a drain's apply does to producers (issue 21 part 4): p99 produce latency and throughput before, during
and after the apply, once at the plan's suggested throttle and once unthrottled, alternated in one run, and
the time from the first submit to converged.

One 5-broker real Kafka 3.9 sandbox. Each run starts from fresh topics: `bulk` (--partitions x --mb MiB, RF 2)
for the drain to copy and `traffic` (10 partitions, RF 3, min ISR 2) that the workload produces into at
--rate msg/s (acks=all, idempotent), both with replicas on broker 1. The workload runs as its own process
(`kplan sandbox workload`, so the apply's CPU in this process does not stall its client), from --before
seconds before the apply to --after seconds after verify; its report's per-second rows give the phases:
before = the seconds before the apply started, during = apply start to converged, after = the seconds after;
copy = the data batches alone (first submit to last completion, from the run record); breakdown = the apply
split by time (first 2 s: the leadership batch's election; middle; the 2.5 s around convergence; settled).
A phase's p99 is the p99 over every message sent in it; its throughput is acknowledged messages per second.
Throttled: the plan's own suggestion per batch (`batch_seconds` --batch-seconds, never below 10 MiB/s);
unthrottled: a rate of 10 GB/s, far above what this machine can copy (the throttle keys are written but
never bind). The drained broker is taken out of maintenance and the topics deleted between runs. Order
T U U T ... (--reps pairs). Writes bench/out/drain_traffic.json.

    python bench/bench_drain_traffic.py [--reps 2] [--partitions 8] [--mb 40] [--rate 200]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from kafka_support import REAL, Real  # noqa: E402  (tests/ holds the sandbox helpers the tests share)
from scenario_support import delete_topics  # noqa: E402

from planner import api  # noqa: E402
from planner.sandbox import Sandbox  # noqa: E402

UNTHROTTLED = 10_000_000_000
BROKERS = [{"id": i, "rack": f"r{(i - 1) % 3 + 1}"} for i in range(1, 6)]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def pct(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, as the workload's report computes its own."""
    if not sorted_values:
        return None
    k = max(1, -(-len(sorted_values) * q // 100))
    return sorted_values[int(k) - 1]


def phase(report: dict, t0: float, t1: float) -> dict:
    """Messages sent in [t0, t1) (epoch seconds): p50 / p99 / max of their produce latency, pooled over the
    phase from the report's samples; throughput = acknowledgements per second of the whole seconds inside."""
    start = report["started_at"]
    lat = sorted(ms for t, ms in report["samples"] if t0 <= start + t < t1)
    rows = [r for r in report["seconds"] if start + r["t"] >= t0 and start + r["t"] + 1 <= t1]
    secs = len(rows)
    return {"seconds": round(t1 - t0, 1), "messages": len(lat), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "max_ms": lat[-1] if lat else None,
            "acked_per_s": round(sum(r["acked"] for r in rows) / secs, 1) if secs else None,
            "failed": sum(r["failed"] for r in rows)}


def breakdown(report: dict, apply_start: float, converged: float) -> dict:
    """The apply split by time (epoch seconds): its first 2 s (the leadership batch's election), the middle
    (the copy), the 2.5 s around convergence (the last reassignment moves leadership off the drained broker),
    and from 2 s after convergence on: messages and p99 of each, from the report's samples."""
    start = report["started_at"]
    parts = {"first_2s": (apply_start, apply_start + 2), "middle": (apply_start + 2, converged - 0.5),
             "converging": (converged - 0.5, converged + 2), "settled": (converged + 2, float("inf"))}
    out = {}
    for name, (a, b) in parts.items():
        lat = sorted(ms for t, ms in report["samples"] if a <= start + t < b)
        out[name] = {"messages": len(lat), "p99_ms": pct(lat, 99)}
    return out


def one_run(real: Real, work: Path, name: str, throttled: bool, args: argparse.Namespace) -> dict:
    sb = real.sb
    bulk, traffic = f"{name}-bulk", f"{name}-traffic"
    n = args.partitions
    real.topic(bulk, *[[(p % 5) + 1, ((p + 1) % 5) + 1] for p in range(n)], settle=120)
    real.topic(traffic, *[[(p % 5) + 1, ((p + 1) % 5) + 1, ((p + 2) % 5) + 1] for p in range(10)], settle=120,
               min_insync_replicas="2")
    t = time.monotonic()
    sb.produce({(bulk, p): args.mb * 1024 * 1024 for p in range(n)})
    sb.wait_settled(300)
    produced_s = time.monotonic() - t
    run = api.RunFolder(work / name)
    run.root.mkdir(parents=True)
    sizes = run.root / "logdirs.json"
    sizes.write_text(json.dumps(sb.log_dirs()))
    api.snapshot(api.SnapshotRequest(zk=sb.connect_string, out=run.snapshot, sizes=sizes))
    api.plan_drain(api.DrainRequest(snapshot=run.snapshot, out=run.plan, brokers=(1,),
                                    batch_seconds=args.batch_seconds))
    doc = json.loads((run.plan / "plan.json").read_text())
    suggested = sorted({b["suggested_throttle_bytes_per_s"] for b in doc["batches"] if b["kind"] == "data"})
    report_file = run.root / "workload.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    wl = subprocess.Popen([sys.executable, "-m", "planner.cli", "sandbox", "workload", "--dir", str(sb.dir),
                           "--topics", traffic, "--rate", str(args.rate), "--every", "3600", "--samples",
                           "--report", str(report_file)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(args.before + 3)   # a benchmark's fixed observation window (3 s for the workload to start)
        apply_start = time.time()
        applied = api.apply(api.ApplyRequest(zk=sb.connect_string, plan=run.plan, poll=0.2,
                                             **({} if throttled else {"throttle": UNTHROTTLED})))
        ver = api.verify(api.VerifyRequest(zk=sb.connect_string, plan=run.plan, wait=600, poll=0.2))
        converged = time.time()
        time.sleep(args.after)
    finally:
        wl.send_signal(signal.SIGTERM)
        out, _ = wl.communicate(timeout=180)
    report = json.loads(report_file.read_text())
    rec = json.loads(real.zk.get(f"/kplan/runs/{doc['id'].split(':', 1)[1]}")[0])
    submitted = [u[1] for u in rec["units"] if u[1]]
    completed = [u[2] for u in rec["units"] if u[2]]
    # the data batches alone (first submit to last completion): the copy the throttle governs, without the
    # leadership batches' elections (which move leaders whatever the rate)
    data = [b["index"] for b in doc["batches"] if b["kind"] == "data"]
    copy_t0, copy_t1 = min(rec["units"][i][1] for i in data), max(rec["units"][i][2] for i in data)
    result = {
        "run": name, "throttle": "suggested" if throttled else "unthrottled",
        "suggested_bytes_per_s": suggested, "bytes_moved": doc["summary"].get("bytes_moved"),
        "batches": applied.batches_total, "produced_s": round(produced_s, 1),
        "apply_s": round(applied.seconds, 2), "converged": ver.converged,
        "first_submit_to_converged_s": round(max(completed) - min(submitted), 2),
        "first_submit_to_verify_converged_s": round(ver.report["converged_at"] - min(submitted), 2)
        if ver.report.get("converged_at") else None,
        "before": phase(report, report["started_at"] + 3, apply_start),
        "during": phase(report, apply_start, converged),
        "copy": phase(report, copy_t0, copy_t1), "copy_s": round(copy_t1 - copy_t0, 2),
        "breakdown": breakdown(report, apply_start, converged),
        "after": phase(report, converged, report["stopped_at"]),
        "workload_ok": report["verdict"]["integrity"] and report["verdict"]["availability"],
        "workload_problems": report["verdict"]["problems"], "lost": report["audit"]["lost"],
        "load": load(),
    }
    for row in api.brokers(api.BrokersRequest(zk=sb.connect_string)):
        if row.state != "in service":
            api.clear_maintenance(api.ClearRequest(zk=sb.connect_string, brokers=(row.broker,), reason="bench"))
    delete_topics(real, [bulk, traffic], timeout=300)
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2, help="pairs of runs (T U, then U T, ...)")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--mb", type=int, default=40, help="MiB per bulk partition")
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--batch-seconds", type=int, default=30)
    ap.add_argument("--before", type=float, default=15.0)
    ap.add_argument("--after", type=float, default=15.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kplan-bench-drain-traffic-"))
    print(f"load before: {load()}", flush=True)
    sb = Sandbox.up(work / "sb", cluster={"brokers": BROKERS, "topics": []}, engine="kafka", timeout=240,
                    broker_heap_mb=384, **REAL)
    real = Real(sb)
    results = []
    try:
        order = []
        for i in range(args.reps):
            order += [True, False] if i % 2 == 0 else [False, True]
        for i, throttled in enumerate(order):
            r = one_run(real, work, f"r{i}{'t' if throttled else 'u'}", throttled, args)
            results.append(r)
            print(json.dumps(r), flush=True)
    finally:
        real.close()
        sb.down()
    print(f"\n{'run':<6} {'throttle':<12} {'batches':>7} {'submit->conv s':>14} {'p99 ms before':>13} "
          f"{'during':>8} {'copy':>8} {'after':>8} {'max during':>10} {'msg/s before':>12} "
          f"{'during':>7} {'copy':>7} {'after':>7}   p99 ms: first 2 s / middle / converging / settled")
    for r in results:
        b, d, c, a = r["before"], r["during"], r["copy"], r["after"]
        k = r["breakdown"]
        print(f"{r['run']:<6} {r['throttle']:<12} {r['batches']:>7} {r['first_submit_to_converged_s']:>14} "
              f"{b['p99_ms']!s:>13} {d['p99_ms']!s:>8} {c['p99_ms']!s:>8} {a['p99_ms']!s:>8} "
              f"{d['max_ms']!s:>10} {b['acked_per_s']!s:>12} {d['acked_per_s']!s:>7} {c['acked_per_s']!s:>7} "
              f"{a['acked_per_s']!s:>7}   " + " / ".join(str(k[x]["p99_ms"]) for x in k))
    for kind in ("suggested", "unthrottled"):
        rs = [r for r in results if r["throttle"] == kind]
        if rs:
            med = statistics.median
            print(f"{kind}: median submit->converged {med(r['first_submit_to_converged_s'] for r in rs)} s; median "
                  f"p99 before / during / after {med(r['before']['p99_ms'] for r in rs)} / "
                  f"{med(r['during']['p99_ms'] for r in rs)} / {med(r['after']['p99_ms'] for r in rs)} ms; the copy "
                  f"alone: median {med(r['copy_s'] for r in rs)} s, p99 {med(r['copy']['p99_ms'] for r in rs)} ms")
    print(f"load after: {load()}")
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "drain_traffic.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=2) + "\n")
    return 0 if all(r["workload_ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
