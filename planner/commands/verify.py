"""`kplan verify --zk … --plan P [--timeout S]`: wait until the cluster has converged to the plan, run a
preferred election where leaders are not the plan's first replica, remove the run's throttles, and write
report.json in the run folder (docs/APPLY.md). Exit 0 converged, 1 not converged (each stalled partition
named, with why), 2 bad input."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from planner.commands._zkargs import add_zk


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check that the cluster converged to a plan; elect preferred leaders, "
                       "remove throttles, write report.json")
    add_zk(p)
    p.add_argument("--plan", required=True, metavar="P", help="plan folder")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds to wait for convergence (default 300); 0 checks once")
    p.add_argument("--poll", type=float, default=1.0, metavar="S", help="seconds between checks (default 1)")
    p.add_argument("--no-elect", dest="elect", action="store_false",
                   help="do not run a preferred election for leaders that are not the plan's first replica")
    p.add_argument("--report", type=Path, metavar="FILE", help="where report.json goes (default <run>/report.json)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from planner import zk as zkmod
    from planner.errors import NotConverged
    from planner.execution import steps
    from planner.execution.verify import VerifyOptions, table

    auth = zkmod.auth_from_env(args.zk_auth_env)
    opts = VerifyOptions(timeout=args.timeout, poll=args.poll, elect=args.elect, report=args.report)
    try:
        result = steps.verify(args.zk, args.plan, opts, auth=auth, connect_timeout=args.connect_timeout)
    except NotConverged as e:
        report = getattr(e, "report", None)
        if report is not None:
            print(json.dumps(report, indent=1) if args.json else table(report))
            print(f"report: {getattr(e, 'path', '')}", file=sys.stderr)
        raise
    print(json.dumps(result.report, indent=1) if args.json else table(result.report))
    for w in result.warnings:
        print(f"kplan verify: WARNING: {w}", file=sys.stderr)
    print(f"report: {result.path}", file=sys.stderr)
    return 0
