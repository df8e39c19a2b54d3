"""Operators: parameters plus an `execute` that calls planner.api. Nothing here re-implements a step.

Every task finds its inputs and writes its outputs in the DAG run's run folder (kplan_airflow.runs), so XComs
carry a few small figures and paths, never data. Errors from the planner say whether a retry can help
(`PlannerError.retryable`): transient faults (ZooKeeper unreachable, session lost) raise AirflowException and
use the task's retries; everything else (bad input, an infeasible plan, a safety refusal, no convergence)
raises AirflowFailException, which fails the task at once, whatever its retries.

A retried step whose folder is already complete (the step wrote it, then the task failed later) reuses it:
each step's folder is complete or absent (planner.runfolder), and a reviewed plan is never replaced.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from kplan_airflow import approval_policy, runs
from planner import api
from planner.api import PlannerError, SafetyRefusal

if TYPE_CHECKING:
    from airflow.sdk import Context

T = TypeVar("T")
MODES = {"controlled": ("controlled",), "failure": ("failure",), "both": ("controlled", "failure")}


def run_folder(context: Context) -> api.RunFolder:
    return runs.run_folder(context["dag"].dag_id, context["run_id"])


# The planner's messages state facts; what to do next is worded here, in a DAG's terms (the CLI words it as
# command lines and flags): the steps to run next on the same plan, and what gets past a missing throttle.
_STEP = {"apply": "the apply task, cleared,", "verify": "the verify task",
         "cancel": "a cancel (planner.api.cancel, or `kplan cancel` in a shell)",
         "roll": "the restart DAG's task, cleared,",
         "brokers": "the plan page's maintenance line (planner.api.brokers)",
         "maintenance clear": "clearing the maintenance state (planner.api.clear_maintenance)",
         "plan drain": "a kafka_broker_drain run", "plan return": "a kafka_broker_return run",
         "follow-up drain": "a new kafka_broker_drain run for the same brokers (the follow_up task offers it)",
         "maintenance carry": "carrying ZooKeeper's maintenance state into __kplan (planner.api.carry_maintenance)"}
NO_THROTTLE_REMEDY = ": give a throttle (the throttle param, e.g. 50MB), or set the no_throttle param to copy at " \
    "full speed on purpose"


def said(text: str, next_steps: Sequence[Any] = ()) -> str:
    """A planner message followed by its next steps (planner.errors.NextStep), in a DAG's words."""
    if not next_steps:
        return text
    return text + ". " + "; ".join(f"{_STEP.get(s.step, s.step)}" + (f" of broker(s) {','.join(map(str, s.brokers))}"
                                                                     if s.brokers else "") + f" {s.does}"
                                   for s in next_steps)


def remedy(e: PlannerError) -> str:
    """What gets past a planner error of this type, in a DAG's words (the CLI words it as flags)."""
    if isinstance(e, api.NoThrottle):
        return NO_THROTTLE_REMEDY
    if isinstance(e, api.WrongPlanKind):
        return (": a restart plan runs through the kafka_broker_restart DAG" if e.kind == "restart" else
                ": the restart DAG runs restart plans only; this one is applied by its own DAG's apply task")
    return ""


@contextmanager
def planner_errors(step: str):
    """PlannerError -> AirflowException (retryable) or AirflowFailException (not), with the planner's message.

    The planner's message is the failure: it is raised `from None`, so the task log shows it without the
    planner's own traceback (a PlannerError is an outcome, not a bug), and `shows_failures` puts it on the
    plan page and, through the plugin's listener, on the DAG run's note."""
    try:
        yield
    except PlannerError as e:
        text = said(str(e), e.next_steps) + remedy(e)
        if e.retryable:
            raise AirflowException(f"{step}: {text} (transient: the task's retries apply)") from None
        raise AirflowFailException(text) from None


def _final_try(op: BaseOperator, context: Context) -> bool:
    ti = context.get("ti")
    try:
        return int(getattr(ti, "try_number", 1)) > int(op.retries or 0)
    except (TypeError, ValueError):
        return True


def record_failure(op: BaseOperator, context: Context, exc: BaseException, before: dict[str, Any]) -> None:
    """The run's review record (plan list, plan page, run note) says which task failed and why. A status or an
    error the task itself recorded while failing (\"apply refused\", \"rejected\") is kept."""
    try:
        run = run_folder(context)
        now = runs.read_json(run.root / runs.REVIEW) or {}
        fields: dict[str, Any] = {"failed_task": op.task_id, "dag_id": context["dag"].dag_id,
                                  "run_id": context["run_id"], "run_key": runs.run_key(context["run_id"])}
        if now.get("error") == before.get("error"):
            fields["error"] = " ".join(str(exc).split()) or type(exc).__name__
        if now.get("status") == before.get("status"):
            fields["status"] = f"failed at {op.task_id}"
        runs.update_review(run, **fields)
    except Exception:  # noqa: BLE001 (the task's own failure is what matters; never mask it)
        op.log.warning("could not record the failure in the run's review record", exc_info=True)


def _control_flow() -> tuple[type[BaseException], ...]:
    from airflow.sdk import exceptions as ex

    names = ("AirflowSkipException", "AirflowRescheduleException", "DagRunTriggerException", "DownstreamTasksSkipped")
    return tuple(getattr(ex, n) for n in names if hasattr(ex, n))


_CONTROL_FLOW = _control_flow()


def shows_failures(cls: type[T]) -> type[T]:
    """Wrap the class's own execute / execute_complete: a failure that ends the task (a planner refusal, or the
    last try of anything else) is recorded in the run's review record, where the plan list, the plan page and
    the DAG run's note (plugins/kplan_airflow/listener.py) show it. Skips and deferrals pass through."""
    import functools

    for name in ("execute", "execute_complete"):
        fn = cls.__dict__.get(name)
        if fn is None:
            continue

        @functools.wraps(fn)
        def wrapper(self, context, *args, __fn=fn, **kwargs):
            try:
                before = runs.read_json(run_folder(context).root / runs.REVIEW) or {}
            except Exception:  # noqa: BLE001
                before = {}
            try:
                return __fn(self, context, *args, **kwargs)
            except _CONTROL_FLOW:   # a skip, a reschedule, a triggered run: outcomes, not failures
                raise
            except AirflowFailException as e:
                record_failure(self, context, e, before)
                raise
            except Exception as e:
                if _final_try(self, context):
                    record_failure(self, context, e, before)
                raise

        setattr(cls, name, wrapper)
    return cls


