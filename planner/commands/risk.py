"""`kplan risk`: what breaks if these brokers go away? (issue 4; the work is in planner.risk + the Spark job)

Prints a table (scenario, level, offline, under-min-ISR, ...; colour only on a terminal) and the worst
partitions, or summary.json with --json. Progress goes to stderr.

Exit codes: 2 bad input (nothing evaluated); otherwise 0, because a risk level is information, not a
failure of the command. Scripts that want to gate on it pass `--fail-on LEVEL`: exit 1 when any scenario
reaches that level (docs/DESIGN.md's "refused for safety").
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from planner import risk_args

LEVELS = ("low", "medium", "high", "critical")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("risk", help="score what a drain breaks: offline, under-min-ISR, unclean... (Spark)",
                       description="Replay Kafka's election rules for the drain, every broker and every rack "
                       "(both modes) and report what would break.")
    risk_args.add_arguments(p)
    p.add_argument("--zk", metavar="HOST:PORT[/chroot]",
                   help="with --plan: read the cluster again and score the plan on it as it is now (whatever "
                   "appeared since the snapshot counts; a drain's brokers must end empty); kept in OUT/cluster")
    p.add_argument("--zk-auth-env", metavar="VAR",
                   help="environment variable holding ZooKeeper digest credentials user:password "
                   "(default: KPLAN_ZK_AUTH when set)")
    p.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    p.add_argument("--spark-submit", action="store_true", help="run the job with spark-submit instead of in-process")
    p.add_argument("--fail-on", choices=LEVELS[1:], help="exit 1 when any scenario reaches this level")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from planner import api, risk

    logging.getLogger("py4j").setLevel(logging.WARNING)
    req = risk_args.request_from_args(args)
    if args.zk:
        from dataclasses import replace

        from planner import zk as zkmod

        if req.plan is None:
            raise api.BadInput("--zk re-reads the cluster to score a plan on it: give --plan too")
        zkmod.parse_connect(args.zk)
        req = replace(req, zk=args.zk, auth=zkmod.auth_from_env(args.zk_auth_env))
    outcome = api.risk(req,
                       progress=lambda p: print(f"kplan risk: {p.message}", file=sys.stderr, flush=True))
    summary = outcome.summary
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(risk.format_report(summary, colour=sys.stdout.isatty()))
    if args.fail_on and LEVELS.index(summary["level"]) >= LEVELS.index(args.fail_on):
        print(f"kplan risk: level {summary['level']} reaches --fail-on {args.fail_on}", file=sys.stderr)
        return 1
    return 0
