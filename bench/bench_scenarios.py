"""The whole scenario matrix of issue 21 on real Apache Kafka 3.9 brokers, a live workload throughout.

Every scenario of tests/scenario_support.SCENARIOS (make test runs a reduced set) on one 5-broker real-Kafka
sandbox, one after another from an empty cluster: the scenario's topics (RF 3 / min ISR 2, RF 2, RF 1) with
data in every partition, an idempotent acks=all workload at --rate msg/s, the operation and its fault, and
the same assertions as the tests (nothing lost or duplicated, no offline / under-min-ISR interval or failed
send beyond what the replay predicts for the fault, final assignment, no throttle, no lock). A scenario that
fails is reported with its assertion and the run goes on. Writes bench/out/scenarios.json.

    python bench/bench_scenarios.py [--only NAME,...] [--rate 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import scenario_support as ss  # noqa: E402  (tests/ holds the harness the tests share)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma-separated scenario names (default: all)")
    ap.add_argument("--rate", type=float, default=ss.RATE)
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(ss.SCENARIOS)
    unknown = [n for n in names if n not in ss.SCENARIOS]
    if unknown:
        print(f"unknown scenarios {unknown}; known: {', '.join(ss.SCENARIOS)}", file=sys.stderr)
        return 2
    ss.RATE = args.rate
    work = Path(tempfile.mkdtemp(prefix="kplan-bench-scenarios-"))
    print(f"load before: {load()}", flush=True)
    t0 = time.monotonic()
    real = ss.up(work / "sb")
    results = []
    try:
        print(f"5 real Kafka {real.sb.kafka_version} brokers up in {time.monotonic() - t0:.1f}s", flush=True)
        for name in names:
            started = time.monotonic()
            try:
                fig = ss.run(real, work, name)
                fig["ok"] = True
            except Exception as e:  # noqa: BLE001 - one failed scenario must not hide the others
                fig = {"scenario": name, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000],
                       "trace": traceback.format_exc()[-3000:], "seconds": round(time.monotonic() - started, 1)}
            fig["load"] = load()
            results.append(fig)
            shown = {k: v for k, v in fig.items() if k not in ("trace",)}
            print(json.dumps(shown), flush=True)
    finally:
        real.close()
        real.sb.down()
    print(f"\n{'scenario':<22} {'ok':<4} {'s':>6} {'sent':>6} {'acked':>6} {'failed':>6} {'lost':>4} {'dup':>4} "
          f"{'intervals':>9} {'longest':>8} {'p99 ms':>8} {'max ms':>8}")
    for f in results:
        if not f["ok"]:
            print(f"{f['scenario']:<22} FAIL {f['seconds']:>6} {f['error'][:80]}")
            continue
        print(f"{f['scenario']:<22} ok   {f['seconds']:>6} {f['sent']:>6} {f['acked']:>6} {f['failed']:>6} "
              f"{f['lost']:>4} {f['duplicated']:>4} {f['intervals']:>9} {f['longest_interval_s']:>8} "
              f"{f['p99_ms']:>8} {f['max_ms']:>8}")
    print(f"load after: {load()}; total {time.monotonic() - t0:.0f}s")
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "scenarios.json").write_text(json.dumps({"results": results}, indent=2) + "\n")
    return 0 if all(f["ok"] for f in results) else 1


if __name__ == "__main__":
    sys.exit(main())
