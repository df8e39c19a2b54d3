"""Drain Kafka brokers before maintenance (manual trigger, with a form).

snapshot -> risk (Spark) -> plan (OR-Tools) -> risk after the plan (Spark) -> publish for review -> approve
-> apply -> verify -> report; when verify finds the drained brokers still hosting partitions (a topic created
after the snapshot, say), follow_up offers their drain as a new run of this DAG, reviewed like this one. Every task works in the run's folder ([kplan] runs_root/<dag>/<run>); the plan
is reviewed on its page (Browse -> Kafka plans) and in the approval (Required Actions). Unknown brokers or an
infeasible drain fail the run at risk / plan with the planner's message; Reject, or no answer within the
approval timeout, ends the run with nothing applied. Apply runs in the 1-slot apply pool and holds the
planner's ZooKeeper lock: one apply at a time across this DAG and the nightly rebalance.

Thin on purpose: parameters and wiring only (kplan_airflow's operators call planner.api at run time).
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param
from kplan_airflow.form import broker_picker, sizes_params
from kplan_airflow.operators import (
    ApplyOperator,
    DrainPlanOperator,
    FollowUpDrainOperator,
    PlanApprovalOperator,
    PublishOperator,
    ReportOperator,
    RiskOperator,
    SnapshotOperator,
    VerifyOperator,
)

P = "params"
READ_ONLY = {"retries": 2, "retry_delay": timedelta(seconds=20)}  # only transient faults get that far

with DAG(
    dag_id="kafka_broker_drain",
    description="Move every replica off the given Kafka brokers: risk, plan, review, apply, verify",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["kafka", "kplan"],
    doc_md=__doc__,
    params={
        "brokers": broker_picker("Brokers to drain", "Pick the brokers, in the order a rolling restart would take "
                                 "them down"),
        "shutdown_mode": Param("both", enum=["controlled", "failure", "both"], title="Shutdown mode to assess",
                               description="controlled = graceful stop, failure = kill; both scores each"),
        "sweep": Param(False, type="boolean", title="Also assess every broker and rack",
                       description="Adds the single-broker and single-rack sweep to the risk report"),
        "leader_scope": Param("touched", enum=["touched", "all"], title="Leader scope",
                              description="touched = only partitions the drain moves may get a new preferred "
                              "leader (least leadership churn); all = re-level preferred leaders cluster-wide"),
        "max_leader_changes": Param(None, type=["null", "integer"], minimum=0, title="Max leader changes",
                                    description="Budget of preferred-leader changes, necessary ones included; "
                                    "empty = none"),
        "max_disk_usage": Param(0.85, type="number", exclusiveMinimum=0, maximum=1, title="Max disk usage",
                                description="No broker may hold more than this fraction of its log dirs' capacity "
                                "after the plan or at any batch boundary"),
        "throttle": Param(None, type=["null", "integer"], minimum=102_400, title="Throttle (bytes/s)",
                          description="Replication throttle while data moves; empty = the plan's suggested rate, if any"),
        "no_throttle": Param(False, type="boolean", title="Copy without a throttle",
                             description="Only when neither a throttle nor the plan's suggestion gives a batch a "
                             "rate (a plan without sizes): copy it at full speed on purpose. Off: such a plan is "
                             "refused before approval"),
        "max_concurrent_per_broker": Param(5, type="integer", minimum=1, maximum=1000,
                                           title="Max concurrent moves per broker"),
        "exclude_topics": Param(None, type=["null", "string"], title="Excluded topics (regex)",
                                description="Full-match regular expression of topics the plan must not touch"),
        "reason": Param(None, type=["null", "string"], title="Reason",
                        description="Why the brokers are drained (an OS patch, a disk swap, a ticket): recorded "
                        "with their maintenance state, shown by kplan brokers and in every plan's review"),
        "verify_timeout": Param(1800, type="integer", minimum=1, title="Verify timeout (s)"),
        "zk_conn_id": Param("zookeeper_default", type="string", minLength=1, title="ZooKeeper connection"),
        **sizes_params(),
        "sizes": Param(None, type=["null", "string"], title="Partition sizes file",
                       description="kafka-log-dirs.sh --describe output (optional: sizes weigh the plan)"),
    },
) as dag:
    snapshot = SnapshotOperator(task_id="snapshot", zk_conn_id="{{ params.zk_conn_id }}",
                                sizes="{{ params.sizes }}",
                                kafka_conn_id="{{ params.kafka_conn_id }}", sizes_from="{{ params.sizes_from }}",
                                **READ_ONLY)
    risk = RiskOperator(task_id="risk", drains="{{ params.brokers }}", mode="{{ params.shutdown_mode }}",
                        all_brokers="{{ params.sweep }}", all_racks="{{ params.sweep }}", **READ_ONLY)
    plan = DrainPlanOperator(task_id="plan", brokers="{{ params.brokers }}",
                             exclude_topics="{{ params.exclude_topics }}",
                             max_concurrent_per_broker="{{ params.max_concurrent_per_broker }}",
                             sizes="{{ params.sizes }}", leader_scope="{{ params.leader_scope }}",
                             max_leader_changes="{{ params.max_leader_changes }}",
                             max_disk_usage="{{ params.max_disk_usage }}", **READ_ONLY)
    risk_after = RiskOperator(task_id="risk_after", drains="{{ params.brokers }}",
                              mode="{{ params.shutdown_mode }}", after_plan=True,
                              zk_conn_id="{{ params.zk_conn_id }}", **READ_ONLY)   # the cluster read again
    publish = PublishOperator(task_id="publish", throttle="{{ params.throttle }}", no_throttle="{{ params.no_throttle }}")
    approve = PlanApprovalOperator(
        task_id="approve",
        subject="{{ ti.xcom_pull(task_ids='publish')['subject'] }}",
        body="{{ ti.xcom_pull(task_ids='publish')['body'] }}",
        require_approval="{{ ti.xcom_pull(task_ids='publish')['require_approval'] }}",
        response_timeout=timedelta(hours=24),
    )
    apply = ApplyOperator(task_id="apply", zk_conn_id="{{ params.zk_conn_id }}", throttle="{{ params.throttle }}",
                          no_throttle="{{ params.no_throttle }}",
                          max_concurrent_per_broker="{{ params.max_concurrent_per_broker }}",
                          reason="{{ params.reason }}")
    verify = VerifyOperator(task_id="verify", zk_conn_id="{{ params.zk_conn_id }}",
                            timeout="{{ params.verify_timeout }}", **READ_ONLY)
    report = ReportOperator(task_id="report")
    follow_up = FollowUpDrainOperator(task_id="follow_up")   # all_done: runs when verify found brokers not empty

    snapshot >> risk >> plan >> risk_after >> publish >> approve >> apply >> verify >> report
    verify >> follow_up
