"""The restart roll's tasks (DAG kafka_broker_restart): the plan, the temporary replicas, one task per broker,
the undo, the report. Each calls planner.api (plan_restart, roll with `part`, roll_status); the roll's state
lives in the cluster (the roll record), so every task can be run again and continues where the roll is.

`RollStepOperator` is mapped over the roll's steps. A step runs only after the steps before it (the library
says NotYourTurn: the task is rescheduled, holding no worker, until they are done, and while the roll waits
for a person's go-ahead) and not after the roll stopped (RollStopped: it skips, saying where the roll
stopped).
It demotes its broker, then the restart happens outside:
- with `restart_conn_id`, a command the operator configures in that Airflow connection's extra
  (`{"command": "ssh kafka-{broker} sudo systemctl restart kafka", "timeout": 600}`; `{broker}`, `{host}`,
  `{port}` from the broker's registration) runs on the worker, and must return once the restart is under
  way;
- without it, someone else restarts the broker (the task log and the plan page say it may restart now).
Either way the task then defers on `RollTrigger`, which sees the broker leave and register again within
`restart_timeout`; then the gates and the restore of its leadership run, and, with `pause`, the task asks a
person (Airflow's human-in-the-loop: Required Actions) whether to go on with the next broker.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException, AirflowSkipException
from airflow.sdk.timezone import utcnow

from kplan_airflow import runs
from kplan_airflow.operators import (
    PlanOperator,
    _disk_usage,
    _ints,
    _log_progress,
    _opt_int,
    _plan_xcom,
    _truthy,
    call,
    cluster,
    is_kraft,
    kraft_writer,
    run_folder,
)
from kplan_airflow.triggers import RollTrigger
from planner import api

if TYPE_CHECKING:
    from airflow.sdk import Context

CONTINUE, STOP = "Continue with the next broker", "Stop the roll here"


class RestartPlanOperator(PlanOperator):
    """The restart plan (<run>/plan): temporary replicas, roll order, each step's demotion. The plan step of
    every DAG (PlanOperator); its XCom is the step indexes (what the broker tasks are mapped over), the plan's
    figures go to the XCom key `plan`."""

    PLAN = staticmethod(api.plan_restart)

    template_fields: Sequence[str] = ("brokers", "order", "exclude_topics", "max_concurrent_per_broker",
                                      "kafka_version", "max_disk_usage")

    def __init__(self, *, brokers: Any, order: str = "auto", exclude_topics: str | None = None,
                 max_concurrent_per_broker: Any = 5, kafka_version: str = "3.7", max_disk_usage: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.brokers, self.order, self.exclude_topics = brokers, order, exclude_topics
        self.max_concurrent_per_broker, self.kafka_version = max_concurrent_per_broker, kafka_version
        self.max_disk_usage = max_disk_usage

    def request(self, run: api.RunFolder) -> api.RestartRequest:
        req = api.RestartRequest(snapshot=run.snapshot, out=run.plan, brokers=_ints(self.brokers, "brokers"),
                                 order=str(self.order or "auto"), exclude_topics=self.exclude_topics or None,
                                 max_concurrent_per_broker=int(self.max_concurrent_per_broker),
                                 kafka_version=str(self.kafka_version or "3.7"), **_disk_usage(self.max_disk_usage))
        if not req.brokers:
            raise AirflowFailException("brokers is empty: name at least one broker to restart")
        return req

    def result(self, plan: api.Plan, context: Context) -> list[int]:
        order = list(plan.section("roll").get("order", ()))
        context["ti"].xcom_push(key="plan", value={**_plan_xcom(plan), "order": order})
        return list(range(len(order)))


def _request(self: Any, context: Context, **fields: Any) -> api.RollRequest:
    run = run_folder(context)
    target = cluster(self.zk_conn_id, getattr(self, "kafka_conn_id", None))
    if is_kraft(target):   # the roll writes through ZooKeeper only: refused on KRaft, one line, nothing written
        kraft_writer(api.RollRequest, call("roll", api.read_plan, run.plan), "roll")
    base = {"zk": target.connect, "plan": run.plan, "auth": target.auth, "poll": float(self.poll),
            "run": f"{context['dag'].dag_id}/{context['run_id']}"}
    return api.RollRequest(**{**base, **fields})


class RollProtectOperator(BaseOperator):
    """The roll's temporary replicas (planner.api.roll, part protect: its batches, throttled, locked,
    resumable). Never retried by Airflow: running it again resumes."""

    template_fields: Sequence[str] = ("zk_conn_id", "kafka_conn_id", "throttle", "no_throttle", "reason")
    ui_color = "#fde8e8"

    def __init__(self, *, zk_conn_id: str | None = "zookeeper_default", kafka_conn_id: str | None = None,
                 throttle: Any = None, no_throttle: Any = False, reason: str | None = None, poll: float = 1.0,
                 publish_task_id: str = "publish", **kwargs: Any) -> None:
        kwargs["retries"] = 0
        kwargs.setdefault("pool", runs.apply_pool())
        super().__init__(**kwargs)
        self.zk_conn_id, self.throttle, self.poll, self.publish_task_id = zk_conn_id, throttle, poll, publish_task_id
        self.no_throttle, self.reason, self.kafka_conn_id = no_throttle, reason, kafka_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        run = run_folder(context)
        plan = call("protect", api.read_plan, run.plan)
        published = (context["ti"].xcom_pull(task_ids=self.publish_task_id) or {}).get("plan_id")
        if published != plan.id:
            raise AirflowFailException(f"the plan in {run.plan} is {plan.id}, but the plan reviewed in this run was "
                                       f"{published}: refusing to run a roll nobody approved")
        runs.update_review(run, status="rolling: temporary replicas")
        throttle = _opt_int(self.throttle)
        out = call("protect", api.roll, _request(self, context, part="protect", throttle=throttle,
                                                 no_throttle=_truthy(self.no_throttle) and throttle is None),
                   progress=_log_progress(self))
        self.log.info("%s", out.message)
        return {"plan_id": out.plan_id, "state": out.state}


class RollStepOperator(HITLOperator):
    """One broker of the roll (mapped over the plan's steps); see the module docstring."""

    template_fields: Sequence[str] = ("zk_conn_id", "kafka_conn_id", "restart_conn_id", "restart_timeout", "gate_timeout", "pause",
                                      "turn_poll", "reason")
    ui_color = "#fdf5e8"

    def __init__(self, *, step: Any, zk_conn_id: str | None = "zookeeper_default", kafka_conn_id: str | None = None,
                 restart_conn_id: str | None = None,
                 restart_timeout: Any = 900, gate_timeout: Any = 900, pause: Any = False, turn_poll: Any = None,
                 reason: str | None = None, poll: float = 2.0, **kwargs: Any) -> None:
        kwargs["retries"] = 0
        kwargs.setdefault("pool", runs.apply_pool())
        super().__init__(subject="Continue the restart roll?", options=[CONTINUE, STOP], defaults=STOP,
                         response_timeout=timedelta(hours=24), **kwargs)
        self.step, self.zk_conn_id, self.restart_conn_id = step, zk_conn_id, restart_conn_id
        self.restart_timeout, self.gate_timeout, self.pause, self.turn_poll = (restart_timeout, gate_timeout,
                                                                               pause, turn_poll)
        self.poll, self.reason, self.kafka_conn_id = poll, reason, kafka_conn_id

    # ------------------------------------------------------------------------------------------ steps
    def execute(self, context: Context) -> Any:
        return self._advance(context)

    def resume(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Back from RollTrigger: the broker registered again (or it timed out: the roll itself then says what
        to do)."""
        event = event or {}
        if event.get("status") == "error":
            raise AirflowFailException(f"step {int(self.step) + 1}: {event.get('message')}")
        if event.get("status") == "restarted" and event.get("left_seen"):
            self.log.info("broker %s was seen gone and registered again", event.get("broker"))
        return self._advance(context)

    def _restart(self) -> dict[str, Any]:
        """The restart command from the connection `restart_conn_id` (its extra's `command` and `timeout`)."""
        if not self.restart_conn_id:
            return {}
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(self.restart_conn_id)
        extra = conn.extra_dejson or {}
        template = extra.get("command")
        if not template:
            raise AirflowFailException(f"connection {self.restart_conn_id!r} has no `command` in its extra (e.g. "
                                       '{"command": "ssh kafka-{broker} sudo systemctl restart kafka"})')
        return {"restart_command": str(template), "command_timeout": float(extra.get("timeout", 600))}

    def _advance(self, context: Context) -> Any:
        i = int(self.step)
        run = run_folder(context)
        req = _request(self, context, part="step", step=i, wait_restart=False,
                       restart_timeout=float(self.restart_timeout), gate_timeout=float(self.gate_timeout),
                       reason=str(self.reason or ""), **self._restart())
        try:
            out = api.roll(req, progress=_log_progress(self))
        except api.NotYourTurn as e:
            # rescheduled, not deferred: its turn comes when another task of this run has done its step (a
            # deferral's wait would block dag.test(), which runs triggers inline, one task at a time)
            wait = float(self.turn_poll or runs.roll_turn_poll())
            self.log.info("%s; asking again in %.0f s", e, wait)
            raise AirflowRescheduleException(utcnow() + timedelta(seconds=wait)) from e
        except api.RollStopped as e:
            raise AirflowSkipException(str(e)) from e
        except api.PlannerError as e:
            runs.update_review(run, status=f"roll stopped at step {i + 1}")
            if e.retryable:
                raise AirflowFailException(f"step {i + 1}: {e} (ZooKeeper unreachable: clear this task to resume)") \
                    from e
            raise AirflowFailException(f"step {i + 1}: {e}") from e
        if out.state == "restarting":
            runs.update_review(run, status=f"rolling: broker {out.broker} restarting")
            self.log.info("broker %s may restart now (its leadership is moved off); waiting up to %s s for it to "
                          "leave and register again", out.broker, self.restart_timeout)
            self.defer(trigger=RollTrigger(zk_conn_id=self.zk_conn_id, plan=str(run.plan), step=i,
                                           broker=out.broker, czxid=out.czxid, timeout=float(self.restart_timeout),
                                           poll=self.poll),
                       method_name="resume")
        runs.update_review(run, status=f"rolling: {out.steps_done}/{out.steps_total} brokers done")
        for w in out.warnings:
            self.log.warning("%s", w)
        self.log.info("%s", out.message)
        result = {"step": i, "state": out.state, "steps_done": out.steps_done, "cannot_move": list(out.cannot_move)}
        if _truthy(self.pause) and i + 1 < out.steps_total:
            order = list(call("pause", api.read_plan, run.plan).section("roll")["order"])
            self.subject = (f"Broker {order[i]} restarted (step {i + 1}/{out.steps_total}, gates passed): continue "
                            f"with broker {order[i + 1]}?")
            self.body = (f"Step {i + 1} of the restart roll is done: broker {order[i]} is registered again, back in "
                         "every ISR, nothing is offline or under min ISR, its leadership is restored.\n\n"
                         f"**{CONTINUE}** restarts broker {order[i + 1]} next; **{STOP}** (or no answer in time) "
                         "ends the roll here, the temporary replicas in place (run `kplan roll` to go on later).")
            call("pause", api.roll, _request(self, context), mark="paused",
                 reason=f"waiting for a person's go-ahead after step {i + 1} (broker {order[i]})")
            return super().execute(context)
        return result

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """The person's answer between brokers: stop the roll (recorded in the cluster), or go on."""
        payload = super().execute_complete(context, event)
        chosen = list(payload["chosen_options"])
        user = (event or {}).get("responded_by_user")
        who = user.get("name") if isinstance(user, dict) else user
        req = _request(self, context)
        if chosen != [CONTINUE]:
            out = call("stop", api.roll, req, mark="stopped",
                       reason=f"stopped by {who or 'nobody (no answer in time)'} after step {int(self.step) + 1}")
            runs.update_review(run_folder(context), status=f"roll stopped after step {int(self.step) + 1}")
            raise AirflowSkipException(out.message)
        call("continue", api.roll, req, mark="running", reason=f"go-ahead by {who} after step {int(self.step) + 1}")
        return {"step": int(self.step), "continue": True, "by": who}


class RollFinishOperator(BaseOperator):
    """After the last broker: the undo (the temporary replicas removed, unless `keep_temporary`) and the
    preferred leaders as before."""

    template_fields: Sequence[str] = ("zk_conn_id", "kafka_conn_id", "keep_temporary")
    ui_color = "#fde8e8"

    def __init__(self, *, zk_conn_id: str | None = "zookeeper_default", kafka_conn_id: str | None = None,
                 keep_temporary: Any = False, poll: float = 1.0, **kwargs: Any) -> None:
        kwargs["retries"] = 0
        kwargs.setdefault("pool", runs.apply_pool())
        super().__init__(**kwargs)
        self.zk_conn_id, self.keep_temporary, self.poll = zk_conn_id, keep_temporary, poll
        self.kafka_conn_id = kafka_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        runs.update_review(run_folder(context), status="rolling: undo")
        out = call("finish", api.roll, _request(self, context, part="finish",
                                                keep_temporary=_truthy(self.keep_temporary)))
        self.log.info("%s", out.message)
        return {"state": out.state, "kept_temporary": out.kept_temporary}


class RollReportOperator(BaseOperator):
    """Whatever happened (trigger rule all_done): the roll as the cluster records it, what to do next, the
    review record closed. Fails the run when the roll did not complete, so a stopped roll never reads as a
    success."""

    template_fields: Sequence[str] = ("zk_conn_id", "kafka_conn_id")
    ui_color = "#f0f0f0"

    def __init__(self, *, zk_conn_id: str | None = "zookeeper_default", kafka_conn_id: str | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.zk_conn_id, self.kafka_conn_id = zk_conn_id, kafka_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        run = run_folder(context)
        if not run.complete("plan"):
            raise AirflowFailException("no plan in this run: nothing was rolled")
        target = cluster(self.zk_conn_id, self.kafka_conn_id)
        if is_kraft(target):
            kraft_writer(api.RollRequest, call("report", api.read_plan, run.plan), "roll")
        st = call("report", api.roll_status, target.connect, run.plan, auth=target.auth)
        steps = ", ".join(f"{s['broker']}: {s['state']}" for s in st["steps"]) or "not started"
        self.log.info("roll of %s: %s (phase %s); brokers %s", st["plan_id"], st["state"] or "not started",
                      st["phase"], steps)
        review = runs.read_json(run.root / runs.REVIEW) or {}
        if st["state"] == "completed":
            runs.update_review(run, status="done")
            return {"state": "completed", "steps": st["steps"]}
        if str(review.get("status", "")).startswith(("rejected", "nothing")):
            return {"state": "not run", "review": review.get("status")}
        what = st["error"] or ("not started" if not st["recorded"] else st["state"])
        runs.update_review(run, status=f"roll {st['state'] or 'not started'}: {what}"[:300])
        raise AirflowFailException(
            f"the roll did not complete ({st['state'] or 'not started'}, phase {st['phase']}): {what}. Brokers: "
            f"{steps}. The cluster is as the last completed state left it (temporary replicas in place): fix the "
            f"cause, then clear the failed task to resume, or run `kplan roll --zk … --plan {Path(run.plan)}`")
