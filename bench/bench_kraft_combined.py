"""The kraft engine's combined layout (issue 24 item 3): every broker node also a voter of the controller quorum
(`process.roles=broker,controller`), against the default layout (a controller node beside the brokers).

Runs tests/test_kraft_differential.py (Kafka 4.1.1, five brokers) once per layout, in one run, with the layout
chosen by KPLAN_KRAFT_LAYOUT. That one test holds all three claims on each layout:
- the snapshot: `kplan snapshot --bootstrap-server` (api.snapshot) read just before the seed incident predicts
  the same 31 partitions as the raw Admin API read;
- the seed incident: broker 1 killed, predicted and reproduced (payments-0 leader -1, ISR [], ELR [1], last
  known ELR [1]);
- the differential: every step's leader, ISR, ELR, last known ELR, offline and under-min-ISR equal to the real
  controller's, 100 %.
Not a CI test: a combined run costs the differential's ~35 s again (the CI budget of issue 24 item 5 took the
seconds). Writes bench/out/kraft_combined.json (per layout: pass/fail, wall seconds, the per-step fidelity).

    /work/team/heavy --bench .venv/bin/python bench/bench_kraft_combined.py [--layouts combined,separate]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run(layout: str) -> dict:
    base = Path(tempfile.mkdtemp(prefix=f"kraft-{layout}-"))
    env = {**os.environ, "KPLAN_KRAFT_LAYOUT": layout}
    started = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "--basetemp", str(base),
                        "tests/test_kraft_differential.py"], cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    fid = next(base.rglob("fidelity.json"), None)
    steps = json.loads(fid.read_text()) if fid else []
    line = next((x for x in p.stdout.splitlines() if "KRaft differential:" in x), "")
    sb_json = next(base.rglob("sandbox.json"), None)
    return {"layout": layout, "passed": p.returncode == 0, "wall_s": round(wall, 1), "summary": line.strip(),
            "steps": [{k: v for k, v in s.items() if k != "misses"} | {"misses": len(s["misses"])} for s in steps],
            "tail": p.stdout.splitlines()[-3:] if p.returncode else [], "sandbox_left": bool(sb_json)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", default="combined,separate")
    ap.add_argument("--out", default=str(HERE / "out" / "kraft_combined.json"))
    args = ap.parse_args()
    out = {"load_before": load(), "runs": []}
    for layout in args.layouts.split(","):
        r = run(layout)
        out["runs"].append(r)
        print(f"{layout}: {'passed' if r['passed'] else 'FAILED'} in {r['wall_s']} s; {r['summary']}", flush=True)
        for s in r["steps"]:
            print(f"  {s['step']}: order {s['order']}, {s['partitions']} partitions, leader {s['leader']}, isr "
                  f"{s['isr']}, elr {s['elr']}, lke {s['last_known_elr']}, offline {s['offline']}, under min ISR "
                  f"{s['under_min_isr']}, misses {s['misses']}, leaders moved {s['leaders_moved']}")
        for x in r["tail"]:
            print("  ", x)
    out["load_after"] = load()
    print(f"load before {out['load_before']}, after {out['load_after']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0 if all(r["passed"] for r in out["runs"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
