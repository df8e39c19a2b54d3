"""What a reviewer reads: the plan's figures and the drain risk before/after per scenario, as data (the
review pages' JSON), as Markdown (the approval's body) and as text (the demo's printout). Pure functions of
the plan model and the risk summaries (kplan-risk/1, RunFolder.risk_summary); no Airflow imports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.api import human_duration as api_duration
from planner.api import human_size
from planner.plan_model import is_hot_spot_warning, replica_spread_text

COUNTS = ("offline", "under_min_isr", "at_min_isr", "under_replicated", "unclean_taken", "rf1_hit")


def human_bytes(n: float | None) -> str:
    return human_size(n, unknown="unknown")


def _key(s: Mapping[str, Any]) -> tuple:
    return (s.get("kind"), s.get("mode"), tuple(s.get("brokers") or ()), s.get("rack"), s.get("sequence"),
            s.get("step"))


def _figures(s: Mapping[str, Any]) -> dict[str, Any]:
    return {"level": s.get("level"), **{k: s.get(k) for k in COUNTS}}


def scenario_pairs(risk_after: Mapping[str, Any] | None, risk_before: Mapping[str, Any] | None = None
                   ) -> list[dict[str, Any]]:
    """One row per scenario: its figures now ("before") and on the plan's target ("after").

    `risk_after` is the summary of the risk run made with the plan (it holds both states); scenarios only
    in `risk_before` (the sweep, when the run asked for it) come with before figures only."""
    rows: dict[tuple, dict[str, Any]] = {}
    for summary, state_filter in ((risk_after, None), (risk_before, "current")):
        for s in (summary or {}).get("scenarios", []):
            state = s.get("state", "current")
            if state_filter and state != state_filter:
                continue
            row = rows.setdefault(_key(s), {"name": s["name"].removeprefix("after plan: "), "kind": s.get("kind"),
                                            "mode": s.get("mode"), "brokers": list(s.get("brokers") or []),
                                            "rack": s.get("rack"), "before": None, "after": None})
            slot = "after" if state == "plan" else "before"
            if row[slot] is None:
                row[slot] = _figures(s)
    order = {"drain": 0, "rack": 1, "broker": 2}
    return sorted(rows.values(), key=lambda r: (r["after"] is None, order.get(r["kind"], 3), r["name"]))


def plan_figures(plan: Any) -> dict[str, Any]:
    """The headline figures of a planner.api.Plan."""
    s = plan.summary
    data_batches = sum(1 for b in plan.batches if b.kind == "data")
    return {
        "plan_id": plan.id, "kind": plan.kind, "drained": list(plan.drained_brokers),
        "replica_moves": s.get("replica_moves"), "partitions_moved": s.get("partitions_moved"),
        "bytes_moved": s.get("bytes_moved"), "lower_bound_moves": s.get("lower_bound_moves"),
        "leadership_changes": s.get("leadership_changes"), "leader_only_partitions": s.get("leader_only_partitions"),
        "replica_spread": [plan.before.get("replica_spread"), plan.after.get("replica_spread")],
        "leader_spread": [plan.before.get("leader_spread"), plan.after.get("leader_spread")],
        "batches": len(plan.batches), "data_batches": data_batches,
        "leadership_batches": len(plan.batches) - data_batches,
        "max_concurrent_per_broker": plan.parameters.get("max_concurrent_per_broker"),
        # hot spots and left-out brokers: shown from their own sections
        "warnings": [w for w in plan.warnings if not is_hot_spot_warning(w) and not w.startswith("left out:")],
        "leadership": leadership_trade(plan),
        "hot_spots": [dict(h) for h in (plan.hot_spots or {}).get("brokers", ())],
        "maintenance": maintenance_figures(plan),
        "returning": list(plan.returning_brokers),
    }


def maintenance_figures(plan: Any) -> dict[str, Any]:
    """The brokers in maintenance when the plan's snapshot was taken (planner/maintenance.py): every one with
    its state, those the plan left out (with since / who / why / the plan that set it), and a return's."""
    m = plan.maintenance or {}
    return {"recorded": bool(m), "states": {str(b): st for b, st in plan.brokers.in_maintenance.items()},
            "left_out": [dict(e) for e in m.get("left_out") or ()],
            "returning": [dict(e) for e in m.get("returning") or ()],
            "undo": dict(m["undo"]) if m.get("undo") else None}


def _entry_text(e: Mapping[str, Any]) -> str:
    by = e.get("by") or {}
    who = f" by {by.get('user')}@{by.get('host')}" if by.get("user") or by.get("host") else ""
    plan = f", plan {str(e['plan_id'])[:19]}…" if e.get("plan_id") else ""
    why = f": {e['reason']}" if e.get("reason") else ""
    return f"broker {e['broker']} {e.get('state')} since {e.get('since') or '?'}{who}{plan}{why}"


