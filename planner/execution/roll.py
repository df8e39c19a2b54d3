"""The restart roll: a restart plan carried out, one broker at a time, locked and resumable (docs/APPLY.md
"Restart rolls").

Phases, each state persisted in the roll record `/kplan/rolls/<plan hex>` (one fenced transaction per state
change, the same transaction that makes the write the state names, as the executor does for its units):
  protect  the plan's temporary replicas, through the executor (its batches, throttles and run record, under
           this roll's lock)
  steps    per broker, in the plan's order:
             pending -> the broker is registered and nothing it hosts would be offline or under min ISR without
                        it (else stop, nothing touched) -> demoting: its leadership moves off (the replay's
                        demote rule on the live state: reordered lists, one reassignment) -> electing: a
                        preferred election for what it led -> restarting: maintenance state `restarting`, the
                        restart command (if configured) runs, the roll waits for the broker's registration to
                        be replaced (a new ZooKeeper session: it left and registered again) -> back: gates (every
                        ISR it was in holds it again; nothing offline or under min ISR that was not before the
                        roll) -> restoring: its lists written back -> restore-electing: a preferred election
                        for the partitions it is the preferred leader of -> done: leadership restored, the
                        maintenance state cleared. With `pause`, the roll stops after a step (state paused); run
                        it again to continue.
  undo     the original lists back (rollback.json: only removals, no data copied), through the executor
  leaders  a preferred election wherever the leader is not the first replica, on the partitions of the roll
Stopping at a failed gate leaves the cluster as safe as it was before that gate (temporary replicas in place,
the broker's leadership where the last completed state left it) and says what to do; running the roll again
resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from planner import codec
from planner import maintenance as mt
from planner import zk as zkmod
from planner.errors import BadInput, NotConverged, NotYourTurn, PlannerError, RollStopped, SafetyRefusal
from planner.execution import preflight, rollgates
from planner.execution import runstate as rs
from planner.execution.clusterview import ClusterView, Key, retrying
from planner.execution.executor import Executor, Options
from planner.execution.lock import ApplyLock, holder
from planner.execution.planview import Entry, Move, RunPlan, _build, from_plan
from planner.execution.progress import write_json_atomic
from planner.runfolder import check_records, records_folder
from planner.zkgate import NAMESPACE, Op, WriteGate

log = logging.getLogger(__name__)

FORMAT = "kplan-roll/1"
ROLLS = f"{NAMESPACE}/rolls"
PROTECT, STEPS, UNDO, LEADERS, DONE = "protect", "steps", "undo", "leaders", "done"
RUNNING, PAUSED, FAILED, COMPLETED, STOPPED = "running", "paused", "failed", "completed", "stopped"
ELECTION_CHUNK = 10_000   # partitions per preferred-election znode (well under ZooKeeper's 1 MiB request)
UNDO_CHUNK = 5_000        # partitions per undo batch
RECORDS = ("progress.json", "outcome.json")


class _Waiting(Exception):
    def __init__(self, broker: int, czxid: int | None):
        super().__init__(broker)
        self.broker, self.czxid = broker, czxid


def roll_path(plan_hex: str) -> str:
    return f"{ROLLS}/{plan_hex}"


@dataclass
class RollOptions:
    throttle: int | None = None         # bytes/s of the protecting batches (None: the plan's suggestion)
    poll: float = 1.0
    restart_timeout: float = 900.0      # how long a broker may take to leave and register again
    gate_timeout: float = 900.0         # how long its partitions may take to rejoin the ISRs (each gate)
    election_timeout: float = 120.0
    lock_wait: float = 0.0
    keep_temporary: bool = False        # after the last broker, keep the temporary replicas (no undo)
    pause: bool = False                 # stop after each broker (state paused); running again continues
    restart: Callable[[int], None] | None = None   # restarts a broker; None: someone else does
    wait_restart: bool = True           # False: return state `restarting` instead of waiting (a deferring task)
    progress_file: Path | None = None
    run: str | None = None              # named in the brokers' maintenance state (the records folder, a DAG run)
    reason: str = ""                    # why the brokers restart (an OS patch, a ticket): in their maintenance state


@dataclass
class RollResult:
    plan_id: str
    state: str                 # completed | already-completed | paused
    message: str
    steps_done: int = 0
    steps_total: int = 0
    resumed: bool = False
    kept_temporary: bool = False
    cannot_move: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    broker: int | None = None  # state restarting: the broker the roll waits for, and its registration before
    czxid: int | None = None


@dataclass(frozen=True)
class RollProgress:
    step: str
    message: str
    done: int
    total: int
    phase: str = ""
    broker: int | None = None
    state: str = ""
    at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "message": self.message, "done": self.done, "total": self.total,
                "phase": self.phase, "broker": self.broker, "state": self.state, "at": self.at}


def undo_plan(plan: Any) -> RunPlan:
    """The undo as an execution plan: every protected partition from its temporary list back to its original
    one (rollback.json). Only removals: no data is copied."""
    moves = {(m.topic, m.partition): Move(m.topic, m.partition, m.to_replicas, m.from_replicas, 0, "data")
             for m in plan.moves}
    entries = [Entry(m.topic, m.partition, m.from_replicas) for m in plan.moves]
    batches = [(i, "data", entries[j: j + UNDO_CHUNK], None)
               for i, j in enumerate(range(0, len(entries), UNDO_CHUNK))]
    return _build(f"{plan.id}-undo", "restart-undo", moves, batches, {}, (), None, str(plan.path or ""))


class Roll:
    def __init__(self, client: KazooClient, plan: Any, options: RollOptions | None = None,
                 progress: Callable[[Any], None] | None = None):
        if plan.kind != "restart":
            raise SafetyRefusal(f"plan {plan.id} is a {plan.kind} plan: `kplan roll` runs restart plans "
                                "(kplan plan restart); apply it with `kplan apply`")
        self.client = client
        self.plan = plan
        self.opts = options or RollOptions()
        self.callback = progress
        self.gate = WriteGate(client)
        self.view = ClusterView(client)
        self.lock = ApplyLock(self.gate, "roll", plan.id)
        roll = plan.section("roll")
        self.order = [int(b) for b in roll.get("order", ())]
        self.kafka_version = str(plan.parameters.get("kafka_version") or "3.7")
        self.hex = plan.id.split(":", 1)[-1]
        self.path = roll_path(self.hex)
        self.accepted = set(plan.section("protection").get("unprotected", ()))
        self.record: dict[str, Any] | None = None
        self.version = -1
        self.started = time.monotonic()
        self.warnings: list[str] = []
        self.resumed = False
        self._wake = threading.Event()

    # ------------------------------------------------------------------------------------ plumbing
    def _read(self, fn: Callable[[], Any]) -> Any:
        return retrying(fn)

    def _watch(self, _event: Any) -> None:
        self._wake.set()

    def _sleep(self) -> None:
        self._wake.wait(self.opts.poll)
        self._wake.clear()

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
        try:
            data, stat = self._read(lambda: self.client.get(self.path))
        except NoNodeError:
            return None
        import json

        try:
            doc = json.loads(data)
        except ValueError:
            raise SafetyRefusal(f"{self.path}: the roll record is not valid JSON; nothing was written") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise SafetyRefusal(f"{self.path}: not a {FORMAT} roll record; nothing was written")
        self.version = stat.version
        return doc

    def _save(self, extra: list[Op] | None = None) -> list[Any]:
        rec = self.record
        assert rec is not None
        rec["updated_at"] = rs.now()
        data = codec.dumps(rec)
        if self.version < 0:
            ops = [Op("create", p) for p in (NAMESPACE, ROLLS) if self._read(lambda p=p: self.client.exists(p)) is None]
            ops.append(Op("create", self.path, data))
        else:
            ops = [Op("set", self.path, data, self.version)]
        try:
            results = self.gate.commit(ops + list(extra or ()))
        except BadVersionError:
            raise SafetyRefusal(f"{self.path} was changed by another process while this roll held the lock; "
                                "stopping") from None
        self.version = 0 if self.version < 0 else results[len(ops) - 1].version
        return results

    def _event(self, text: str) -> None:
        hist = self.record.setdefault("history", [])
        hist.append([rs.now(), text])
        del hist[:-rs.HISTORY]

    # ------------------------------------------------------------------------------------------ run
    def run(self, part: str | None = None, step: int | None = None) -> RollResult:
        """The whole roll (`part` None: the CLI), or one part of it for a scheduler that runs the roll as
        separate tasks (the Airflow DAG): "protect", "step" (the step at index `step`; with no restart callable
        and `wait_restart` off it returns state `restarting` while the broker has not registered again, and
        running it again continues), "finish" (undo and leaders). A step runs only after the steps before it:
        NotYourTurn while one of them is still under way, RollStopped when the roll stopped before it."""
        if part not in (None, "protect", "step", "finish"):
            raise ValueError(part)
        try:
            who = holder(self.client)
            if who and not self.opts.lock_wait:
                raise SafetyRefusal(f"another kplan holds the lock {rs.LOCK_PATH}: {who}. Only one roll or apply may "
                                    "write at a time; nothing was written")
            self._read(lambda: preflight.check_cluster(self.client))
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
            self.lock.acquire(self.opts.lock_wait)
            return self._run(part, step)
        finally:
            self.lock.release()

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
            who = holder(self.client)
            if who and not self.opts.lock_wait:
                raise SafetyRefusal(f"another kplan holds the lock {rs.LOCK_PATH}: {who}; try again")
            self.lock.acquire(self.opts.lock_wait)
            rec = self._load()
            if rec is None:
                raise SafetyRefusal(f"no roll of plan {self.plan.id} is recorded on this cluster")
            self.record = rec
            if rec.get("state") == COMPLETED:
                return self._result(rec, COMPLETED, f"the roll of plan {self.plan.id} is already completed")
            rec["state"], rec["error"] = state, (reason[:500] if state != RUNNING else None)
            self._event(f"{state}: {reason[:200]}")
            self._save()
            return self._result(rec, state, f"the roll of plan {self.plan.id} is {state}" + (f": {reason}" if reason
                                                                                              else ""))
        finally:
            self.lock.release()

    def _refuse_fresh(self) -> None:
        """A first run: every check that can refuse, before the first write."""
        z = self._read(self.view.reassignment)
        if z.exists:
            raise SafetyRefusal(preflight.describe_foreign(z) + "; a roll starts only when no reassignment is in "
                                "flight (nothing was written)")
        live = self._read(self.view.live_brokers)
        missing = [b for b in self.order if b not in live]
        if missing:
            raise SafetyRefusal(f"broker(s) {missing} of the roll are not registered in /brokers/ids: a roll restarts "
                                "running brokers; start them first (nothing was written)")
        states = self._read(lambda: mt.read_all(self.client))
        held = [states.get(b) for b in self.order if states.get(b) is not None]
        if held:
            raise SafetyRefusal("a roll restarts brokers in service: " + "; ".join(e.describe() for e in held)
                                + " (nothing was written; `kplan brokers` shows every state)")
        if self.plan.moves:
            run = self._read(lambda: rs.load(self.client, self.hex))
            self._read(lambda: preflight.check(self.client, self.view, from_plan(self.plan), run))

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
                rec["state"] = RUNNING
            self._event(f"resumed (pid {rec['holder']['pid']})")
            self._save()
        return rec

    def _run(self, part: str | None, step: int | None) -> RollResult:
        rec = self._begin()
        try:
            if rec["phase"] == PROTECT and part in (None, "protect"):
                self._protect()
                rec["phase"] = STEPS
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
                    self._step(i)
                    if self.opts.pause and i + 1 < len(self.order):
                        rec["state"] = PAUSED
                        self._event(f"paused after broker {self.order[i]}")
                        self._save()
                        nxt = self.order[i + 1]
                        self.say(f"paused after broker {self.order[i]} (step {i + 1}/{len(self.order)}); run the roll "
                                 f"again to restart broker {nxt}")
                        return self._result(rec, PAUSED, f"paused after broker {self.order[i]}: its gates passed; "
                                            f"run the roll again to continue with broker {nxt}")
                rec["phase"] = UNDO
                self._save()
            if rec["phase"] == UNDO:
                if rec.get("keep_temporary") or self.opts.keep_temporary:
                    rec["keep_temporary"] = True
                    self._event("temporary replicas kept (operator's choice)")
                else:
                    self._undo()
                rec["phase"] = LEADERS
                self._save()
            if rec["phase"] == LEADERS:
                self._final_leaders()
                rec["phase"] = DONE
                rec["state"] = COMPLETED
                self._event("completed")
                self._save()
            kept = bool(rec.get("keep_temporary"))
            return self._result(rec, "completed", f"roll of plan {self.plan.id} completed: {len(self.order)} brokers "
                                "restarted, " + ("temporary replicas kept" if kept else "temporary replicas removed")
                                + ", preferred leaders restored")
        except _Waiting as w:
            self._event(f"waiting for broker {w.broker} to restart")
            self._save()
            return self._result(rec, "restarting", f"broker {w.broker} is restarting: waiting for it to register "
                                "again", broker=w.broker, czxid=w.czxid)
        except BaseException as e:
            self._fail(e)
            raise

    def _fail(self, error: BaseException) -> None:
        if self.record is None or not self.lock.held:
            return
        try:
            self.record["state"] = FAILED
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

    # ------------------------------------------------------------------------------------ phases
    def _executor(self, run_plan: RunPlan, what: str) -> None:
        opts = Options(throttle=self.opts.throttle if what == "protect" else None, poll=self.opts.poll)
        relay = None
        if self.callback is not None:
            def relay(p: Any) -> None:
                self.callback(RollProgress("roll", f"{what}: {p.message}", p.done, p.total, what, None, p.state,
                                           rs.now()))
        ex = Executor(self.client, run_plan, opts, relay, "roll", lock=self.lock)
        result = ex.apply()
        self.warnings += [w for w in result.warnings if w not in self.warnings]
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
        statuses = self._read(lambda: self.view.partitions(keys))
        live = self._read(self.view.live_brokers)
        want = [k for k, s in statuses.items() if s.replicas and s.leader != s.replicas[0]
                and s.replicas[0] in live and s.replicas[0] in s.isr]
        if want:
            self.say(f"leaders: preferred election for {len(want)} partitions")
            self._elect(want, "final")
        statuses = self._read(lambda: self.view.partitions(keys))
        off = [f"{rollgates.name(k)} (leader {s.leader}, preferred {s.replicas[0]}, ISR {list(s.isr)})"
               for k, s in statuses.items() if s.replicas and s.leader != s.replicas[0]]
        if off:
            self.warn(f"{len(off)} partitions are not led by their preferred leader after the roll (it is not in "
                      f"their ISR): {preflight.listing(off)}")

    # ------------------------------------------------------------------------------------- reads
    def _all_keys(self) -> dict[Key, tuple[int, ...]]:
        try:
            topics = self._read(lambda: self.client.get_children(codec.TOPICS))
        except NoNodeError:
            return {}
        out: dict[Key, tuple[int, ...]] = {}
        for t, ta in self._read(lambda: self.view.topics(topics)).items():
            if isinstance(ta, codec.TopicAssignment):
                for p, reps in ta.partitions.items():
                    out[(t, p)] = tuple(reps)
        return out

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
        statuses = self._read(lambda: self.view.partitions(keys))
        live = self._read(self.view.live_brokers)
        mins = self._read(lambda: rollgates.min_isr(self.view, {k[0] for k in keys}))
        off, under = rollgates.unhealthy(statuses, live, mins, self.kafka_version)
        return {rollgates.name(k) for k in off}, {rollgates.name(k) for k in under}

    def _baseline(self) -> dict[str, list[str]]:
        off, under = self._health()
        if off or under:
            self.warn(f"before the roll, {len(off)} partitions are offline and {len(under)} under min ISR: "
                      f"{preflight.listing(sorted(off | under))}; the roll's gates only refuse new ones")
        return {"offline": sorted(off)[:20_000], "under_min_isr": sorted(under)[:20_000]}

    def _registration(self, broker: int, watch: bool = False) -> Any:
        return self._read(lambda: self.client.exists(codec.broker_path(broker), watch=self._watch if watch else None))

    # ------------------------------------------------------------------------------------- writes
    def _await_absent(self, path: str, timeout: float, what: str) -> None:
        limit = time.monotonic() + timeout
        while self._read(lambda: self.client.exists(path, watch=self._watch)) is not None:
            if time.monotonic() > limit:
                raise NotConverged(f"{path} has existed for {timeout:.0f} s ({what}); the roll stopped. Run it again "
                                   "once the controller has processed it")
            self._sleep()

    def _submit_reorder(self, entries: list[tuple[Key, tuple[int, ...]]], state: str) -> None:
        """Record `state` and create /admin/reassign_partitions with the lists, in one fenced transaction."""
        self._await_absent(codec.REASSIGN, self.opts.election_timeout, "a reassignment by someone else")
        data = codec.encode_reassignment([codec.ReassignEntry(k[0], k[1], reps) for k, reps in entries])
        self._event(f"{state}: {len(entries)} lists reordered")
        self._save([Op("create", codec.REASSIGN, data)])

    def _wait_lists(self, entries: list[tuple[Key, tuple[int, ...]]], what: str) -> None:
        limit = time.monotonic() + max(self.opts.election_timeout, 30.0)
        keys = [k for k, _ in entries]
        want = dict(entries)
        while True:
            self._read(lambda: self.client.exists(codec.REASSIGN, watch=self._watch))
            statuses = self._read(lambda: self.view.partitions(keys, states=False))
            off = [k for k in keys if statuses[k].reassigning or statuses[k].replicas != want[k]]
            if not off:
                return
            if time.monotonic() > limit:
                raise NotConverged(f"{what}: {len(off)} reordered lists not in place after "
                                   f"{max(self.opts.election_timeout, 30.0):.0f} s: "
                                   f"{preflight.listing([rollgates.name(k) for k in off])}")
            self._sleep()

    def _elect(self, keys: list[Key], what: str, state: str | None = None, step: dict | None = None) -> None:
        for j in range(0, len(keys), ELECTION_CHUNK):
            chunk = keys[j: j + ELECTION_CHUNK]
            self._await_absent(codec.PREFERRED_ELECTION, self.opts.election_timeout, "an election by someone else")
            if step is not None and state is not None:
                step["state"] = state
            self._event(f"{what}: preferred election for {len(chunk)} partitions")
            self._save([Op("create", codec.PREFERRED_ELECTION, codec.encode_preferred_election(chunk))])
            self._await_absent(codec.PREFERRED_ELECTION, self.opts.election_timeout, f"{what}: the election")

    # -------------------------------------------------------------------------------------- steps
    def _step(self, i: int) -> None:
        st = self.record["steps"][i]
        b = st["broker"]
        n = f"step {i + 1}/{len(self.order)} (broker {b})"
        if st["state"] == "pending":
            self._demote(st, n)
        if st["state"] == "demoting":
            self._wait_lists([((t, p), tuple(new)) for t, p, _old, new in st["demote"]], f"{n} demotion")
            elect = [(t, p) for t, p in st["elect"]]
            if elect:
                self._elect(elect, f"{n} demotion", "electing", st)
            st["state"] = "demoted"
            self._save()
        if st["state"] == "electing":
            self._await_absent(codec.PREFERRED_ELECTION, self.opts.election_timeout, f"{n}: the election")
            st["state"] = "demoted"
            self._save()
        if st["state"] == "demoted":
            self._check_demoted(st, n)
        if st["state"] == "restarting":
            self._await_restart(st, n)
        if st["state"] == "back":
            self._gates(st, n)
        if st["state"] == "restoring":
            self._wait_lists([((t, p), tuple(old)) for t, p, old, _new in st["demote"]], f"{n} restore")
            self._restore_leaders(st, n)
        if st["state"] == "restore-electing":
            self._await_absent(codec.PREFERRED_ELECTION, self.opts.election_timeout, f"{n}: the election")
            self._restore_leaders(st, n, elected=True)

    def _demote(self, st: dict[str, Any], n: str) -> None:
        b = st["broker"]
        self._maintenance_ops(b, mt.RESTARTING)   # refuses (writing nothing) a broker someone put in maintenance
        live = self._read(self.view.live_brokers)
        if b not in live:
            raise SafetyRefusal(f"{n}: broker {b} is not registered; the roll restarts running brokers and stopped "
                                f"before touching it. Start broker {b}, then run the roll again")
        keys = self._hosted(b)
        statuses = self._read(lambda: self.view.partitions(keys))
        mins = self._read(lambda: rollgates.min_isr(self.view, {k[0] for k in keys}))
        hurt = {k: v for k, v in rollgates.would_hurt(statuses, b, live, mins, self.kafka_version).items()
                if rollgates.name(k) not in self.accepted}
        if hurt:
            raise SafetyRefusal(f"{n}: broker {b} cannot go down safely now: {len(hurt)} partitions would be offline "
                                f"or under min ISR without it: {preflight.listing(sorted(hurt.values()))}. The roll "
                                f"stopped before touching broker {b}. Wait for their ISRs to recover (or take a new "
                                "snapshot and plan again), then run the roll again")
        d = rollgates.demotion(statuses, b, live)
        reg = self._registration(b)
        st.update({"czxid": reg.czxid if reg is not None else None, "started_at": rs.now(),
                   "isr_before": {rollgates.name(k): list(s.isr) for k, s in statuses.items() if b in s.isr},
                   "demote": [[k[0], k[1], list(old), list(new)] for k, (old, new) in sorted(d.reorder.items())],
                   "elect": [[k[0], k[1]] for k in d.elect],
                   "led_before": sorted(rollgates.name(k) for k, s in statuses.items() if s.leader == b),
                   "cannot_move": [rollgates.name(k) for k in d.stuck]})
        if d.stuck:
            self.warn(f"{n}: the leadership of {len(d.stuck)} partitions cannot move off broker {b} (no other "
                      f"registered in-sync replica): {preflight.listing(st['cannot_move'])}")
        self.say(f"{n}: demoting broker {b}: {len(d.reorder)} lists reordered, {len(d.elect)} leaders to move",
                 b, "demoting")
        if d.reorder:
            st["state"] = "demoting"
            self._submit_reorder([(k, new) for k, (_o, new) in sorted(d.reorder.items())], f"{n} demoting")
        else:
            st["state"] = "demoting"
            self._save()

    def _check_demoted(self, st: dict[str, Any], n: str) -> None:
        b = st["broker"]
        keys = self._hosted(b)
        statuses = self._read(lambda: self.view.partitions(keys))
        still = sorted(rollgates.name(k) for k, s in statuses.items() if s.leader == b)
        unexpected = [x for x in still if x not in st.get("cannot_move", ())]
        if unexpected:
            self.warn(f"{n}: broker {b} still leads {len(unexpected)} partitions after its demotion (the election did "
                      f"not move them): {preflight.listing(unexpected)}; its controlled shutdown moves them")
        reg = self._registration(b)
        if reg is None or reg.czxid != st["czxid"]:
            self.warn(f"{n}: broker {b}'s registration changed before the roll asked for its restart")
        st["state"] = "restarting"
        st["restart_at"] = rs.now()
        self._event(f"{n}: broker {b} restarting")
        self._save(self._maintenance_ops(b, mt.RESTARTING))
        if self.opts.restart is not None and not st.get("command_run"):
            st["command_run"] = rs.now()
            self._save()
            self.say(f"{n}: restarting broker {b}", b, "restarting")
            self.opts.restart(b)
        else:
            self.say(f"{n}: broker {b} may restart now (its leadership is moved off); waiting for it to leave and "
                     f"register again (up to {self.opts.restart_timeout:.0f} s)", b, "restarting")

    def _await_restart(self, st: dict[str, Any], n: str) -> None:
        b = st["broker"]
        limit = float(st.get("restart_at") or rs.now()) + self.opts.restart_timeout
        while True:
            reg = self._registration(b, watch=True)
            if reg is None and not st.get("left_at"):
                st["left_at"] = rs.now()
                self.say(f"{n}: broker {b} left /brokers/ids", b, "restarting")
            elif reg is not None and reg.czxid != st["czxid"]:
                st["back_at"] = rs.now()
                st["left_at"] = st.get("left_at") or st["back_at"]
                st["state"] = "back"
                self._event(f"{n}: broker {b} registered again")
                self._save()
                self.say(f"{n}: broker {b} registered again; waiting for its partitions to rejoin the ISRs", b, "back")
                return
            if time.time() <= limit and not self.opts.wait_restart:
                raise _Waiting(b, st.get("czxid"))
            if time.time() > limit:
                if st.get("left_at"):
                    what = (f"broker {b} left at {_hms(st['left_at'])} and has not registered again within "
                            f"{self.opts.restart_timeout:.0f} s. Its partitions are running without it (its "
                            "leadership was moved off; the temporary replicas hold min ISR). Start it, then run the "
                            "roll again: it waits for the registration and continues")
                else:
                    what = (f"broker {b} did not restart within {self.opts.restart_timeout:.0f} s (its registration "
                            "is unchanged). Its leadership is moved off, so restarting it now is safe; then run the "
                            "roll again")
                raise NotConverged(f"{n}: {what}")
            self._sleep()

    def _gates(self, st: dict[str, Any], n: str) -> None:
        b = st["broker"]
        limit = time.monotonic() + self.opts.gate_timeout
        base = self.record.get("baseline", {})
        base_off, base_under = set(base.get("offline", ())), set(base.get("under_min_isr", ()))
        while True:
            live = self._read(self.view.live_brokers)
            keys = self._hosted(b)
            statuses = self._read(lambda keys=keys: self.view.partitions(keys))
            problems = []
            if b not in live:
                problems.append(f"broker {b} is not registered")
            behind = rollgates.not_back(statuses, b, st.get("isr_before", {}))
            if behind:
                problems.append(f"{len(behind)} partitions have not got broker {b} back in their ISR: "
                                f"{preflight.listing(behind)}")
            if not problems:
                off, under = self._health()
                new_off, new_under = sorted(off - base_off), sorted(under - base_under)
                if new_off:
                    problems.append(f"{len(new_off)} partitions are offline: {preflight.listing(new_off)}")
                if new_under:
                    problems.append(f"{len(new_under)} partitions are under min ISR: {preflight.listing(new_under)}")
            if not problems:
                break
            if time.monotonic() > limit:
                raise NotConverged(f"{n}: the gates did not pass within {self.opts.gate_timeout:.0f} s: "
                                   + "; ".join(problems) + f". The roll stopped before restoring broker {b}'s "
                                   "leadership and before the next broker (the temporary replicas stay). Run the roll "
                                   "again to keep waiting, or look at broker " + str(b) + "'s log")
            self._sleep()
        self.say(f"{n}: gates passed (registered, back in every ISR, nothing offline or under min ISR)", b, "restoring")
        back = [((t, p), tuple(old)) for t, p, old, new in st.get("demote", ())]
        statuses = self._read(lambda: self.view.partitions([k for k, _ in back], states=False)) if back else {}
        todo = [(k, old) for (k, old), (_t, _p, _o, new) in zip(back, st["demote"], strict=True)
                if statuses[k].replicas == tuple(new)]
        moved = [rollgates.name(k) for (k, old), (_t, _p, _o, new) in zip(back, st["demote"], strict=True)
                 if statuses[k].replicas not in (tuple(new), old)]
        if moved:
            self.warn(f"{n}: {len(moved)} partitions were reassigned by someone else during the step; their lists are "
                      f"left as they are: {preflight.listing(moved)}")
        st["state"] = "restoring"
        if todo:
            self._submit_reorder(todo, f"{n} restoring")
        else:
            self._save()

    def _restore_leaders(self, st: dict[str, Any], n: str, elected: bool = False) -> None:
        """A preferred election for the partitions the broker is the preferred leader of (where it is in the
        ISR), then the gate: every partition it led before its demotion and is the preferred leader of is led
        by it again."""
        b = st["broker"]
        limit = time.monotonic() + self.opts.gate_timeout
        keys = self._hosted(b)
        if not elected:
            statuses = self._read(lambda: self.view.partitions(keys))
            want = [k for k, s in statuses.items() if s.replicas and s.replicas[0] == b and s.leader != b
                    and b in s.isr]
            if want:
                self._elect(want, f"{n} restore", "restore-electing", st)
        led = set(st.get("led_before", ()))
        retried = False
        while True:
            statuses = self._read(lambda: self.view.partitions(keys))
            off = [x for x in rollgates.not_led(statuses, b) if x.rsplit(" (", 1)[0] in led]
            if not off:
                break
            if time.monotonic() > limit:
                raise NotConverged(f"{n}: broker {b}'s leadership is not restored after {self.opts.gate_timeout:.0f} "
                                   f"s: {preflight.listing(off)}. Run the roll again to retry the election")
            if not retried and time.monotonic() > limit - self.opts.gate_timeout / 2:
                retried = True   # once more, half way: an election can miss a replica that joined the ISR late
                again = [k for k, s in statuses.items() if rollgates.name(k) in led and s.replicas
                         and s.replicas[0] == b and s.leader != b and b in s.isr]
                if again:
                    self._elect(again, f"{n} restore (again)")
                    continue
            self._sleep()
        for key in ("isr_before", "demote", "elect", "led_before"):
            st.pop(key, None)
        st["state"] = "done"
        st["done_at"] = rs.now()
        self._event(f"{n}: done")
        self._save(self._maintenance_ops(b, None))
        self.say(f"{n}: broker {b} restarted, leadership restored", b, "done")

    def _maintenance_ops(self, broker: int, state: str | None) -> list[Op]:
        """The writes that put `broker` into maintenance state `restarting` while it restarts, or take it out
        after (planner/maintenance.py's table: only this roll's plan may), for the roll's own transactions."""
        states = self._read(lambda: mt.read_all(self.client))
        i = self.order.index(broker) + 1
        why = f"restart roll of brokers {','.join(map(str, self.order))}: step {i}/{len(self.order)}"
        return mt.set_ops(states, [broker], mt.RESTART, state, plan_id=self.plan.id, run=self.opts.run,
                          reason=f"{self.opts.reason} ({why})" if self.opts.reason else why, by=mt.identity("roll"))


