"""Verify: did the cluster converge to the plan? Then finish the job: preferred election, throttles off, report.

1. Wait (up to `wait` seconds) until every partition of the plan has converged (diagnosis.converged): `probe` in a
   loop until the deadline. `probe` is one read-only pass (the reassignment znode, then the partitions, in
   bulk); it is also what a deferred wait polls from elsewhere (planner.api.verify_probe, Airflow's
   VerifyTrigger), so both decide "converged" alike. The loop re-probes only partitions not yet converged and
   is woken by a watch on `/admin/reassign_partitions` (the controller updates it as partitions complete and
   deletes it after the last ISR join), so convergence is noticed within one poll interval of the last ISR
   join, usually within milliseconds. Once all look converged, one probe of all of them confirms it.
2. A preferred election for partitions whose leader is not `target[0]` (where that replica is registered and
   in the ISR), and a wait for it.
3. The run's throttles removed (a broker's rates only once none of its moves is in flight).
4. `report.json` (converged, partitions converged/total, leaders on preferred, offline, under-replicated,
   throttles remaining, seconds to converge, stalled partitions with reasons).
Writes (2, 3) need the apply lock; when another process holds it they are skipped and the report says so.
On timeout the report is still written and the result (converged False) names each stalled partition and why;
the caller decides whether that is an error (planner.api.verify raises NotConverged unless fail=False).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from planner import codec
from planner.execution import election, lifecycle, preflight
from planner.execution import runstate as rs
from planner.execution.clusterview import ClusterView, Key, PartStatus, retrying
from planner.execution.diagnosis import Context, converged, diagnose, reassign_keys, run_units
from planner.execution.intent import drain_intent
from planner.execution.lock import ApplyLock, holder
from planner.execution.planview import RunPlan
from planner.execution.progress import Progress, Reporter, write_json_atomic
from planner.execution.throttles import Throttles
from planner.execution.waiter import Waiter
from planner.zkgate import Op, WriteGate

log = logging.getLogger(__name__)

REPORT_FORMAT = "kplan-verify/1"


@dataclass
class VerifyOptions:
    wait: float = 300.0                # seconds to wait for convergence (0: check once)
    poll: float = 1.0
    elect: bool = True
    remove_throttles: bool = True
    cluster_wide: bool = True          # count offline / under-replicated partitions of the whole cluster
    election_timeout: float = 60.0
    report: Path | None = None         # where report.json goes
    progress_file: Path | None = None
    since: float | None = None         # epoch s the wait began, when it began before this call (a deferred wait
    #                                    resumed): seconds_to_converge counts from then


@dataclass
class VerifyResult:
    plan_id: str
    converged: bool
    report: dict[str, Any]
    path: Path | None
    message: str                       # a summary; when not converged, what stalled and why (NotConverged's text)
    warnings: list[str] = field(default_factory=list)


@dataclass
class Probe:
    """One read-only pass over the plan's partitions (or `keys` of them): which have converged, which not."""

    statuses: dict[Key, PartStatus]
    pending: list[Key]                 # not converged (all of them while the reassignment znode is malformed)
    reassigning: bool                  # /admin/reassign_partitions exists
    preferred: int                     # partitions read whose leader is their target's first replica

    @property
    def converged(self) -> bool:
        return not self.pending

    def status(self, total: int) -> dict[str, Any]:
        """JSON-serialisable: what a deferred wait passes on (planner.api.verify_probe)."""
        return {"status": "converged" if self.converged else "waiting",
                "converged": len(self.statuses) - len(self.pending), "total": total,
                "reassigning": self.reassigning, "leaders_on_preferred": self.preferred,
                "pending": [preflight.name(k) for k in self.pending[:20]]}


