"""What the review pages show, read from the run folders under `[kplan] runs_root` (no database, no
Airflow imports): the plan list (review.json + the plan model) and one plan's page data. Plans are read
with planner.api.read_plan, which checks the plan's id and files; a folder that does not pass is listed
with its error, never shown as a plan."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kplan_airflow import runs
from kplan_airflow import summary as sm
from planner import api, plan_model
from planner.api import PlannerError

_KEY = re.compile(r"^[A-Za-z0-9._-]+$")
# the plan folder's files a reviewer downloads (the reassignment files first, as Kafka's tool reads them)
DOWNLOADS = tuple(sorted(plan_model.FILES, key=lambda f: f.startswith("plan")))


class NotFound(LookupError):
    pass


def _run_dir(root: Path, dag_key: str, run_key: str) -> Path:
    if not (_KEY.match(dag_key) and _KEY.match(run_key)) or ".." in (dag_key, run_key):
        raise NotFound("no such run")
    path = root / dag_key / run_key
    if not path.is_dir():
        raise NotFound(f"no run {dag_key}/{run_key}")
    return path


def _status(folder: api.RunFolder, review: dict[str, Any]) -> str:
    progress = folder.progress("apply")
    status = review.get("status")
    if status == "applying" and progress:
        return f"applying ({progress.get('units_done', 0)}/{progress.get('units_total', '?')} batches)"
    if status:
        return str(status)
    return "planned" if folder.complete("plan") else "planning"


BAD = ("rejected", "failed", "apply refused", "apply failed", "apply stopped", "apply cancelled", "apply reverted",
       "not converged", "drain not complete", "refused")


def decision(review: dict[str, Any]) -> str | None:
    """The approval's answer in words ("approved by ann", "rejected by bob", "auto-approved: ..."), or None
    while nobody has answered (or before the plan was published)."""
    status = str(review.get("status") or "")
    if status.startswith("rejected"):
        who = review.get("rejected_by")
        return f"rejected by {who}" if who else "rejected: no answer within the approval timeout"
    who = review.get("approved_by")
    if who == "auto":
        return "auto-approved: no review needed" + (" ([kplan] skip_review)" if runs.skip_review() else
                                                    " (within the auto-approve limits)")
    return f"approved by {who}" if who else None


def outcome(review: dict[str, Any]) -> dict[str, Any]:
    """How the run ended, in words, for the plan list and the plan page: `bad` (rejected, refused, failed),
    `headline` (why, in one line: the planner's message, who rejected), `apply` (what the "Apply and
    verify" section says when apply did not run or did not finish) and `decision` (the approval's answer)."""
    status = str(review.get("status") or "")
    error = review.get("error")
    task = review.get("failed_task")
    bad = status.startswith(BAD)
    out: dict[str, Any] = {"bad": bad, "headline": None, "apply": None, "decision": decision(review)}
    if status.startswith("rejected"):
        out["headline"] = error or ("Rejected" + (f" by {review['rejected_by']}" if review.get("rejected_by") else ""))
        out["apply"] = "not started: " + ("rejected" + (f" by {review['rejected_by']}" if review.get("rejected_by")
                                                        else " (no answer in time)"))
    elif error and task in ("apply", "verify"):
        word = "refused" if status == "apply refused" else f"{task} failed"
        out["headline"] = f"{'Apply refused' if word == 'refused' else word.capitalize()}: {error}"
        out["apply"] = f"{word}: {error}"
    elif error:
        out["headline"] = f"Failed at {task}: {error}" if task else str(error)
        out["apply"] = f"not started: the run failed at {task}" if task else "not started"
    return out


def list_plans(root: Path) -> list[dict[str, Any]]:
    """Every run folder with a plan or a review record, newest first."""
    out = []
    if not root.is_dir():
        return out
    for dag_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for run_dir in (p for p in dag_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            folder = api.RunFolder(run_dir)
            review = runs.read_json(run_dir / runs.REVIEW) or {}
            if not review and not folder.complete("plan"):
                continue
            row: dict[str, Any] = {
                "dag_key": dag_dir.name, "run_key": run_dir.name, "dag_id": review.get("dag_id", dag_dir.name),
                "run_id": review.get("run_id", run_dir.name), "status": _status(folder, review),
                "risk_before": review.get("risk_before"), "risk_after": review.get("risk_after"),
                "created": review.get("created"), "approval_task_id": review.get("approval_task_id", "approve"),
                "outcome": outcome(review),
            }
            try:
                plan = api.read_plan(folder.plan)
            except PlannerError as e:   # a run that failed before its plan shows why it failed, not "no plan"
                row.update(error=None if review.get("error") else str(e), kind=review.get("kind"))
            else:
                row.update(kind=plan.kind, plan_id=plan.id,
                           brokers=list(plan.section("roll").get("order", ())) if plan.kind == "restart"
                           else list(plan.drained_brokers or plan.returning_brokers),
                           maintenance=", ".join(f"{b} {st}" for b, st in plan.brokers.in_maintenance.items()),
                           moves=plan.summary.get("replica_moves"), partitions=plan.summary.get("partitions_moved"),
                           bytes=plan.summary.get("bytes_moved"), bytes_h=sm.human_bytes(plan.summary.get("bytes_moved")),
                           created=row["created"] or (plan.snapshot or {}).get("taken_at"))
            row["mtime"] = run_dir.stat().st_mtime
            out.append(row)
    out.sort(key=lambda r: r["mtime"], reverse=True)
    return out


def _plain(value: Any) -> Any:
    """The plan model's read-only mappings (nested too: a rebalance's summary holds its bounds) as plain JSON
    data, for the page's embedded JSON and the API."""
    from collections.abc import Mapping

    return json.loads(json.dumps(value, default=lambda o: dict(o) if isinstance(o, Mapping) else str(o)))


def _per_broker(plan: api.Plan) -> dict[str, Any]:
    b = plan.brokers
    return {
        "ids": list(b.ids), "racks": list(b.racks), "drained": list(b.drained), "alive": list(b.alive),
        "maintenance": list(b.maintenance) or [None] * len(b.ids),
        "replicas_before": list(plan.before.get("replicas", [])), "replicas_after": list(plan.after.get("replicas", [])),
        "leaders_before": list(plan.before.get("preferred_leaders", [])),
        "leaders_after": list(plan.after.get("preferred_leaders", [])),
        "bytes_before": list(plan.before.get("bytes") or []), "bytes_after": list(plan.after.get("bytes") or []),
    }


def progress(root: Path, dag_key: str, run_key: str) -> dict[str, Any]:
    folder = api.RunFolder(_run_dir(root, dag_key, run_key))
    review = runs.read_json(folder.root / runs.REVIEW) or {}
    return {"status": _status(folder, review), "outcome": outcome(review),
            "apply": folder.progress("apply"), "apply_outcome": folder.outcome("apply"),
            "verify": folder.progress("verify"), "report": runs.read_json(folder.report),
            "roll": folder.progress("roll"), "roll_outcome": folder.outcome("roll")}


def snapshot_age_warning(snapshot: Any, review: dict[str, Any], now: float | None = None) -> str | None:
    """For a plan waiting for approval: a warning once its snapshot is older than `[kplan] snapshot_max_age`."""
    import time
    from datetime import datetime

    if review.get("status") != "awaiting approval":
        return None
    taken = (snapshot or {}).get("taken_at")
    try:
        at = datetime.fromisoformat(str(taken).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    age, limit = (now if now is not None else time.time()) - at, runs.snapshot_max_age()
    if age <= limit:
        return None
    return (f"The snapshot this plan was made from is {api.human_duration(age)} old (older than "
            f"{api.human_duration(limit)}, [kplan] snapshot_max_age): the cluster may have changed since. Apply "
            "refuses a plan the cluster no longer matches; trigger a new run for a fresh plan before approving.")


def plan_page(root: Path, dag_key: str, run_key: str, now: float | None = None) -> dict[str, Any]:
    """Everything the plan page shows except the move rows (moves() pages through those)."""
    run_dir = _run_dir(root, dag_key, run_key)
    folder = api.RunFolder(run_dir)
    review = runs.read_json(run_dir / runs.REVIEW) or {}
    try:
        plan = api.read_plan(folder.plan)
    except PlannerError as e:
        return {"dag_key": dag_key, "run_key": run_key, "review": review, "error": str(e),
                "outcome": outcome(review), "status": _status(folder, review)}
    before, after = folder.risk_summary(), folder.risk_summary(after_plan=True)
    sizes = {(m.topic, m.partition): m.bytes for m in plan.moves}
    # the rates apply copies at: the run's throttle (its review record) or the plan's suggestion
    schedule = api.apply_schedule(plan, review.get("throttle"), True)
    rates = {r.index: r for r in schedule.batches}
    batches = []
    for b in plan.batches:
        nbytes = b.bytes
        if nbytes is None:  # plans written before batches carried their bytes
            known = [sizes.get(k) for k in b.partitions]
            nbytes = sum(x for x in known if x) if b.kind == "data" and None not in known else None
        batches.append({"index": b.index, "kind": b.kind, "partitions": len(b.partitions), "bytes": nbytes,
                        "file": b.file or f"batch-{b.index:03d}.json",
                        "throttle": b.suggested_throttle_bytes_per_s,
                        "rate": rates[b.index].rate, "rate_source": rates[b.index].source,
                        "seconds": rates[b.index].seconds,
                        "duration": api.human_duration(rates[b.index].seconds, "")})
    figures_apply = {"seconds": schedule.seconds, "duration": api.human_duration(schedule.seconds),
                     "unthrottled": len(schedule.unthrottled)}
    figures = sm.plan_figures(plan)
    figures["leadership_text"] = sm.leadership_line(figures)
    figures["maintenance_lines"] = sm.maintenance_lines(figures)
    roll = None
    if plan.kind == "restart":
        from kplan_airflow import restart_summary as rsm

        roll = {**rsm.figures(plan), "steps": rsm.step_rows(plan, after or before),
                "files": [{"step": s["step"], "broker": s["broker"], "demote": s["demote"]["file"],
                           "restore": s["restore"]["file"]} for s in plan.section("roll").get("steps", ())]}
    stale = snapshot_age_warning(plan.snapshot, review, now)
    return {
        "roll": roll,
        "dag_key": dag_key, "run_key": run_key, "review": review, "title": sm.title(plan),
        "figures": figures, "summary": _plain(plan.summary),
        "scenarios": sm.scenario_pairs(after, before),
        "risk_levels": {"before": (after or before or {}).get("level_by_state", {}).get("current"),
                        "after": (after or {}).get("level_by_state", {}).get("plan")},
        "brokers": _per_broker(plan), "batches": batches, "moves_total": len(plan.moves),
        "apply": figures_apply,
        "snapshot": _plain(plan.snapshot), "parameters": _plain(plan.parameters),
        "progress": progress(root, dag_key, run_key), "downloads": list(DOWNLOADS), "outcome": outcome(review), "stale_snapshot": stale,
    }


def moves(root: Path, dag_key: str, run_key: str, q: str = "", limit: int = 500, offset: int = 0
          ) -> dict[str, Any]:
    """Move rows matching `q` (words; each must match the topic, `topic-partition`, the kind, or a broker id
    in the from/to lists; `broker:3` matches moves touching broker 3; `leader` matches every move whose
    preferred leader changes, a data move's included)."""
    plan = api.read_plan(api.RunFolder(_run_dir(root, dag_key, run_key)).plan)
    words = [w.lower() for w in q.split() if w]

    def match(m: api.Move, w: str) -> bool:
        if w.startswith("broker:"):
            try:
                b = int(w[7:])
            except ValueError:
                return False
            return b in m.from_replicas or b in m.to_replicas
        if w == "leader":   # every move that changes the preferred leader, data moves included
            return m.kind == "leader" or m.from_replicas[:1] != m.to_replicas[:1]
        return (w in m.topic.lower() or w == f"{m.topic}-{m.partition}".lower() or w == m.kind
                or (w.isdigit() and (int(w) in m.from_replicas or int(w) in m.to_replicas)))

    rows = [m for m in plan.moves if all(match(m, w) for w in words)]
    page = rows[offset:offset + max(1, min(limit, 5000))]
    return {"total": len(plan.moves), "matched": len(rows), "offset": offset,
            "moves": [{"topic": m.topic, "partition": m.partition, "from": list(m.from_replicas),
                       "to": list(m.to_replicas), "bytes": m.bytes, "kind": m.kind} for m in page]}


def download(root: Path, dag_key: str, run_key: str, name: str) -> tuple[bytes, str]:
    """(content, file name) of a plan file or a batch's reassignment file."""
    folder = api.RunFolder(_run_dir(root, dag_key, run_key))
    if name in DOWNLOADS:
        path = folder.plan / name
        if not path.is_file():
            raise NotFound(f"{name} is missing")
        return path.read_bytes(), name
    if re.fullmatch(r"step-\d{3,6}-broker-\d+-(demote|restore)\.json", name):   # a restart plan's steps
        path = folder.plan / name
        if not path.is_file():
            raise NotFound(f"{name} is missing")
        return path.read_bytes(), name
    m = re.fullmatch(r"batch-(\d{3,6})\.json", name)
    if not m:
        raise NotFound(f"no file {name}")
    path = folder.plan / name
    if path.is_file():
        return path.read_bytes(), name
    plan = api.read_plan(folder.plan)
    index = int(m.group(1))
    batch = next((b for b in plan.batches if b.index == index), None)
    if batch is None:
        raise NotFound(f"plan {plan.id} has no batch {index}")
    doc = {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                        for (t, p), r in zip(batch.partitions, batch.replicas, strict=True)]}
    return (json.dumps(doc, separators=(",", ":")) + "\n").encode(), name