def command_restarter(template: str, timeout: float, brokers: dict[int, dict[str, Any]] | None = None
                      ) -> Callable[[int], None]:
    """A restart that runs an operator's command, e.g. `ssh kafka-{broker} sudo systemctl restart kafka`:
    `{broker}` (and `{host}`, `{port}` from the broker's registration) are filled in. The command must return
    once the restart is under way; the roll then waits for the broker to register again. A non-zero exit
    stops the roll (the broker's leadership is already moved off, so it is safe to restart it by hand)."""
    import shlex

    def restart(broker: int) -> None:
        info = (brokers or {}).get(broker, {})
        cmd = template.format(broker=broker, host=info.get("host", ""), port=info.get("port", ""))
        log.info("restart command for broker %d: %s", broker, cmd)
        try:
            done = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SafetyRefusal(f"the restart command for broker {broker} failed: {e}; restart it by hand and run "
                                "the roll again") from None
        if done.returncode:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise SafetyRefusal(f"the restart command for broker {broker} exited {done.returncode}: "
                                f"{' | '.join(tail)}; restart it by hand and run the roll again")

    return restart


def registrations(client: KazooClient, brokers: list[int]) -> dict[int, dict[str, Any]]:
    out = {}
    for b in brokers:
        try:
            data, _ = client.get(codec.broker_path(b))
            reg = codec.decode_broker(b, data)
            out[b] = {"host": reg.host, "port": reg.port}
        except (NoNodeError, PlannerError):
            continue
    return out