def maintenance_lines(f: Mapping[str, Any]) -> list[str]:
    """What an approver must see about maintenance: who is left out and why, a return's brokers and how."""
    m = f.get("maintenance") or {}
    out = [f"left out (in maintenance: no replica, no preferred leadership): {_entry_text(e)}"
           for e in m.get("left_out") or ()]
    u = m.get("undo")
    for e in m.get("returning") or ():
        share = e.get("share") or []
        how = (f"; {u['reversed']} of the drain's {u['drain_moves']} moves reversed, {u['no_longer_matching']} no "
               f"longer match the cluster, {u['balanced_moves']} replicas balanced onto it" if u else "")
        out.append(f"returning: {_entry_text(e)}, back to its share of {share[0]}..{share[-1]} replicas{how}; "
                   "out of maintenance once verified" if share else f"returning: {_entry_text(e)}{how}")
    if not out and not m.get("recorded"):
        out.append("brokers in maintenance: not recorded (a plan made before maintenance states existed)")
    elif not out:
        states = m.get("states") or {}
        out.append("brokers in maintenance: " + (", ".join(f"{b} {st}" for b, st in sorted(states.items()))
                                                  if states else "none") + " (when the snapshot was taken)")
    return out


def leadership_trade(plan: Any) -> dict[str, Any] | None:
    """The leader scope the plan used, its necessary / optional preferred-leader changes, and what the other
    scope would reach on the same placement (plans written before leader scopes existed: None)."""
    lead = plan.leadership or {}
    if not lead.get("scope"):
        return None
    alt = lead.get("alternative") or {}
    return {"scope": lead["scope"], "changes": lead.get("leadership_changes"), "necessary": lead.get("necessary"),
            "optional": lead.get("optional"), "leader_spread_after": lead.get("leader_spread_after"),
            "max_changes": lead.get("max_changes"),
            "alternative": {"scope": alt.get("scope"), "changes": alt.get("leadership_changes"),
                            "leader_spread_after": alt.get("leader_spread_after")} if alt else None}


def leadership_line(f: Mapping[str, Any]) -> str:
    """One line on the leadership trade, e.g. "scope touched: 12 changes (10 necessary, 2 optional), leader
    spread 3; scope all would make 420 changes for spread 1"."""
    t = f.get("leadership")
    if not t:
        return f"{f['leadership_changes']} changes"
    line = (f"scope {t['scope']}: {t['changes']} changes ({t['necessary']} necessary, {t['optional']} optional), "
            f"leader spread {t['leader_spread_after']}")
    if t.get("max_changes") is not None:
        line += f", budget {t['max_changes']}"
    alt = t.get("alternative")
    if alt and alt.get("scope"):
        line += f"; scope {alt['scope']} would make {alt['changes']} changes for spread {alt['leader_spread_after']}"
    return line


def hot_spot_line(h: Mapping[str, Any]) -> str:
    rack = f" (rack {h['rack']})" if h.get("rack") else ""
    return (f"hot spot: broker {h['broker']}{rack} ends {h['excess_pct']:+.1f}% {h['metric']} vs the mean. "
            f"Why ({h['reason']}): {h['detail']}.")


def title(plan: Any) -> str:
    if plan.kind == "restart":
        from kplan_airflow import restart_summary

        return restart_summary.title(plan)
    if plan.kind == "drain":
        return f"Drain of broker(s) {', '.join(map(str, plan.drained_brokers))}"
    if plan.kind == "return":
        return f"Return of broker(s) {', '.join(map(str, plan.returning_brokers))}"
    return "Rebalance"


def _cell(f: Mapping[str, Any] | None) -> str:
    if not f:
        return "—"
    parts = [f"{k.replace('_', ' ')} {f[k]}" for k in ("offline", "under_min_isr", "under_replicated") if f.get(k)]
    return f"**{str(f['level']).upper()}**" + (f" ({', '.join(parts)})" if parts else "")


def schedule_lines(schedule: Any, limit: int = 8) -> list[str]:
    """Markdown: each data batch's effective rate and copy time, and the estimated duration of the apply."""
    if schedule is None:
        return []
    data = [b for b in schedule.batches if b.source != "no data"]
    if not data:
        return ["- apply: leadership only, no data copied"]
    est = human_duration(schedule.seconds) if schedule.seconds is not None else "unknown"
    out = [f"- apply: **estimated copy time {est}** over {len(data)} data batches (each batch's busiest "
           "broker's bytes at its rate)"]
    for b in data[:limit]:
        rate = f"{human_bytes(b.rate)}/s ({'throttle given' if b.source == 'throttle' else 'plan suggestion'})" \
            if b.rate else "**FULL SPEED, no throttle**"
        out.append(f"  - batch {b.index}: {human_bytes(b.bytes)} at {rate}, ~{human_duration(b.seconds)}")
    if len(data) > limit:
        out.append(f"  - … {len(data) - limit} more batches on the plan page")
    return out


