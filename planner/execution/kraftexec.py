"""Apply, verify and cancel on a KRaft cluster: the Admin API only, fenced by `__kplan` (docs/KRAFT.md).

It shares with the ZooKeeper executor (planner.execution.executor) the plan's units (planview), the run record
and its table of legal transitions (runrecord: the same `kplan-run/1` JSON), progress (progress.Tally,
Reporter), the throttle rule (throttles.spec_for), the election rule (election.electable), convergence
(diagnosis.converged) and the drain's intent (intent.drain_intent). It does not share the ZooKeeper executor's
transaction structure: there a unit's state and its znode are one ZooKeeper transaction; here no Admin request
can share a transaction with the record, so each submission is two transitions around one request:

  pending  -> (its partitions are where the previous unit left them, its targets registered and unfenced)
              throttles recorded, then set (kraftthrottles)
  intended -> committed BEFORE AlterPartitionReassignments (the request is sent only within the lease)
  submitted-> committed after it; then wait until every partition lists exactly its target, nothing adding or
              removing (ListPartitionReassignments), with a heartbeat commit every third of the lease
  electing -> (a drain's leadership units) committed before ElectLeaders (PREFERRED)
  completed-> throttles removed, committed.
A resumed run that finds `intended` re-sends the same targets (AlterPartitionReassignments to the target a
partition is already moving to, or already has, changes nothing) and goes on: a batch is submitted exactly once
in effect, and `intended` without `submitted` is the only case that sends a request twice.

Cancel (`kplan cancel`, a request record on `__kplan`): the unit in flight is aborted with an empty target
(AlterPartitionReassignments with a null replica list: the controller restores the replicas it had before,
ReplicationControlManager.cancelPartitionReassignment), recorded as the run's revert of that unit
(intended -> submitted -> completed); the run ends `reverted`, or `cancelled` when nothing was in flight.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner import maintenance_kraft
from planner.errors import Interrupted, NextStep, NotConverged, SafetyRefusal
from planner.execution import election, lifecycle, preflight
from planner.execution import runrecord as rr
from planner.execution.clusterview import Key, PartStatus
from planner.execution.diagnosis import converged
from planner.execution.intent import drain_intent
from planner.execution.kraftcluster import AdminCluster
from planner.execution.kraftstore import LOCK, Fenced, Store, cancel_key, describe, holder_alive, run_key
from planner.execution.kraftthrottles import KraftThrottles
from planner.execution.planview import RunPlan, Unit
from planner.execution.progress import Progress, Reporter, Tally, write_json_atomic
from planner.execution.runstate import identity
from planner.execution.throttles import Spec, spec_for
from planner.requests import ApplyOutcome

log = logging.getLogger(__name__)

Result = ApplyOutcome
REPORT_FORMAT = "kplan-verify/1"
METADATA_LAG = 10.0      # seconds a broker's metadata may trail the controller's reassignment state (checked waits)
GUARD_COMMITS = 3        # commits tried before an Admin write when a slow one left the lease expired (_guard)


@dataclass
class KraftOptions:
    throttle: int | None = None
    poll: float = 1.0
    wait: float | None = None
    lock_wait: float = 0.0
    dry_run: bool = False
    lease: float = 30.0                 # seconds: Admin writes only this long after the last commit started
    election_timeout: float = 60.0
    progress_file: Path | None = None
    stop: threading.Event | None = None
    bootstrap: str = ""
    held: bool = False                  # the fence is the caller's (a restart roll's phases): not taken, kept
    run: str | None = None              # named in a drain's / return's brokers' maintenance state
    reason: str | None = None           # why: recorded with that state


def _unit_spec(unit: Unit) -> Spec:
    return spec_for((e.topic, e.partition, b, e.replicas) for e, b in zip(unit.entries, unit.before, strict=True))


def _name(k: Key) -> str:
    return preflight.name(k)


class KraftExecutor:
    def __init__(self, store: Store, plan: RunPlan, options: KraftOptions | None = None,
                 progress: Callable[[Progress], None] | None = None, command: str = "apply"):
        self.store = store
        self.plan = plan
        store.avoid = set(plan.drained)
        self.opts = options or KraftOptions()
        self.command = command
        self.cluster = AdminCluster(store.admin(), self._guard, dry_run=self.opts.dry_run)
        self.throttles = KraftThrottles(store, self.cluster, plan.hexid, self._records)
        self.reporter = Reporter(command, progress, self.opts.progress_file, every=self.opts.poll,
                                 stamp={"plan_id": plan.id})
        self.started = time.monotonic()
        self.deadline = self.started + self.opts.wait if self.opts.wait else None
        self.record: rr.RunRecord | None = None
        self.holder = identity(command, plan.id)
        self.warnings: list[str] = []
        self.units_submitted = 0
        self.resumed = False
        self.reverted: list[Key] = []
        self.tally = Tally(plan.final_unit(), {k: plan.moves[k].bytes for k in plan.final_unit()},
                           len(plan.units), self.started)
        self._stop_said = False

    # ----------------------------------------------------------------------------------- records
    @property
    def key(self) -> str:
        return run_key(self.plan.hexid)

    def _lock_doc(self, released: bool = False) -> dict[str, Any]:
        return {"holder": self.holder, "heartbeat": time.time(), "released": released}

    def _records(self) -> dict[str, Any]:
        """What every transaction writes besides its own change: the run record as it is and the lock's heartbeat."""
        out: dict[str, Any] = {LOCK: self._lock_doc()}
        if self.record is not None:
            self.record.updated_at = rr.now()
            out[self.key] = self.record.to_json()
        return out

    def _save(self, extra: dict[str, Any] | None = None) -> None:
        if self.opts.dry_run:
            return
        self.store.transact({**self._records(), **(extra or {})})

    def _guard(self) -> None:
        """Before every Admin write: a new holder's initial wait, a fresh commit when a third of the lease is gone,
        then the lease itself. The lease runs from a commit's start, so a commit slower than the lease (its
        transaction coordinator's partition moving, as a drain of the coordinator's broker does) leaves it
        expired: commit again, up to GUARD_COMMITS times, before the guard refuses (seen on real brokers: a
        resumed drain's first commit took over its 4 s lease while __transaction_state partitions moved)."""
        self.store.wait_initial(self.stop_requested)
        for _ in range(GUARD_COMMITS):
            if self.store.fresh():
                break
            self._save()
        self.store.guard(self.stop_requested)

    def _heartbeat(self) -> None:
        if not self.opts.dry_run and not self.store.fresh():
            self._save()

    def stop_requested(self) -> bool:
        return self.opts.stop is not None and self.opts.stop.is_set()

    def _load(self) -> rr.RunRecord | None:
        doc = self.store.get(self.key)
        return None if doc is None else rr.RunRecord.from_json(doc)

    # ----------------------------------------------------------------------------------- progress
    def progress(self, state: str, unit: Unit | None = None, unit_done: int = 0, force: bool = False) -> Progress:
        rec = self.record
        completed = [u.state == rr.COMPLETED for u in rec.units] if rec is not None else [False] * len(self.plan.units)
        done, bytes_done, units_done = self.tally.done(completed, unit.index if unit is not None else None, unit_done)
        elapsed, rate = self.tally.rate(bytes_done)
        total_b = self.plan.bytes_total
        eta = 0.0 if state == rr.DONE else ((total_b - bytes_done) / rate if rate else None)
        label = unit.label if unit is not None else None
        p = Progress(self.command, state + (f": {label}" if label else ""), done, self.plan.partitions_total, state,
                     label, units_done, len(self.plan.units), bytes_done, total_b, rate, eta, round(elapsed, 3),
                     rr.now())
        self.reporter.emit(p, force=force)
        if rec is not None:
            rec.progress = p.as_dict()
        return p

    # ---------------------------------------------------------------------------------- preflight
    def _check_run(self, rec: rr.RunRecord | None) -> None:
        plan = self.plan
        if rec is not None and rec.state in (rr.CANCELLED, rr.REVERTED):
            raise SafetyRefusal(f"the run of plan {plan.id} on this cluster was {rec.state}; a cancelled plan is not "
                                "applied again: take a new snapshot and plan")
        if rec is not None and rec.digest != plan.digest():
            raise SafetyRefusal(f"a run of plan {plan.id} with other batches is recorded (max concurrent moves per "
                                f"broker {rec.options.get('max_concurrent')}); resume it with the same setting")

    def _check_lock(self, wait: float) -> None:
        """A live holder (an apply, cancel or verify writing now) is named and refused, or waited for."""
        limit = time.monotonic() + wait
        while True:
            lock = self.store.get(LOCK)
            if not holder_alive(lock, self.opts.lease):
                return
            if time.monotonic() >= limit:
                raise SafetyRefusal(f"another kplan holds this cluster's lock ({describe(lock)}). Only one apply/"
                                    "cancel may write at a time; nothing was written")
            time.sleep(min(1.0, self.opts.poll))
            self.store.read()

    def _expected(self, rec: rr.RunRecord | None) -> dict[Key, tuple[set[tuple[int, ...]], bool]]:
        """Where each partition of the plan must be now: (allowed replica lists, may be reassigning)."""
        exp: dict[Key, tuple[set[tuple[int, ...]], bool]] = {}
        for u in self.plan.units:
            st = rec.unit_state(u.index) if rec is not None else rr.PENDING
            for e, b in zip(u.entries, u.before, strict=True):
                if st == rr.COMPLETED:
                    exp[e.key] = ({e.replicas}, False)
                elif st == rr.PENDING:
                    exp.setdefault(e.key, ({b}, False))
                else:
                    exp[e.key] = ({b, e.replicas}, True)
        return exp

    def preflight(self, rec: rr.RunRecord | None) -> None:
        """Every partition of the plan is where the run left it (or the plan starts from), nobody else moves it,
        and every broker a unit still to come writes into a replica list is registered and unfenced."""
        exp = self._expected(rec)
        statuses = self.cluster.partitions(list(exp))
        bad = []
        for k, (allowed, moving_ok) in exp.items():
            s = statuses[k]
            if s.replicas is None:
                bad.append(f"{_name(k)} (does not exist)")
            elif s.reassigning and not (moving_ok and s.target in allowed):
                bad.append(f"{_name(k)} (being reassigned to {list(s.target or ())} by someone else)")
            elif not s.reassigning and s.replicas not in allowed:
                bad.append(f"{_name(k)} (expected {sorted(map(list, allowed))[0]}, found {list(s.replicas)})")
        if bad:
            raise SafetyRefusal(f"{len(bad)} partitions of plan {self.plan.id} are not where the "
                                f"{'run left' if rec else 'plan starts from'} them: {preflight.listing(bad)}; "
                                "nothing was written (take a new snapshot and plan)")
        live = self.cluster.live_brokers()
        need = {b for u in self.plan.units if rec is None or rec.unit_state(u.index) != rr.COMPLETED
                for e in u.entries for b in e.replicas}
        missing = sorted(need - live)
        if missing:
            raise SafetyRefusal(f"broker(s) {','.join(map(str, missing))} of the plan's targets are not registered or "
                                "are fenced; nothing was written")

    # -------------------------------------------------------------------------------------- apply
    def apply(self) -> Result:
        plan = self.plan
        self.store.read()
        rec = self._load()
        if rec is not None and rec.state == rr.DONE:
            return self._result("already-completed", f"plan {plan.id} was already applied to this cluster; nothing "
                                "to do")
        self._check_run(rec)
        if not self.opts.held:
            self._check_lock(self.opts.lock_wait)
        self.preflight(rec)
        maintenance = self._maintenance()        # refuses, writing nothing, a plan that gives a broker in
        if self.opts.dry_run:                    # maintenance anything, or a move the table forbids
            return self._dry_run(rec, maintenance)
        if not self.opts.held:
            self.store.open()        # the fence: any earlier holder is fenced from here on
        try:
            rec = self._load()       # decided again on everything committed before the fence
            self._check_run(rec)
            maintenance = self._maintenance()
            self.resumed = rec is not None
            if rec is None:
                rec = rr.RunRecord.new(plan.id, plan.kind, plan.digest(), len(plan.units), self.holder,
                                       {"throttle": self.opts.throttle, "max_concurrent": plan.max_concurrent,
                                        "poll": self.opts.poll, "backend": "kraft", "lease": self.opts.lease})
            else:
                rec.holder = self.holder
                rec.error = None
                if rec.state == rr.FAILED:
                    rec.move_run(rr.RUNNING)
                rec.event(f"resumed by {self.command} (pid {self.holder['pid']} on {socket.gethostname()})")
            self.record = rec
            self._save(maintenance)  # the brokers' state in the same transaction as the run record (lifecycle)
            return self._run()
        except Fenced:
            raise
        except BaseException as e:
            self._fail(e)
            raise
        finally:
            if not self.opts.held:
                released = self.store.holding
                self.store.close(self._lock_doc(released=True) if released else None)

    def _maintenance(self) -> dict[str, Any]:
        """The brokers' maintenance records this apply writes when it starts (planner.execution.lifecycle: a
        drain's brokers `draining`, a return's `returning`), from `__kplan` as last read."""
        states = maintenance_kraft.read_all(self.store)
        changes = lifecycle.apply_changes(states, self.plan, run=self.opts.run, reason=self.opts.reason,
                                          command=self.command)
        return maintenance_kraft.ops(states, changes)

    def _run(self) -> Result:
        plan, rec = self.plan, self.record
        assert rec is not None
        self.progress(rec.state, force=True)
        if rec.state in (rr.CANCELLING, rr.REVERTING) or self._cancel_request():
            return self._finish_cancel()
        for unit in plan.units:
            if self.stop_requested() and rec.unit_state(unit.index) == rr.PENDING:
                return self._finish_stop()
            if self._step(unit):
                return self._finish_cancel()
        self.throttles.release()
        intent = self._intent()
        rec.move_run(rr.DONE, "completed")
        if intent is not None:
            rec.extra["intent"] = {"holds": intent["holds"], "remaining_count": intent["remaining_count"],
                                   "leading_count": intent["leading_count"]}
        self.progress(rr.DONE, force=True)
        self._save()
        note = ""
        if intent is not None:
            note = (f"; broker(s) {','.join(map(str, intent['brokers']))} now host and lead nothing" if intent["holds"]
                    else f"; BUT the drain is not complete: {intent['remaining_count']} partitions remain")
        return self._result("completed", f"plan {plan.id} applied: {self.plan.partitions_total} partitions in "
                            f"{len(plan.units)} batches" + note, intent)

    def _intent(self) -> dict[str, Any] | None:
        if self.plan.kind != "drain":
            return None
        intent = drain_intent(None, self.plan, self.cluster.partitions(None))  # type: ignore[arg-type]
        if intent is not None and not intent["holds"]:
            self.warn(intent["text"])
        return intent

    def warn(self, text: str) -> None:
        log.warning("%s", text)
        self.warnings.append(text)

    def rate(self, unit: Unit) -> int | None:
        return self.opts.throttle if self.opts.throttle is not None else unit.throttle

    def _step(self, unit: Unit) -> bool:
        """Take one unit to completed. True when a cancel request was seen (the caller aborts what is in flight)."""
        rec = self.record
        assert rec is not None
        i = unit.index
        if rec.unit_state(i) == rr.COMPLETED:
            return False
        if rec.unit_state(i) == rr.PENDING:
            if self._cancel_request():
                return True
            self._before_submit(unit)
            rate = self.rate(unit)
            if rate and unit.kind == "data":
                self.throttles.throttle(_unit_spec(unit), rate)
            rec.move_unit(i, rr.INTENDED, f"{unit.label} intended ({len(unit.entries)} partitions)")
            self._save()
        if rec.unit_state(i) == rr.INTENDED:
            rate = self.rate(unit)
            if self.resumed and rate and unit.kind == "data":
                self.throttles.throttle(_unit_spec(unit), rate)      # idempotent: what the record lists is set
            self.cluster.reassign({e.key: e.replicas for e in unit.entries}, unit.label)
            self.units_submitted += 1
            rec.move_unit(i, rr.SUBMITTED, f"{unit.label} submitted ({len(unit.entries)} partitions)")
            self._save()
        elif rec.unit_state(i) == rr.SUBMITTED and self.opts.throttle and unit.kind == "data":
            self.throttles.throttle(_unit_spec(unit), self.opts.throttle)
        if rec.unit_state(i) == rr.SUBMITTED:
            if self._wait_unit(unit):
                return True
            if unit.kind == "leadership":
                rec.move_unit(i, rr.ELECTING, f"{unit.label}: preferred election")
                self._save()
        if rec.unit_state(i) == rr.ELECTING:
            self._elect(unit)
        self.throttles.release()
        rec.move_unit(i, rr.COMPLETED, f"{unit.label} completed")
        self.progress(rec.state, force=True)
        self._save()
        return False

    def _before_submit(self, unit: Unit) -> None:
        limit = time.monotonic() + METADATA_LAG
        while True:   # the previous unit's completion may not have reached the broker's metadata yet
            statuses = self.cluster.partitions(unit.keys())
            off = [(e, b) for e, b in zip(unit.entries, unit.before, strict=True)
                   if statuses[e.key].reassigning or statuses[e.key].replicas != b]
            if not off or time.monotonic() > limit:
                break
            time.sleep(min(self.opts.poll, 0.5))
        if off:
            moved = [f"{_name(e.key)} (expected {list(b)}, found {list(statuses[e.key].replicas or ())}"
                     + (", reassigning" if statuses[e.key].reassigning else "") + ")" for e, b in off]
            raise SafetyRefusal(f"{len(moved)} partitions of {unit.label} changed during the run: "
                                f"{preflight.listing(moved)}; {unit.label} was not submitted")
        live = self.cluster.live_brokers()
        missing = sorted({b for e in unit.entries for b in e.replicas} - live)
        if missing:
            raise SafetyRefusal(f"{unit.label}: target broker(s) {','.join(map(str, missing))} are not registered or "
                                "are fenced; it was not submitted")

    def _wait_unit(self, unit: Unit) -> bool:
        """Until every partition lists exactly its target, nothing adding or removing. True: a cancel request."""
        keys = unit.keys()
        target = {e.key: e.replicas for e in unit.entries}
        final = self.plan.final_unit()
        odd_since: float | None = None
        while True:
            statuses = self.cluster.partitions(keys, states=False)
            gone = [_name(k) for k in keys if statuses[k].replicas is None]
            if gone:
                raise SafetyRefusal(f"partitions of {unit.label} disappeared while moving (topic deleted?): "
                                    f"{preflight.listing(gone)}")
            done = sum(1 for k in keys if statuses[k].replicas == target[k] and not statuses[k].reassigning)
            here = sum(1 for k in keys if final.get(k) == unit.index and statuses[k].replicas == target[k]
                       and not statuses[k].reassigning)
            self.progress(self.record.state, unit, here)      # type: ignore[union-attr]
            if done == len(keys):
                return False
            # The replica lists come from a broker's metadata cache (DescribeTopicPartitions), the reassignments
            # from the controller (ListPartitionReassignments): for a moment around a submission or a completion
            # the two disagree. Only a disagreement that lasts is someone else's doing.
            dropped = [k for k in keys if not statuses[k].reassigning and statuses[k].replicas != target[k]]
            odd_since = (odd_since or time.monotonic()) if dropped else None
            if dropped and time.monotonic() - odd_since > METADATA_LAG:
                raise SafetyRefusal(f"{len(dropped)} partitions of {unit.label} are neither moving nor at their target "
                                    f"(someone cancelled or changed them): {preflight.listing([_name(k) for k in dropped])}")
            if self._cancel_request():
                log.info("cancel requested: %s in flight is aborted (empty target)", unit.label)
                return True
            if self.stop_requested() and not self._stop_said:
                self._stop_said = True
                self.reporter.emit(Progress(self.command, f"stop requested: {unit.label} is in flight and finishes "
                                   "first, then this run's throttles are removed and the run is recorded as stopped",
                                   done, len(keys), "stopping", unit.label, at=rr.now()), force=True)
            if self.deadline is not None and time.monotonic() > self.deadline:
                stalled = [_name(k) for k in keys if not (statuses[k].replicas == target[k]
                                                          and not statuses[k].reassigning)]
                raise NotConverged(f"{self.command} timed out after {self.opts.wait:.0f} s while {unit.label} was in "
                                   f"flight: {len(stalled)} partitions not done: {preflight.listing(stalled)}. The run "
                                   "is recorded", next_steps=(NextStep("apply", "resumes it"),
                                                              NextStep("verify", "reports"),
                                                              NextStep("cancel", "stops it")))
            self._heartbeat()
            time.sleep(self.opts.poll)

    def _elect(self, unit: Unit) -> None:
        keys = unit.keys()
        preferred = {e.key: e.replicas[0] for e in unit.entries}
        statuses = self.cluster.partitions(keys)
        choice = election.electable(statuses, self.cluster.live_brokers(), preferred, keys)
        if choice.blocked:
            self.warn(f"{len(choice.blocked)} partitions cannot take their preferred leader now (not registered or "
                      f"not in the ISR): {preflight.listing(choice.blocked_text(preferred, isr=True, statuses=statuses))}")
        if choice.ok:
            errors = self.cluster.elect_preferred(choice.ok, unit.label)
            failed = {k: v for k, v in errors.items() if v}
            if failed:
                self.warn(f"{unit.label}: the preferred election failed for {len(failed)} partitions: "
                          + preflight.listing([f"{_name(k)} ({v})" for k, v in failed.items()]))

    # ------------------------------------------------------------------------------------ stopping
    def _moving(self) -> list[Key]:
        return [k for k, s in self.cluster.partitions(list(self.plan.moves), states=False).items() if s.reassigning]

    def _fail(self, error: BaseException) -> None:
        """On the way out: throttles off what is not moving, the run recorded as failed (resumable)."""
        rec = self.record
        if rec is None or not self.store.holding:
            return
        try:
            self.throttles.release(self._moving())
            text = "interrupted" if isinstance(error, KeyboardInterrupt) else f"{type(error).__name__}: {error}"
            if rec.state == rr.RUNNING:
                rec.move_run(rr.FAILED)
            rec.error = text[:2000]
            rec.event(f"stopped: {text[:200]}")
            self._save()
        except BaseException as e:  # noqa: BLE001 - never hide the original error
            log.warning("could not record the failure in the run record: %r", e)
        if isinstance(error, KeyboardInterrupt):
            raise Interrupted("the run is recorded as stopped; a batch in flight keeps moving in Kafka",
                              (NextStep("apply", "resumes it"), NextStep("cancel", "aborts what is in flight"))) \
                from None

    def _finish_stop(self) -> Result:
        rec = self.record
        assert rec is not None
        self.throttles.release()
        if rec.state == rr.RUNNING:
            rec.move_run(rr.FAILED)
        rec.error = "interrupted: stopped between batches (resumable)"
        rec.event("stopped on request between batches")
        self._save()
        p = self.progress(rec.state, force=True)
        return self._result("interrupted", f"plan {self.plan.id} stopped on request: {p.units_done} of "
                            f"{len(self.plan.units)} batches applied, none in flight, no throttle of this run left",
                            next_steps=(NextStep("apply", "resumes it"), NextStep("cancel", "ends it")))

    # -------------------------------------------------------------------------------------- cancel
    def _cancel_request(self) -> dict[str, Any] | None:
        if self.opts.dry_run:
            return None
        self.store.read()
        req = self.store.get(cancel_key(self.plan.hexid))
        return req if isinstance(req, dict) else None

    def _finish_cancel(self) -> Result:
        """Abort the unit in flight with an empty target (recorded as the run's revert of it), remove this run's
        throttles, end the run."""
        rec = self.record
        assert rec is not None
        req = self._cancel_request() or {"mode": "abort"}
        if rec.state not in (rr.CANCELLING, rr.REVERTING):
            rec.move_run(rr.CANCELLING, "cancel requested (the unit in flight is aborted)")
            self._save()
        flight = [i for i in rec.in_flight()]
        rev = rec.revert
        unit = self.plan.units[rev.unit] if rev is not None else (self.plan.units[flight[0]] if flight else None)
        if unit is not None and unit.kind == "leadership" and rev is None:
            unit = None          # a reordering moves no data: nothing to abort
        kept: list[Key] = []
        if unit is not None:
            if rec.revert is None:
                rec.begin_revert(unit.index)
                self._save()
            keys = unit.keys()
            if rec.revert.state == rr.PENDING:    # type: ignore[union-attr]
                rec.move_revert(rr.INTENDED, f"{unit.label}: abort intended (empty target)")
                self._save()
            if rec.revert.state == rr.INTENDED:   # type: ignore[union-attr]
                self.cluster.reassign({k: None for k in keys}, f"abort of {unit.label}")
                rec.move_revert(rr.SUBMITTED, f"{unit.label}: abort submitted")
                self._save()
            before = {e.key: b for e, b in zip(unit.entries, unit.before, strict=True)}
            statuses = self._settle(keys)
            # The controller restores the replica *set* (the current list minus the adding replicas), not its
            # order (Kafka's PartitionReassignmentRevert): the lists the unit started from are written back, a
            # reordering that copies nothing, so the preferred leaders are those of before the unit.
            order = {k: before[k] for k in keys if statuses[k].replicas is not None
                     and statuses[k].replicas != before[k] and set(statuses[k].replicas) == set(before[k])}
            if order:
                self.cluster.reassign(order, f"the order of {unit.label}'s lists before it")
                statuses = self._settle(keys)
            self.reverted = [k for k in keys if statuses[k].replicas == before[k]]
            kept = [k for k in keys if statuses[k].replicas != before[k]]
            rec.move_revert(rr.COMPLETED, f"{unit.label} aborted: {len(self.reverted)} partitions back where they "
                            f"were, {len(kept)} had completed")
        self.throttles.release()
        end = rr.REVERTED if rec.state == rr.REVERTING else rr.CANCELLED
        rec.move_run(end)
        rec.extra["cancel"] = {k: v for k, v in req.items() if not str(k).startswith("_")}
        rec.event(f"{end}")
        self.progress(rec.state, force=True)
        self._save({cancel_key(self.plan.hexid): None})
        done = sum(1 for u in rec.units if u.state == rr.COMPLETED)
        what = (f"{unit.label} was aborted in flight (empty target): {len(self.reverted)} of its partitions are back "
                f"on the replicas they had before it" + (f", {len(kept)} had already completed" if kept else "")
                if unit is not None else "no batch was in flight")
        return self._result(end, f"plan {self.plan.id} {end}: {what}; {done} of {len(self.plan.units)} batches "
                            "stay applied (rollback.json reverts them all)")

    def _settle(self, keys: list[Key]) -> dict[Key, PartStatus]:
        """Until none of `keys` is reassigning and the broker's metadata shows it (at most METADATA_LAG more)."""
        quiet_since = None
        while True:
            statuses = self.cluster.partitions(keys, states=False)
            if any(s.reassigning for s in statuses.values()):
                quiet_since = None
            else:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= min(METADATA_LAG, 3 * self.opts.poll):
                    return statuses
            self._heartbeat()
            time.sleep(self.opts.poll)

    def cancel(self, timeout: float) -> Result:
        """`kplan cancel`: record the request; a running apply honours it within a poll. When no apply holds the
        lock (it was killed, or stopped), take the fence here and do it."""
        plan = self.plan
        self.store.read()
        rec = self._load()
        if rec is None:
            return Result(None, plan.id, "none", message=f"no run of plan {plan.id} is recorded on this cluster: "
                          "nothing to cancel", partitions_total=plan.partitions_total)
        if rec.state in rr.TERMINAL:
            self.record = rec
            return self._result(rec.state, f"the run of plan {plan.id} is already {rec.state}; nothing to cancel")
        req = {"mode": "abort", "requested_at": rr.now(), "by": identity("cancel", plan.id)}
        self.store.request(cancel_key(plan.hexid), req)
        log.info("cancel of plan %s requested", plan.id)
        limit = time.monotonic() + timeout
        while True:
            self.store.read()
            rec = self._load()
            if rec is not None and rec.state in rr.TERMINAL:
                self.record = rec
                self.store.close()
                return self._result(rec.state, f"the apply honoured the cancel: the run is {rec.state}")
            if not holder_alive(self.store.get(LOCK), self.opts.lease):
                break
            if time.monotonic() > limit:
                raise NotConverged(f"cancel of plan {plan.id} is recorded, but {describe(self.store.get(LOCK))} still "
                                   f"holds the lock after {timeout:.0f} s. The apply aborts at its next check",
                                   next_steps=(NextStep("cancel", "waits longer"),))
            time.sleep(self.opts.poll)
        self.store.open()
        try:
            rec = self._load()
            if rec is None or rec.state in rr.TERMINAL:
                self.record = rec
                return self._result(rec.state if rec else "none", "the run ended meanwhile")
            rec.holder = self.holder
            self.record = rec
            self.deadline = time.monotonic() + timeout
            self._save()
            return self._finish_cancel()
        finally:
            released = self.store.holding
            self.store.close(self._lock_doc(released=True) if released else None)

    # -------------------------------------------------------------------------------------- dry run
    def _dry_run(self, rec: rr.RunRecord | None, maintenance: dict[str, Any]) -> Result:
        """Every write a real apply would make now, in order; none is made."""
        for key, value in sorted(maintenance.items()):
            self.cluster.writes.append(f"commit {key}: {value['state'] if value else 'in service'} (with the run "
                                       "record's first save)")
        for u in self.plan.units:
            if rec is not None and rec.unit_state(u.index) == rr.COMPLETED:
                continue
            rate = self.rate(u)
            spec = _unit_spec(u)
            self.cluster.writes.append(f"commit {self.key}: {u.label} intended (with the lock's heartbeat)")
            if rate and u.kind == "data" and not spec.empty():
                self.cluster.writes.append(f"IncrementalAlterConfigs throttle {rate} B/s: topics "
                                           f"{','.join(sorted(spec.replicas))} APPEND leader/follower throttled "
                                           f"replicas; brokers {','.join(map(str, sorted(spec.brokers)))} SET rates")
            self.cluster.reassign({e.key: e.replicas for e in u.entries}, u.label)
            self.cluster.writes.append(f"commit {self.key}: {u.label} submitted")
            if u.kind == "leadership":
                self.cluster.writes.append(f"ElectLeaders preferred for up to {len(u.entries)} partitions ({u.label})")
            self.cluster.writes.append(f"commit {self.key}: {u.label} completed (throttles removed first)")
        return self._result("dry-run", f"dry run: {len(self.cluster.writes)} writes, none made")

    # --------------------------------------------------------------------------------------- result
    def _result(self, state: str, message: str, intent: dict[str, Any] | None = None,
                next_steps: tuple[NextStep, ...] = ()) -> Result:
        p = self.progress(self.record.state if self.record else state, force=True)
        self.reporter.flush()
        return Result(None, self.plan.id, state, batches_done=p.units_done, batches_total=len(self.plan.units),
                      warnings=tuple(self.warnings), message=message, resumed=self.resumed,
                      batches_submitted=self.units_submitted, partitions_done=p.done,
                      partitions_total=self.plan.partitions_total, bytes_done=p.bytes_done,
                      bytes_total=self.plan.bytes_total, seconds=round(time.monotonic() - self.started, 3),
                      writes=tuple(self.cluster.writes), intent=intent, next_steps=next_steps,
                      reverted=tuple(self.reverted))