def _hms(t: Any) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(float(t))) if isinstance(t, int | float) else "?"


def roll_folder(plan_path: Path | str, out: Path | str | None) -> Path:
    """progress.json and outcome.json of a roll: `out`, else `roll/` in the plan's records folder."""
    return Path(out) if out is not None else records_folder(plan_path) / "roll"


def roll_step(zk: str, plan_path: Path | str, options: RollOptions, *, restart_command: str | None = None,
              command_timeout: float = 600.0, auth: tuple[str, str] | None = None, connect_timeout: float = 10.0,
              out: Path | str | None = None, progress: Callable[[Any], None] | None = None,
              part: str | None = None, step: int | None = None, mark: tuple[str, str] | None = None,
              no_throttle: bool = False) -> RollResult:
    """The roll as a whole step: read and check the plan (before any connection), open the session, run the
    roll, write `<run>/roll/outcome.json` (progress.json while it runs)."""
    from dataclasses import asdict

    from planner.plan_model import apply_schedule, read_plan

    for name, value in (("poll", options.poll), ("restart timeout", options.restart_timeout),
                        ("gate timeout", options.gate_timeout)):
        if not value > 0:
            raise BadInput(f"{name} must be positive, got {value}")
    if options.lock_wait < 0:
        raise BadInput(f"lock wait must be zero or more, got {options.lock_wait}")
    if options.throttle is not None and options.throttle < 1:
        raise BadInput(f"throttle must be at least 1 byte/s, got {options.throttle}")
    zkmod.parse_connect(zk)
    plan = read_plan(plan_path)
    if plan.kind != "restart":
        raise BadInput(f"{plan_path} is a {plan.kind} plan: `kplan roll` runs restart plans (kplan plan restart); "
                       "apply this one with `kplan apply`")
    if restart_command is not None:
        _check_template(restart_command)
    if options.throttle is not None and no_throttle:
        raise BadInput("give either a throttle or no_throttle (--no-throttle), not both")
    if part in (None, "protect") and mark is None:
        # the temporary replicas copy data: never at full speed by accident (docs/APPLY.md "Throttles")
        refusal = apply_schedule(plan, options.throttle, no_throttle).refusal
        if refusal:
            raise BadInput(refusal)
    if part not in (None, "protect", "step", "finish"):
        raise BadInput(f"part must be protect, step or finish, got {part!r}")
    folder = check_records(roll_folder(plan_path, out), plan.id, RECORDS, Path(plan_path),
                           "--out" if out is not None else "the roll's records folder", out is not None)
    options.progress_file = folder / "progress.json"
    options.run = options.run or str(records_folder(plan_path))
    with zkmod.session(zk, auth=auth, timeout=connect_timeout) as client:
        zkmod.require_kafka(client)
        if restart_command is not None:
            options.restart = command_restarter(restart_command, command_timeout,
                                                registrations(client, [int(b) for b in plan.section("roll")["order"]]))
        roll = Roll(client, plan, options, progress)
        result = roll.mark(mark[0], mark[1]) if mark is not None else roll.run(part, step)
    write_json_atomic(folder / "outcome.json", {"command": "roll", **asdict(result)})   # names its plan (plan_id)
    return result


