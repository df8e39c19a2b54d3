"""`make demo`: the main job end to end on the embedded default.

Sandbox (real ZooKeeper + emulated 6-broker cluster) -> snapshot -> Spark drain risk for broker 1 ->
OR-Tools drain plan -> residual risk of the plan. Every step goes through the public `kplan` CLI, so the
demo shows exactly what an operator would type; artifacts stay in the run folder for inspection.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from planner import cli
from planner.runfolder import RunFolder


def _step(title: str, argv: list[str], ok: tuple[int, ...] = (0,)) -> None:
    print(f"\n=== {title}\n$ kplan {' '.join(argv)}", flush=True)
    started = time.monotonic()
    rc = cli.main(argv)
    print(f"--- {title}: exit {rc} in {time.monotonic() - started:.1f}s", flush=True)
    if rc not in ok:
        raise SystemExit(f"demo step failed: {title} (exit {rc})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m planner.demo")
    parser.add_argument("--dir", default="demo-run", help="run folder (recreated)")
    parser.add_argument("--drain", default="1", help="brokers to drain (comma separated)")
    parser.add_argument("--keep", action="store_true", help="leave the sandbox running afterwards")
    args = parser.parse_args(argv)
    run = Path(args.dir).resolve()
    rf = RunFolder(run)
    sandbox = run / "sandbox"
    if (sandbox / "sandbox.json").exists():
        cli.main(["sandbox", "down", "--dir", str(sandbox)])
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    try:
        _step("start the sandbox cluster", ["sandbox", "up", "--dir", str(sandbox), "--preset", "demo"])
        _step("cluster status", ["sandbox", "status", "--dir", str(sandbox)])
        import json

        zk = json.loads((sandbox / "sandbox.json").read_text())["connect"]
        _step("snapshot ZooKeeper", ["snapshot", "--zk", zk, "--out", str(rf.snapshot),
                                     "--sizes", str(sandbox / "logdirs.json")])
        _step(f"risk of draining broker(s) {args.drain}",
              ["risk", "--snapshot", str(rf.snapshot), "--out", str(rf.risk),
               "--drain", args.drain, "--all-brokers", "--all-racks", "--mode", "both"])
        _step(f"plan the drain of broker(s) {args.drain}",
              ["plan", "drain", "--snapshot", str(rf.snapshot), "--brokers", args.drain,
               "--out", str(rf.plan)])
        _step("residual risk once the plan is applied",
              ["risk", "--snapshot", str(rf.snapshot), "--out", str(rf.risk_after),
               "--drain", args.drain, "--mode", "both", "--plan", str(rf.plan)])
    finally:
        if not args.keep and (sandbox / "sandbox.json").exists():
            cli.main(["sandbox", "down", "--dir", str(sandbox)])
    print(f"\nArtifacts in {run}: snapshot/, risk/, plan/ (reassignment.json is ready for "
          "kafka-reassign-partitions.sh), risk-after/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
