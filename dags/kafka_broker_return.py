"""Bring drained Kafka brokers back into service (manual trigger, with a form): the way back after a drain.

snapshot -> plan (replicas move only onto the returning brokers: the drain's own moves reversed where the
cluster still matches them, then balanced up to their share) -> risk after the plan (Spark: every broker,
before and after) -> publish for review -> approve -> apply (the brokers become `returning`) -> verify
(preferred leadership restored, then the brokers leave maintenance) -> report.

The brokers must be `drained` (kplan brokers shows it) and registered again: anything else fails `plan` with
the planner's message and nothing is applied. Apply shares the 1-slot apply pool and the ZooKeeper lock with
the drain DAG and the nightly rebalance. Thin on purpose: parameters and wiring only.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param
from kplan_airflow import chains
from kplan_airflow.chains import READ_ONLY, dag_args, param
from kplan_airflow.form import broker_picker, cluster_params, throttle_param
from kplan_airflow.operators import ReturnPlanOperator, RiskOperator

with DAG(
    dag_id="kafka_broker_return",
    description="Move replicas back onto drained Kafka brokers that are running again, then end their maintenance",
    schedule=None,
    doc_md=__doc__,
    **dag_args(),
    params={
        "brokers": broker_picker("Brokers to bring back", "Drained brokers, registered again"),
        "drain_plan": Param(None, type=["null", "string"], title="The drain's plan folder",
                            description="Optional: by default the plan named by the brokers' maintenance state"),
        "reason": Param(None, type=["null", "string"], title="Reason",
                        description="Recorded with the brokers' maintenance state while they return"),
        "max_disk_usage": Param(0.85, type="number", exclusiveMinimum=0, maximum=1, title="Max disk usage",
                                description="No broker may hold more than this fraction of its log dirs' capacity "
                                "after the plan or at any batch boundary"),
        **throttle_param("Replication throttle while data moves; empty = the plan's suggested rate"),
        "max_concurrent_per_broker": Param(5, type="integer", minimum=1, maximum=1000,
                                           title="Max concurrent moves per broker"),
        "exclude_topics": Param(None, type=["null", "string"], title="Excluded topics (regex)"),
        "verify_timeout": Param(1800, type="integer", minimum=1, title="Verify timeout (s)"),
        **cluster_params(),
        "sizes": Param(None, type=["null", "string"], title="Partition sizes file"),
    },
) as dag:
    snapshot = chains.snapshot(sizes=param("sizes"))
    plan = ReturnPlanOperator(task_id="plan", brokers=param("brokers"), drain_plan=param("drain_plan"),
                              exclude_topics=param("exclude_topics"),
                              max_concurrent_per_broker=param("max_concurrent_per_broker"), sizes=param("sizes"),
                              max_disk_usage=param("max_disk_usage"), **READ_ONLY)
    risk_after = RiskOperator(task_id="risk_after", all_brokers=True, mode="controlled", after_plan=True,
                              **READ_ONLY)
    publish, approve = chains.review()
    apply, verify, report = chains.carry_out(throttle=param("throttle"),
                                             max_concurrent_per_broker=param("max_concurrent_per_broker"),
                                             reason=param("reason"))

    snapshot >> plan >> risk_after >> publish
    approve >> apply
