"""`kplan plan restart`: the restart plan of a rolling restart (docs/PLAN.md "Restart plans").

Argument parsing and the printed summary only; the step is planner.api.plan_restart.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.text import count, size


def add_kind(kinds: argparse._SubParsersAction) -> None:
    q = kinds.add_parser("restart", help="restart brokers one at a time: the fewest temporary replicas that keep "
                                         "every partition online and at min ISR, and each broker's demotion")
    q.add_argument("--brokers", required=True, help="broker ids to restart, comma separated (e.g. 1,2,3)")
    q.add_argument("--order", choices=["auto", "given"], default="auto",
                   help="roll order: auto (ascending id, the controller's broker last) or given (as listed)")
    q.add_argument("--snapshot", required=True, type=Path, help="snapshot folder (kplan snapshot --out)")
    q.add_argument("--out", required=True, type=Path, help="plan folder to write")
    q.add_argument("--exclude-topics", metavar="REGEX", help="topics (full-match regex) the plan must not touch")
    q.add_argument("--rack-aware", dest="rack_aware", action="store_true", default=None,
                   help="prefer racks a partition does not span yet (default: on when brokers have racks)")
    q.add_argument("--no-rack-aware", dest="rack_aware", action="store_false")
    q.add_argument("--sizes", type=Path, metavar="FILE",
                   help='partition sizes: {"topic-partition": bytes} or kafka-log-dirs.sh output')
    q.add_argument("--kafka-version", default="3.7",
                   help="Kafka version whose min-ISR rule applies (default 3.7: min(min.insync.replicas, RF))")
    q.add_argument("--max-concurrent-per-broker", type=int, default=5,
                   help="moves per broker per batch of the protecting reassignment (default 5)")
    q.add_argument("--batch-seconds", type=int, default=3600, metavar="S",
                   help="target duration of one protecting batch (its suggested throttle)")
    q.add_argument("--max-disk-usage", type=float, default=0.85, metavar="F",
                   help="no broker above this fraction of its log dirs' capacity with the temporary replicas "
                   "(default 0.85)")
    q.add_argument("--quiet", action="store_true", help="no progress on stderr")
    q.add_argument("--force", action="store_true", help="replace --out if it is not empty")
    q.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from planner import api
    from planner.commands._zkargs import broker_list

    started = time.perf_counter()

    def progress(p: api.Progress) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - started:6.1f}s] {p.message}", file=sys.stderr, flush=True)

    req = api.RestartRequest(snapshot=args.snapshot, out=args.out, brokers=tuple(broker_list(args.brokers)),
                             order=args.order, exclude_topics=args.exclude_topics, rack_aware=args.rack_aware,
                             sizes=args.sizes, kafka_version=args.kafka_version,
                             max_concurrent_per_broker=args.max_concurrent_per_broker,
                             batch_seconds=args.batch_seconds, force=args.force,
                             max_disk_usage=args.max_disk_usage)
    outcome = api.plan_restart(req, progress=progress)
    print(summary_text(outcome.plan.doc, outcome.solve))
    return 0


def summary_text(doc: Mapping[str, Any], solve: Mapping[str, Any] | None = None) -> str:
    s, roll, prot, drain = doc["summary"], doc["roll"], doc["protection"], doc["drain_comparison"]
    order = ",".join(map(str, roll["order"]))
    ctrl = roll.get("controller")
    lines = [
        f"plan {doc['id']}: restart of brokers {order} ({roll['order_source']} order"
        + (f", controller {ctrl} {'last' if roll['order'] and roll['order'][-1] == ctrl else 'not in the roll'}"
           if ctrl is not None else "") + ")",
        f"  temporary replicas {prot['replicas']} on {count(prot['partitions'], 'partition')} "
        f"({size(prot['bytes'], 'size unknown')}): {prot['reasons']['rf1']} RF=1, "
        f"{prot['reasons']['shrunk-isr']} shrunk ISR, {prot['reasons']['min-isr']} at min ISR with a broker down",
        f"  a full drain       would move {drain['replicas']} replicas of {count(drain['partitions'], 'partition')} "
        f"({size(drain['bytes'], 'size unknown')})"
        + ("; it is not possible: no other broker is left" if drain["brokers_left"] == 0 else ""),
        f"  leadership         {s['leaders_to_move']} leaders moved off before each broker stops (demotion), "
        f"restored after it is back; {s['cannot_move']} cannot move",
        f"  replay check       worst step before the plan {s['worst_level_before'].upper()}, "
        f"after it {s['worst_level_after'].upper()}",
        f"  batches            {s['batches']} protecting batch(es), then {len(roll['steps'])} steps, then the undo "
        "(rollback.json)",
        "  steps:",
    ]
    checks = {(c["step"], c["mode"]): c for c in doc["replay_check"]["after"]}
    before = {(c["step"], c["mode"]): c for c in doc["replay_check"]["before"]}
    for st in roll["steps"]:
        k = st["step"]
        verdict = "  ".join(f"{m} {before[(k, m)]['level']}->{checks[(k, m)]['level']}" for m in ("controlled", "failure")
                            if (k, m) in checks)
        lines.append(f"    {k:>3}. broker {st['broker']}: hosts {st['hosted']}, leads {st['leads']}, "
                     f"{st['demote']['partitions']} reordered ({st['demote']['file']}); {verdict}"
                     + (f"; CANNOT MOVE: {', '.join(st['cannot_move'][:10])}" if st["cannot_move"] else ""))
    if solve:
        t = solve.get("timings_s", {})
        lines.append("  times              " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))
    for w in doc["warnings"]:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)
