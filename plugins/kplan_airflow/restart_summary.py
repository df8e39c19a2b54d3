"""What a reviewer reads about a restart plan (kind "restart"): the roll step by step, the replay's risk of
each step before and after the plan, the temporary replicas beside what a full drain would move, and what
cannot move. Pure functions of the plan model and the risk summary (kplan-risk/1, RunFolder.risk_summary)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.api import human_size

COUNTS = ("offline", "under_min_isr", "at_min_isr", "under_replicated", "unclean_taken", "rf1_hit")
ROLL_KINDS = ("rolling", "restart")


def _figures(s: Mapping[str, Any]) -> dict[str, Any]:
    return {"level": s.get("level"), **{k: s.get(k) for k in COUNTS},
            "unavailable_until_expiry": s.get("unavailable_until_expiry"),
            "failed_shutdowns": list(s.get("failed_shutdowns") or [])}


def step_rows(plan: Any, risk: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One row per step of the roll and mode: the broker, what the plan expects of its demotion, and the
    risk of that step without the plan (a plain rolling restart) and with it (the roll the plan makes)."""
    roll = plan.section("roll")
    steps = {s["step"]: s for s in roll.get("steps", ())}
    by: dict[tuple[int, str], dict[str, Any]] = {}
    for s in (risk or {}).get("scenarios", []):
        if s.get("kind") not in ROLL_KINDS:
            continue
        row = by.setdefault((int(s["step"]), s["mode"]), {"before": None, "after": None})
        row["after" if s.get("state") == "plan" else "before"] = _figures(s)
    modes = sorted({m for _k, m in by}) or [None]
    out = []
    for k in sorted(steps):
        st = steps[k]
        for mode in modes:
            r = by.get((k, mode)) if mode else None
            out.append({"step": k, "steps": len(steps), "broker": st["broker"], "mode": mode,
                        "name": f"step {k}/{len(steps)}: broker {st['broker']}" + (f" [{mode}]" if mode else ""),
                        "hosted": st.get("hosted"), "leads": st.get("leads"),
                        "reordered": (st.get("demote") or {}).get("partitions"),
                        "cannot_move": list(st.get("cannot_move") or []),
                        "before": (r or {}).get("before"), "after": (r or {}).get("after")})
    return out


def figures(plan: Any) -> dict[str, Any]:
    s, prot, drain, roll = plan.summary, plan.section("protection"), plan.section("drain_comparison"), plan.section("roll")
    return {"plan_id": plan.id, "kind": plan.kind, "order": list(roll.get("order", ())),
            "order_source": roll.get("order_source"), "controller": roll.get("controller"),
            "temporary_replicas": prot.get("replicas"), "partitions": prot.get("partitions"),
            "bytes": prot.get("bytes"), "reasons": dict(prot.get("reasons") or {}),
            "unprotected": list(prot.get("unprotected") or ()),
            "drain_replicas": drain.get("replicas"), "drain_partitions": drain.get("partitions"),
            "drain_bytes": drain.get("bytes"), "drain_possible": (drain.get("brokers_left") or 0) > 0,
            "leaders_to_move": s.get("leaders_to_move"), "cannot_move": s.get("cannot_move"),
            "batches": s.get("batches"), "warnings": list(plan.warnings)}


def title(plan: Any) -> str:
    order = plan.section("roll").get("order", ())
    return f"Rolling restart of broker(s) {', '.join(map(str, order))}"


def _cell(f: Mapping[str, Any] | None) -> str:
    if not f:
        return "—"
    parts = [f"{k.replace('_', ' ')} {f[k]}" for k in ("offline", "under_min_isr", "unclean_taken") if f.get(k)]
    if f.get("failed_shutdowns"):
        parts.append(f"shutdown fails: {','.join(map(str, f['failed_shutdowns']))}")
    if f.get("unavailable_until_expiry"):
        parts.append(f"{f['unavailable_until_expiry']} unanswered until the session expires")
    return f"**{str(f['level']).upper()}**" + (f" ({', '.join(parts)})" if parts else "")


def approval_body(plan: Any, risk: Mapping[str, Any] | None, url: str | None, reason: str | None = None,
                  schedule: Any = None) -> str:
    """Markdown for the approval: the roll, the temporary replicas beside a full drain, the rate their copy
    runs at (`schedule`: api.apply_schedule, as for any plan), every step's risk."""
    from kplan_airflow.summary import maintenance_figures, maintenance_lines, schedule_lines

    f = figures(plan)
    r = f["reasons"]
    lines = [
        f"### {title(plan)}: plan `{plan.id[:19]}…`",
        "",
        f"- order: {', '.join(map(str, f['order']))} ({f['order_source']}"
        + (f"; controller {f['controller']}" if f["controller"] is not None else "") + ")",
        f"- temporary replicas: **{f['temporary_replicas']}** on {f['partitions']} partitions "
        f"({human_size(f['bytes'], 'unknown')}): {r.get('rf1', 0)} RF=1, {r.get('shrunk-isr', 0)} shrunk ISR, "
        f"{r.get('min-isr', 0)} at min ISR with a broker down; removed after the last broker",
        f"- a full drain of the same brokers would move {f['drain_replicas']} replicas "
        f"({human_size(f['drain_bytes'], 'unknown')})" + ("" if f["drain_possible"] else ": not possible here"),
        f"- leadership: {f['leaders_to_move']} leaders moved off their broker before it stops, restored after; "
        f"**{f['cannot_move']}** cannot move",
    ]
    lines += [x.replace("- apply:", "- copy of the temporary replicas:", 1) for x in schedule_lines(schedule)]
    lines += [f"- {x}" for x in maintenance_lines({"maintenance": maintenance_figures(plan)})]
    for w in f["warnings"]:
        lines.append(f"- ⚠ {w}")
    if reason:
        lines += ["", f"Review needed: {reason}"]
    lines += ["", "| step | demoted | without the plan | with the plan |", "|---|---|---|---|"]
    for row in step_rows(plan, risk):
        cannot = f", cannot move: {', '.join(row['cannot_move'][:5])}" if row["cannot_move"] else ""
        lines.append(f"| {row['name']} | {row['leads']} led, {row['reordered']} reordered{cannot} | "
                     f"{_cell(row['before'])} | {_cell(row['after'])} |")
    if url:
        lines += ["", f"[Open the plan page]({url}) (steps, temporary replicas, files in Kafka's format)"]
    lines += ["", "**Approve** runs exactly this roll, one broker at a time, stopping at the first failed gate; "
              "**Reject** (or no answer in time) ends the run with nothing changed."]
    return "\n".join(lines)


def text_report(plan: Any, risk: Mapping[str, Any] | None) -> str:
    f = figures(plan)
    out = [f"{title(plan)}: plan {plan.id}",
           f"  temporary replicas {f['temporary_replicas']} on {f['partitions']} partitions "
           f"({human_size(f['bytes'], 'unknown')}); a full drain: {f['drain_replicas']} replicas "
           f"({human_size(f['drain_bytes'], 'unknown')})",
           f"  leaders moved off before each stop {f['leaders_to_move']}, cannot move {f['cannot_move']}", "",
           f"  {'step':<34} {'without the plan':<34} with the plan"]
    for row in step_rows(plan, risk):
        out.append(f"  {row['name']:<34} {_cell(row['before']).replace('**', ''):<34} "
                   f"{_cell(row['after']).replace('**', '')}")
    return "\n".join(out)
