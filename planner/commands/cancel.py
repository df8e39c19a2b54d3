"""`kplan cancel --zk … --plan P [--revert]`: stop an apply after the batch in flight (or move that batch's
partitions back to where they were), remove the throttles, release the lock and record the state
(docs/APPLY.md). Exit 0 cancelled / nothing to cancel, 1 the batch in flight did not finish in time, 2 bad
input."""

from __future__ import annotations

import argparse
import sys

from planner.commands._zkargs import ProgressLine, add_zk, cluster


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cancel", help="stop an apply after its current batch (or revert that batch)")
    add_zk(p, kraft=True)
    p.add_argument("--plan", required=True, metavar="P", help="plan folder of the apply to cancel")
    p.add_argument("--revert", action="store_true",
                   help="move the partitions of the batch in flight back to their replicas before it "
                   "(ZooKeeper cannot stop a running reassignment: the batch finishes, then is reverted)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds to wait for the batch in flight (default 300)")
    p.add_argument("--poll", type=float, default=1.0, metavar="S", help="seconds between checks (default 1)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from planner import api

    req = api.CancelRequest(plan=Path(args.plan), revert=args.revert, wait=args.timeout, poll=args.poll,
                            **cluster(args))
    line = ProgressLine()
    try:
        outcome = api.cancel(req, progress=line)
    finally:
        line.end()
    for w in outcome.warnings:
        print(f"kplan cancel: WARNING: {w}", file=sys.stderr)
    print(outcome.message)
    return 0