def probe(view: ClusterView, plan: RunPlan, keys: list[Key] | None = None) -> Probe:
    """Read `/admin/reassign_partitions` once and the partitions `keys` (default: all of the plan's) once, in bulk;
    never writes. A partition has converged as diagnosis.converged says (absent from the reassignment znode,
    replicas == target, no adding/removing replicas, leader in the target, ISR full)."""
    keys = list(plan.moves) if keys is None else keys
    z = retrying(view.reassignment)
    zk = reassign_keys(z) if z.entries is not None else {}
    blocked = z.exists and z.entries is None   # a malformed znode: nothing counts as done until it is gone
    statuses = retrying(lambda: view.partitions(keys))
    pending = [k for k in keys if blocked or not converged(statuses[k], plan.moves[k].to, k in zk)]
    preferred = sum(1 for k in keys if statuses[k].leader == plan.moves[k].to[0])
    return Probe(statuses, pending, z.exists, preferred)


class Verifier:
    def __init__(self, client: KazooClient, plan: RunPlan, options: VerifyOptions | None = None,
                 progress: Callable[[Progress], None] | None = None):
        self.client = client
        self.plan = plan
        self.opts = options or VerifyOptions()
        self.gate = WriteGate(client)
        self.view = ClusterView(client)
        self.lock = ApplyLock(self.gate, "verify", plan.id)
        self.throttles = Throttles(self.gate, self.view, plan.hexid)
        self.reporter = Reporter("verify", progress, self.opts.progress_file, every=self.opts.poll,
                                 stamp={"plan_id": plan.id})
        self.waiter = Waiter(client, self.opts.poll)
        self.warnings: list[str] = []
        self.started = time.monotonic()
        self.converged_at: float | None = None

    def _read(self, fn: Callable[[], Any]) -> Any:
        return retrying(fn)

    def _emit(self, state: str, done: int, force: bool = False) -> None:
        total = self.plan.partitions_total
        self.reporter.emit(Progress("verify", f"{state}: {done}/{total} partitions converged", done, total, state,
                                    elapsed=round(time.monotonic() - self.started, 3), at=rs.now()), force=force)

    # ----------------------------------------------------------------------------------- convergence
    def wait_converged(self) -> tuple[bool, dict[Key, PartStatus], float | None]:
        """`probe` until the deadline. Returns (converged, statuses of all plan partitions, epoch seconds when
        convergence was seen)."""
        keys = list(self.plan.moves)
        pending = list(keys)
        statuses: dict[Key, PartStatus] = {}
        deadline = self.started + self.opts.wait
        for _stat in self.waiter.rounds(codec.REASSIGN, deadline):
            seen = probe(self.view, self.plan, pending)
            statuses.update(seen.statuses)
            pending = seen.pending
            self._emit("waiting", len(keys) - len(pending))
            if not pending:
                seen_at = time.time()
                # Confirm on one consistent read of everything (a converged partition can fall back).
                seen = probe(self.view, self.plan)
                statuses, pending = seen.statuses, seen.pending
                if not pending:
                    self._emit("converged", len(keys), force=True)
                    return True, statuses, seen_at
            if time.monotonic() >= deadline:
                return False, statuses, None
        return False, statuses, None   # not reached: rounds() never ends

    # ------------------------------------------------------------------------------------------ run
    def verify(self) -> VerifyResult:
        try:
            return self._verify()
        finally:
            self.reporter.flush()
            self.lock.release()

    def _verify(self) -> VerifyResult:
        plan = self.plan
        t0 = self.opts.since if self.opts.since is not None else time.time()
        ok, statuses, seen_at = self.wait_converged()
        self.converged_at = seen_at
        seconds = round((seen_at - t0), 3) if seen_at else None
        run = self._read(lambda: rs.load(self.client, plan.hexid))
        wrote = self.lock.try_acquire()
        skipped = None
        if not wrote:
            skipped = f"writes skipped (election, throttle removal): the lock is held by {holder(self.client)}"
            self.warnings.append(skipped)
        election: dict[str, Any] = {"requested": 0, "moved": 0, "not_electable": []}
        if ok and self.opts.elect and wrote:
            election = self._elect(statuses)
        moving: list[tuple[str, int, tuple[int, ...], tuple[int, ...]]] = []
        if not ok:
            moving = [(k[0], k[1], s.origin, s.target) for k, s in statuses.items()
                      if s.reassigning and s.origin is not None and s.target is not None]
        if self.opts.remove_throttles and wrote:
            self._read(lambda: self.throttles.release(moving))
        report = self._report(ok, seconds, election, run, skipped)
        intent = report.get("intent")
        if intent is not None and not intent["holds"]:
            self.warnings.append(intent["text"])
            report["warnings"] = list(self.warnings)
        if plan.kind in ("drain", "return"):
            report["maintenance"] = self._maintenance(ok, report, wrote)
        if wrote and run is not None:
            try:
                run = self._read(lambda: rs.load(self.client, plan.hexid))
                if run is not None:
                    mgr = rs.RunManager(self.gate, run)
                    mgr.send(mgr.note_verify({k: report[k] for k in ("converged", "partitions", "leaders_on_preferred",
                                                                     "offline_count", "under_replicated_count", "at")}))
            except Exception as e:  # noqa: BLE001 - the report is what matters; the record is a convenience
                log.warning("could not record the verify result in the run record: %r", e)
        path = self.opts.report
        if path is not None:
            write_json_atomic(path, report)
        if not report["converged"]:
            if not ok:
                stalled = report["stalled"]
                lines = "; ".join(f"{s['partition']}: {', '.join(s['reasons'])}" for s in stalled[:50])
                more = f" (and {len(stalled) - 50} more in report.json)" if len(stalled) > 50 else ""
                text = (f"plan {plan.id} has not converged after {self.opts.wait:.0f} s: "
                        f"{len(stalled)} of {plan.partitions_total} partitions stalled: {lines}{more}")
            else:
                text = f"plan {plan.id} converged, but {intent['text'] if intent else 'its intent does not hold'}"
            return VerifyResult(plan.id, False, report, path, text, list(self.warnings))
        return VerifyResult(plan.id, True, report, path, self._summary(report), list(self.warnings))

    def _maintenance(self, ok: bool, report: dict[str, Any], wrote: bool) -> dict[str, Any]:
        """The brokers' maintenance state after this verify (planner/execution/lifecycle.py): a drain's become
        `drained` when its intent holds on the whole cluster; a return's leave maintenance."""
        intent = report.get("intent")
        if self.plan.kind == "drain" and ok and intent is None:
            intent = report["intent"] = self._read(lambda: lifecycle.drain_intent(self.view, self.plan))
        if not wrote:
            brokers = self.plan.drained or self.plan.returning
            return {"set": {}, "kept": {str(b): "writes skipped: another kplan holds the lock" for b in brokers}}
        try:
            return self._read(lambda: lifecycle.after_verify(self.client, self.gate, self.plan, ok, intent))
        except Exception as e:  # noqa: BLE001 - the report still says what happened
            self.warnings.append(f"the brokers' maintenance state was not updated: {e}")
            report["warnings"] = list(self.warnings)
            return {"set": {}, "kept": {}, "error": str(e)}

    def _elect(self, statuses: dict[Key, PartStatus]) -> dict[str, Any]:
        """A preferred election where Kafka would move the leader (election.py), and a wait for it."""
        preferred = {k: m.to[0] for k, m in self.plan.moves.items()}
        choice = election.electable(statuses, self._read(self.view.live_brokers), preferred)
        ok, bad = choice.ok, choice.blocked_text(preferred)
        out: dict[str, Any] = {"requested": len(ok), "moved": 0, "not_electable": bad}
        if bad:
            self.warnings.append(f"{len(bad)} partitions cannot take their preferred leader (not registered or not "
                                 f"in the ISR): {preflight.listing(bad)}")
        if not ok:
            return out
        deadline = time.monotonic() + self.opts.election_timeout
        if not election.await_none_pending(self.waiter, self.opts.election_timeout):   # someone else's first
            self.warnings.append("a preferred replica election by someone else is pending; none requested")
            return out
        try:
            self.gate.commit([Op("create", codec.PREFERRED_ELECTION, election.request(ok))])
        except NodeExistsError:
            self.warnings.append("a preferred replica election appeared meanwhile; none requested")
            return out
        log.info("preferred election requested for %d partitions", len(ok))
        moved, how = election.await_moved(self.waiter, ok, preferred, lambda keys: self._read(
            lambda: self.view.partitions(keys)), max(0.0, deadline - time.monotonic()))
        out["moved"] = moved
        if how == "done":   # the controller is done; what did not move could not (preferred replica left the ISR?)
            self.warnings.append(f"the preferred election moved {moved} of {len(ok)} leaders")
        elif how == "timeout":
            self.warnings.append(f"the preferred election moved {moved} of {len(ok)} leaders within "
                                 f"{self.opts.election_timeout:.0f} s")
        return out

    # --------------------------------------------------------------------------------------- report
    def _report(self, ok: bool, seconds: float | None, election: dict[str, Any], run: rs.Run | None,
                skipped: str | None) -> dict[str, Any]:
        plan = self.plan
        keys = list(plan.moves)
        target = {k: m.to for k, m in plan.moves.items()}
        statuses = self._read(lambda: self.view.partitions(keys))
        live = self._read(self.view.live_brokers)
        z = self._read(self.view.reassignment)
        zk = reassign_keys(z) if z.entries is not None else {}
        done = [k for k in keys if converged(statuses[k], target[k], k in zk)]
        preferred = [k for k in keys if statuses[k].leader == target[k][0]]
        offline = [k for k in keys if statuses[k].has_state and (statuses[k].leader == -1
                                                                 or statuses[k].leader not in live)]
        under = [k for k in keys if statuses[k].replicas is not None and len(set(statuses[k].isr))
                 < len(statuses[k].target or ())]
        record, _ = self._read(self.throttles.record)
        brokers = {b for m in plan.moves.values() for b in (*m.frm, *m.to)}
        for b in (record or {}).get("brokers", {}):
            brokers.add(int(b))
        remaining = self._read(lambda: self.throttles.remaining({k[0] for k in keys}, brokers))
        ours = bool(record and (record.get("topics") or record.get("brokers")))
        stalled: list[dict[str, Any]] = []
        if not ok:
            ctx = self._context(run, z, live, record)
            reasons = diagnose(plan, statuses, ctx)
            stalled = [{"partition": preflight.name(k), "reasons": v} for k, v in sorted(reasons.items())]
        every: dict[Key, PartStatus] | None = None
        if self.opts.cluster_wide or plan.kind == "drain":
            all_keys = self._read(self.view.all_partition_keys)
            every = self._read(lambda: self.view.partitions(all_keys))
        intent = drain_intent(self.view, plan, every)
        report: dict[str, Any] = {
            "format": REPORT_FORMAT,
            "plan_id": plan.id,
            "at": rs.now(),
            # converged: the plan's partitions are at their targets AND the plan's intent holds (a drain's
            # brokers host and lead nothing); plan_converged: the partitions alone
            "converged": ok and (intent is None or intent["holds"]),
            "plan_converged": ok,
            "intent": intent,
            "partitions": {"converged": len(done), "total": len(keys)},
            "leaders_on_preferred": {"count": len(preferred), "total": len(keys)},
            "offline_count": len(offline),
            "offline": [preflight.name(k) for k in offline],
            "under_replicated_count": len(under),
            "under_replicated": [preflight.name(k) for k in under],
            "throttles_remaining": remaining,
            "run_throttles_remaining": ours,
            "seconds_to_converge": seconds,
            "converged_at": self.converged_at,
            "election": election,
            "stalled": stalled,
            "run": None if run is None else {"state": run.state, "units": len(run.record.units)},
            "warnings": list(self.warnings),
            "writes_skipped": skipped,
        }
        if self.opts.cluster_wide and every is not None:
            report["cluster"] = {
                "partitions": len(every),
                "offline": sum(1 for s in every.values() if s.has_state and (s.leader == -1 or s.leader not in live)),
                "under_replicated": sum(1 for s in every.values()
                                        if s.replicas is not None and len(set(s.isr)) < len(s.target or ())),
            }
        return report

    def _context(self, run: rs.Run | None, z: Any, live: set[int], record: Any) -> Context:
        pending, submitted = run_units(self.plan, None if run is None else run.record)
        return Context(live, z, pending, submitted, record, time.time(), 0.0)

    @staticmethod
    def _summary(r: dict[str, Any]) -> str:
        p = r["partitions"]
        return (f"converged: {p['converged']}/{p['total']} partitions, leaders on preferred "
                f"{r['leaders_on_preferred']['count']}/{r['leaders_on_preferred']['total']}, offline "
                f"{r['offline_count']}, under-replicated {r['under_replicated_count']}, throttles remaining "
                f"{len(r['throttles_remaining'])}")


