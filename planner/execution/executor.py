"""The executor: apply a plan batch by batch through `/admin/reassign_partitions`, resumable, cancellable.

Per unit (a plan batch, or part of one), with explicit states persisted in the run record (runstate.py):
  pending   -> fresh check (its partitions still have the replicas the previous step left them with, nothing
               else reassigning, every target broker registered) -> throttles set (throttles.py)
  submitted -> one fenced transaction creates `/admin/reassign_partitions` (Kafka's strict schema) *and*
               records the state, so a unit is submitted exactly once even if the process dies right after;
               then wait, woken by a watch on the znode, until every partition lists exactly its target
  electing  -> (leadership units of a drain) the reordered lists are in place; one transaction creates
               `/admin/preferred_replica_election` and records it; wait until the controller is done
  completed -> throttles removed (nothing is in flight between units), state recorded; next unit.
A killed apply run again resumes at the recorded state. A lost session (the lock's znode is gone) makes the
next fenced write fail; the executor takes the lock again and resumes from the record.

A cancel request (`/kplan/runs/<plan>/cancel`, written by `kplan cancel`) is honoured between units: the unit
in flight finishes (ZooKeeper offers no way to stop a running reassignment: the controller acts on the znode
only when it is created, and deleting it loses the controller's watch); with mode "revert" that unit's
partitions are then moved back to the replicas they had before it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from planner import codec
from planner import zk as zkmod
from planner.errors import Interrupted, NextStep, NotConverged, PlannerError, SafetyRefusal, ZkUnavailable
from planner.execution import election, lifecycle, preflight
from planner.execution import runstate as rs
from planner.execution.cancelwatch import CancelWatch
from planner.execution.clusterview import ClusterView, Key, retrying
from planner.execution.diagnosis import Context, diagnose, run_units
from planner.execution.intent import drain_intent
from planner.execution.lock import ApplyLock, holder
from planner.execution.planview import RunPlan, Unit, revert_unit
from planner.execution.progress import STOPPING, ZK_DOWN, Progress, Reporter, Tally
from planner.execution.throttles import Spec, Throttles, spec_for
from planner.execution.waiter import Waiter
from planner.requests import ApplyOutcome
from planner.text import count
from planner.zkgate import MAX_TXN_BYTES, MAX_TXN_OPS, FenceLost, Op, WriteGate, _cost

log = logging.getLogger(__name__)

AFTER_BATCH, REVERT = "after-batch", "revert"


@dataclass
class Options:
    throttle: int | None = None         # bytes/s; None: the plan's suggestion per batch, else unthrottled
    poll: float = 1.0                   # seconds between checks when no watch fires
    wait: float | None = None           # overall, seconds; None waits as long as it takes (stalls are logged)
    lock_wait: float = 0.0              # seconds to wait for the lock (a killed apply's session must expire)
    dry_run: bool = False
    election_timeout: float = 60.0
    stall_warning: float = 60.0         # log a diagnosis when no partition completes for this long
    progress_file: Path | None = None
    lock_recoveries: int = 3            # times a lost lock (expired session) is taken again and the run resumed
    run: str | None = None              # the run this apply belongs to (its folder), recorded with the brokers'
    reason: str | None = None           # maintenance state (planner/maintenance.py), and why the maintenance
    connect: str | None = None          # the connect string, named in what to run next (it holds no credential)
    stop: threading.Event | None = None  # set from outside (Ctrl-C / SIGTERM, Airflow's on_kill): stop after the
    #                                     batch in flight, remove what is no longer needed, record the state
    zk_patience: float = 600.0          # how long to wait for an unreachable ZooKeeper, saying so every poll


# What an apply or a cancel returns: the library's ApplyOutcome (planner.requests), its path left to the step
# that knows the records folder (execution/steps.py); state "none" only from a cancel that found no run.
Result = ApplyOutcome


class Executor:
    def __init__(self, client: KazooClient, plan: RunPlan, options: Options | None = None,
                 progress: Callable[[Progress], None] | None = None, command: str = "apply",
                 lock: ApplyLock | None = None):
        """`lock`: a lock the caller already holds (a restart roll runs its phases under its own lock): this
        executor writes through its gate and neither takes nor releases it."""
        self.client = client
        self.plan = plan
        self.opts = options or Options()
        self.command = command
        self._own_lock = lock is None
        self.gate = WriteGate(client, dry_run=self.opts.dry_run) if lock is None else lock.gate
        self.view = ClusterView(client)
        self.throttles = Throttles(self.gate, self.view, plan.hexid)
        self.lock = lock or ApplyLock(self.gate, command, plan.id)
        self.reporter = Reporter(command, progress, self.opts.progress_file, every=self.opts.poll,
                                 stamp={"plan_id": plan.id})
        self.started = time.monotonic()
        self.deadline = self.started + self.opts.wait if self.opts.wait else None
        self.budget = self.opts.wait   # the seconds `deadline` allows (cancel sets its own)
        self.warnings: list[str] = []
        self.units_submitted = 0
        self.resumed = False
        self.mgr = rs.RunManager(self.gate)   # the only code that changes the run's state
        self.waiter = Waiter(client, self.opts.poll, self._read)
        self.cancel_watch = CancelWatch(client, plan.hexid, self._read, self.waiter.wake, self.gate.dry_run)
        self._last_saved = 0.0
        self._last_entries: dict[Key, tuple[int, ...]] = {}
        self._reverted: list[Key] = []
        self._maintenance: list[Op] = []
        final = plan.final_unit()
        self.tally = Tally(final, {k: plan.moves[k].bytes for k in final}, len(plan.units), self.started)
        self._final = final
        self._rate_brokers = brokers_ahead(plan.units, self.rate)
        self._zk_down_since: float | None = None
        self._zk_said = 0.0
        self._stop_said = False
        client.add_listener(self._on_state)

    # ----------------------------------------------------------------------------------- plumbing
    @property
    def run(self) -> rs.Run | None:
        return self.mgr.run

    @run.setter
    def run(self, run: rs.Run | None) -> None:
        self.mgr.run = run

    def close(self) -> None:
        self.client.remove_listener(self._on_state)

    def _on_state(self, state: str) -> bool:
        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost: the lock went with it; writes stop until it is taken again")
        if state == KazooState.CONNECTED:
            self._zk_down_since = None
        elif self._zk_down_since is None:
            self._zk_down_since = time.monotonic()
        self.cancel_watch.stale = True  # a watch may have been lost with the session
        self.waiter.wake()
        return False

    def _read(self, fn: Callable[[], Any]) -> Any:
        return retrying(fn, self.opts.zk_patience, self._zk_waiting, max_delay=min(0.5, self.opts.poll),
                        ready=lambda: self.client.connected)

    def stop_requested(self) -> bool:
        return self.opts.stop is not None and self.opts.stop.is_set()

    def _zk_waiting(self, waited: float, error: BaseException) -> None:
        """A read failed because ZooKeeper does not answer: say so at once and then every poll, with what
        happens next. A stop request now cannot wait for the batch in flight: leave at once, saying what is left."""
        if self.stop_requested():
            raise KeyboardInterrupt("stop requested while ZooKeeper is unreachable")
        now = time.monotonic()
        since = self._zk_down_since = self._zk_down_since or (now - waited)
        if now - self._zk_said < self.opts.poll:
            return
        first = self._zk_said == 0.0
        self._zk_said = now
        unit = self._in_flight_unit()
        hosts = (self.opts.connect or "ZooKeeper").split("/", 1)[0]
        text = (f"ZooKeeper ({hosts}) unreachable for {now - since:.0f} s: "
                + (f"{unit.label} keeps moving in Kafka; " if unit is not None else "")
                + "kplan writes nothing until ZooKeeper answers, then carries on (after a lost session it takes "
                f"the lock again and resumes from the run record); it gives up after {self.opts.zk_patience:.0f} s. "
                "Ctrl-C leaves now, saying what is left")
        if first:   # the caller's progress shows it (the CLI's line, an Airflow task's log): logged, not warned
            log.info("%s (%r)", text, error)
        run = self.run
        done = len(run.record.completed()) if run is not None else 0
        self.reporter.emit(Progress(self.command, text, 0, self.plan.partitions_total, ZK_DOWN,
                                    unit.label if unit else None, done, len(self.plan.units),
                                    elapsed=round(now - self.started, 3), at=rs.now()), force=True)

    def _commit(self, ops: list[Op], fenced: bool = True) -> None:
        """Send the ops of a RunManager transition as one transaction."""
        try:
            self.mgr.send(ops, fenced=fenced)
        except BadVersionError:
            raise SafetyRefusal(f"{self.run.path if self.run else 'the run record'} was changed by another process while this one held the "
                                "lock; stopping (two writers must never run at once)") from None
        self._last_saved = time.monotonic()

    def _reload(self) -> rs.Run:
        run = self._read(lambda: rs.load(self.client, self.plan.hexid, self.gate))
        if run is None:
            raise SafetyRefusal(f"the run record {rs.run_path(self.plan.hexid)} disappeared")
        self.run = run
        return run

    def _cancel_request(self) -> dict[str, Any] | None:
        return self.cancel_watch.request()

    def _check_time(self, what: str, keys: list[Key]) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            reasons = self.diagnose(keys, time_left=0.0)
            raise NotConverged(f"{self.command} timed out after {self.budget or 0:.0f} s while {what}; "
                               + stalled_text(reasons) + ". The run is recorded",
                               next_steps=(NextStep("apply", "resumes it"), NextStep("verify", "reports"),
                                           NextStep("cancel", "stops it")))

    # ------------------------------------------------------------------------------------ progress
    def progress(self, state: str, unit: Unit | None = None, unit_done: int = 0, force: bool = False) -> Progress:
        run = self.run
        completed = [u.state == rs.COMPLETED for u in run.record.units] if run is not None \
            else [False] * len(self.plan.units)
        in_flight = unit.index if unit is not None and unit.kind != "revert" else None
        done, bytes_done, units_done = self.tally.done(completed, in_flight, unit_done)
        elapsed, rate = self.tally.rate(bytes_done)
        total_b = self.plan.bytes_total
        eta = (total_b - bytes_done) / rate if rate else None
        if state == rs.DONE:
            eta = 0.0
        label = unit.label if unit is not None else None
        p = Progress(self.command, f"{state}" + (f": {label}" if label else ""), done, self.plan.partitions_total,
                     state, label, units_done, len(self.plan.units), bytes_done, total_b, rate, eta,
                     round(elapsed, 3), rs.now())
        if self.reporter.emit(p, force=force) and run is not None and not self.gate.dry_run and self.lock.held \
                and self.client.connected and time.monotonic() - self._last_saved > max(5.0, self.opts.poll):
            self.mgr.note_progress(p.as_dict())
            self._commit(self.mgr.ops())
        elif run is not None:
            self.mgr.note_progress(p.as_dict())   # written with the next transition
        return p

    # ------------------------------------------------------------------------------------ diagnosis
    def diagnose(self, keys: list[Key], time_left: float) -> dict[Key, list[str]]:
        statuses = self._read(lambda: self.view.partitions(keys))
        return diagnose(self.plan, statuses, self.context(time_left))

    def context(self, time_left: float) -> Context:
        run = self.run
        pending, submitted = run_units(self.plan, None if run is None else run.record)
        record, _ = self._read(self.throttles.record)
        return Context(self._read(self.view.live_brokers), self._read(self.view.reassignment), pending, submitted,
                       record, time.time(), time_left)

    # ---------------------------------------------------------------------------------------- apply
    def apply(self) -> Result:
        """Apply the plan (or resume it); see the module docstring."""
        try:
            if not self.gate.dry_run and self._own_lock:
                # Everything that can refuse is checked before the first write (the lock's znodes): a refused
                # apply leaves ZooKeeper exactly as it was. The checks run again once the lock is held.
                who = holder(self.client)
                if who and not self.opts.lock_wait:
                    raise SafetyRefusal(f"another kplan holds the lock {rs.LOCK_PATH}: {who}. Only one apply/cancel "
                                        "may write at a time; nothing was written")
                if not who:
                    self._checked_run()
            if self._own_lock:
                self.lock.acquire(self.opts.lock_wait)
            if self.gate.dry_run:
                who = holder(self.client)
                if who:
                    self.warnings.append(f"the lock is held by {who}: a real apply would be refused now")
            recoveries = 0
            while True:
                try:
                    return self._apply()
                except FenceLost:
                    if self.gate.dry_run or recoveries >= self.opts.lock_recoveries:
                        raise
                    recoveries += 1
                    log.warning("the ZooKeeper session expired and the lock with it; taking it again and resuming "
                                "from the run record (%d/%d)", recoveries, self.opts.lock_recoveries)
                    self._read(lambda: self.lock.reacquire(max(self.opts.lock_wait, 0.0)))
                    self.resumed = True
        finally:
            if self._own_lock:
                self.lock.release()
            self.close()

    def _checked_run(self) -> rs.Run | None:
        """The run record (None for a first apply) after every refusal check; writes nothing."""
        plan = self.plan
        run = self._read(lambda: rs.load(self.client, plan.hexid, self.gate))
        self.run = run
        if run is not None and run.state == rs.DONE:
            return run
        if run is not None and run.state in (rs.CANCELLED, rs.REVERTED):
            raise SafetyRefusal(f"the run of plan {plan.id} on this cluster was {run.state} "
                                f"{_when(run.record.updated_at)}; a cancelled plan is not applied again: take a "
                                "new snapshot and plan")
        if run is not None and run.record.digest != plan.digest():
            was = run.record.options.get("max_concurrent")
            raise SafetyRefusal(f"a run of plan {plan.id} with other batches is recorded (max concurrent moves per "
                                f"broker {was}); resume it with the same setting")
        self._read(lambda: preflight.check(self.client, self.view, plan, run))
        self._maintenance = self._read(lambda: lifecycle.apply_ops(self.client, plan, run=self.opts.run,
                                                                   reason=self.opts.reason, command=self.command))
        return run

    def _apply(self) -> Result:
        plan = self.plan
        run = self._checked_run()
        if run is not None and run.state == rs.DONE:
            self._release_all()
            intent = self._intent()
            return self._result(run, "already-completed", f"plan {plan.id} was already applied to this cluster "
                                f"(completed {_when(run.record.updated_at)}); nothing to do"
                                + _intent_note(intent), intent)
        self.resumed = self.resumed or run is not None
        who = rs.identity(self.command, plan.id)
        new = rs.RunRecord.new(plan.id, plan.kind, plan.digest(), len(plan.units), who,
                               {"throttle": self.opts.throttle, "max_concurrent": plan.max_concurrent,
                                "poll": self.opts.poll}) if run is None else None
        self._commit(self.mgr.start(rs.run_path(plan.hexid), new, who, self.command, self._maintenance))
        run = self.run
        unthrottled = [u.label for u in plan.units if u.kind == "data" and u.bytes and not self.rate(u)
                       and run.unit_state(u.index) == rs.PENDING]
        if unthrottled and not any("no replication throttle" in w for w in self.warnings):
            self.warn(f"no replication throttle: {len(unthrottled)} data batches copy at full speed")
        self.progress(run.state, force=True)
        try:
            if run.state in (rs.CANCELLING, rs.REVERTING) or self._cancel_request():
                return self._finish_cancel(run, self._cancel_request() or {"mode": AFTER_BATCH}, self._in_flight_unit())
            for unit in plan.units:
                if self.stop_requested() and run.unit_state(unit.index) == rs.PENDING:
                    return self._finish_stop(run)
                seen = self._step(run, unit)
                run = self.run
                if seen is not None:
                    return self._finish_cancel(run, seen, unit if seen.get("_in_flight") else None)
            self._release_all()
            intent = self._intent()
            self._commit(self.mgr.finish(intent))
            p = self.progress(rs.DONE, force=True)
            if self.gate.dry_run:
                return self._result(run, "dry-run", f"dry run: {len(self.gate.writes)} writes, none made")
            return self._result(run, "completed", f"plan {plan.id} applied: {p.done} partitions in "
                                f"{len(plan.units)} batches" + _intent_note(intent), intent)
        except FenceLost:
            raise
        except BaseException as e:
            self._fail(e)
            raise

    def _intent(self) -> dict[str, Any] | None:
        """A drain's final state: the drained brokers host and lead nothing, read cluster-wide (a topic made
        after the snapshot is not in the plan). Not holding is a warning the caller cannot miss."""
        if self.gate.dry_run or self.plan.kind != "drain":
            return None
        intent = self._read(lambda: drain_intent(self.view, self.plan))
        if intent is not None and not intent["holds"]:
            self.warn(intent["text"])
        return intent

    def _in_flight_unit_now(self) -> Unit | None:
        try:
            self._reload()
        except PlannerError:
            return None
        return self._in_flight_unit()

    def _in_flight_unit(self) -> Unit | None:
        run = self.run
        if run is None:
            return None
        for i in run.in_flight():
            return self.plan.units[i]
        return None

    def _step(self, run: rs.Run, unit: Unit) -> dict[str, Any] | None:
        """Take one unit from wherever it is to completed. Returns a cancel request seen on the way (with
        `_in_flight` set when the unit was already submitted then), or None."""
        i = unit.index
        seen = None
        if run.unit_state(i) == rs.COMPLETED:
            return None
        before = self.units_submitted
        if run.unit_state(i) == rs.PENDING:
            req = self._cancel_request()
            if req:
                return req
            self._before_submit(unit)
            rate = self.rate(unit)
            self._throttle_and_submit(run, unit, self._spec(unit) if rate and unit.kind == "data" else Spec(), rate)
            run = self.run
        elif run.unit_state(i) == rs.SUBMITTED and self.opts.throttle and unit.kind == "data":
            # Resuming a unit in flight with --throttle: change its rate, as Kafka's tool does when an
            # execution is run again with a new --throttle.
            self.throttles.throttle(self._spec(unit), self.opts.throttle)
        if run.unit_state(i) == rs.SUBMITTED:
            seen = self._wait_unit(unit, just_submitted=self.units_submitted > before)
            run = self.run
            if unit.kind == "leadership":
                self._elect(run, unit)
                run = self.run
        if run.unit_state(i) == rs.ELECTING:
            self._wait_election(unit)
        ops = self.mgr.complete(i, unit.label)
        nxt = self.plan.units[i + 1] if i + 1 < len(self.plan.units) else None
        # When the next unit follows at once, its submission transaction records this completion and swaps
        # this unit's throttles for its own (see _throttle_and_submit); every path that stops before it
        # (cancel, refusal, error, end of the plan) releases the throttles and saves the record itself.
        if seen is not None or nxt is None or run.unit_state(nxt.index) != rs.PENDING or self.gate.dry_run \
                or self.stop_requested():
            self._release_all()
            self._commit(ops)
        self.progress(run.state, force=True)
        if seen is not None:
            seen = dict(seen, _in_flight=True)
        return seen

    def rate(self, unit: Unit) -> int | None:
        return self.opts.throttle if self.opts.throttle is not None else unit.throttle

    def _spec(self, unit: Unit):  # noqa: ANN202 - throttles.Spec
        """The throttles a data unit needs: its own moves' topic entries, and rates on its brokers and on those of
        the data units that follow it at the same rate (see brokers_ahead)."""
        spec = _unit_spec(unit)
        if not spec.empty():
            spec.brokers |= self._rate_brokers[unit.index]
        return spec

    def _before_submit(self, unit: Unit, revert_of: Unit | None = None) -> None:
        """Right before a unit (or, with `revert_of`, the revert of that unit) is submitted: the previous znode
        is gone (a foreign one refused), no KRaft migration started, the unit's partitions are where the
        previous step left them, its targets are registered. The one check before every submission."""
        if self.gate.dry_run:
            return
        self._await_znode_gone(unit, own=revert_of is None)
        self._read(lambda: zkmod.refuse_kraft_migration(self.client))
        statuses = self._read(lambda: self.view.partitions(unit.keys(), states=False))
        off = [(e, b) for e, b in zip(unit.entries, unit.before, strict=True)
               if statuses[e.key].reassigning or statuses[e.key].replicas != b]
        if off and revert_of is not None:
            raise SafetyRefusal(f"cannot revert {revert_of.label}: {len(off)} of its partitions are no longer where "
                                f"it left them: {preflight.listing([preflight.name(e.key) for e, _b in off])}")
        if off:
            moved = [f"{preflight.name(e.key)} (expected {list(b)}, found "
                     f"{list(statuses[e.key].replicas) if statuses[e.key].replicas is not None else 'nothing'}"
                     + (", reassigning" if statuses[e.key].reassigning else "") + ")" for e, b in off]
            raise SafetyRefusal(f"{len(moved)} partitions of {unit.label} changed during the run: "
                                f"{preflight.listing(moved)}; {unit.label} was not submitted")
        run = self.run if revert_of is None else None
        self._read(lambda: preflight.check_targets(self.view, self.plan, run, [unit]))

    def _await_znode_gone(self, unit: Unit, own: bool) -> None:
        """/admin/reassign_partitions left by this run's previous submission: wait (a while) for the controller to
        delete it. Anyone else's: refuse. `own`: the run record may name it too (a resumed run)."""
        limit = time.monotonic() + max(30.0, 5 * self.opts.poll)
        while self.waiter.arm(codec.REASSIGN) is not None:
            z = self._read(self.view.reassignment)
            if not z.exists:
                break
            ours = (z.entries is not None and all(self._last_entries.get((e.topic, e.partition)) == e.replicas
                                                   for e in z.entries)) \
                or (own and preflight.own_reassignment(z, self.run, self.plan))
            if not ours or time.monotonic() > limit:
                raise SafetyRefusal(preflight.describe_foreign(z) + f"; {unit.label} was not submitted")
            self.waiter.sleep()

    def _throttle_and_submit(self, run: rs.Run, unit: Unit, spec: Spec, rate: int | None) -> None:
        """Throttles and submission of a unit, with nothing of the run in flight. Where it fits, ONE fenced
        transaction writes the run record (the previous unit completed, this one submitted), the throttle
        record, every config change (the previous unit's throttles removed, this one's set: a broker or topic
        in both is written once or not at all) with its notification, and creates /admin/reassign_partitions.
        ZooKeeper then never shows throttles of a unit that is not in flight, and the unit is submitted exactly
        once. A config changed meanwhile (BadVersion), a znode that appeared, or a transaction too large for
        one request: the step by step way (release, throttle, submit), whose errors say what went wrong."""
        if not self.gate.dry_run:
            groups, _ = self._read(lambda: self.throttles.transition(spec, rate))
            ops = [op for g in groups for op in g]
            create = Op("create", codec.REASSIGN, _reassignment(unit))
            if len(ops) + 8 <= MAX_TXN_OPS and sum(_cost(op) for op in ops + [create]) + len(run.encode()) + 4096 \
                    <= MAX_TXN_BYTES:
                before = self.mgr.checkpoint()
                try:
                    self._submit(run, unit, extra=ops, raw=True)
                    return
                except (BadVersionError, NoNodeError, NodeExistsError):  # nothing was applied: undo in memory
                    self.mgr.restore(before)
                    log.info("%s: the one-transaction submission was refused (a znode changed meanwhile); "
                             "submitting step by step", unit.label)
        self._release_all()
        if not spec.empty() and rate:
            self.throttles.throttle(spec, rate)
        self._submit(run, unit)

    def _submit(self, run: rs.Run, unit: Unit, revert: bool = False, extra: list[Op] | None = None,
                raw: bool = False) -> None:
        data = _reassignment(unit)
        submit = self.mgr.submit_revert if revert else partial(self.mgr.submit, unit.index)
        ops = submit(unit.label, len(unit.entries), data, extra)
        try:
            if raw:  # the caller falls back on a refused transaction
                self.mgr.send(ops)
                self._last_saved = time.monotonic()
            else:
                self._commit(ops)
        except NodeExistsError:
            if raw:
                raise
            self._reload()
            z = self._read(self.view.reassignment)
            raise SafetyRefusal(preflight.describe_foreign(z) + f"; {unit.label} was not submitted") from None
        except BaseException:
            if raw and not isinstance(sys.exc_info()[1], FenceLost | ZkUnavailable):
                raise
            self._reload()
            raise
        self.units_submitted += 1
        self._last_entries = {e.key: e.replicas for e in unit.entries}
        log.info("%s submitted: %d partitions, %d bytes to copy", unit.label, len(unit.entries), unit.bytes)

    def _wait_unit(self, unit: Unit, just_submitted: bool = False) -> dict[str, Any] | None:
        """Wait until every partition of the unit lists exactly its target with nothing adding/removing.
        Returns a cancel request seen meanwhile (honoured after the unit completes). A unit this process has
        just submitted was read right before (nothing of it can have completed): the first read waits for the
        controller to change the znode, or for one poll interval."""
        keys = unit.keys()
        target = {e.key: e.replicas for e in unit.entries}
        self._last_entries = dict(target)
        if self.gate.dry_run:
            return None
        seen = None
        best, best_at, warned_at = -1, time.monotonic(), 0.0
        for stat in self.waiter.rounds(codec.REASSIGN, read_at=time.monotonic() if just_submitted else None):
            statuses = self._read(lambda: self.view.partitions(keys, states=False))
            done = sum(1 for k in keys if statuses[k].replicas == target[k] and not statuses[k].reassigning)
            gone = [preflight.name(k) for k in keys if statuses[k].replicas is None]
            if gone:
                raise SafetyRefusal(f"partitions of {unit.label} disappeared while moving (topic deleted?): "
                                    f"{preflight.listing(gone)}")
            final_here = sum(1 for k in keys if self._final.get(k) == unit.index
                             and statuses[k].replicas == target[k] and not statuses[k].reassigning)
            self.progress(self.run.state, unit, final_here)
            if done == len(keys):
                return seen
            if stat is None:
                dropped = [k for k in keys if not statuses[k].reassigning and statuses[k].replicas != target[k]]
                if dropped:
                    raise SafetyRefusal(
                        f"the controller dropped {len(dropped)} partitions of {unit.label} from the reassignment "
                        f"(they are neither moving nor at their target): "
                        f"{preflight.listing([preflight.name(k) for k in dropped])}")
            if seen is None:
                seen = self._cancel_request()
                if seen:
                    log.info("cancel requested (%s): %s finishes first", seen.get("mode"), unit.label)
            if self.stop_requested() and not self._stop_said:
                self._stop_said = True
                self.reporter.emit(Progress(
                    self.command, f"stop requested: {unit.label} is in flight and finishes first ({done} of "
                    f"{len(keys)} partitions at their target; ZooKeeper cannot stop a running reassignment), then "
                    "this run's throttles are removed and the run is recorded as stopped; interrupt again to leave "
                    "at once", done, len(keys), STOPPING, unit.label, elapsed=round(time.monotonic() - self.started, 3),
                    at=rs.now()), force=True)
            now = time.monotonic()
            if done > best:
                best, best_at = done, now
            elif now - best_at > self.opts.stall_warning and now - warned_at > self.opts.stall_warning:
                warned_at = now
                reasons = self.diagnose(keys, time_left=(self.deadline - now) if self.deadline else 1e9)
                msg = f"{unit.label}: no partition completed for {now - best_at:.0f} s; " + stalled_text(reasons)
                log.warning("%s", msg)
            self._check_time(f"{unit.label} was in flight", keys)
        return seen   # not reached: rounds() never ends

    # ------------------------------------------------------------------------------------ elections
    def _elect(self, run: rs.Run, unit: Unit) -> None:
        """After a leadership unit: a preferred election for its partitions whose leader is not the new first
        replica, where Kafka would move it (election.py)."""
        keys = unit.keys()
        preferred = {e.key: e.replicas[0] for e in unit.entries}
        statuses = self._read(lambda: self.view.partitions(keys))
        choice = election.electable(statuses, self._read(self.view.live_brokers), preferred, keys)
        if choice.blocked:
            skipped = choice.blocked_text(preferred, isr=True, statuses=statuses)
            self.warn(f"{len(skipped)} partitions cannot take their preferred leader now (not registered or not in "
                      f"the ISR): {preflight.listing(skipped)}")
        if not choice.ok:
            return
        if not self.gate.dry_run and not election.await_none_pending(self.waiter, self.opts.election_timeout):
            self.warn(f"a preferred replica election by someone else has been pending for "
                      f"{self.opts.election_timeout:.0f} s; skipping this one (verify elects)")
            return
        try:
            self._commit(self.mgr.elect(unit.index, unit.label, choice.ok))
        except NodeExistsError:
            self._reload()
            self.warn(f"{unit.label}: a preferred replica election appeared meanwhile; leadership of {len(choice.ok)} "
                      "partitions moves later (verify elects)")

    def _wait_election(self, unit: Unit) -> None:
        if self.gate.dry_run:
            return
        if not self.waiter.until_absent(codec.PREFERRED_ELECTION, self.opts.election_timeout):
            self.warn(f"{unit.label}: the preferred election has not finished after "
                      f"{self.opts.election_timeout:.0f} s; continuing (leadership also moves when data batches "
                      "complete)")
            return
        target = {e.key: e.replicas for e in unit.entries}
        statuses = self._read(lambda: self.view.partitions(unit.keys()))
        off = [preflight.name(k) for k, s in statuses.items() if s.leader != target[k][0]]
        if off:
            log.info("%s: %d partitions are not led by their new first replica after the election: %s", unit.label,
                     len(off), preflight.listing(off))

    def warn(self, text: str) -> None:
        log.warning("%s", text)
        self.warnings.append(text)

    # ---------------------------------------------------------------------------------- throttles
    def _release_all(self, keep: list[tuple[str, int, tuple[int, ...], tuple[int, ...]]] | None = None) -> None:
        self._read(lambda: self.throttles.release(keep or ()))

    def _moving(self) -> list[tuple[str, int, tuple[int, ...], tuple[int, ...]]]:
        """Partitions of the plan still reassigning, as (topic, partition, origin, target): their throttles stay."""
        statuses = self._read(lambda: self.view.partitions(self.plan.moves, states=False))
        return [(k[0], k[1], s.origin, s.target) for k, s in statuses.items()
                if s.reassigning and s.origin is not None and s.target is not None]

    def _fail(self, error: BaseException) -> None:
        """Best effort on the way out: throttles off everything not in flight, the run marked failed. On an
        interrupt, raises Interrupted saying exactly what remains and which command removes it."""
        interrupted = isinstance(error, KeyboardInterrupt)
        if self.gate.dry_run or not self.lock.held or self.run is None:
            return
        reachable = self.client.connected
        recorded = False
        try:
            if reachable:
                self._release_all(self._moving())
                self._reload()
                text = "interrupted" if interrupted else f"{type(error).__name__}: {error}"
                self._commit(self.mgr.stop(text, f"stopped: {text[:200]}"))
                recorded = True
        except BaseException as e:  # noqa: BLE001 - never hide the original error (a further Ctrl-C included)
            log.warning("could not record the failure in the run record: %r", e)
        if interrupted:
            raise Interrupted(*self._what_remains(recorded)) from None

    def _what_remains(self, recorded: bool) -> tuple[str, tuple[NextStep, ...]]:
        """After an interrupt: what this run leaves in the cluster, and the steps that remove it or resume."""
        unit = self._in_flight_unit()
        entities: list[str] = []
        if self.client.connected:
            try:
                rec, _ = self.throttles.record()
                entities = [f"topic {t}" for t in sorted((rec or {}).get("topics", {}))] + \
                    [f"broker {b}" for b in sorted((rec or {}).get("brokers", {}), key=int)]
            except Exception:  # noqa: BLE001 - the words below still say where to look
                entities = []
        elif unit is not None:
            spec = self._spec(unit)
            entities = [f"topic {t}" for t in sorted(spec.replicas)] + [f"broker {b}" for b in sorted(spec.brokers)]
        head = ("the run is recorded as stopped" if recorded else
                "ZooKeeper did not answer, so nothing could be removed or recorded (the lock znode goes with the "
                "session)")
        if unit is None and not entities:
            return (f"{head}; no batch was in flight and no throttle of this run is left",
                    (NextStep("apply", "resumes"),))
        shown = ", ".join(entities[:12]) + (f" and {len(entities) - 12} more" if len(entities) > 12 else "")
        return ((f"{head}; " + (f"{unit.label} is still moving in Kafka ({count(len(unit.entries), 'partition')})"
                                if unit is not None else "no batch is in flight")
                 + (f", with this run's replication throttles on {shown}" if shown else "")),
                (NextStep("cancel", "waits for it, removes those throttles and ends the run"),
                 NextStep("apply", "resumes the plan instead")))

    def _finish_stop(self, run: rs.Run) -> Result:
        """A stop request (Ctrl-C, SIGTERM) between batches: nothing is in flight. Remove this run's throttles,
        record the run as stopped (resumable), return."""
        self._release_all()
        self._commit(self.mgr.stop("interrupted: stopped between batches (resumable)",
                                   "stopped on request between batches"))
        p = self.progress(run.state, force=True)
        return self._result(run, "interrupted", f"plan {self.plan.id} stopped on request: {p.units_done} of "
                            f"{len(self.plan.units)} batches applied, none in flight, no throttle of this run "
                            "left, the run recorded as stopped",
                            next_steps=(NextStep("apply", "resumes it"), NextStep("cancel", "ends it")))

    # --------------------------------------------------------------------------------------- cancel
    def _finish_cancel(self, run: rs.Run, req: dict[str, Any], unit: Unit | None) -> Result:
        """Stop here. With mode revert, move the unit that was in flight back to the replicas it started from."""
        mode = req.get("mode", AFTER_BATCH)
        if run.state not in (rs.CANCELLING, rs.REVERTING):
            self._commit(self.mgr.cancelling(mode))
        in_flight = self._in_flight_unit()
        if in_flight is not None:  # a cancel that finds a unit in flight lets it finish first
            self._step(run, in_flight)
            unit = in_flight
            run = self.run
        rev = run.record.revert
        if rev is not None and rev.state != rs.COMPLETED:
            unit = self.plan.units[rev.unit]
            mode = REVERT
        end = rs.CANCELLED
        if mode == REVERT and unit is not None:
            self._revert(unit)
            run, end = self.run, rs.REVERTED
        ops = self.mgr.end(end, req, mode)
        self._release_all()
        self._commit(ops)
        p = self.progress(run.state, force=True)
        what = (f"{unit.label} was moved back to the replicas it started from" if run.state == rs.REVERTED
                else "no batch was in flight" if unit is None else f"{unit.label} completed first")
        # a reverted batch completed, then was moved back: it does not stay applied
        applied = p.units_done - (1 if run.state == rs.REVERTED and unit is not None
                                  and run.unit_state(unit.index) == rs.COMPLETED else 0)
        return self._result(run, run.state, f"plan {self.plan.id} {run.state}: {what}; {applied} of "
                            f"{len(self.plan.units)} batches stay applied (rollback.json reverts them all)")

    def _revert(self, unit: Unit) -> None:
        r = revert_unit(self.plan, unit, unit.index)
        run = self.run
        assert run is not None
        rev = run.record.revert
        if rev is None or rev.unit != unit.index:
            self._commit(self.mgr.begin_revert(unit.index))
        if self.mgr.record.revert.state == rs.PENDING:  # type: ignore[union-attr]
            self._before_submit(r, revert_of=unit)
            rate = self.rate(unit)
            if rate and unit.kind == "data":
                self.throttles.throttle(_unit_spec(r), rate)
            self._submit(run, r, revert=True)
        if self.mgr.record.revert.state == rs.SUBMITTED:  # type: ignore[union-attr]
            self._wait_unit(r)
            ops = self.mgr.complete_revert(unit.label)
            self._reverted = r.keys()
            self._release_all()
            self._commit(ops)

    def cancel(self, mode: str, timeout: float) -> Result:
        """`kplan cancel`: record the request; the running apply honours it after its unit in flight. When no
        apply holds the lock (it was killed, or has finished its unit and stopped), do the rest here."""
        if mode not in (AFTER_BATCH, REVERT):
            raise ValueError(mode)
        try:
            run = self._read(lambda: rs.load(self.client, self.plan.hexid))
            self.run = run
            if run is None:
                return Result(None, self.plan.id, "none", message=f"no run of plan {self.plan.id} is recorded on "
                              "this cluster: nothing to cancel", partitions_total=self.plan.partitions_total)
            if run.state in rs.TERMINAL:
                if self.lock.try_acquire():
                    self._release_all()
                return self._result(run, run.state, f"the run of plan {self.plan.id} is already {run.state}; "
                                    "nothing to cancel")
            req = {"mode": mode, "requested_at": rs.now(), "by": rs.identity("cancel", self.plan.id)}
            path = rs.cancel_path(self.plan.hexid)
            data = codec.dumps(req)
            existing = self._read(lambda: self.client.exists(path))
            self.gate.commit([Op("set", path, data) if existing else Op("create", path, data)], fenced=False)
            log.info("cancel (%s) of plan %s requested", mode, self.plan.id)
            try:
                self.lock.acquire(timeout)
            except SafetyRefusal:
                who = holder(self.client) or "another kplan"
                unit = self._in_flight_unit_now()
                raise NotConverged(
                    f"cancel ({mode}) of plan {self.plan.id} is recorded, but {who} still holds the lock after "
                    f"{timeout:.0f} s" + (f": {unit.label} is in flight and must finish first (ZooKeeper cannot stop "
                                          "a running reassignment)" if unit else "")
                    + ". The apply stops at its next step",
                    next_steps=(NextStep("cancel", "waits longer"),)) from None
            run = self._reload()
            if run.state in rs.TERMINAL:
                return self._result(run, run.state, f"the apply honoured the cancel: the run is {run.state}")
            self.deadline = time.monotonic() + timeout
            self.budget = timeout
            self._read(lambda: preflight.check_cluster(self.client))
            return self._finish_cancel(run, req, self._in_flight_unit())
        finally:
            self.lock.release()
            self.close()

    # --------------------------------------------------------------------------------------- result
    def _result(self, run: rs.Run, state: str, message: str, intent: dict[str, Any] | None = None,
                next_steps: tuple[NextStep, ...] = ()) -> Result:
        p = self.progress(run.state if run else state, force=True)
        self.reporter.flush()
        return Result(None, self.plan.id, state, batches_done=p.units_done, batches_total=len(self.plan.units),
                      warnings=tuple(self.warnings), message=message, resumed=self.resumed,
                      batches_submitted=self.units_submitted, partitions_done=p.done,
                      partitions_total=self.plan.partitions_total, bytes_done=p.bytes_done,
                      bytes_total=self.plan.bytes_total, seconds=round(time.monotonic() - self.started, 3),
                      writes=tuple(f"[txn {t}] {op.describe()}"
                                   for t, op in zip(self.gate.txn_of, self.gate.writes, strict=True)),
                      intent=intent, next_steps=next_steps, reverted=tuple(self._reverted))


