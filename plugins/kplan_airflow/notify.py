"""Telling a person that a plan waits for their approval: an Airflow notifier on the approval task.

`PlanWaitingNotifier` is a `BaseNotifier`; the approval (kplan_airflow.operators.PlanApprovalOperator, a
human-in-the-loop operator) calls its `notifiers` once the request is written and before it waits, and never
for a plan that needs no review. This one needs no connection and sends nothing off the machine:
- a line in the approval task's log and on the `kplan.approvals` logger (whatever handler a deployment gives
  that logger: a file, syslog, a log shipper);
- one JSON line per waiting plan appended to `[kplan] approval_notify_file` (default
  `<runs_root>/waiting-approvals.jsonl`; `none` turns it off), for a script or a monitor to follow;
- `[kplan] approval_notify_callback = package.module:function`, called with the same dict (a deployment's own
  hook).
A failing sink is logged and never fails the approval.

Slack, e-mail and the rest come from Airflow's provider notifiers, added beside this one on the approval
(README.md, "Being told a plan waits").
"""

from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path
from typing import Any

from airflow.sdk import BaseNotifier

from kplan_airflow import runs

log = logging.getLogger("kplan.approvals")
DEFAULT_FILE = "waiting-approvals.jsonl"


def waiting_message(context: Any) -> dict[str, Any]:
    """What a person needs to act: which plan, of which run, why it needs review, and where to answer."""
    from kplan_airflow.operators import plan_url

    ti, task = context["ti"], context["task"]
    dag_id, run_id = ti.dag_id, ti.run_id
    review = runs.read_json(runs.run_folder(dag_id, run_id).root / runs.REVIEW) or {}
    url = plan_url(dag_id, run_id)
    base = url[: url.index(runs.PLUGIN_PAGES)] if url else ""
    from urllib.parse import quote

    answer = (f"{base}/dags/{dag_id}/runs/{quote(run_id, safe='')}/tasks/{ti.task_id}/required_actions"
              if base else None)
    plan = str(review.get("plan_id") or "")
    text = (f"Plan {plan[7:19] or '?'} ({review.get('kind') or dag_id}) waits for approval in {dag_id} run "
            f"{run_id}: {getattr(task, 'subject', '')}")
    if review.get("review_reason"):
        text += f". Review needed: {review['review_reason']}"
    if url:
        text += f". Review: {url} · answer: {answer}"
    return {"event": "plan waiting for approval", "text": text, "dag_id": dag_id, "run_id": run_id,
            "task_id": ti.task_id, "plan_id": plan or None, "kind": review.get("kind"),
            "risk_before": review.get("risk_before"), "risk_after": review.get("risk_after"),
            "review_reason": review.get("review_reason"), "plan_url": url, "approval_url": answer,
            "subject": getattr(task, "subject", None)}


def notify_file() -> Path | None:
    value = runs.conf_value("approval_notify_file")
    if value and value.strip().lower() == "none":
        return None
    return Path(value).expanduser() if value else runs.runs_root() / DEFAULT_FILE


def notify_callback() -> Any:
    """`[kplan] approval_notify_callback` ("package.module:function") or None."""
    value = runs.conf_value("approval_notify_callback")
    if not value:
        return None
    module, _, name = value.partition(":")
    return getattr(importlib.import_module(module), name)


class PlanWaitingNotifier(BaseNotifier):
    """The plan waits for approval: say so where people and their tools look (module docstring)."""

    def notify(self, context: Any) -> None:
        try:
            message = waiting_message(context)
        except Exception as e:  # noqa: BLE001 (telling someone must never fail the approval itself)
            log.error("kplan: could not describe the waiting plan: %s", e)
            return
        log.warning("%s", message["text"])   # the approval task's log, and the kplan.approvals logger
        path = notify_file()
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(message, sort_keys=True) + "\n")
            except OSError as e:
                log.error("kplan: could not append the waiting plan to %s: %s", path, e)
        try:
            callback = notify_callback()
            if callback is not None:
                callback(message)
        except Exception as e:  # noqa: BLE001 (a deployment's hook must not fail the approval)
            log.error("kplan: [kplan] approval_notify_callback failed: %s", e)
