"""`kplan risk`: what breaks if these brokers go away? (issue 4; the work is in planner.risk + the Spark job)

Prints a table (scenario, level, offline, under-min-ISR, ...; colour only on a terminal) and the worst
partitions, or summary.json with --json. Progress goes to stderr.

Exit codes: 2 bad input (nothing evaluated); otherwise 0, because a risk level is information, not a
failure of the command. Scripts that want to gate on it pass `--fail-on LEVEL`: exit 1 when any scenario
reaches that level (DESIGN.md's "refused for safety").
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

LEVELS = ("low", "medium", "high", "critical")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The request arguments, shared by `kplan risk` and `spark-submit spark/drain_risk.py`."""
    p.add_argument("--snapshot", required=True, help="snapshot folder (kplan snapshot)")
    p.add_argument("--out", required=True, help="output folder: scenarios.parquet, partitions.parquet, summary.json")
    p.add_argument("--drain", action="append", default=[], metavar="IDS",
                   help="broker ids to drain, comma-separated, in rolling order (repeatable)")
    p.add_argument("--drain-rack", action="append", default=[], metavar="RACK",
                   help="drain every broker of a rack (repeatable)")
    p.add_argument("--all-brokers", action="store_true",
                   help="also every live broker alone (default when no drain is given)")
    p.add_argument("--all-racks", action="store_true", help="also every rack (default when no drain is given)")
    p.add_argument("--mode", choices=["controlled", "failure", "both"], default="both",
                   help="controlled = graceful stop, failure = kill (default both)")
    p.add_argument("--plan", help="plan folder (reassignment.json): also score the scenarios on the plan's "
                   "target assignment")
    p.add_argument("--kafka-version", default="3.7",
                   help="Kafka version whose min-ISR rule applies (default 3.7: min(min.insync.replicas, RF))")
    p.add_argument("--master", help="Spark master (default $SPARK_MASTER or local[2])")
    p.add_argument("--driver-memory", help="Spark driver memory (default $KPLAN_SPARK_DRIVER_MEMORY or 2g)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("risk", help="score what a drain breaks: offline, under-min-ISR, unclean... (Spark)",
                       description="Replay Kafka's election rules for the drain, every broker and every rack "
                       "(both modes) and report what would break.")
    add_arguments(p)
    p.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    p.add_argument("--spark-submit", action="store_true", help="run the job with spark-submit instead of in-process")
    p.add_argument("--fail-on", choices=LEVELS[1:], help="exit 1 when any scenario reaches this level")
    p.add_argument("--force", action="store_true", help="replace --out if it is not empty")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from planner import api, risk

    logging.getLogger("py4j").setLevel(logging.WARNING)
    outcome = api.risk(risk.request_from_args(args),
                       progress=lambda p: print(p.message, file=sys.stderr, flush=True))
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