def brokers_ahead(units: Sequence[Unit], rate_of: Callable[[Unit], int | None]) -> list[set[int]]:
    """For each unit, the brokers of the consecutive data units from it on that share its rate. A broker's
    rate then stays set from its first batch to its last one of such a stretch instead of being removed and
    set again between batches: a rate throttles only the replicas listed on the topics (which still follow
    each batch exactly), so keeping it changes no copy, while rewriting it costs a config write and a
    /config/changes notification that every broker of the cluster reads, per broker and batch. Kafka's own
    tool keeps the rates for the whole reassignment."""
    ahead: list[set[int]] = [set() for _ in units]
    acc: set[int] = set()
    nxt_rate: int | None = None
    for u in reversed(units):
        rate = rate_of(u) if u.kind == "data" else None
        if not rate:
            acc, nxt_rate = set(), None
            continue
        if rate != nxt_rate:
            acc = set()
        acc = acc | _unit_spec(u).brokers
        ahead[u.index], nxt_rate = acc, rate
    return ahead


def _unit_spec(unit: Unit) -> Spec:
    return spec_for((e.topic, e.partition, b, e.replicas) for e, b in zip(unit.entries, unit.before, strict=True))


def _reassignment(unit: Unit) -> bytes:
    return codec.encode_reassignment([codec.ReassignEntry(e.topic, e.partition, e.replicas) for e in unit.entries])


def stalled_text(reasons: dict[Key, list[str]], show: int = 20) -> str:
    if not reasons:
        return "every partition looks converged"
    items = sorted(reasons.items())
    text = "; ".join(f"{k[0]}-{k[1]}: {', '.join(v)}" for k, v in items[:show])
    more = f" (and {len(items) - show} more)" if len(items) > show else ""
    return f"{len(items)} partitions not done: {text}{more}"


def _intent_note(intent: dict[str, Any] | None) -> str:
    if intent is None:
        return ""
    if intent["holds"]:
        return f"; broker(s) {','.join(map(str, intent['brokers']))} now host and lead nothing"
    return (f"; BUT the drain is not complete: broker(s) {','.join(map(str, intent['brokers']))} still host "
            f"{intent['remaining_count']} partitions (see the warning)")


def _when(t: Any) -> str:
    if not isinstance(t, int | float):
        return ""
    return "at " + time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))

