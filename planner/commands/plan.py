"""`kplan plan drain|rebalance`: compute a reassignment plan from a snapshot (docs/PLAN.md).

Nothing is written unless the whole plan succeeded: bad input and infeasible requests exit 2 with a message
that names the constraint and the partitions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from planner.errors import BadInput


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="plan a drain or a rebalance (writes plan.json, reassignment.json, "
                                    "rollback.json)")
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    d = kinds.add_parser("drain", help="move every replica off the given brokers")
    d.add_argument("--brokers", required=True, help="broker ids to drain, comma separated (e.g. 1,2)")
    r = kinds.add_parser("rebalance", help="level replicas (or bytes) and leaders over the registered brokers")
    r.add_argument("--max-moves", type=int, help="at most this many replica moves (best balance within it)")
    r.add_argument("--max-bytes", type=_bytes, help="at most this many bytes copied (e.g. 500GiB)")
    r.add_argument("--balance", choices=["auto", "count", "bytes"], default="auto",
                   help="level replica counts or bytes (auto: bytes when every partition's size is known)")
    for q in (d, r):
        q.add_argument("--snapshot", required=True, type=Path, help="snapshot folder (kplan snapshot --out)")
        q.add_argument("--out", required=True, type=Path, help="plan folder to write")
        q.add_argument("--exclude-topics", metavar="REGEX",
                       help="topics (full-match regex) the plan must not touch")
        q.add_argument("--rack-aware", dest="rack_aware", action="store_true", default=None,
                       help="keep partitions on min(RF, racks) racks (default: on when brokers have racks)")
        q.add_argument("--no-rack-aware", dest="rack_aware", action="store_false")
        q.add_argument("--sizes", type=Path, metavar="FILE",
                       help='partition sizes: {"topic-partition": bytes} or kafka-log-dirs.sh output '
                            "(default: the snapshot's size_bytes)")
        q.add_argument("--max-concurrent-per-broker", type=int, default=5,
                       help="moves per broker per batch (default 5)")
        q.add_argument("--order", choices=["smallest-first", "largest-first"], default="smallest-first",
                       help="data batches order by partition size")
        q.add_argument("--quiet", action="store_true", help="no progress on stderr")
        q.set_defaults(func=_run)


def _bytes(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([kmgtp]?)(i?b)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a byte count (e.g. 1000000, 500GiB, 2TB)")
    unit = m.group(2).lower()
    base = 1024 if (m.group(3) or "").lower() == "ib" else 1000
    return int(m.group(1)) * base ** " kmgtp".index(unit or " ")


def _broker_list(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise BadInput("--brokers is empty: name at least one broker id")
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise BadInput(f"--brokers {text!r}: broker ids are integers, comma separated") from None


def _human(n: int | None) -> str:
    if n is None:
        return "size unknown"
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if x < 1024 or unit == "PiB":
            return f"{x:.1f} {unit}" if unit != "B" else f"{int(x)} B"
        x /= 1024
    return f"{n} B"


def _run(args: argparse.Namespace) -> int:
    from planner.optimizer import Params, from_snapshot, make_plan
    from planner.optimizer.sizes import parse_sizes
    from planner.plan_format import write_plan
    from planner.snapshot_io import read_snapshot

    started = time.perf_counter()
    t0 = started

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    brokers = _broker_list(args.brokers) if args.kind == "drain" else []
    params = Params(kind=args.kind, brokers=brokers, max_moves=getattr(args, "max_moves", None),
                    max_bytes=getattr(args, "max_bytes", None),
                    max_concurrent_per_broker=args.max_concurrent_per_broker, order=args.order,
                    balance=getattr(args, "balance", "auto"))
    params.validate()
    progress(f"reading snapshot {args.snapshot}")
    snap = read_snapshot(args.snapshot)
    sizes = None
    sizes_param: dict[str, Any] = {"source": "snapshot"}
    if args.sizes is not None:
        if not args.sizes.is_file():
            raise BadInput(f"--sizes {args.sizes}: no such file")
        raw = args.sizes.read_bytes()
        sizes = parse_sizes(raw.decode("utf-8", errors="replace"), str(args.sizes))
        sizes_param = {"source": "file", "file": str(args.sizes), "sha256": hashlib.sha256(raw).hexdigest()}
    pb = from_snapshot(snap, sizes=sizes, exclude_topics=args.exclude_topics, rack_aware=args.rack_aware)
    load_s = time.perf_counter() - t0
    progress(f"{pb.num_partitions} partitions, {pb.num_brokers} brokers, "
             f"{'rack-aware' if pb.rack_aware else 'not rack-aware'}, "
             f"{'sizes known' if pb.sizes_known else 'counting replicas (sizes unknown)'}")
    res = make_plan(pb, params, progress)
    t1 = time.perf_counter()
    snapshot = {"fingerprint": snap.fingerprint, "path": str(args.snapshot),
                "taken_at": snap.manifest.get("taken_at")}
    parameters = {
        "brokers": brokers,
        "exclude_topics": args.exclude_topics,
        "rack_aware": pb.rack_aware,
        "sizes": sizes_param,
        "max_moves": params.max_moves,
        "max_bytes": params.max_bytes,
        "max_concurrent_per_broker": params.max_concurrent_per_broker,
        "order": params.order,
        "balance": res.rebalance.mode if res.rebalance else None,
    }
    timings = {"load": round(load_s, 3), **{k.removesuffix("_s"): round(v, 3) for k, v in res.timings.items()}}
    progress(f"writing {args.out}")

    def solve_info() -> dict[str, Any]:
        timings["write"] = round(time.perf_counter() - t1, 3)
        timings["total"] = round(time.perf_counter() - started, 3)
        return {"timings_s": timings, "leader_method": res.leader_method,
                "rebalance_rounds": res.rebalance.rounds if res.rebalance else None}

    doc = write_plan(args.out, res, snapshot, parameters, solve_info)
    solve = json.loads((args.out / "solve.json").read_text())
    _print_summary(doc, solve)
    return 0


def _print_summary(doc: dict[str, Any], solve: dict[str, Any]) -> None:
    s = doc["summary"]
    b, a = doc["before"], doc["after"]
    p = doc["parameters"]
    what = f"drain of brokers {','.join(map(str, p['brokers']))}" if doc["kind"] == "drain" else \
        f"rebalance ({p['balance']} balance)"
    lines = [
        f"plan {doc['id']}: {what}",
        f"  replica moves      {s['replica_moves']} ({s['partitions_moved']} partitions, "
        f"{_human(s['bytes_moved'])}); lower bound {s['lower_bound_moves']}"
        + (f", x{s['moves_over_lower_bound']}" if s["moves_over_lower_bound"] is not None else ""),
        f"  replica spread     {b['replica_spread']} -> {a['replica_spread']} (registered, non-drained brokers)",
        f"  leader spread      {b['leader_spread']} -> {a['leader_spread']} "
        f"(ideal {s['ideal_leaders_per_broker']} per broker, within 1: {s['leaders_within_one_of_ideal']})",
        f"  topic leaders      max per broker {s['max_topic_leaders_per_broker_after']}; "
        f"{s['topics_over_ceil_partitions_per_broker']} topics above ceil(partitions/brokers)",
        f"  leadership changes {s['leadership_changes']} ({s['leader_only_partitions']} reorders without data)",
    ]
    if "bytes_max_deviation_pct" in a:
        lines.append(f"  bytes vs mean      max deviation {b['bytes_max_deviation_pct']}% -> "
                     f"{a['bytes_max_deviation_pct']}%")
    nlead = sum(1 for x in doc["batches"] if x["kind"] == "leadership")
    lines.append(f"  batches            {nlead} leadership + {s['batches'] - nlead} data "
                 f"(max {p['max_concurrent_per_broker']} moves per broker, {p['order']})")
    t = solve["timings_s"]
    lines.append("  times              " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))
    for w in doc["warnings"]:
        lines.append(f"  warning: {w}")
    print("\n".join(lines))
