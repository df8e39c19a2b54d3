"""Run every benchmark in bench/ one after another (they are heavy: never in parallel on 2 cores) and
collect what each wrote to bench/out/*.json into bench/out/all.json."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["bench_snapshot.py", "bench_sandbox.py", "bench_risk.py", "bench_plan.py"]


def main() -> int:
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    failed = []
    for name in ORDER + sorted(p.name for p in HERE.glob("bench_*.py") if p.name not in ORDER):
        script = HERE / name
        if not script.exists():
            continue
        print(f"\n##### {name}", flush=True)
        started = time.monotonic()
        rc = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        print(f"##### {name}: exit {rc} in {time.monotonic() - started:.0f}s", flush=True)
        if rc:
            failed.append(name)
    results = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json")) if p.stem != "all"}
    (out / "all.json").write_text(json.dumps(results, indent=2) + "\n")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
