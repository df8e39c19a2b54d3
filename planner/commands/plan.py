"""`kplan plan drain|rebalance`: compute a reassignment plan from a snapshot (docs/PLAN.md).

Argument parsing and the printed summary only; the step is planner.api.plan_drain / plan_rebalance.
Nothing is written unless the whole plan succeeded: bad input and infeasible requests exit 2 with a message
that names the constraint and the partitions.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.commands._zkargs import broker_list
from planner.text import count, size


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="plan a drain, a rebalance or a restart (writes plan.json, reassignment.json, "
                                    "rollback.json)")
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    d = kinds.add_parser("drain", help="move every replica off the given brokers")
    d.add_argument("--brokers", required=True, help="broker ids to drain, comma separated (e.g. 1,2)")
    r = kinds.add_parser("rebalance", help="level replicas (or bytes) and leaders over the registered brokers")
    r.add_argument("--max-moves", type=int, help="at most this many replica moves (best balance within it)")
    r.add_argument("--max-bytes", type=_bytes, help="at most this many bytes copied (e.g. 500GiB)")
    r.add_argument("--balance", choices=["auto", "count", "bytes"], default="auto",
                   help="level replica counts or bytes (auto: bytes when every partition's size is known)")
    t = kinds.add_parser("return", help="bring drained brokers back: replicas move only onto them (the drain's "
                                        "own moves reversed where the cluster still matches them)")
    t.add_argument("--brokers", required=True, help="drained broker ids that are registered again, comma separated")
    t.add_argument("--drain-plan", type=Path, metavar="P",
                   help="the drain's plan folder (default: found through the brokers' maintenance state)")
    for q in (d, r, t):
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
        q.add_argument("--leader-scope", choices=["touched", "all"],
                       help="partitions that may change their preferred leader: touched (only those the plan "
                            "moves) or all (default: touched for a drain, all for a rebalance)")
        q.add_argument("--max-leader-changes", type=int, metavar="N",
                       help="at most N preferred-leader changes in all (the most level leaders within it)")
        q.add_argument("--batch-seconds", type=int, default=3600, metavar="S",
                       help="target duration of one batch: its suggested throttle is its busiest broker's "
                            "bytes over S (default 3600)")
        q.add_argument("--max-disk-usage", type=float, default=0.85, metavar="F",
                       help="no broker may hold more than this fraction of its log dirs' capacity after the "
                            "plan or at any batch boundary (default 0.85; capacity from the snapshot)")
        q.add_argument("--quiet", action="store_true", help="no progress on stderr")
        q.add_argument("--force", action="store_true", help="replace --out if it is not empty")
        q.set_defaults(func=_run)
    from planner.commands.plan_restart import add_kind

    add_kind(kinds)


def _bytes(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([kmgtp]?)(i?b)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a byte count (e.g. 1000000, 500GiB, 2TB)")
    unit = m.group(2).lower()
    base = 1024 if (m.group(3) or "").lower() == "ib" else 1000
    return int(m.group(1)) * base ** " kmgtp".index(unit or " ")


def _human(n: int | None) -> str:
    return size(n, unknown="size unknown")


def _run(args: argparse.Namespace) -> int:
    from planner import api

    started = time.perf_counter()

    def progress(p: api.Progress) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - started:6.1f}s] {p.message}", file=sys.stderr, flush=True)

    common = dict(snapshot=args.snapshot, out=args.out, exclude_topics=args.exclude_topics,
                  rack_aware=args.rack_aware, sizes=args.sizes,
                  max_concurrent_per_broker=args.max_concurrent_per_broker, order=args.order, force=args.force,
                  max_leader_changes=args.max_leader_changes, batch_seconds=args.batch_seconds,
                  max_disk_usage=args.max_disk_usage)
    if args.leader_scope:
        common["leader_scope"] = args.leader_scope
    if args.kind == "drain":
        outcome = api.plan_drain(api.DrainRequest(brokers=tuple(broker_list(args.brokers)), **common),
                                 progress=progress)
    elif args.kind == "return":
        outcome = api.plan_return(api.ReturnRequest(brokers=tuple(broker_list(args.brokers)),
                                                    drain_plan=args.drain_plan, **common), progress=progress)
    else:
        outcome = api.plan_rebalance(api.RebalanceRequest(max_moves=args.max_moves, max_bytes=args.max_bytes,
                                                          balance=args.balance, **common), progress=progress)
    _print_summary(outcome.plan.doc, outcome.solve, outcome.plan)
    return 0


def _disk_lines(doc: Mapping[str, Any]) -> list[str]:
    """'disk use  max 61.2% -> 78.9% (broker 4), limit 85%' over the brokers that stay."""
    br = doc["brokers"]
    cap = br.get("capacity_bytes")
    if not cap or "disk_used_bytes" not in doc["after"]:
        return ["  disk capacity      unknown (not checked: the snapshot has no log-dir capacity)"]

    def top(used: list) -> tuple[float, int | None]:
        best, who = -1.0, None
        for bid, c, u, e in zip(br["ids"], cap, used, br["eligible"], strict=True):
            if e and c and u is not None and u / c > best:
                best, who = u / c, bid
        return best, who

    b_pct, _ = top(doc["before"]["disk_used_bytes"])
    a_pct, who = top(doc["after"]["disk_used_bytes"])
    limit = doc["parameters"].get("max_disk_usage")
    return [f"  disk use           fullest kept broker {100 * b_pct:.1f}% -> {100 * a_pct:.1f}% (broker {who}); "
            f"limit {100 * limit:g}% of capacity, at every batch boundary too"] if who is not None else []


def _nothing_to_move(doc: Mapping[str, Any]) -> str:
    """The moves line of a plan with no move: what that means for its kind, never a bound it did not need."""
    b, a = doc["before"], doc["after"]
    if doc["kind"] == "drain":
        return "0: the brokers host no replica; nothing to drain"
    if doc["kind"] == "rebalance":
        return (f"0: already balanced (replica spread {b['replica_spread']}, leader spread {b['leader_spread']}"
                + (f", bytes within {a['bytes_max_deviation_pct']}% of the mean" if "bytes_max_deviation_pct" in a
                   else "") + "): no move improves it within the plan's limits")
    return "0: nothing to move"


def _wrap(label: str, text: str, width: int = 110) -> list[str]:
    """`  label  text`, wrapped at word boundaries under the text (a long line is never cut)."""
    import textwrap

    head = f"  {label:<18} "
    return textwrap.wrap(text, width=width, initial_indent=head, subsequent_indent=" " * len(head),
                         break_long_words=False, break_on_hyphens=False) or [head.rstrip()]


def _moves_line(doc: Mapping[str, Any]) -> str:
    """The moves against the bound the plan is measured by, and what that bound is for."""
    s = doc["summary"]
    head = f"{s['replica_moves']:,} ({count(s['partitions_moved'], 'partition')}, {_human(s['bytes_moved'])})"
    if s.get("already_balanced"):
        return head + ": already balanced, nothing to move"
    ratio = f", x{s['moves_over_lower_bound']}" if s.get("moves_over_lower_bound") is not None else ""
    if doc["kind"] == "drain":
        return head + f"; lower bound {s['lower_bound_moves']:,} (the drained brokers' replicas){ratio}"
    if doc["kind"] != "rebalance":
        return head + f"; lower bound {s['lower_bound_moves']:,}{ratio}"
    band = s.get("target_replica_band")
    goal = f"replica spread <= {s['reachable_replica_spread']} ({band[0]:,}..{band[1]:,} per broker)" if band \
        else "the level counts"
    parts = s.get("lower_bound_parts") or {}
    basis = s.get("lower_bound_basis")
    if basis == "count + leader caps":
        side = parts.get("joint_side", "above")
        base = parts["replicas_above_band"] if side == "above" else parts["replicas_below_band"]
        why = (f"{base:,} replicas {'above' if side == 'above' else 'missing below'} the band + "
               f"{parts['leader_cap_extra_moves']:,} moves the topics' leader caps add")
    elif basis == "leader caps":
        why = f"{parts['leader_cap_deficiency']:,} partitions no leader within its topic's cap can serve today"
    elif basis == "exact":
        why = "the exact minimum (CP-SAT)"
    elif basis == "LP relaxation of the whole goal":
        why = ("the LP relaxation of the band, the rack rules, every topic's leader cap and leader spread <= 1 "
               "together")
    elif basis == "count under the rack rules":
        why = "the fewest new replicas that reach the band when replicas may change only to racks their " \
              "partitions may use"
    else:
        why = (f"{max(parts.get('replicas_above_band', 0), parts.get('replicas_below_band', 0)):,} replicas "
               "above / missing below the band")
    return head + f"; lower bound {s['lower_bound_moves']:,} to reach {goal} with every topic's leaders " \
        f"within its cap ({why}){ratio}"


def _print_summary(doc: Mapping[str, Any], solve: Mapping[str, Any], plan: Any = None) -> None:
    from planner.plan_model import replica_spread_text

    s = doc["summary"]
    b, a = doc["before"], doc["after"]
    p = doc["parameters"]
    what = {"drain": f"drain of brokers {','.join(map(str, p['brokers']))}",
            "return": f"return of brokers {','.join(map(str, p['brokers']))}"}.get(
        doc["kind"], f"rebalance ({p['balance']} balance)")
    lines = [
        f"plan {doc['id']}: {what}",
        *_wrap("replica moves", _moves_line(doc) if s["replica_moves"] else _nothing_to_move(doc)),
        *_wrap("replica spread", (replica_spread_text(plan) if plan is not None else
                                  f"{b['replica_spread']} -> {a['replica_spread']}")
               + (f"; the racks allow {s['reachable_replica_spread']} at best: {s['replica_spread_reason']}"
                  if s.get("replica_spread_reason") else "")),
        f"  leader spread      {b['leader_spread']} -> {a['leader_spread']} "
        f"(ideal {s['ideal_leaders_per_broker']} per broker, within 1: {s['leaders_within_one_of_ideal']})",
        f"  topic leaders      max per broker {s['max_topic_leaders_per_broker_after']}; "
        f"{s['topics_over_ceil_partitions_per_broker']} topics above ceil(partitions/brokers)"
        + (f" ({s['topics_over_ceil_stopped_by_budget']} of them because the move budget ran out)"
           if s.get("topics_over_ceil_stopped_by_budget") else ""),
        f"  leadership changes {s['leadership_changes']} ({s['necessary_leadership_changes']} necessary, "
        f"{s['optional_leadership_changes']} optional; {s['leader_only_partitions']} reorders without data), "
        f"scope {s['leader_scope']}",
    ]
    alt = doc["leadership"]["alternative"]
    lines.append(f"  scope {alt['scope']:<12} would make {alt['leadership_changes']} leadership changes "
                 f"({alt['optional']} optional), leader spread {alt['leader_spread_after']}, "
                 f"{alt['topics_over_ceil_partitions_per_broker']} topics above ceil(partitions/brokers)")
    if "bytes_max_deviation_pct" in a:
        lines.append(f"  bytes vs mean      max deviation {b['bytes_max_deviation_pct']}% -> "
                     f"{a['bytes_max_deviation_pct']}%")
    if "bytes_led_spread" in a:
        lines.append(f"  bytes led          spread {_human(b['bytes_led_spread'])} -> {_human(a['bytes_led_spread'])} "
                     f"({doc['leadership'].get('bytes_led_swaps', 0)} same-topic leadership swaps, counts "
                     "unchanged)")
    lines.extend(_disk_lines(doc))
    nlead = sum(1 for x in doc["batches"] if x["kind"] == "leadership")
    lines.append(f"  batches            {nlead} leadership + {s['batches'] - nlead} data "
                 f"(max {p['max_concurrent_per_broker']} moves per broker, {p['order']})")
    data = [x for x in doc["batches"] if x["kind"] == "data"]
    if data and data[0]["suggested_throttle_bytes_per_s"] is not None:
        top = max(x["suggested_throttle_bytes_per_s"] for x in data)
        lines.append(f"  batch files        {doc['batches'][0]['file']} .. {doc['batches'][-1]['file']}; "
                     f"suggested throttle up to {_human(top)}/s ({p['batch_seconds']} s per batch)")
    elif doc["batches"]:
        lines.append(f"  batch files        {doc['batches'][0]['file']} .. {doc['batches'][-1]['file']}")
    maint = doc.get("maintenance") or {}
    for e in maint.get("left_out") or ():
        lines.append(f"  LEFT OUT           broker {e['broker']}: {e['state']} since {e.get('since') or '?'}"
                     + (f", plan {str(e['plan_id'])[:19]}" if e.get("plan_id") else "")
                     + (f" ({e['reason']})" if e.get("reason") else "") + ": no replica, no preferred leadership")
    if "undo" in maint:
        u = maint["undo"]
        share = ", ".join(f"broker {e['broker']} {e['share'][0]}..{e['share'][1]} replicas"
                          for e in maint.get("returning") or ())
        lines.append(f"  return             {u['reversed']} of the drain's {u['drain_moves']} moves reversed "
                     f"({u['no_longer_matching']} no longer match the cluster, {u['held_back']} held back), "
                     f"{u['balanced_moves']} replicas balanced onto it; share {share}"
                     + ("" if u.get("drain_plan") else "; no drain plan found: balanced only"))
    from planner.commands._zkargs import flags
    from planner.plan_model import apply_schedule
    from planner.text import schedule_line

    sched = apply_schedule(plan, None, no_throttle=True)
    lines.append(f"  apply at the suggested rates: {schedule_line(sched)}")
    for h in doc["hot_spots"]["brokers"]:
        rack = f" (rack {h['rack']})" if h.get("rack") else ""
        lines += _wrap("HOT SPOT", f"broker {h['broker']}{rack} ends {h['excess_pct']:+.1f}% {h['metric']} vs the "
                       f"mean. Why ({h['reason']}): {flags(h['detail'])}.")
    t = solve["timings_s"]
    lines.append("  times              " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))
    from planner.plan_model import is_hot_spot_warning

    for w in doc["warnings"]:
        if not is_hot_spot_warning(w) and not w.startswith("left out:"):  # printed above
            lines += _wrap("warning", flags(w))
    print("\n".join(lines))