# ------------------------------------------------------------------------------------------------ verify
@dataclass
class KraftVerifyResult:
    plan_id: str
    converged: bool
    report: dict[str, Any]
    path: Path | None
    message: str
    warnings: list[str]


def probe(cluster: AdminCluster, plan: RunPlan, keys: list[Key] | None = None) -> dict[str, Any]:
    """One read-only pass (DescribeTopicPartitions + ListPartitionReassignments): what a deferred wait polls."""
    keys = list(plan.moves) if keys is None else keys
    statuses = cluster.partitions(keys)
    pending = [k for k in keys if not converged(statuses[k], plan.moves[k].to, False)]
    return {"status": "waiting" if pending else "converged", "converged": len(keys) - len(pending),
            "total": plan.partitions_total, "reassigning": any(s.reassigning for s in statuses.values()),
            "leaders_on_preferred": sum(1 for k in keys if statuses[k].leader == plan.moves[k].to[0]),
            "pending": [_name(k) for k in pending[:20]]}


class KraftVerifier:
    """Verify on KRaft: wait for convergence, then (holding the fence, unless an apply holds the lock) elect
    preferred leaders, remove the run's throttles, note the result in the run record; report.json as the
    ZooKeeper verify writes it."""

    def __init__(self, store: Store, plan: RunPlan, wait: float = 300.0, poll: float = 1.0, elect: bool = True,
                 lease: float = 30.0, report: Path | None = None, progress_file: Path | None = None,
                 progress: Callable[[Progress], None] | None = None, since: float | None = None,
                 election_timeout: float = 60.0):
        self.store = store
        self.plan = plan
        self.wait, self.poll, self.elect, self.lease = wait, poll, elect, lease
        self.report_path = report
        self.since = since
        self.election_timeout = election_timeout
        self.ex = KraftExecutor(store, plan, KraftOptions(poll=poll, lease=lease), None, "verify")
        self.cluster = self.ex.cluster
        self.reporter = Reporter("verify", progress, progress_file, every=poll, stamp={"plan_id": plan.id})
        self.warnings: list[str] = []
        self.started = time.monotonic()

    def _emit(self, state: str, done: int, force: bool = False) -> None:
        total = self.plan.partitions_total
        self.reporter.emit(Progress("verify", f"{state}: {done}/{total} partitions converged", done, total, state,
                                    elapsed=round(time.monotonic() - self.started, 3), at=rr.now()), force=force)

    def verify(self) -> KraftVerifyResult:
        try:
            return self._verify()
        finally:
            self.reporter.flush()
            released = self.store.holding
            self.store.close(self.ex._lock_doc(released=True) if released else None)

    def _verify(self) -> KraftVerifyResult:
        plan = self.plan
        t0 = self.since if self.since is not None else time.time()
        deadline = self.started + self.wait
        keys = list(plan.moves)
        while True:
            seen = probe(self.cluster, plan)
            self._emit("waiting", seen["converged"])
            ok = seen["status"] == "converged"
            if ok or time.monotonic() >= deadline:
                break
            time.sleep(self.poll)
        seconds = round(time.time() - t0, 3) if ok else None
        self.store.read()
        lock = self.store.get(LOCK)
        skipped = None
        wrote = not holder_alive(lock, self.lease)
        if not wrote:
            skipped = f"writes skipped (election, throttle removal): the lock is held by {describe(lock)}"
            self.warnings.append(skipped)
        elected: dict[str, Any] = {"requested": 0, "moved": 0, "not_electable": []}
        if wrote:
            self.store.open()
            self.ex.record = self.ex._load()
            statuses = self.cluster.partitions(keys)
            if ok and self.elect:
                elected = self._elect(statuses)
            moving = [k for k, s in statuses.items() if s.reassigning] if not ok else []
            self.ex.throttles.release(moving)
        report = self._report(ok, seconds, elected, skipped)
        maintenance: dict[str, Any] = {}
        if plan.kind in ("drain", "return"):
            report["maintenance"], maintenance = self._maintenance(ok, report.get("intent"), wrote)
        if wrote and (self.ex.record is not None or maintenance):
            if self.ex.record is not None:
                self.ex.record.verify = {k: report[k] for k in ("converged", "partitions", "leaders_on_preferred",
                                                                "offline_count", "under_replicated_count", "at")}
            self.ex._save(maintenance)    # the brokers' new state with the run record's note: one transaction
        if self.report_path is not None:
            write_json_atomic(self.report_path, report)
        if not report["converged"]:
            if not ok:
                stalled = report["stalled"]
                lines = "; ".join(f"{s['partition']}: {', '.join(s['reasons'])}" for s in stalled[:50])
                text = (f"plan {plan.id} has not converged after {self.wait:.0f} s: {len(stalled)} of "
                        f"{plan.partitions_total} partitions stalled: {lines}")
            else:
                text = f"plan {plan.id} converged, but {report['intent']['text']}"
            return KraftVerifyResult(plan.id, False, report, self.report_path, text, list(self.warnings))
        p = report["partitions"]
        return KraftVerifyResult(plan.id, True, report, self.report_path,
                                 f"converged: {p['converged']}/{p['total']} partitions, leaders on preferred "
                                 f"{report['leaders_on_preferred']['count']}/{p['total']}", list(self.warnings))

    def _maintenance(self, ok: bool, intent: dict[str, Any] | None, wrote: bool
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The brokers' maintenance state after this verify (planner.execution.lifecycle, as on ZooKeeper): a
        drain's become `drained` only when its intent holds on the whole cluster (a partition created since the
        snapshot with a replica on them keeps them `draining`), a return's leave maintenance once converged.
        Returns the report's section and the records for the verify's transaction."""
        if not wrote:
            brokers = self.plan.drained or self.plan.returning
            return {"set": {}, "kept": {str(b): "writes skipped: another kplan holds the lock" for b in brokers}}, {}
        states = maintenance_kraft.read_all(self.store)
        changes, section = lifecycle.verify_changes(states, self.plan, ok, intent)
        for b, to in section["set"].items():
            log.info("broker %s is now %s", b, to or "in service")
        return section, maintenance_kraft.ops(states, changes)

    def _elect(self, statuses: dict[Key, PartStatus]) -> dict[str, Any]:
        preferred = {k: m.to[0] for k, m in self.plan.moves.items()}
        choice = election.electable(statuses, self.cluster.live_brokers(), preferred)
        out: dict[str, Any] = {"requested": len(choice.ok), "moved": 0, "not_electable": choice.blocked_text(preferred)}
        if out["not_electable"]:
            self.warnings.append(f"{len(choice.blocked)} partitions cannot take their preferred leader (not registered "
                                 f"or not in the ISR): {preflight.listing(out['not_electable'])}")
        if not choice.ok:
            return out
        self.ex._guard()
        self.cluster.elect_preferred(choice.ok, "verify")
        limit = time.monotonic() + self.election_timeout
        while True:
            now = self.cluster.partitions(choice.ok)
            out["moved"] = sum(1 for k in choice.ok if now[k].leader == preferred[k])
            if out["moved"] == len(choice.ok) or time.monotonic() > limit:
                break
            time.sleep(min(self.poll, 0.5))
        if out["moved"] < len(choice.ok):
            self.warnings.append(f"the preferred election moved {out['moved']} of {len(choice.ok)} leaders")
        return out

    def _report(self, ok: bool, seconds: float | None, elected: dict[str, Any], skipped: str | None
                ) -> dict[str, Any]:
        plan = self.plan
        keys = list(plan.moves)
        target = {k: m.to for k, m in plan.moves.items()}
        every = self.cluster.partitions(None)
        statuses = {k: every.get(k, PartStatus(None)) for k in keys}
        live = self.cluster.live_brokers()
        done = [k for k in keys if converged(statuses[k], target[k], False)]
        preferred = [k for k in keys if statuses[k].leader == target[k][0]]
        offline = [k for k in keys if statuses[k].has_state and (statuses[k].leader == -1
                                                                 or statuses[k].leader not in live)]
        under = [k for k in keys if statuses[k].replicas is not None and len(set(statuses[k].isr))
                 < len(statuses[k].target or ())]
        rec = self.ex.throttles.record()
        brokers = {b for m in plan.moves.values() for b in (*m.frm, *m.to) if b in live}
        remaining = self.ex.throttles.remaining({k[0] for k in keys}, brokers)
        stalled = []
        if not ok:
            for k in keys:
                s = statuses[k]
                if converged(s, target[k], False):
                    continue
                why = ["does not exist"] if s.replicas is None else (
                    [f"reassigning (adding {list(s.adding)}, removing {list(s.removing)})"] if s.reassigning else
                    [f"replicas {list(s.replicas)}, target {list(target[k])}"] if s.replicas != target[k] else
                    [f"ISR {list(s.isr)} not full"] if set(s.isr) != set(target[k]) else [f"leader {s.leader}"])
                stalled.append({"partition": _name(k), "reasons": why})
        intent = drain_intent(None, plan, every)  # type: ignore[arg-type]
        if intent is not None and not intent["holds"]:
            self.warnings.append(intent["text"])
        run = self.ex.record
        return {
            "format": REPORT_FORMAT, "plan_id": plan.id, "at": rr.now(), "backend": "kraft",
            "converged": ok and (intent is None or intent["holds"]), "plan_converged": ok, "intent": intent,
            "partitions": {"converged": len(done), "total": len(keys)},
            "leaders_on_preferred": {"count": len(preferred), "total": len(keys)},
            "offline_count": len(offline), "offline": [_name(k) for k in offline],
            "under_replicated_count": len(under), "under_replicated": [_name(k) for k in under],
            "throttles_remaining": remaining,
            "run_throttles_remaining": bool(rec and (rec.get("topics") or rec.get("brokers"))),
            "seconds_to_converge": seconds, "converged_at": time.time() if ok else None, "election": elected,
            "stalled": stalled, "run": None if run is None else {"state": run.state, "units": len(run.units)},
            "warnings": list(self.warnings), "writes_skipped": skipped,
            "cluster": {"partitions": len(every),
                        "offline": sum(1 for s in every.values() if s.has_state and (s.leader == -1
                                                                                    or s.leader not in live)),
                        "under_replicated": sum(1 for s in every.values() if s.replicas is not None
                                                and len(set(s.isr)) < len(s.target or ()))},
        }