def human_duration(seconds: float | None) -> str:
    return api_duration(seconds)


def approval_body(plan: Any, pairs: list[dict[str, Any]], url: str | None, reason: str | None = None,
                  schedule: Any = None, intent: Mapping[str, Any] | None = None, limit: int = 12) -> str:
    """Markdown for the ApprovalOperator: plan summary, risk before/after, link to the plan page."""
    f = plan_figures(plan)
    lines = [
        f"### {title(plan)}: plan `{plan.id[:19]}…`",
        "",
        f"- replica moves: **{f['replica_moves']}** ({f['partitions_moved']} partitions, "
        f"{human_bytes(f['bytes_moved'])}); lower bound {f['lower_bound_moves']}",
        f"- preferred-leader changes: {leadership_line(f)} ({f['leader_only_partitions']} reorders without data)",
        f"- {replica_spread_text(plan).replace('->', '→')}; preferred-leader spread "
        f"{f['leader_spread'][0]} → {f['leader_spread'][1]}",
        f"- batches: {f['leadership_batches']} leadership + {f['data_batches']} data "
        f"(at most {f['max_concurrent_per_broker']} moves per broker at a time)",
        *schedule_lines(schedule),
    ]
    if intent and not intent.get("holds"):
        lines.append(f"- ⚠ **After this plan, on the cluster as read again: {intent.get('text')}**")
    for line in maintenance_lines(f):
        lines.append(f"- {line}")
    for w in f["warnings"]:
        lines.append(f"- ⚠ {w}")
    for h in f["hot_spots"]:
        lines.append(f"- ⚠ {hot_spot_line(h)}")
    if reason:
        lines += ["", f"Review needed: {reason}"]
    lines += ["", "| scenario | before | after the plan |", "|---|---|---|"]
    for row in pairs[:limit]:
        lines.append(f"| {row['name']} | {_cell(row['before'])} | {_cell(row['after'])} |")
    if len(pairs) > limit:
        lines.append(f"| … {len(pairs) - limit} more on the plan page | | |")
    if url:
        lines += ["", f"[Open the plan page]({url}) (moves, batches, charts, reassignment.json / rollback.json)"]
    lines += ["", "**Approve** applies exactly this plan; **Reject** (or no answer in time) ends the run with "
              "nothing applied."]
    return "\n".join(lines)


def text_report(plan: Any, pairs: list[dict[str, Any]], width: int = 110) -> str:
    """Plain text for a terminal (the demo): long lines wrap under their text, the risk table's columns are as
    wide as what they hold."""
    import textwrap

    f = plan_figures(plan)

    def wrapped(text: str, indent: str = "  ", more: str = "    ") -> list[str]:
        return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=more,
                             break_long_words=False, break_on_hyphens=False)

    out = [f"{title(plan)}: plan {plan.id}",
           *wrapped(f"replica moves {f['replica_moves']} ({f['partitions_moved']} partitions, "
                    f"{human_bytes(f['bytes_moved'])}; lower bound {f['lower_bound_moves']})"),
           *wrapped(f"preferred leaders: {leadership_line(f)}"),
           *wrapped(replica_spread_text(plan)),
           *wrapped(f"leader spread {f['leader_spread'][0]} -> {f['leader_spread'][1]}"),
           f"  batches {f['leadership_batches']} leadership + {f['data_batches']} data"]
    for h in f["hot_spots"]:
        out += wrapped("HOT SPOT" + hot_spot_line(h).removeprefix("hot spot:"))
    for line in maintenance_lines(f):
        out += wrapped(f"MAINTENANCE {line}")
    for w in f["warnings"]:
        out += wrapped(f"warning: {w}")
    if pairs:
        cells = [(row["name"], _cell(row["before"]).replace("**", ""), _cell(row["after"]).replace("**", ""))
                 for row in pairs]
        w0 = max(len("scenario"), *(len(c[0]) for c in cells))
        w1 = max(len("before"), *(len(c[1]) for c in cells))
        out += ["", f"  {'scenario':<{w0}}  {'before':<{w1}}  after the plan"]
        out += [f"  {a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in cells]
    return "\n".join(out)
