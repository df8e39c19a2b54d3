"""`kplan verify --zk … --plan P [--timeout S]`: wait until the cluster has converged to the plan, run a
preferred election where leaders are not the plan's first replica, remove the run's throttles, and write
report.json in the run folder (docs/APPLY.md). Exit 0 converged, 1 not converged (each stalled partition
named, with why), 2 bad input."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from planner.commands._zkargs import add_zk, cluster


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check that the cluster converged to a plan; elect preferred leaders, "
                       "remove throttles, write report.json")
    add_zk(p, kraft=True)
    p.add_argument("--plan", required=True, metavar="P", help="plan folder")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds to wait for convergence (default 300); 0 checks once")
    p.add_argument("--poll", type=float, default=1.0, metavar="S", help="seconds between checks (default 1)")
    p.add_argument("--no-elect", dest="elect", action="store_false",
                   help="do not run a preferred election for leaders that are not the plan's first replica")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="folder for report.json and progress.json: empty, or holding only this plan's records "
                   "(default: the plan's records folder: the run folder for <run>/plan, else <plan>-run)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from planner import api
    from planner.errors import NotConverged
    from planner.execution.verify import table
    from planner.intent import next_steps as intent_steps

    req = api.VerifyRequest(plan=Path(args.plan), wait=args.timeout, out=args.out, poll=args.poll,
                            elect=args.elect, fail=False, **cluster(args))
    outcome = api.verify(req)
    if not outcome.converged:
        print(json.dumps(dict(outcome.report), indent=1) if args.json else table(dict(outcome.report)))
        print(f"report: {outcome.path or ''}", file=sys.stderr)
        raise NotConverged(outcome.message, next_steps=intent_steps(outcome.report.get("intent")))
    print(json.dumps(dict(outcome.report), indent=1) if args.json else table(outcome.report))
    for w in outcome.warnings:
        print(f"kplan verify: WARNING: {w}", file=sys.stderr)
    print(f"report: {outcome.path}", file=sys.stderr)
    return 0
