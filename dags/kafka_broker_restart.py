"""Restart Kafka brokers one at a time, without a full drain (manual trigger, with a form).

snapshot -> plan (the fewest temporary replicas that keep every partition online and at min ISR while each
broker is down, each step's demotion) -> risk of the roll, step by step, without and with the plan (Spark) ->
publish for review -> approve -> temporary replicas (throttled) -> one task per broker, in the plan's order:
demote, restart (a command from the `restart_conn_id` connection, or whoever restarts it: the task waits on a
deferrable trigger for the broker to leave and register again), gates (registered, back in every ISR, nothing
offline or under min ISR), leadership restored, and with `pause_between_brokers` a person's go-ahead (Required
Actions) -> undo (temporary replicas removed, unless kept) -> report. The roll stops at the first failed gate
(the later brokers' tasks skip, saying where it stopped), leaving the cluster as safe as it was; clearing the
failed task resumes it. The roll's state lives in the cluster (`kplan roll` continues the same roll by hand).

Thin on purpose: parameters and wiring only (kplan_airflow's operators call planner.api at run time).
"""

from __future__ import annotations

from airflow.sdk import DAG, Param
from kplan_airflow import chains
from kplan_airflow.chains import READ_ONLY, dag_args, param
from kplan_airflow.form import broker_picker, cluster_params, no_throttle_param, sizes_params, throttle_param
from kplan_airflow.operators import RiskOperator
from kplan_airflow.roll_ops import (
    RestartPlanOperator,
    RollFinishOperator,
    RollProtectOperator,
    RollReportOperator,
    RollStepOperator,
)

with DAG(
    dag_id="kafka_broker_restart",
    description="Restart Kafka brokers one at a time: temporary replicas, demotion, gates, undo",
    schedule=None,
    doc_md=__doc__,
    **dag_args(),
    params={
        "brokers": broker_picker("Brokers to restart", "Restarted one at a time"),
        "order": Param("auto", enum=["auto", "given"], title="Order",
                       description="auto = ascending id, the controller's broker last; given = as listed"),
        "restart_conn_id": Param(None, type=["null", "string"], title="Restart command connection",
                                 description="A connection whose extra holds {\"command\": \"ssh kafka-{broker} "
                                 "sudo systemctl restart kafka\"}; empty = someone else restarts each broker when "
                                 "its task says so"),
        "restart_timeout": Param(900, type="integer", minimum=1, title="Restart timeout (s)",
                                 description="How long a broker may take to leave and register again"),
        "gate_timeout": Param(900, type="integer", minimum=1, title="Gate timeout (s)",
                              description="How long a restarted broker's partitions may take to rejoin their ISRs"),
        "pause_between_brokers": Param(False, type="boolean", title="Pause for a person between brokers"),
        "keep_temporary": Param(False, type="boolean", title="Keep the temporary replicas",
                                description="After the last broker keep them instead of removing them"),
        **throttle_param("Replication throttle of the temporary replicas' copies; empty = the plan's"),
        **no_throttle_param(),
        "reason": Param(None, type=["null", "string"], title="Reason",
                        description="Why the brokers restart (an OS patch, a config change, a ticket): recorded "
                        "with their maintenance state while each restarts"),
        **sizes_params(),
        "max_disk_usage": Param(0.85, type="number", exclusiveMinimum=0, maximum=1, title="Max disk usage"),
        "exclude_topics": Param(None, type=["null", "string"], title="Excluded topics (regex)"),
        "kafka_version": Param("3.7", type="string", title="Kafka version (min-ISR rule)"),
        **cluster_params(),
    },
) as dag:
    snapshot = chains.snapshot(sizes_from=param("sizes_from"))
    plan = RestartPlanOperator(task_id="plan", brokers=param("brokers"), order=param("order"),
                               exclude_topics=param("exclude_topics"), kafka_version=param("kafka_version"),
                               max_disk_usage=param("max_disk_usage"), **READ_ONLY)
    risk = RiskOperator(task_id="risk_after", after_plan=True, kafka_version="3.7", **READ_ONLY)
    publish, approve = chains.review(throttle=param("throttle"), no_throttle=param("no_throttle"))
    protect = RollProtectOperator(task_id="protect", **chains.cluster(), throttle=param("throttle"),
                                  no_throttle=param("no_throttle"))
    steps = RollStepOperator.partial(
        task_id="restart", **chains.cluster(), restart_conn_id=param("restart_conn_id"),
        restart_timeout=param("restart_timeout"), gate_timeout=param("gate_timeout"),
        pause=param("pause_between_brokers"), reason=param("reason"),
    ).expand(step=plan.output)
    finish = RollFinishOperator(task_id="undo", **chains.cluster(), keep_temporary=param("keep_temporary"))
    report = RollReportOperator(task_id="report", **chains.cluster())

    snapshot >> plan >> risk >> publish
    approve >> protect >> steps >> finish >> report
