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

from airflow.sdk import DAG, Param
from kplan_airflow import chains
from kplan_airflow.chains import READ_ONLY, dag_args, param
from kplan_airflow.form import broker_picker, cluster_params, no_throttle_param, sizes_params, throttle_param
from kplan_airflow.operators import DrainPlanOperator, FollowUpDrainOperator, RiskOperator

with DAG(
    dag_id="kafka_broker_drain",
    description="Move every replica off the given Kafka brokers: risk, plan, review, apply, verify",
    schedule=None,
    doc_md=__doc__,
    **dag_args(),
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
        **throttle_param("Replication throttle while data moves; empty = the plan's suggested rate, if any"),
        **no_throttle_param(),
        "max_concurrent_per_broker": Param(5, type="integer", minimum=1, maximum=1000,
                                           title="Max concurrent moves per broker"),
        "exclude_topics": Param(None, type=["null", "string"], title="Excluded topics (regex)",
                                description="Full-match regular expression of topics the plan must not touch"),
        "reason": Param(None, type=["null", "string"], title="Reason",
                        description="Why the brokers are drained (an OS patch, a disk swap, a ticket): recorded "
                        "with their maintenance state, shown by kplan brokers and in every plan's review"),
        "verify_timeout": Param(1800, type="integer", minimum=1, title="Verify timeout (s)"),
        **cluster_params(),
        **sizes_params(),
        "sizes": Param(None, type=["null", "string"], title="Partition sizes file",
                       description="kafka-log-dirs.sh --describe output (optional: sizes weigh the plan)"),
    },
) as dag:
    snapshot = chains.snapshot(sizes=param("sizes"), sizes_from=param("sizes_from"))
    risk = RiskOperator(task_id="risk", drains=param("brokers"), mode=param("shutdown_mode"),
                        all_brokers=param("sweep"), all_racks=param("sweep"), **READ_ONLY)
    plan = DrainPlanOperator(task_id="plan", brokers=param("brokers"), exclude_topics=param("exclude_topics"),
                             max_concurrent_per_broker=param("max_concurrent_per_broker"), sizes=param("sizes"),
                             leader_scope=param("leader_scope"), max_leader_changes=param("max_leader_changes"),
                             max_disk_usage=param("max_disk_usage"), **READ_ONLY)
    risk_after = RiskOperator(task_id="risk_after", drains=param("brokers"), mode=param("shutdown_mode"),
                              after_plan=True, reread=True, **chains.cluster(), **READ_ONLY)  # the cluster read again
    publish, approve = chains.review(throttle=param("throttle"), no_throttle=param("no_throttle"))
    apply, verify, report = chains.carry_out(throttle=param("throttle"), no_throttle=param("no_throttle"),
                                             max_concurrent_per_broker=param("max_concurrent_per_broker"),
                                             reason=param("reason"))
    follow_up = FollowUpDrainOperator(task_id="follow_up")   # all_done: runs when verify found brokers not empty

    snapshot >> risk >> plan >> risk_after >> publish
    approve >> apply
    verify >> follow_up