def table(report: dict[str, Any]) -> str:
    """The report as the CLI prints it."""
    p = report["partitions"]
    lp = report["leaders_on_preferred"]
    intent = report.get("intent")
    conv = "yes" if report["converged"] else "NO"
    if not report["converged"] and report.get("plan_converged") and intent and not intent["holds"]:
        conv = "NO: the plan's partitions did, but the drain is not complete (below)"
    rows = [("converged", conv),
            ("partitions converged", f"{p['converged']:,} / {p['total']:,}"),
            ("leaders on preferred", f"{lp['count']:,} / {lp['total']:,}"),
            ("offline (plan)", f"{report['offline_count']:,}"),
            ("under-replicated (plan)", f"{report['under_replicated_count']:,}")]
    if "cluster" in report:
        c = report["cluster"]
        rows.append(("offline (cluster)", f"{c['offline']:,} of {c['partitions']:,}"))
        rows.append(("under-replicated (cluster)", f"{c['under_replicated']:,}"))
    if intent:
        rows.append((f"broker(s) {','.join(map(str, intent['brokers']))} empty",
                     "yes (no replica, no leadership anywhere in the cluster)" if intent["holds"] else
                     f"NO: {intent['remaining_count']:,} partitions still there, {intent['leading_count']:,} led"))
    rows.append(("throttles remaining", str(len(report["throttles_remaining"]))))
    secs = report["seconds_to_converge"]
    rows.append(("seconds to converge", "-" if secs is None else f"{secs:.2f}"))
    e = report["election"]
    rows.append(("preferred election", f"{e['moved']} of {e['requested']} moved"
                 + (f", {len(e['not_electable'])} not electable" if e["not_electable"] else "")))
    width = max(len(r[0]) for r in rows)
    out = [f"  {k.ljust(width)}  {v}" for k, v in rows]
    for t in report["throttles_remaining"][:10]:
        out.append(f"    throttle left: {t['entity']} {t['key']}={t['value']}")
    for s in report["stalled"][:50]:
        out.append(f"    stalled {s['partition']}: {', '.join(s['reasons'])}")
    if len(report["stalled"]) > 50:
        out.append(f"    ... {len(report['stalled']) - 50} more stalled partitions in report.json")
    if intent and not intent["holds"]:
        for r in intent["remaining"][:20]:
            out.append(f"    still on broker(s) {','.join(map(str, intent['brokers']))}: {r['topic']}-{r['partition']} "
                       f"replicas {r['replicas']} leader {r['leader']} ({r['reason']})")
        if intent["remaining_count"] > 20:
            out.append(f"    ... {intent['remaining_count'] - 20} more in report.json")
        out.append(f"  next: {intent['next']}")
    for b, st in ((report.get("maintenance") or {}).get("set") or {}).items():
        out.append(f"  maintenance: broker {b} is now {st or 'in service (out of maintenance)'}")
    for b, why in ((report.get("maintenance") or {}).get("kept") or {}).items():
        out.append(f"  maintenance: broker {b} unchanged: {why}")
    if report.get("writes_skipped"):
        out.append(f"  note: {report['writes_skipped']}")
    return "\n".join(out)

