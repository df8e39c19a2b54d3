"""The restart roll carried out: class Roll runs its phases (protect, the brokers' steps, undo, leaders) under
the apply lock, resumable from its record (rollrecord.py); one broker's step is rollsteps.py. The overview is
planner/execution/roll.py's docstring.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from planner.errors import BadInput, NextStep, NotYourTurn, RollStopped, SafetyRefusal
from planner.execution import election, preflight, rollgates
from planner.execution import runstate as rs
from planner.execution.clusterview import Key
from planner.execution.planview import Entry, Move, RunPlan, _build, from_plan
from planner.execution.progress import write_json_atomic
from planner.execution.rollcluster import Presence, RollCluster, Write, ZkRollCluster
from planner.execution.rollrecord import (
    COMPLETED,
    DONE,
    FAILED,
    FORMAT,
    LEADERS,
    PAUSED,
    PROTECT,
    RUNNING,
    STEPS,
    STOPPED,
    UNDO,
    UNDO_CHUNK,
    RollOptions,
    RollProgress,
    RollResult,
    StopRequested,
    Waiting,
    move_phase,
    move_state,
    roll_path,
)
from planner.execution.rollsteps import BrokerSteps

log = logging.getLogger(__name__)


def undo_plan(plan: Any) -> RunPlan:
    """The undo as an execution plan: every protected partition from its temporary list back to its original
    one (rollback.json). Only removals: no data is copied."""
    moves = {(m.topic, m.partition): Move(m.topic, m.partition, m.to_replicas, m.from_replicas, 0, "data")
             for m in plan.moves}
    entries = [Entry(m.topic, m.partition, m.from_replicas) for m in plan.moves]
    batches = [(i, "data", entries[j: j + UNDO_CHUNK], None)
               for i, j in enumerate(range(0, len(entries), UNDO_CHUNK))]
    return _build(f"{plan.id}-undo", "restart-undo", moves, batches, {}, (), None, str(plan.path or ""))


class Roll(BrokerSteps):
    def __init__(self, cluster: Any, plan: Any, options: RollOptions | None = None,
                 progress: Callable[[Any], None] | None = None):
        """`cluster`: a RollCluster (planner.execution.rollcluster; the KRaft one is kraftroll.KraftRollCluster),
        or a connected KazooClient (a ZooKeeper-mode cluster)."""
        if plan.kind != "restart":
            raise SafetyRefusal(f"plan {plan.id} is a {plan.kind} plan: a roll runs restart plans; apply it instead")
        self.plan = plan
        self.opts = options or RollOptions()
        self.callback = progress
        self.cluster: RollCluster = cluster if hasattr(cluster, "backend") else ZkRollCluster(cluster, plan,
                                                                                              self.opts.poll)
        roll = plan.section("roll")
        self.order = [int(b) for b in roll.get("order", ())]
        self.kafka_version = str(plan.parameters.get("kafka_version") or "3.7")
        self.hex = plan.id.split(":", 1)[-1]
        self.path = roll_path(self.hex)
        self.accepted = set(plan.section("protection").get("unprotected", ()))
        self.record: dict[str, Any] | None = None
        self.started = time.monotonic()
        self.warnings: list[str] = []
        self.resumed = False

    def _read(self, fn: Callable[[], Any]) -> Any:
        return self.cluster.read(fn)

    def warn(self, text: str) -> None:
        log.warning("%s", text)
        self.warnings.append(text)

    def say(self, message: str, broker: int | None = None, state: str = "") -> None:
        log.info("%s", message)
        rec = self.record or {}
        done = sum(1 for s in rec.get("steps", ()) if s["state"] == "done")
        p = RollProgress("roll", message, done, len(self.order), rec.get("phase", ""), broker, state, rs.now())
        if self.opts.progress_file is not None:
            write_json_atomic(self.opts.progress_file, {"plan_id": self.plan.id, **p.as_dict()})
        if self.callback is not None:
            self.callback(p)

    def _load(self) -> dict[str, Any] | None:
        return self.cluster.load()

    def _save(self, extra: list[Write] | None = None) -> None:
        """The record as it is now, with `extra` (the write its new state names: a reordering, an election, a
        maintenance state) in one fenced transaction on ZooKeeper; committed before the write on KRaft."""
        rec = self.record
        assert rec is not None
        rec["updated_at"] = rs.now()
        self.cluster.save(rec, list(extra or ()))

    def _event(self, text: str) -> None:
        hist = self.record.setdefault("history", [])
        hist.append([rs.now(), text])
        del hist[:-rs.HISTORY]

    def run(self, part: str | None = None, step: int | None = None) -> RollResult:
        """The whole roll (`part` None: the CLI), or one part of it for a scheduler that runs the roll as
        separate tasks (the Airflow DAG): "protect", "step" (the step at index `step`; with no restart callable
        and `wait_restart` off it returns state `restarting` while the broker has not registered again, and
        running it again continues), "finish" (undo and leaders). A step runs only after the steps before it:
        NotYourTurn while one of them is still under way, RollStopped when the roll stopped before it."""
        if part not in (None, "protect", "step", "finish"):
            raise ValueError(part)
        try:
            who = self.cluster.holder()
            if who and not self.opts.lock_wait:
                raise SafetyRefusal(f"another kplan holds the lock {self._lock_name()}: {who}. Only one roll or apply "
                                    "may write at a time; nothing was written")
            self.cluster.check_cluster()
            rec = self._load()
            if rec is not None and rec.get("state") == COMPLETED:
                return self._result(rec, "already-completed", f"the roll of plan {self.plan.id} was already completed "
                                    "on this cluster; nothing to do")
            if rec is None:
                if part not in (None, "protect"):
                    raise SafetyRefusal(f"the roll of plan {self.plan.id} has not started on this cluster (no "
                                        f"{self.path}): its temporary replicas come first")
                self._refuse_fresh()
            elif part == "step":
                self._check_turn(rec, step)
            self.cluster.acquire(self.opts.lock_wait)
            return self._run(part, step)
        finally:
            self.cluster.release()

    def _check_turn(self, rec: dict[str, Any], i: int | None) -> None:
        if i is None or not 0 <= i < len(self.order):
            raise BadInput(f"step must be 0..{len(self.order) - 1}, got {i}")
        if rec.get("state") == STOPPED:
            raise RollStopped(f"the roll of plan {self.plan.id} was stopped ({rec.get('error') or 'by a person'}); "
                              f"broker {self.order[i]} is not restarted")
        if rec.get("state") == PAUSED and rec["steps"][i]["state"] == "pending":
            raise NotYourTurn(f"the roll is paused ({rec.get('error') or 'for a person'}); broker {self.order[i]} "
                              "waits")
        if rec.get("phase") == PROTECT:
            raise NotYourTurn(f"the roll's temporary replicas are not in place yet; broker {self.order[i]} waits")
        for j in range(i):
            st = rec["steps"][j]
            if st["state"] != "done":
                if rec.get("state") == FAILED:
                    raise RollStopped(f"the roll stopped at step {j + 1} (broker {st['broker']}): "
                                      f"{rec.get('error') or st['state']}; broker {self.order[i]} is not restarted")
                raise NotYourTurn(f"step {j + 1} (broker {st['broker']}) is not done yet ({st['state']}); broker "
                                  f"{self.order[i]} waits")

    def mark(self, state: str, reason: str) -> RollResult:
        """A person's say between brokers, recorded under the lock: `paused` (the next broker waits for an
        answer), `running` (go on), `stopped` (the roll ends here; the cluster is left as it is, the temporary
        replicas in place; `kplan roll` run again continues it)."""
        if state not in (PAUSED, RUNNING, STOPPED):
            raise BadInput(f"a roll can be marked paused, running or stopped, not {state!r}")
        try:
            who = self.cluster.holder()
            if who and not self.opts.lock_wait:
                raise SafetyRefusal(f"another kplan holds the lock {self._lock_name()}: {who}; try again")
            self.cluster.acquire(self.opts.lock_wait)
            rec = self._load()
            if rec is None:
                raise SafetyRefusal(f"no roll of plan {self.plan.id} is recorded on this cluster")
            self.record = rec
            if rec.get("state") == COMPLETED:
                return self._result(rec, COMPLETED, f"the roll of plan {self.plan.id} is already completed")
            move_state(rec, state)
            rec["error"] = reason[:500] if state != RUNNING else None
            self._event(f"{state}: {reason[:200]}")
            self._save()
            return self._result(rec, state, f"the roll of plan {self.plan.id} is {state}" + (f": {reason}" if reason
                                                                                              else ""))
        finally:
            self.cluster.release()

    def _lock_name(self) -> str:
        return rs.LOCK_PATH if self.cluster.backend == "zookeeper" else "(the __kplan fence)"

    def _refuse_fresh(self) -> None:
        """A first run: every check that can refuse, before the first write."""
        foreign = self.cluster.foreign_reassignment()
        if foreign:
            raise SafetyRefusal(foreign + "; a roll starts only when no reassignment is in flight (nothing was "
                                "written)")
        live = self.cluster.live_brokers()
        missing = [b for b in self.order if b not in live]
        if missing:
            raise SafetyRefusal(f"broker(s) {missing} of the roll are not registered in /brokers/ids: a roll restarts "
                                "running brokers; start them first (nothing was written)")
        states = self.cluster.maintenance()
        held = [states.get(b) for b in self.order if states.get(b) is not None]
        if held:
            raise SafetyRefusal("a roll restarts brokers in service: " + "; ".join(e.describe() for e in held)
                                + " (nothing was written)",
                                next_steps=(NextStep("brokers", "shows every state"),))
        if self.plan.moves:
            self.cluster.check_protect(from_plan(self.plan))

    def _begin(self) -> dict[str, Any]:
        rec = self._load()
        if rec is None:
            rec = {"format": FORMAT, "plan_id": self.plan.id, "state": RUNNING, "phase": PROTECT,
                   "created_at": rs.now(), "holder": rs.identity("roll", self.plan.id),
                   "keep_temporary": self.opts.keep_temporary, "error": None,
                   "steps": [{"broker": b, "state": "pending"} for b in self.order],
                   "baseline": self._baseline(), "history": [[rs.now(), "created"]]}
            self.record = rec
            self._save()
        else:
            self.resumed = True
            self.record = rec
            rec["holder"] = rs.identity("roll", self.plan.id)
            rec["error"] = None
            if rec.get("state") in (FAILED, PAUSED, STOPPED):
                move_state(rec, RUNNING)
            self._event(f"resumed (pid {rec['holder']['pid']})")
            self._save()
        return rec

    def _run(self, part: str | None, step: int | None) -> RollResult:
        rec = self._begin()
        try:
            if rec["phase"] == PROTECT and part in (None, "protect"):
                self._check_stop("its temporary replicas")
                self._protect()
                move_phase(rec, STEPS)
                self._event("protected")
                self._save()
            if part == "protect":
                return self._result(rec, "protected", f"the temporary replicas of plan {self.plan.id} are in place")
            if part == "step":
                assert step is not None
                if rec["steps"][step]["state"] != "done":
                    self._step(step)
                b = self.order[step]
                return self._result(rec, "done", f"step {step + 1}/{len(self.order)}: broker {b} restarted, its "
                                    "leadership restored")
            if rec["phase"] == STEPS:
                for i in range(len(self.order)):
                    if rec["steps"][i]["state"] == "done":
                        continue
                    if part == "finish":
                        raise RollStopped(f"step {i + 1} (broker {self.order[i]}) is not done: the roll cannot finish")
                    if rec["steps"][i]["state"] == "pending":
                        self._check_stop(f"broker {self.order[i]}")
                    self._step(i)
                    if self.opts.pause and i + 1 < len(self.order):
                        move_state(rec, PAUSED)
                        self._event(f"paused after broker {self.order[i]}")
                        self._save()
                        nxt = self.order[i + 1]
                        self.say(f"paused after broker {self.order[i]} (step {i + 1}/{len(self.order)}); run the roll "
                                 f"again to restart broker {nxt}")
                        return self._result(rec, PAUSED, f"paused after broker {self.order[i]}: its gates passed; "
                                            f"run the roll again to continue with broker {nxt}")
                move_phase(rec, UNDO)
                self._save()
            if rec["phase"] == UNDO:
                self._check_stop("the undo of its temporary replicas")
                if rec.get("keep_temporary") or self.opts.keep_temporary:
                    rec["keep_temporary"] = True
                    self._event("temporary replicas kept (operator's choice)")
                else:
                    self._undo()
                move_phase(rec, LEADERS)
                self._save()
            if rec["phase"] == LEADERS:
                self._final_leaders()
                move_phase(rec, DONE)
                move_state(rec, COMPLETED)
                self._event("completed")
                self._save()
            kept = bool(rec.get("keep_temporary"))
            return self._result(rec, "completed", f"roll of plan {self.plan.id} completed: {len(self.order)} brokers "
                                "restarted, " + ("temporary replicas kept" if kept else "temporary replicas removed")
                                + ", preferred leaders restored")
        except StopRequested as s:
            return self._stopped(rec, str(s))
        except Waiting as w:
            self._event(f"waiting for broker {w.broker} to restart")
            self._save()
            return self._result(rec, "restarting", f"broker {w.broker} is restarting: waiting for it to register "
                                "again", broker=w.broker, czxid=w.czxid)
        except BaseException as e:
            self._fail(e)
            raise

    def _check_stop(self, what: str) -> None:
        """Between brokers (and phases), with nothing of the roll in flight: honour a stop request."""
        if self.opts.stop is not None and self.opts.stop.is_set():
            raise StopRequested(what)

    def _stopped(self, rec: dict[str, Any], what: str) -> RollResult:
        """Recorded as stopped (resumable: a run again continues with `what`), the lock released by run()."""
        move_state(rec, FAILED)
        rec["error"] = "interrupted: stopped on request, nothing in flight (resumable)"
        self._event(f"stopped on request before {what}")
        self._save()
        done = sum(1 for s in rec.get("steps", ()) if s["state"] == "done")
        return self._result(rec, "interrupted", f"roll of plan {self.plan.id} stopped on request: {done} of "
                            f"{len(self.order)} brokers restarted, none in flight; run the roll again to continue "
                            f"with {what}")

    def _fail(self, error: BaseException) -> None:
        if self.record is None or not self.cluster.held:
            return
        try:
            move_state(self.record, FAILED)
            text = "interrupted" if isinstance(error, KeyboardInterrupt) else str(error)
            self.record["error"] = text[:2000]
            self._event(f"stopped: {text[:300]}")
            self._save()
        except Exception as e:  # noqa: BLE001 - never hide the original error
            log.warning("could not record the failure in the roll record: %r", e)

    def _result(self, rec: dict[str, Any], state: str, message: str, broker: int | None = None,
                czxid: int | None = None) -> RollResult:
        done = sum(1 for s in rec.get("steps", ()) if s["state"] == "done")
        cannot = [n for s in rec.get("steps", ()) for n in s.get("cannot_move", ())]
        self.say(message, broker=broker, state=state)
        return RollResult(self.plan.id, state, message, done, len(self.order), self.resumed,
                          bool(rec.get("keep_temporary")), cannot, list(self.warnings),
                          round(time.monotonic() - self.started, 3), broker, czxid)

    def _executor(self, run_plan: RunPlan, what: str) -> None:
        relay = None
        if self.callback is not None:
            def relay(p: Any) -> None:
                self.callback(RollProgress("roll", f"{what}: {p.message}", p.done, p.total, what, None, p.state,
                                           rs.now()))
        result = self.cluster.execute(run_plan, self.opts.throttle if what == "protect" else None, self.opts.poll,
                                      self.opts.stop, relay)
        self.warnings += [w for w in result.warnings if w not in self.warnings]
        if result.state == "interrupted":   # the executor stopped between batches and recorded its run as stopped
            raise StopRequested("its temporary replicas" if what == "protect" else "the undo of its temporary replicas")
        if result.state not in ("completed", "already-completed"):
            raise SafetyRefusal(f"the roll's {what} phase ended {result.state}: {result.message}")

    def _protect(self) -> None:
        if not self.plan.moves:
            self.say("no temporary replica needed")
            return
        self.say(f"protect: {len(self.plan.moves)} partitions get temporary replicas")
        self._executor(from_plan(self.plan), "protect")

    def _undo(self) -> None:
        if not self.plan.moves:
            return
        self.say(f"undo: {len(self.plan.moves)} partitions back to their original replicas")
        self._executor(undo_plan(self.plan), "undo")

    def _final_leaders(self) -> None:
        """Preferred leaders as before: elect `replicas[0]` wherever it is not the leader but could be."""
        keys = self._roll_keys()
        statuses = self.cluster.partitions(keys)
        live = self.cluster.live_brokers()
        led = [k for k, s in statuses.items() if s.replicas]
        want = election.electable(statuses, live, {k: statuses[k].replicas[0] for k in led}, led).ok
        if want:
            self.say(f"leaders: preferred election for {len(want)} partitions")
            self._elect(want, "final")
        statuses = self.cluster.partitions(keys)
        off = [f"{rollgates.name(k)} (leader {s.leader}, preferred {s.replicas[0]}, ISR {list(s.isr)})"
               for k, s in statuses.items() if s.replicas and s.leader != s.replicas[0]]
        if off:
            self.warn(f"{len(off)} partitions are not led by their preferred leader after the roll (it is not in "
                      f"their ISR): {preflight.listing(off)}")

    def _all_keys(self) -> dict[Key, tuple[int, ...]]:
        return self.cluster.assignments()

    def _hosted(self, broker: int) -> list[Key]:
        return sorted(k for k, reps in self._all_keys().items() if broker in reps)

    def _roll_keys(self) -> list[Key]:
        roll = set(self.order)
        keys = {k for k, reps in self._all_keys().items() if roll & set(reps)}
        keys |= {(m.topic, m.partition) for m in self.plan.moves}
        return sorted(keys)

    def _health(self) -> tuple[set[str], set[str]]:
        """(offline, under min ISR) partitions of the whole cluster, by name."""
        keys = list(self._all_keys())
        statuses = self.cluster.partitions(keys)
        live = self.cluster.live_brokers()
        mins = self.cluster.min_isr({k[0] for k in keys})
        off, under = rollgates.unhealthy(statuses, live, mins, self.kafka_version)
        return {rollgates.name(k) for k in off}, {rollgates.name(k) for k in under}

    def _baseline(self) -> dict[str, list[str]]:
        off, under = self._health()
        if off or under:
            self.warn(f"before the roll, {len(off)} partitions are offline and {len(under)} under min ISR: "
                      f"{preflight.listing(sorted(off | under))}; the roll's gates only refuse new ones")
        return {"offline": sorted(off)[:20_000], "under_min_isr": sorted(under)[:20_000]}

    def _registration(self, broker: int, watch: bool = False) -> Presence:
        return self.cluster.presence(broker, watch)
