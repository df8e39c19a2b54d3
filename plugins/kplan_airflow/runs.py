"""Where a DAG run keeps its files, and the small review record the plan list is built from.

One run folder per DAG run: `<[kplan] runs_root>/<dag_id>/<run key>/` (planner.api.RunFolder layout:
snapshot/, risk/, plan/, risk-after/, apply/, verify/, report.json) plus `review.json`, written by the
publish task. Every task derives the folder from its context, so tasks pass paths, never data, between them.
Cheap to import: the review app and the DAG files use it.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

from planner.api import RunFolder

REVIEW = "review.json"
# the review app's pages inside Airflow's UI: the external view's route, then the app's own path
# (plugins/kafka_plans.py: URL_ROUTE "kplan", URL_PREFIX "/kafka-plans")
PLUGIN_PAGES = "/plugin/kplan/kafka-plans"
DEFAULT_POOL = "kplan_apply"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _conf(key: str) -> str | None:
    from airflow.sdk import conf

    value = conf.get("kplan", key, fallback=None)
    return value or None


def conf_value(key: str) -> str | None:
    """`[kplan] <key>` (AIRFLOW__KPLAN__<KEY>), or None when unset or empty."""
    return _conf(key)


def airflow_home() -> Path:
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")


def runs_root() -> Path:
    """`[kplan] runs_root` (AIRFLOW__KPLAN__RUNS_ROOT), default $AIRFLOW_HOME/kplan-runs."""
    value = _conf("runs_root")
    if value:
        return Path(value.replace("{AIRFLOW_HOME}", str(airflow_home()))).expanduser()
    return airflow_home() / "kplan-runs"


def apply_pool() -> str:
    """`[kplan] apply_pool`: the 1-slot pool every apply and verify task runs in."""
    return _conf("apply_pool") or DEFAULT_POOL


def roll_turn_poll() -> float:
    """`[kplan] roll_turn_poll` (seconds, default 15): how often a restart roll's broker task whose turn has not
    come asks again."""
    try:
        return max(0.5, float(_conf("roll_turn_poll") or 15))
    except ValueError:
        return 15.0


def skip_review() -> bool:
    """`[kplan] skip_review` (AIRFLOW__KPLAN__SKIP_REVIEW, default False): a deployment where every plan of the
    drain and return DAGs is applied without a person's approval. A deployment setting, never a per-run form
    field: whoever may trigger a run must not be able to skip its review."""
    from airflow.sdk import conf

    return conf.getboolean("kplan", "skip_review", fallback=False)


def snapshot_max_age() -> float:
    """`[kplan] snapshot_max_age` in seconds (AIRFLOW__KPLAN__SNAPSHOT_MAX_AGE, default 3600): a plan waiting
    for approval whose snapshot is older says so on its page (the cluster may have moved on; apply refuses a
    plan the cluster no longer matches)."""
    value = _conf("snapshot_max_age")
    try:
        return float(value) if value else 3600.0
    except ValueError:
        return 3600.0


def run_key(run_id: str) -> str:
    """A DAG run id as a folder name (`manual__2026-01-01T02:00:00+00:00` -> `manual__2026-01-01T02_00_00_00_00`)."""
    key = _UNSAFE.sub("_", run_id).strip(".")
    if not key:
        raise ValueError(f"run id {run_id!r} gives an empty folder name")
    return key


def run_folder(dag_id: str, run_id: str, root: Path | None = None) -> RunFolder:
    return RunFolder((root or runs_root()) / run_key(dag_id) / run_key(run_id))


def write_json(path: Path, obj: Any) -> None:
    """Through a temporary name, so a reader (the review page) sees the old or the new file, whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def update_review(run: RunFolder, **fields: Any) -> dict[str, Any]:
    """Merge `fields` into the run's review.json (the plan list reads it)."""
    path = run.root / REVIEW
    record = read_json(path) or {}
    record.update(fields)
    write_json(path, record)
    return record
