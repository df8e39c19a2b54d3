"""The risk request as command-line arguments: one parser for `kplan risk` and for the Spark job's
`spark-submit` entry (both are command lines, so messages here name the flags). Cheap to import."""

from __future__ import annotations

import argparse
from pathlib import Path

from planner.errors import BadInput
from planner.requests import RiskRequest

MODES = ("controlled", "failure")


def parse_brokers(text: str, what: str = "--drain") -> tuple[int, ...]:
    """'1,2, 3' -> (1, 2, 3), order kept (it is the rolling order). Empty or junk -> BadInput."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items:
        raise BadInput(f"{what} is empty: name at least one broker id, e.g. {what} 1,2")
    try:
        ids = tuple(int(x) for x in items)
    except ValueError:
        raise BadInput(f"{what} {text!r} must be a comma-separated list of broker ids") from None
    if len(set(ids)) != len(ids):
        raise BadInput(f"{what} {text!r} names a broker twice")
    return ids


def parse_racks(text: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in str(text).split(",") if x.strip())
    if not items:
        raise BadInput("--drain-rack is empty: name at least one rack")
    return items


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
    p.add_argument("--plan", help="plan folder (kplan plan): also score the scenarios on the plan's target "
                   "assignment")
    p.add_argument("--plan-snapshot", metavar="DIR",
                   help="the snapshot the plan was made from, when --snapshot is a later read of the cluster "
                   "(what `kplan risk --zk` passes the job)")
    p.add_argument("--kafka-version", default="3.7",
                   help="Kafka version whose min-ISR rule applies (default 3.7: min(min.insync.replicas, RF))")
    p.add_argument("--session-timeout", type=float, default=18.0, metavar="S",
                   help="the brokers' zookeeper.session.timeout.ms in seconds (default 18, Kafka 3.x): how long "
                   "a killed broker's partitions stay unanswered")
    p.add_argument("--master", help="Spark master (default $SPARK_MASTER or local[2])")
    p.add_argument("--driver-memory", help="Spark driver memory (default $KPLAN_SPARK_DRIVER_MEMORY or 2g)")
    p.add_argument("--force", action="store_true", help="replace --out if it is not empty")


def request_from_args(args: argparse.Namespace) -> RiskRequest:
    modes = MODES if args.mode == "both" else (args.mode,)
    return RiskRequest(
        snapshot=Path(args.snapshot), out=Path(args.out),
        drains=tuple(parse_brokers(d) for d in args.drain),
        drain_racks=tuple(r for text in args.drain_rack for r in parse_racks(text)),
        all_brokers=args.all_brokers, all_racks=args.all_racks, modes=modes,
        plan=Path(args.plan) if args.plan else None,
        plan_snapshot=Path(args.plan_snapshot) if getattr(args, "plan_snapshot", None) else None,
        kafka_version=args.kafka_version,
        session_timeout_s=args.session_timeout, master=args.master,
        driver_memory=args.driver_memory, spark_submit=bool(getattr(args, "spark_submit", False)),
        force=bool(getattr(args, "force", False)))


def to_args(req: RiskRequest) -> list[str]:
    """The request as command-line arguments (what spark-submit passes to the job's entry)."""
    if not isinstance(req.snapshot, str | Path):
        raise ValueError("spark-submit needs a snapshot folder, not an in-memory snapshot")
    args = ["--snapshot", str(req.snapshot), "--out", str(req.out), "--kafka-version", req.kafka_version,
            "--session-timeout", repr(float(req.session_timeout_s)),
            "--mode", "both" if set(req.modes) == set(MODES) else req.modes[0]]
    for d in req.drains:
        args += ["--drain", ",".join(map(str, d))]
    for r in req.drain_racks:
        args += ["--drain-rack", r]
    if req.all_brokers:
        args.append("--all-brokers")
    if req.all_racks:
        args.append("--all-racks")
    if req.plan is not None:
        args += ["--plan", str(req.plan)]
    if req.plan_snapshot is not None:
        args += ["--plan-snapshot", str(req.plan_snapshot)]
    return args
