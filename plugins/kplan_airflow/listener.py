"""The run's outcome on the DAG run itself, read from the run's review record, so the runs list and the run
page say it without opening a task log: when a kplan run fails, its note says which task failed and the
planner's one-line message (or who rejected the plan); when it succeeds, who approved the plan (or that no
review was needed) and that it was applied and verified.

An Airflow listener (registered by plugins/kafka_plans.py). The scheduler calls `on_dag_run_failed` with the
run's row in its session: the note is written in the same transaction as the run's state (a second session
would wait on the scheduler's row lock); dag.test() calls it with the row detached: a session of its own.
A person's note is never replaced.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)
NOTE_MAX = 1000


def failure_note(review: dict[str, Any]) -> str | None:
    """The note for a failed run from its review record: the task and the message, or None."""
    error = review.get("error")
    if not error:
        return None
    task = review.get("failed_task")
    status = str(review.get("status") or "")
    if status.startswith("rejected"):
        text = str(error)
    elif status == "apply refused":
        text = f"Apply refused: {error}"
    else:
        text = f"Failed at {task}: {error}" if task else str(error)
    return text if len(text) <= NOTE_MAX else text[:NOTE_MAX - 1] + "…"


def success_note(review: dict[str, Any]) -> str | None:
    """The note for a successful run whose plan was approved (by a person or by the deployment's rules)."""
    who = review.get("approved_by")
    if not who or review.get("status") != "done":
        return None
    plan = str(review.get("plan_id") or "")[7:19]
    head = "Auto-approved (no review needed)" if who == "auto" else f"Approved by {who}"
    return f"{head}: plan {plan} applied and verified"


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    _note(dag_run, failure_note)


@hookimpl
def on_dag_run_success(dag_run: Any, msg: str) -> None:
    _note(dag_run, success_note)


def _note(dag_run: Any, build: Any) -> None:
    try:
        from kplan_airflow import runs

        review = runs.read_json(runs.run_folder(dag_run.dag_id, dag_run.run_id).root / runs.REVIEW) or {}
        note = build(review)
        if not note:
            return
        from sqlalchemy.orm import object_session

        if object_session(dag_run) is not None:   # the scheduler: in its transaction (no second writer)
            if not dag_run.note:
                dag_run.note = note
            return
        from airflow.models.dagrun import DagRun  # dag.test(): the run's session is closed already
        from airflow.utils.session import create_session

        with create_session() as session:
            row = session.query(DagRun).filter(DagRun.dag_id == dag_run.dag_id,
                                               DagRun.run_id == dag_run.run_id).one_or_none()
            if row is not None and not row.note:
                row.note = note
    except Exception:  # noqa: BLE001 (a listener must never break the scheduler)
        log.warning("kplan: could not write the run's note", exc_info=True)