def _check_template(template: str) -> None:
    import shlex

    try:
        parts = shlex.split(template.format(broker=1, host="h", port=9092))
    except (KeyError, IndexError, ValueError) as e:
        raise BadInput(f"restart command {template!r}: {e} (placeholders: {{broker}}, {{host}}, {{port}})") from None
    if not parts:
        raise BadInput("restart command is empty")


def status(client: KazooClient, plan: Any) -> dict[str, Any]:
    """The roll as recorded (read-only, no lock), with each roll broker's registration now: for a scheduler
    that waits for a broker to restart, or for a step's turn."""
    hexid = plan.id.split(":", 1)[-1]
    order = [int(b) for b in plan.section("roll").get("order", ())]
    try:
        data, _ = retrying(lambda: client.get(roll_path(hexid)))
        rec = json.loads(data)
    except NoNodeError:
        rec = None
    regs = {}
    for b in order:
        st = retrying(lambda b=b: client.exists(codec.broker_path(b)))
        regs[b] = st.czxid if st is not None else None
    steps = [{"broker": s["broker"], "state": s["state"], "czxid": s.get("czxid")} for s in (rec or {}).get("steps", ())]
    return {"plan_id": plan.id, "recorded": rec is not None, "state": (rec or {}).get("state"),
            "phase": (rec or {}).get("phase"), "error": (rec or {}).get("error"), "steps": steps,
            "registrations": regs}