def call(step: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    with planner_errors(step):
        return fn(*args, **kwargs)


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if isinstance(value, str):
        value = [x for x in value.replace(",", " ").split() if x]
    try:
        out = tuple(int(x) for x in (value or ()))
    except (TypeError, ValueError):
        raise AirflowFailException(f"{what} must be a list of integers, got {value!r}") from None
    return out


def _opt_int(value: Any) -> int | None:
    return None if value in (None, "", "None") else int(value)


def _zk(conn_id: str):
    from kplan_airflow.hooks import ZooKeeperConnectionError, ZooKeeperHook

    try:
        return ZooKeeperHook(conn_id).get_conn()
    except ZooKeeperConnectionError as e:
        raise AirflowFailException(f"ZooKeeper connection {conn_id!r}: {e}") from None


def cluster(zk_conn_id: Any, kafka_conn_id: Any) -> Any:
    """The run's cluster: a ZkTarget (a ZooKeeper-mode cluster, from its `zookeeper` connection) or a
    KafkaTarget (a KRaft cluster, from a connection of the Apache Kafka provider's type), exactly one of them
    named (kplan_airflow.form.cluster_problem: both or neither fails the task with the reason)."""
    from kplan_airflow.form import _given, cluster_problem

    why = cluster_problem(zk_conn_id, kafka_conn_id)
    if why:
        raise AirflowFailException(f"Cluster: {why}")
    zk = _given(zk_conn_id)
    if zk:
        return _zk(zk)
    from kplan_airflow.kafka_conn import KafkaClusterHook, KafkaConnectionError

    try:
        return call("snapshot", KafkaClusterHook(kafka_config_id=_given(kafka_conn_id)).target)
    except KafkaConnectionError as e:
        raise AirflowFailException(str(e)) from None


def is_kraft_conn(zk_conn_id: Any, kafka_conn_id: Any) -> bool:
    from kplan_airflow.form import _given

    return not _given(zk_conn_id) and bool(_given(kafka_conn_id))


def is_kraft(target: Any) -> bool:
    return hasattr(target, "bootstrap")


# The fence's lease for a write task on a KRaft cluster (apply, verify, cancel; docs/KRAFT.md "The one-writer
# fence"), longer than the CLI's 30 s because an Airflow worker is the place where a writer stalls: a task
# process on a busy worker node or a CPU-limited pod, a commit to `__kplan` that waits while a drain moves the
# transaction coordinator's partition. A stall past the lease only costs a fresh commit before the next Admin
# write (the guard's retries), never safety. What a longer lease costs is the wait of a writer taking over from
# one that died without releasing: two leases before the lock counts as dead (another host), then one lease
# before its first Admin write. Airflow notices a dead task only after [scheduler]
# task_instance_heartbeat_timeout (300 s by default) and never retries apply (a person clears it), so with
# 60 s the dead apply's lock is stale (two leases, 120 s) before Airflow has even failed its task: the cleared
# apply adds at most one lease of waiting to what Airflow already takes.
KRAFT_LEASE = 60.0


def target_fields(target: Any) -> dict[str, Any]:
    """A request's cluster fields: zk + auth (ZooKeeper mode) or bootstrap + kafka (KRaft)."""
    if is_kraft(target):
        return {"zk": None, "bootstrap": target.bootstrap, "kafka": target.security}
    return {"zk": target.connect, "auth": target.auth}


def writer_fields(target: Any, lease: Any = None) -> dict[str, Any]:
    """A write request's cluster fields (apply, verify, cancel): target_fields, and on KRaft the fence's lease
    (`lease` seconds; None: KRAFT_LEASE)."""
    if not is_kraft(target):
        return target_fields(target)
    return {**target_fields(target), "lease": float(KRAFT_LEASE if lease in (None, "", "None") else lease)}


def kraft_writer(request: type, plan: api.Plan, step: str) -> None:
    """A write step (apply, verify, cancel, roll) named by a Kafka connection (a KRaft cluster). Apply, verify
    and cancel go through the Admin API writer (the request's bootstrap, kafka and lease fields); a plan made
    from a ZooKeeper snapshot is refused here, nothing written (the library refuses it too: the reverse, a
    KRaft plan through a ZooKeeper connection, is the library's refusal on the ZooKeeper path). The restart
    DAG's roll on KRaft is not wired yet (`kplan roll --bootstrap-server` is): refused, one line."""
    if (plan.snapshot or {}).get("backend", "zookeeper") == "zookeeper":
        raise AirflowFailException(f"plan {plan.id[:19]} was made from a ZooKeeper snapshot, but this run names a "
                                   "KRaft cluster (a Kafka connection): nothing was written")
    if step == "roll" or not any(f.name == "bootstrap" for f in dataclasses.fields(request)):
        raise AirflowFailException(f"plan {plan.id[:19]}: the restart DAG's roll on a KRaft cluster is not wired "
                                   "yet (`kplan roll --bootstrap-server` rolls it from a shell); nothing was written")


def _log_progress(op: BaseOperator, every: float = 30.0) -> Callable[[api.Progress], None]:
    """Counts into the task log when they change, else at most every `every` seconds (apply reports once per
    poll; a stalled batch must not bury the log under identical lines)."""
    last: dict[str, Any] = {"key": None, "at": 0.0}

    def show(p: api.Progress) -> None:  # the library logs each message itself; keep counts visible
        state = (p.detail or {}).get("state")
        if state in ("zookeeper unreachable", "stopping"):
            now = time.monotonic()
            if state != last.get("said") or now - last.get("said_at", 0.0) >= every:
                op.log.warning("%s: %s", p.step, p.message)   # what is happening, and what comes next
                last.update(said=state, said_at=now)
            return
        last["said"] = state
        if not p.total:
            return
        now = time.monotonic()
        key = (p.step, p.done, p.total)
        if key != last["key"] or now - last["at"] >= every:
            op.log.info("%s: %s/%s", p.step, p.done, p.total)
            last.update(key=key, at=now)

    return show


@shows_failures
class SnapshotOperator(BaseOperator):
    """Read the cluster into <run>/snapshot, with sizes and disk capacity from the brokers (read-only; safe to
    retry). Exactly one of `zk_conn_id` (a ZooKeeper-mode cluster, read from ZooKeeper; its brokers asked for
    sizes with the security of the Kafka connection its extra names, else PLAINTEXT) and `kafka_conn_id` (a
    KRaft cluster, read through the Admin API: a connection of the Apache Kafka provider's type, conn type
    `kafka`, its extra the librdkafka config: bootstrap.servers, security.protocol, sasl.mechanism,
    sasl.username, sasl.password, ssl.*). Secrets go only to the Kafka client."""

    template_fields: Sequence[str] = ("zk_conn_id", "sizes", "timeout", "kafka_conn_id", "sizes_from")
    ui_color = "#e8f4fd"

    def __init__(self, *, zk_conn_id: str | None = "zookeeper_default", sizes: str | None = None,
                 timeout: float = 10.0, kafka_conn_id: str | None = None, sizes_from: str = "brokers",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kafka_conn_id = kafka_conn_id
        self.sizes_from = sizes_from
        self.zk_conn_id = zk_conn_id
        self.sizes = sizes
        self.timeout = timeout

    def execute(self, context: Context) -> dict[str, Any]:
        run = run_folder(context)
        m = run.manifest()
        if m is not None:
            self.log.info("reusing the complete snapshot %s (written by an earlier try)", run.snapshot)
            return {"path": str(run.snapshot), "fingerprint": m.get("fingerprint"), "reused": True}
        target = cluster(self.zk_conn_id, self.kafka_conn_id)
        self.log.info("snapshot of %s -> %s", target, run.snapshot)
        where = target_fields(target) if is_kraft(target) else {"zk": target.connect, "auth": target.auth,
                                                                "kafka": _kafka(target.kafka_conn_id)}
        req = api.SnapshotRequest(**where, out=run.snapshot, sizes=Path(self.sizes) if self.sizes else None,
                                  timeout=float(self.timeout), sizes_from=str(self.sizes_from or "brokers"))
        out = call("snapshot", api.snapshot, req, progress=_log_progress(self))
        for w in out.warnings:
            self.log.warning("snapshot warning: %s", dict(w))
        _offer_brokers(self, out.path)
        return {"path": str(out.path), "fingerprint": out.fingerprint, "counts": dict(out.counts)}


def _offer_brokers(op: BaseOperator, path: Path) -> None:
    """The brokers this snapshot saw become the trigger forms' broker picker (kplan_airflow.form)."""
    from kplan_airflow import form

    try:
        snap = api.read_snapshot(path)
        form.write_known_brokers(snap.brokers.to_pylist(), snap.manifest.get("taken_at"),
                                 form._given(op.zk_conn_id) or form._given(op.kafka_conn_id))
    except Exception:  # noqa: BLE001 (the picker is a convenience; the snapshot itself is done)
        op.log.warning("could not record the snapshot's brokers for the trigger forms", exc_info=True)


def _kafka(conn_id: str | None) -> Any:
    """KafkaSecurity from an Apache Kafka provider connection (its extra is the client config): how a
    ZooKeeper-mode cluster's brokers are asked for sizes."""
    if conn_id in (None, "", "None"):
        return None
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    if conn.conn_type != "kafka":
        raise AirflowFailException(f"connection {conn_id!r} is of type {conn.conn_type!r}, not 'kafka' (the Apache "
                                   "Kafka provider's)")
    return call("snapshot", api.kafka_security, conn.extra_dejson)


@shows_failures
class RiskOperator(SparkSubmitOperator):
    """Drain risk through spark-submit (the Apache Spark provider, connection `spark_default` by default).

    `drains`: broker id lists to assess (rolling order); `all_brokers` / `all_racks` add the sweep;
    `after_plan=True` also scores the scenarios on the run's plan and writes <run>/risk-after, else <run>/risk.
    The request is validated in this process first (unknown brokers fail here, with the planner's message,
    before a JVM starts); the job writes into a temporary folder that becomes the step's folder on success.
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "drains", "mode", "all_brokers",
                                      "all_racks", "zk_conn_id", "kafka_conn_id")
    ui_color = "#fdf2e8"

    def __init__(self, *, drains: Any = (), mode: str = "both", all_brokers: Any = False, all_racks: Any = False,
                 after_plan: bool = False, kafka_version: str = "3.7", conn_id: str = "spark_default",
                 zk_conn_id: str | None = None, kafka_conn_id: str | None = None, reread: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(conn_id=conn_id, name="kplan-drain-risk", **kwargs)
        # reread (with after_plan): read the run's cluster again and score the plan on it (api.reread)
        self.zk_conn_id, self.kafka_conn_id, self.reread = zk_conn_id, kafka_conn_id, reread
        self.drains = drains
        self.mode = mode
        self.all_brokers = all_brokers
        self.all_racks = all_racks
        self.after_plan = after_plan
        self.kafka_version = kafka_version
        self.spark_conn_id = conn_id

    def _request(self, run: api.RunFolder, out: Path) -> api.RiskRequest:
        drains = self.drains
        if drains and not isinstance(drains[0], list | tuple):
            drains = [drains]  # one drain set given flat
        if self.mode not in MODES:
            raise AirflowFailException(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        return api.RiskRequest(
            snapshot=run.snapshot, out=out, drains=tuple(_ints(d, "drains") for d in drains if d),
            all_brokers=bool(self.all_brokers), all_racks=bool(self.all_racks), modes=MODES[self.mode],
            plan=run.plan if self.after_plan else None, kafka_version=self.kafka_version)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.sdk import BaseHook

        from kplan_airflow.spark import submit_env

        run = run_folder(context)
        step = "risk_after" if self.after_plan else "risk"
        final = run.step(step)
        if not run.complete(step):
            req = self._request(run, final)
            call(step, api.risk_submit, req)  # bad input fails here, before a folder or a JVM exists
            try:
                BaseHook.get_connection(self.spark_conn_id)
            except Exception:
                raise AirflowFailException(
                    f"Spark connection {self.spark_conn_id!r} is not defined (the Spark provider would fall back "
                    "to YARN): define it, e.g. AIRFLOW_CONN_SPARK_DEFAULT='{\"conn_type\": \"spark\", \"host\": "
                    "\"local[2]\"}' or spark://master:7077") from None
            inputs = (run.snapshot, run.plan) if self.after_plan else (run.snapshot,)
            target = cluster(self.zk_conn_id, self.kafka_conn_id) if self.after_plan and self.reread else None
            with planner_errors(step), run.step_writer(step, inputs=inputs) as tmp, ExitStack() as stack:
                job_req = dataclasses.replace(req, out=tmp)
                if target is not None:   # whatever appeared since the snapshot counts (issue 19)
                    where = target_fields(target) if is_kraft(target) else {
                        "zk": target.connect, "auth": target.auth, "kafka": _kafka(target.kafka_conn_id)}
                    job_req = stack.enter_context(api.reread(dataclasses.replace(job_req, **where), final,
                                                             progress=_log_progress(self)))
                spec = api.risk_submit(job_req)
                self.application = str(spec.application)
                self.application_args = list(spec.args)
                self.conf = dict(spec.conf)
                self._driver_memory = spec.driver_memory
                self.env_vars = submit_env()
                self.log.info("risk (%s): %s %s", step, self.application, " ".join(self.application_args))
                super().execute(context)
                if not api.step_complete(tmp, step):
                    raise AirflowException(f"the Spark job ended without writing its risk summary in {final}")
        else:
            self.log.info("reusing the complete %s (written by an earlier try)", final)
        summary = run.risk_summary(after_plan=self.after_plan)
        if summary is None:
            raise AirflowException(f"{final} holds no readable risk summary")
        self.log.info("risk level %s (%s)", summary["level"].upper(),
                      ", ".join(f"{k}: {v}" for k, v in summary["level_by_state"].items()))
        return {"path": str(final), "level": summary["level"], "level_by_state": summary["level_by_state"]}


@shows_failures
class PlanOperator(BaseOperator):
    """The plan step of every DAG (<run>/plan): a plan already there (an earlier try) is reused, never
    replaced; otherwise the kind's request (`request`) goes to its planner function (`PLAN`). One operator,
    one behaviour; the subclasses below only say which plan and from which fields."""

    PLAN: Callable[..., Any]
    ui_color = "#eefde8"

    def request(self, run: api.RunFolder) -> Any:
        raise NotImplementedError

    def result(self, plan: api.Plan, context: Context) -> Any:
        """The task's XCom: the plan's figures (the restart plan returns its steps instead)."""
        return _plan_xcom(plan)

    def execute(self, context: Context) -> Any:
        run = run_folder(context)
        if run.complete("plan"):
            plan = call("plan", api.read_plan, run.plan)
            self.log.info("reusing the plan %s already in %s (a plan is never replaced)", plan.id, run.plan)
        else:
            plan = call("plan", type(self).PLAN, self.request(run), progress=_log_progress(self)).plan
        return self.result(plan, context)


class DrainPlanOperator(PlanOperator):
    """OR-Tools plan that empties `brokers` (<run>/plan). Unknown brokers or an infeasible drain fail here."""

    PLAN = staticmethod(api.plan_drain)

    template_fields: Sequence[str] = ("brokers", "exclude_topics", "max_concurrent_per_broker", "sizes",
                                      "leader_scope", "max_leader_changes", "max_disk_usage")

    def __init__(self, *, brokers: Any, exclude_topics: str | None = None, max_concurrent_per_broker: Any = 5,
                 sizes: str | None = None, leader_scope: str = "touched", max_leader_changes: Any = None,
                 max_disk_usage: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_disk_usage = max_disk_usage
        self.brokers = brokers
        self.exclude_topics = exclude_topics
        self.max_concurrent_per_broker = max_concurrent_per_broker
        self.sizes = sizes
        self.leader_scope = leader_scope
        self.max_leader_changes = max_leader_changes

    def request(self, run: api.RunFolder) -> api.DrainRequest:
        req = api.DrainRequest(snapshot=run.snapshot, out=run.plan, brokers=_ints(self.brokers, "brokers"),
                               exclude_topics=self.exclude_topics or None,
                               max_concurrent_per_broker=int(self.max_concurrent_per_broker),
                               sizes=Path(self.sizes) if self.sizes else None,
                               leader_scope=str(self.leader_scope or "touched"),
                               max_leader_changes=None if self.max_leader_changes in (None, "", "None")
                               else int(self.max_leader_changes), **_disk_usage(self.max_disk_usage))
        if not req.brokers:
            raise AirflowFailException("brokers is empty: name at least one broker to drain")
        return req


class RebalancePlanOperator(PlanOperator):
    """OR-Tools rebalance within a move / bytes budget (<run>/plan)."""

    PLAN = staticmethod(api.plan_rebalance)

    template_fields: Sequence[str] = ("max_moves", "max_bytes", "exclude_topics", "max_concurrent_per_broker",
                                      "sizes", "max_disk_usage")

    def __init__(self, *, max_moves: Any = None, max_bytes: Any = None, exclude_topics: str | None = None,
                 max_concurrent_per_broker: Any = 5, sizes: str | None = None, max_disk_usage: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_disk_usage = max_disk_usage
        self.max_moves = max_moves
        self.max_bytes = max_bytes
        self.exclude_topics = exclude_topics
        self.max_concurrent_per_broker = max_concurrent_per_broker
        self.sizes = sizes

    def request(self, run: api.RunFolder) -> api.RebalanceRequest:
        return api.RebalanceRequest(snapshot=run.snapshot, out=run.plan, max_moves=_opt_int(self.max_moves),
                                   max_bytes=_opt_int(self.max_bytes), exclude_topics=self.exclude_topics or None,
                                   max_concurrent_per_broker=int(self.max_concurrent_per_broker),
                                   sizes=Path(self.sizes) if self.sizes else None,
                                   **_disk_usage(self.max_disk_usage))


def _disk_usage(value: Any) -> dict[str, float]:
    """The max_disk_usage field of a plan request (empty: the library's default)."""
    if value in (None, "", "None"):
        return {}
    try:
        return {"max_disk_usage": float(value)}
    except (TypeError, ValueError):
        raise AirflowFailException(f"max_disk_usage must be a fraction in (0, 1], got {value!r}") from None


class ReturnPlanOperator(PlanOperator):
    """The way back after a drain (<run>/plan): replicas move only onto `brokers`, drained brokers that are
    registered again; the drain's own moves reversed where the cluster still matches them (its plan found
    through the brokers' maintenance state, or `drain_plan`), then balanced up to their share."""

    PLAN = staticmethod(api.plan_return)

    template_fields: Sequence[str] = ("brokers", "drain_plan", "exclude_topics", "max_concurrent_per_broker",
                                      "sizes", "max_disk_usage")

    def __init__(self, *, brokers: Any, drain_plan: str | None = None, exclude_topics: str | None = None,
                 max_concurrent_per_broker: Any = 5, sizes: str | None = None, max_disk_usage: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_disk_usage = max_disk_usage
        self.brokers = brokers
        self.drain_plan = drain_plan
        self.exclude_topics = exclude_topics
        self.max_concurrent_per_broker = max_concurrent_per_broker
        self.sizes = sizes

    def request(self, run: api.RunFolder) -> api.ReturnRequest:
        req = api.ReturnRequest(snapshot=run.snapshot, out=run.plan, brokers=_ints(self.brokers, "brokers"),
                                drain_plan=Path(self.drain_plan) if self.drain_plan not in (None, "", "None")
                                else None, exclude_topics=self.exclude_topics or None,
                                max_concurrent_per_broker=int(self.max_concurrent_per_broker),
                                sizes=Path(self.sizes) if self.sizes else None, **_disk_usage(self.max_disk_usage))
        if not req.brokers:
            raise AirflowFailException("brokers is empty: name the drained brokers that are back")
        return req


def _plan_xcom(plan: api.Plan) -> dict[str, Any]:
    s = plan.summary
    return {"path": str(plan.path), "plan_id": plan.id, "kind": plan.kind, "moves": len(plan.moves),
            "replica_moves": s.get("replica_moves"), "bytes_moved": s.get("bytes_moved"),
            "batches": len(plan.batches)}


def plan_url(dag_id: str, run_id: str) -> str | None:
    """The plan page (served by the review plugin on the API server), inside Airflow's UI (Browse -> Kafka plans)."""
    from airflow.sdk import conf

    base = (conf.get("api", "base_url", fallback=None) or "").rstrip("/")
    return f"{base}{runs.PLUGIN_PAGES}/runs/{runs.run_key(dag_id)}/{runs.run_key(run_id)}" if base else None


@shows_failures
class PublishOperator(BaseOperator):
    """Publish the plan for review: review.json in the run folder (the plan list reads it) and, as XCom, the
    approval's subject and Markdown body (plan summary, risk before/after, link to the plan page).

    Approval is required unless `require_approval` is false (default: unless the deployment sets
    `[kplan] skip_review`), or, when auto-approve limits are given (the
    nightly rebalance), the plan is within every one of them: moves, bytes, and the worst risk level on the
    plan's target. A plan with no moves skips the rest of the run: there is nothing to apply."""

    template_fields: Sequence[str] = ("require_approval", "auto_approve_max_moves", "auto_approve_max_bytes",
                                      "auto_approve_max_risk", "throttle", "no_throttle")
    ui_color = "#f5e8fd"

    def __init__(self, *, require_approval: Any = None, auto_approve_max_moves: Any = None,
                 auto_approve_max_bytes: Any = None, auto_approve_max_risk: str | None = None,
                 approval_task_id: str = "approve", throttle: Any = None, no_throttle: Any = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.throttle = throttle
        self.no_throttle = no_throttle
        self.require_approval = require_approval
        self.auto_approve_max_moves = auto_approve_max_moves
        self.auto_approve_max_bytes = auto_approve_max_bytes
        self.auto_approve_max_risk = auto_approve_max_risk
        self.approval_task_id = approval_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        from kplan_airflow import summary as sm

        run = run_folder(context)
        plan = call("publish", api.read_plan, run.plan)
        before, after = run.risk_summary(), run.risk_summary(after_plan=True)
        pairs = sm.scenario_pairs(after, before)
        after_level = (after or {}).get("level_by_state", {}).get("plan")
        before_level = (after or before or {}).get("level_by_state", {}).get("current")
        dag_id, run_id = context["dag"].dag_id, context["run_id"]
        url = plan_url(dag_id, run_id)
        record = {"dag_id": dag_id, "run_id": run_id, "run_key": runs.run_key(run_id), "kind": plan.kind,
                  "plan_id": plan.id, "brokers": list(plan.section("roll").get("order", ())) if plan.kind == "restart"
                  else list(plan.drained_brokers or plan.returning_brokers),
                  "replica_moves": plan.summary.get("replica_moves"), "bytes_moved": plan.summary.get("bytes_moved"),
                  "risk_before": before_level, "risk_after": after_level,
                  "created": (plan.snapshot or {}).get("taken_at"), "approval_task_id": self.approval_task_id}
        # the rates apply will copy at, and its refusal of a copy with no rate, before anyone is asked to approve
        schedule = api.apply_schedule(plan, _opt_int(self.throttle), _truthy(self.no_throttle))
        record["throttle"] = _opt_int(self.throttle)
        record["no_throttle"] = _truthy(self.no_throttle)
        if plan.moves and schedule.refusal:
            runs.update_review(run, **record, status="refused: no throttle")
            raise AirflowFailException(schedule.refusal + NO_THROTTLE_REMEDY)
        if not plan.moves:
            runs.update_review(run, **record, status="nothing to do")
            raise AirflowSkipException(f"plan {plan.id} has no moves: the cluster is already as asked; "
                                       "nothing to review or apply")
        intent = (after or {}).get("intent")
        if intent and not intent.get("holds"):
            record["intent_after_plan"] = {k: intent.get(k) for k in ("holds", "brokers", "remaining_count")}
        decision = approval_policy.decide(
            approval_policy.Policy(self.require_approval, self.auto_approve_max_moves, self.auto_approve_max_bytes,
                                   self.auto_approve_max_risk),
            moves=plan.summary.get("replica_moves") or 0, nbytes=plan.summary.get("bytes_moved"),
            risk_after=after_level, skip_review=runs.skip_review(),
            drain_empties=not (intent and not intent.get("holds")))   # never applied unseen if it does not
        reason, shown = decision.reason, decision.shown   # shown: why auto-approve did not apply
        runs.update_review(run, **record, status="awaiting approval" if reason else "auto-approved",
                           review_reason=shown)
        subject = f"{sm.title(plan)}: apply plan {plan.id[7:19]}? ({plan.summary.get('replica_moves')} replica moves)"
        body = sm.approval_body(plan, pairs, url, shown, schedule, intent)
        text = sm.text_report(plan, pairs)
        if plan.kind == "restart":   # every step of the roll, without and with the plan
            from kplan_airflow import restart_summary as rsm

            subject = (f"{sm.title(plan)}: run plan {plan.id[7:19]}? ({plan.summary.get('replica_moves')} temporary "
                       "replicas)")
            body, text = rsm.approval_body(plan, after or before, url, shown, schedule), rsm.text_report(plan, after or before)
        self.log.info("%s\n%s", subject, text)
        return {"plan_id": plan.id, "subject": subject, "body": body, "require_approval": bool(reason),
                "reason": reason, "url": url}


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off", "none")
    return bool(value)


@shows_failures
class PlanApprovalOperator(ApprovalOperator):
    """Airflow's ApprovalOperator (Approve / Reject), skipped when the publish step says no review is needed.

    While it waits, its notifiers tell a person (kplan_airflow.notify.PlanWaitingNotifier by default).
    Reject, or no answer within `response_timeout` (the default answer is Reject), FAILS this task, so the run
    reads as rejected in the runs list (not a green success), with the decision and who made it as the
    task's failure and the run's note; apply and everything after it never run. Review is skipped only when
    the deployment says so (`[kplan] skip_review`) or a plan is within the nightly rebalance's auto-approve
    limits; never per run."""

    template_fields: Sequence[str] = (*ApprovalOperator.template_fields, "require_approval")

    def __init__(self, *, require_approval: Any = True, **kwargs: Any) -> None:
        from kplan_airflow.notify import PlanWaitingNotifier

        kwargs.setdefault("defaults", "Reject")
        kwargs.setdefault("fail_on_reject", True)
        # a person learns that the plan waits (task log, [kplan] approval_notify_file / _callback); a DAG adds
        # Slack or e-mail by passing notifiers=[PlanWaitingNotifier(), <a provider's notifier>]
        kwargs.setdefault("notifiers", [PlanWaitingNotifier()])
        super().__init__(**kwargs)
        self.require_approval = require_approval

    def execute(self, context: Context) -> Any:
        if not _truthy(self.require_approval):
            self.log.info("no review needed for this plan (see the publish task): approved without waiting")
            runs.update_review(run_folder(context), status="auto-approved", approved_by="auto")
            return {"chosen_options": [self.APPROVE], "auto": True}
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        from airflow.providers.standard.exceptions import HITLRejectException

        event = event or {}
        chosen = event.get("chosen_options") or []
        user = event.get("responded_by_user")
        who = (user.get("name") or user.get("id")) if isinstance(user, dict) else user
        plan_id = str((runs.read_json(run_folder(context).root / runs.REVIEW) or {}).get("plan_id") or "")[7:19]
        if "error" in event or (chosen == [self.REJECT] and not who):
            why = (f"No answer within the approval timeout: rejected by default; plan {plan_id} was not applied "
                   "(nothing on the cluster changed)")
            runs.update_review(run_folder(context), status="rejected (no answer in time)", error=why)
            self.log.error("%s", why)
            raise AirflowFailException(why)
        approved = chosen == [self.APPROVE]
        if not approved:
            why = f"Rejected by {who}: plan {plan_id} was not applied (nothing on the cluster changed)"
            runs.update_review(run_folder(context), status="rejected", rejected_by=who, error=why)
        else:
            runs.update_review(run_folder(context), status="approved", approved_by=who)
            self.log.info("Approved by %s: plan %s goes to apply", who, plan_id)
        try:
            return super().execute_complete(context, event)
        except HITLRejectException:
            self.log.error("%s", why)
            raise AirflowFailException(why) from None


@shows_failures
class ApplyOperator(BaseOperator):
    """Apply exactly the reviewed plan (planner.api.apply: lock, preflight, throttles, batches). Never retried
    by Airflow: a second apply of the same plan resumes where the first stopped, so run it again by hand
    (clear the task) once the cause is understood. Runs in the apply pool (one apply at a time).

    On a KRaft cluster (a Kafka connection) the same steps go through the Admin API, fenced by `__kplan` with
    a lease of `lease` seconds (KRAFT_LEASE by default; docs/KRAFT.md): the pool is the scheduler's gate, the
    fence the cluster's, across Airflow deployments and the CLI alike."""

    template_fields: Sequence[str] = ("zk_conn_id", "kafka_conn_id", "throttle", "max_concurrent_per_broker", "reason",
                                      "no_throttle")
    ui_color = "#fde8e8"

    def __init__(self, *, zk_conn_id: str | None = "zookeeper_default", kafka_conn_id: str | None = None,
                 throttle: Any = None,
                 max_concurrent_per_broker: Any = None, publish_task_id: str = "publish", reason: Any = None,
                 no_throttle: Any = False, lease: float | None = None,
                 **kwargs: Any) -> None:
        kwargs["retries"] = 0
        kwargs.setdefault("pool", runs.apply_pool())
        super().__init__(**kwargs)
        self.zk_conn_id, self.kafka_conn_id = zk_conn_id, kafka_conn_id
        self.throttle = throttle
        self.max_concurrent_per_broker = max_concurrent_per_broker
        self.publish_task_id = publish_task_id
        self.reason = reason
        self.no_throttle = no_throttle
        self.lease = lease

    def execute(self, context: Context) -> dict[str, Any]:
        run = run_folder(context)
        plan = call("apply", api.read_plan, run.plan)
        published = (context["ti"].xcom_pull(task_ids=self.publish_task_id) or {}).get("plan_id")
        if published != plan.id:
            raise AirflowFailException(str(SafetyRefusal(
                f"the plan in {run.plan} is {plan.id}, but the plan reviewed in this run was {published}: "
                "refusing to apply a plan nobody approved")))
        target = cluster(self.zk_conn_id, self.kafka_conn_id)
        if is_kraft(target):
            kraft_writer(api.ApplyRequest, plan, "apply")
        fields = {**writer_fields(target, self.lease), "plan": run.plan, "out": run.apply,
                  "throttle": _opt_int(self.throttle), "no_throttle": _truthy(self.no_throttle),
                  "max_concurrent_per_broker": _opt_int(self.max_concurrent_per_broker),
                  # recorded with a drain's / return's brokers' maintenance state (kplan brokers shows it)
                  "reason": _reason(self.reason, context)}
        self._stop = threading.Event()   # on_kill (SIGTERM to the task): stop after the batch in flight
        fields["stop"] = self._stop
        req = _request(api.ApplyRequest, fields)
        runs.update_review(run, status="applying")
        try:
            out = call("apply", api.apply, req, progress=_log_progress(self))
        except BaseException as e:   # a safety refusal (a stale plan, the lock held) is not a failure of apply
            refused = isinstance(e.__context__, SafetyRefusal)
            runs.update_review(run, status="apply refused" if refused else "apply failed")
            raise
        if out.state == "interrupted":   # the task was killed: it stopped between batches, throttles removed
            runs.update_review(run, status="apply stopped", apply_state=out.state)
            raise AirflowFailException(f"apply of {out.plan_id} stopped on request: {said(out.message, out.next_steps)}")
        if out.state in ("cancelled", "reverted"):  # `kplan cancel` stopped it: the plan is not fully applied
            runs.update_review(run, status=f"apply {out.state}", apply_state=out.state)
            raise AirflowFailException(f"apply of {out.plan_id}: {out.message or out.state}")
        runs.update_review(run, status="applied", apply_state=out.state)
        self.log.info("apply of %s: %s (%s/%s batches)", out.plan_id, out.state, out.batches_done, out.batches_total)
        return {"plan_id": out.plan_id, "state": out.state, "batches_done": out.batches_done,
                "batches_total": out.batches_total}

    def on_kill(self) -> None:
        """SIGTERM to the task (a person marked it failed, the scheduler stops it): the apply finishes the batch
        in flight, removes its throttles and records the run as stopped, then the task fails saying so."""
        stop = getattr(self, "_stop", None)
        if stop is not None:
            self.log.warning("stopping the apply after the batch in flight (throttles removed, run recorded)")
            stop.set()


def _reason(reason: Any, context: Context) -> str:
    """The operator's reason, and the DAG run that applies the plan."""
    run = f"{context['dag'].dag_id} run {context['run_id']}"
    return f"{reason} ({run})" if reason not in (None, "", "None") else run


def _request(cls: type[T], fields: dict[str, Any]) -> T:
    """Build a request (None means: the library's default; a field without a default, such as `zk` for a KRaft
    cluster's request, keeps its None). A field the request does not declare is a TypeError here, never
    silently dropped."""
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING  # type: ignore[arg-type]
                and f.default_factory is dataclasses.MISSING}
    return cls(**{k: v for k, v in fields.items() if v is not None or k in required})


@shows_failures
class VerifyOperator(BaseOperator):
    """Wait until the cluster matches the plan, then finish it (planner.api.verify: preferred election, the run's
    throttles removed, report.json); fails, naming the stalled partitions, when it does not converge within
    `timeout` seconds. Read-only apart from the election and removing the run's own throttles.

    Deferrable (the default): after one quick look (planner.api.verify_probe) the wait goes to the triggerer
    (kplan_airflow.triggers.VerifyTrigger), so a waiting verify holds no worker slot and, in a pool that does
    not count deferred tasks (the apply pool is made so), no pool slot; `execute_complete` is the short
    finishing task. The deadline is fixed when the task starts, so a restarted scheduler or triggerer resumes
    the same wait. `deferrable=False` waits in the worker, as verify did before (a deployment without a
    triggerer). On a KRaft cluster (a Kafka connection) the quick look, the trigger's polls and the finishing
    task go through the Admin API (the trigger resolves the Kafka connection in the triggerer); the finishing
    task's election and throttle removal are fenced like apply's (`lease`, KRAFT_LEASE by default)."""

    template_fields: Sequence[str] = ("zk_conn_id", "kafka_conn_id", "timeout")
    ui_color = "#e8fdf5"

    def __init__(self, *, zk_conn_id: str | None = "zookeeper_default", kafka_conn_id: str | None = None,
                 timeout: Any = 600, deferrable: bool = True, poll_interval: float = 10.0, lease: float | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("pool", runs.apply_pool())
        super().__init__(**kwargs)
        self.zk_conn_id, self.kafka_conn_id = zk_conn_id, kafka_conn_id
        self.lease = lease
        self.timeout = timeout
        self.deferrable = deferrable
        self.poll_interval = poll_interval

    def _request(self, run: api.RunFolder, **fields: Any) -> api.VerifyRequest:
        target = cluster(self.zk_conn_id, self.kafka_conn_id)
        if is_kraft(target):
            kraft_writer(api.VerifyRequest, call("verify", api.read_plan, run.plan), "verify")
        # report.json goes to the run folder (the library's default for a plan in <run>/plan)
        # fail=False: a timeout returns converged=False (report.json written) so the review record says so
        return _request(api.VerifyRequest, {**writer_fields(target, self.lease), "plan": run.plan, "fail": False,
                                            **fields})

    def execute(self, context: Context) -> dict[str, Any]:
        run = run_folder(context)
        runs.update_review(run, status="verifying")
        if not self.deferrable:
            return self._finish(context, run, wait=float(self.timeout))
        started = time.time()
        status = call("verify", api.verify_probe, self._request(run))
        if status["status"] == "failed":
            raise AirflowFailException(str(status["message"]))
        if status["status"] == "converged":
            return self._finish(context, run, wait=float(self.timeout), since=started)
        self._defer(run, status, started, started + float(self.timeout))
        raise AssertionError("defer() returns only by raising")   # pragma: no cover

    def _defer(self, run: api.RunFolder, status: dict[str, Any], started: float, deadline: float) -> None:
        from datetime import timedelta

        from kplan_airflow.form import _given
        from kplan_airflow.triggers import VerifyTrigger

        self.log.info("%s/%s partitions converged; waiting up to %.0f s in the triggerer (no worker slot held)",
                      status.get("converged"), status.get("total"), max(0.0, deadline - time.time()))
        # the connection's id only: the trigger resolves it in the triggerer (no credential is serialized)
        kraft = is_kraft_conn(self.zk_conn_id, self.kafka_conn_id)
        conn = {"kafka_conn_id": _given(self.kafka_conn_id)} if kraft else {"zk_conn_id": self.zk_conn_id}
        self.defer(trigger=VerifyTrigger(**conn, plan=str(run.plan), started=started, deadline=deadline,
                                         poll=float(self.poll_interval)),
                   method_name="execute_complete",
                   # a backstop only: the trigger fires "timeout" itself at the deadline, with the report
                   timeout=timedelta(seconds=max(0.0, deadline - time.time()) + 300))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Back from VerifyTrigger: the finishing task (verify's election, throttles, report), or the planner's
        message."""
        run = run_folder(context)
        kind = event.get("status")
        started, deadline = float(event["started"]), float(event["deadline"])
        if kind == "failed":
            runs.update_review(run, status="verify failed")
            raise AirflowFailException(str(event.get("message")))
        left = max(0.0, deadline - time.time())
        if kind == "converged":
            again = call("verify", api.verify_probe, self._request(run))
            if again["status"] == "waiting" and left > 0:   # it fell back meanwhile (a broker left an ISR): wait on
                self._defer(run, again, started, deadline)
        return self._finish(context, run, wait=left if kind == "converged" else 0.0, since=started)

    def _finish(self, context: Context, run: api.RunFolder, *, wait: float, since: float | None = None
                ) -> dict[str, Any]:
        out = call("verify", api.verify, self._request(run, wait=wait, since=since), progress=_log_progress(self))
        intent = out.report.get("intent")
        if intent is not None:
            runs.update_review(run, intent={k: intent[k] for k in ("holds", "brokers", "remaining_count", "next")})
        if not out.converged and out.report.get("plan_converged") and intent and not intent["holds"]:
            # the plan's partitions converged; the drain did not: a topic made after the snapshot, say
            runs.update_review(run, status="drain not complete")
            raise AirflowFailException(f"verify: plan {out.plan_id} converged, but {intent['text']}")
        if not out.converged:
            runs.update_review(run, status="not converged")
            stalled = out.report.get("stalled") or []
            why = "; ".join(f"{s['partition']}: {', '.join(s['reasons'])}" for s in stalled[:20])
            more = f" (and {len(stalled) - 20} more)" if len(stalled) > 20 else ""
            raise AirflowFailException(f"the cluster did not converge to plan {out.plan_id} within "
                                       f"{self.timeout} s; stalled: {why or 'see report.json'}{more}")
        runs.update_review(run, status="verified")
        return {"plan_id": out.plan_id, "converged": out.converged}


@shows_failures
class ReportOperator(BaseOperator):
    """Log the run's outcome (report.json from verify, the plan's figures) and close the review record."""

    ui_color = "#f0f0f0"

    def execute(self, context: Context) -> dict[str, Any]:
        from kplan_airflow import summary as sm

        run = run_folder(context)
        plan = call("report", api.read_plan, run.plan)
        report = runs.read_json(run.report) or {}
        pairs = sm.scenario_pairs(run.risk_summary(after_plan=True), run.risk_summary())
        self.log.info("%s\nverification (%s):\n%s", sm.text_report(plan, pairs), run.report,
                      api.verify_report_text(report) if report else "no report.json: verify did not finish")
        runs.update_review(run, status="done", report=str(run.report) if report else None)
        parts = report.get("partitions") or {}
        figures = {"converged": report.get("converged"), "partitions_converged": parts.get("converged"),
                   "partitions_total": parts.get("total"), "offline": report.get("offline_count"),
                   "under_replicated": report.get("under_replicated_count"),
                   "seconds_to_converge": report.get("seconds_to_converge")}
        return {"plan_id": plan.id, **{k: v for k, v in figures.items() if v is not None}}


@shows_failures
class IdleCheckOperator(BaseOperator):
    """Skip the rest of the run (cleanly: skipped, not failed) when the cluster is busy: a reassignment in
    flight in the run's snapshot, a run of one of `busy_dag_ids` (the drain, return and restart DAGs) queued or
    running, or a broker in maintenance part way (draining, restarting, returning: its snapshot says so).
    Drained brokers are no reason to skip: the plan leaves them out (planner/maintenance.py)."""

    template_fields: Sequence[str] = ("busy_dag_ids",)

    def __init__(self, *, busy_dag_ids: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.busy_dag_ids = busy_dag_ids

    def execute(self, context: Context) -> None:
        run = run_folder(context)
        manifest = run.manifest()
        if manifest is None:
            raise AirflowFailException(f"{run.snapshot} holds no complete snapshot: nothing to check")
        inflight = manifest.get("reassignment_in_flight") or []
        if inflight:
            names = ", ".join(f"{e['topic']}-{e['partition']}" for e in inflight[:10])
            raise AirflowSkipException(f"a reassignment is in flight ({len(inflight)} partitions: {names}): "
                                       "not planning a rebalance on a moving cluster")
        ti = context["ti"]
        for dag_id in self.busy_dag_ids:
            n = ti.get_dr_count(dag_id=dag_id, states=["queued", "running"])
            if n:
                raise AirflowSkipException(f"{n} run(s) of {dag_id} queued or running: maintenance is in flight")
        moving = [e for e in manifest.get("maintenance") or () if e.get("state") not in ("drained", None)]
        if moving:
            names = "; ".join(f"broker {e['broker']} {e['state']} since {e.get('since')} (plan "
                              f"{str(e.get('plan_id'))[:19]})" for e in moving)
            raise AirflowSkipException(f"brokers are in maintenance part way ({names}): a drain, restart or return is "
                                       "under way or stopped half way; not rebalancing until it ends (a drained "
                                       "broker is no reason to skip: the plan leaves it out)")
        drained = [e["broker"] for e in manifest.get("maintenance") or () if e.get("state") == "drained"]
        self.log.info("cluster idle: no reassignment in flight, no drain running%s",
                      f"; drained brokers {drained} are left out of the plan" if drained else "")


FOLLOW_UP_PARAMS = ("shutdown_mode", "sweep", "leader_scope", "max_leader_changes", "throttle",
                    "max_concurrent_per_broker", "exclude_topics", "verify_timeout", "zk_conn_id", "kafka_conn_id",
                    "sizes", "sizes_from")


class FollowUpDrainOperator(TriggerDagRunOperator):
    """After verify, whatever it ended with (trigger rule all_done): when the drain's intent does not hold (its
    brokers still host partitions: a topic created after the snapshot, say), offer the follow-up drain as a new
    plan for review: a new run of this DAG for the same brokers, with this run's parameters (reviewed unless the
    deployment skips review). Skipped when the intent holds, or there is no verify report (nothing was applied)."""

    ui_color = "#fdf5e8"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        kwargs.setdefault("trigger_dag_id", "kafka_broker_drain")
        super().__init__(**kwargs)

    def execute(self, context: Context) -> Any:
        run = run_folder(context)
        report = runs.read_json(run.report) or {}
        intent = report.get("intent")
        if not intent or intent.get("holds") is not False:
            raise AirflowSkipException("no follow-up needed: " + (
                "the drained brokers host and lead nothing" if intent else "no drain was verified in this run"))
        params = context.get("params") or {}
        conf = {k: params[k] for k in FOLLOW_UP_PARAMS if k in params}
        conf.update(brokers=list(intent["brokers"]))
        self.trigger_dag_id = context["dag"].dag_id
        self.conf = conf
        self.trigger_run_id = f"follow_up__{context['run_id']}"
        self.note = (f"Follow-up of {context['run_id']}: broker(s) {','.join(map(str, intent['brokers']))} still "
                     f"host {intent['remaining_count']} partitions; plan their drain for review")
        runs.update_review(run, status="drain not complete: follow-up offered", follow_up_run=self.trigger_run_id)
        self.log.warning("%s\noffering the follow-up drain for review as run %s of %s", intent.get("text"),
                         self.trigger_run_id, self.trigger_dag_id)
        return super().execute(context)
