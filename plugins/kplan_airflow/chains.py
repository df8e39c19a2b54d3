"""The tasks the DAGs share, built in one place: the snapshot, the review (publish -> approve) and the way a
plan is carried out (apply -> verify -> report). A DAG file says only what is its own: its params, its plan
and risk tasks, and the arguments that differ (templated from its params with `param`).

Cheap to import (the DAG files use it): the operators it builds import their heavy parts at run time.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kplan_airflow.operators import (
    ApplyOperator,
    PlanApprovalOperator,
    PublishOperator,
    ReportOperator,
    SnapshotOperator,
    VerifyOperator,
)


def dag_args() -> dict[str, Any]:
    """What every kplan DAG is: one run at a time, its params rendered as native objects (lists of brokers,
    numbers), tagged kafka and kplan (a fresh dict each time: no DAG shares another's tag list)."""
    return {"catchup": False, "max_active_runs": 1, "render_template_as_native_obj": True, "tags": ["kafka", "kplan"]}
# read-only steps are retried; only transient faults (ZooKeeper unreachable, a lost session) get that far
READ_ONLY: dict[str, Any] = {"retries": 2, "retry_delay": timedelta(seconds=20)}


def param(name: str) -> str:
    """The DAG run's param `name`, as a template (rendered as a native object: the DAGs set
    render_template_as_native_obj)."""
    return "{{ params." + name + " }}"


CLUSTER = {"zk_conn_id": param("zk_conn_id"), "kafka_conn_id": param("kafka_conn_id")}


def cluster() -> dict[str, str]:
    """The run's cluster connections (params zk_conn_id and kafka_conn_id, exactly one of them set: a
    ZooKeeper-mode cluster or a KRaft one), as operator arguments."""
    return dict(CLUSTER)


def snapshot(**kwargs: Any) -> SnapshotOperator:
    """Task `snapshot`: the cluster from the run's connection (ZooKeeper, or a Kafka connection for KRaft),
    retried."""
    return SnapshotOperator(task_id="snapshot", **cluster(), **kwargs, **READ_ONLY)


def review(*, approval_timeout: timedelta = timedelta(hours=24), **publish: Any
           ) -> tuple[PublishOperator, PlanApprovalOperator]:
    """Tasks `publish` >> `approve`: the plan published for review, then a person's answer (or none needed, as
    the publish task decided). `publish`: PublishOperator's arguments (throttle, auto-approve limits)."""
    pub = PublishOperator(task_id="publish", **publish)
    def published(key: str) -> str:
        return "{{ ti.xcom_pull(task_ids='publish')['" + key + "'] }}"

    approve = PlanApprovalOperator(task_id="approve", subject=published("subject"), body=published("body"),
                                   require_approval=published("require_approval"), response_timeout=approval_timeout)
    pub >> approve
    return pub, approve


def carry_out(**apply: Any) -> tuple[ApplyOperator, VerifyOperator, ReportOperator]:
    """Tasks `apply` >> `verify` >> `report` on the run's cluster connection; verify waits up to the param
    verify_timeout. `apply`: ApplyOperator's arguments (throttle, no_throttle, concurrency, reason)."""
    apply_task = ApplyOperator(task_id="apply", **cluster(), **apply)
    verify = VerifyOperator(task_id="verify", **cluster(), timeout=param("verify_timeout"), **READ_ONLY)
    report = ReportOperator(task_id="report")
    apply_task >> verify >> report
    return apply_task, verify, report
