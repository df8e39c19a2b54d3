"""apply / verify / cancel as whole steps: read and check the plan (before any connection), open the ZooKeeper
session, run the executor or verifier, write the run folder's files. planner.api calls these with its requests
(planner.requests) as they are; each step builds its executor's options from the request and changes nothing
it is given.

Files, in the plan's records folder (planner.runfolder.records_folder: the run folder for `<run>/plan`,
`<plan folder>-run` beside any other plan folder; docs/APPLY.md):
    <records>/apply/progress.json   live progress of apply / cancel, replaced atomically at most once per poll
    <records>/apply/outcome.json    how the last apply / cancel ended
    <records>/verify/progress.json  live progress of verify
    <records>/report.json           verify's report
Each file names its plan; another plan's records are never overwritten (runfolder.check_records). Nothing is
written anywhere for a dry run, and nothing for input that is refused before connecting. Every step checks,
right after connecting and before any write, that the connect string reaches a Kafka cluster (a mistyped
chroot must not get a /kplan lock).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from planner import zk as zkmod
from planner.errors import BadInput, Interrupted, WrongPlanKind
from planner.execution.executor import Executor, Options, Result
from planner.execution.planview import RunPlan, from_plan
from planner.execution.progress import Progress, write_json_atomic
from planner.execution.verify import Verifier, VerifyOptions, VerifyResult, probe
from planner.requests import MIN_THROTTLE, ApplyRequest, CancelRequest, VerifyRequest
from planner.runfolder import RECORD_FILES, check_records, records_folder

log = logging.getLogger(__name__)


def load_plan(path: Path | str, max_concurrent: int | None = None) -> RunPlan:
    """The reviewed plan, checked (id, files agree) by the plan reader, as execution units."""
    from planner.plan_model import read_plan

    return from_plan(read_plan(path), max_concurrent)


def run_folder(plan_path: Path | str) -> Path:
    """The plan's records folder (planner.runfolder.records_folder)."""
    return records_folder(plan_path)


def apply_folder(plan_path: Path | str, out: Path | str | None) -> Path:
    return Path(out) if out is not None else run_folder(plan_path) / "apply"


def verify_folder(plan_path: Path | str, out: Path | str | None) -> tuple[Path, Path]:
    """(report.json, progress.json) of verify: both in `out` when given, else in the records folder."""
    if out is not None:
        return Path(out) / "report.json", Path(out) / "progress.json"
    return run_folder(plan_path) / "report.json", run_folder(plan_path) / "verify" / "progress.json"


def _claim_apply(plan_path: Path | str, plan: RunPlan, out: Path | str | None, command: str) -> Path:
    folder = apply_folder(plan_path, out)
    return check_records(folder, plan.id, RECORD_FILES["apply"], Path(plan_path),
                         "out" if out is not None else f"{command}'s records folder", out is not None)


def _backend(req: Any) -> bool:
    """True for a KRaft cluster (`bootstrap`), checked; else the ZooKeeper connect string, checked."""
    if getattr(req, "bootstrap", None) is not None:
        from planner.execution.kraftsteps import check_request

        check_request(req)
        return True
    if req.zk is None:
        raise BadInput("give either a ZooKeeper connect string or Kafka bootstrap servers")
    zkmod.parse_connect(req.zk)
    return False


def _connected(client) -> None:  # noqa: ANN001 - a KazooClient
    """Before anything is written: the connect string reaches a Kafka cluster (not a mistyped chroot)."""
    zkmod.require_kafka(client)


def _not_a_roll(plan: RunPlan, path: Path | str, command: str) -> None:
    """A restart plan's temporary replicas are one phase of its roll: `kplan roll` runs (and checks) it whole."""
    if plan.kind == "restart":
        raise WrongPlanKind(f"{path} is a restart plan", plan.kind, str(path))


MAX_BATCH_SECONDS = 7 * 86400  # a throttle that makes one batch take longer than a week is a typo


def batch_seconds(plan: RunPlan, rate: int) -> tuple[float, Any, int, int]:
    """The longest data batch at `rate`: (seconds, unit, broker, bytes into that broker). A rate limits each
    broker's replication traffic (Kafka's leader/follower throttled rates), so a batch takes as long as its
    busiest destination's bytes take."""
    worst: tuple[float, Any, int, int] = (0.0, None, -1, 0)
    for u in plan.units:
        if u.kind != "data":
            continue
        into: dict[int, int] = {}
        for e, before in zip(u.entries, u.before, strict=True):
            nbytes = plan.moves[e.key].bytes or 0
            for b in set(e.replicas) - set(before):
                into[b] = into.get(b, 0) + nbytes
        for b, n in into.items():
            if n / rate > worst[0]:
                worst = (n / rate, u, b, n)
    return worst


def check_throttle(plan: RunPlan, rate: int) -> None:
    """A throttle so low that a batch would never finish is refused, saying what it would take (issue 19)."""
    from planner.text import size

    secs, unit, broker, nbytes = batch_seconds(plan, rate)
    where = (f"; at {size(rate)}/s {unit.label} would take {_duration(secs)} to copy {size(nbytes)} into broker "
             f"{broker}" if unit is not None else "")
    if rate < MIN_THROTTLE:
        raise BadInput(f"throttle {size(rate)}/s is below the floor of {size(MIN_THROTTLE)}/s (a replication "
                       f"throttle that low never lets a real batch finish{where}); give at least "
                       f"{size(MIN_THROTTLE)}/s, e.g. 50MB")
    if secs > MAX_BATCH_SECONDS:
        need = math.ceil(nbytes / MAX_BATCH_SECONDS)
        raise BadInput(f"throttle {size(rate)}/s is too low for this plan{where}, over the limit of "
                       f"{_duration(MAX_BATCH_SECONDS)} per batch; give at least {size(need)}/s")


def _duration(secs: float) -> str:
    for unit, n in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if secs >= n:
            return f"{secs / n:,.1f} {unit}"
    return f"{secs:.0f} s"


def _check_positive(name: str, value: float | None, allow_zero: bool = False) -> None:
    if value is None:
        return
    if not (value >= 0 if allow_zero else value > 0):
        raise BadInput(f"{name} must be {'zero or more' if allow_zero else 'positive'}, got {value}")


def apply(req: ApplyRequest, *, progress: Callable[[Progress], None] | None = None) -> Result:
    _check_positive("poll", req.poll)
    _check_positive("wait", req.wait)
    _check_positive("lock wait", req.lock_wait, allow_zero=True)
    zk, plan_path, out = req.zk, req.plan, req.out
    kraft = _backend(req)
    plan = load_plan(plan_path, req.max_concurrent_per_broker)
    if req.throttle is not None:
        check_throttle(plan, req.throttle)
    _not_a_roll(plan, plan_path, "apply")
    folder = None if req.dry_run else _claim_apply(plan_path, plan, out, "apply")
    options = Options(throttle=req.throttle, poll=req.poll, wait=req.wait, lock_wait=req.lock_wait,
                      dry_run=req.dry_run, reason=req.reason, stop=req.stop, connect=zk,
                      run=req.run or str(run_folder(plan_path)),   # named in the brokers' maintenance state
                      progress_file=folder / "progress.json" if folder is not None else None)
    try:
        if kraft:
            from planner.execution import kraftsteps

            result = kraftsteps.apply(req, plan, folder, progress, options.run)
        else:
            with zkmod.session(zk, auth=req.auth, timeout=req.timeout) as client:
                _connected(client)
                result = Executor(client, plan, options, progress, "apply").apply()
    except Interrupted as e:   # the record of how it ended says what is left (the review pages read it)
        if folder is not None:
            write_json_atomic(folder / "outcome.json", {"command": "apply", "plan_id": plan.id,
                                                        "state": "interrupted", "message": e.detail})
        raise
    if folder is not None:
        write_json_atomic(folder / "outcome.json", outcome_record("apply", result))
    return replace(result, path=folder)


# outcome.json: how the last apply / cancel ended, in the record's own names (a batch is a unit there, as in
# progress.json; the review pages and the demo read them)
_RECORD = (("plan_id", "plan_id"), ("state", "state"), ("message", "message"), ("resumed", "resumed"),
           ("units_total", "batches_total"), ("units_done", "batches_done"), ("units_submitted", "batches_submitted"),
           ("partitions_done", "partitions_done"), ("partitions_total", "partitions_total"),
           ("bytes_done", "bytes_done"), ("bytes_total", "bytes_total"), ("seconds", "seconds"), ("writes", "writes"),
           ("warnings", "warnings"), ("reverted", "reverted"), ("intent", "intent"), ("next_steps", "next_steps"))


def outcome_record(command: str, result: Result) -> dict[str, Any]:
    """outcome.json of an apply or a cancel (`_RECORD`)."""
    fields = asdict(result)
    return {"command": command, **{key: fields[name] for key, name in _RECORD}}


def cancel(req: CancelRequest, *, progress: Callable[[Progress], None] | None = None) -> Result:
    _check_positive("wait", req.wait)
    _check_positive("poll", req.poll)
    zk, plan_path = req.zk, req.plan
    kraft = _backend(req)
    plan = load_plan(plan_path)
    folder = _claim_apply(plan_path, plan, req.out, "cancel")
    if kraft:
        from planner.execution import kraftsteps

        result = kraftsteps.cancel(req, plan, folder, progress)
    else:
        opts = Options(poll=req.poll, progress_file=folder / "progress.json")
        mode = "revert" if req.revert else "after-batch"
        with zkmod.session(zk, auth=req.auth, timeout=req.timeout) as client:
            _connected(client)
            result = Executor(client, plan, opts, progress, "cancel").cancel(mode, req.wait)
    if result.state != "none":
        write_json_atomic(folder / "outcome.json", outcome_record("cancel", result))
    return replace(result, path=folder)


def verify(req: VerifyRequest, *, progress: Callable[[Progress], None] | None = None) -> VerifyResult:
    """`req.out`: the folder for report.json and progress.json (default: the plan's records folder). A plan that
    did not converge is a result (converged False, the report written), not an error: the caller decides."""
    _check_positive("wait", req.wait, allow_zero=True)
    _check_positive("poll", req.poll)
    zk, plan_path, out = req.zk, req.plan, req.out
    kraft = _backend(req)
    plan = load_plan(plan_path)
    _not_a_roll(plan, plan_path, "verify")
    report, prog = verify_folder(plan_path, out)
    if out is not None:
        check_records(Path(out), plan.id, ("report.json", "progress.json"), Path(plan_path), "out", True)
    else:
        check_records(report.parent, plan.id, RECORD_FILES["report"], Path(plan_path),
                      "verify's records folder", False)
        check_records(prog.parent, plan.id, RECORD_FILES["verify"], Path(plan_path), "verify's records folder",
                      False)
    if kraft:
        from planner.execution import kraftsteps

        return kraftsteps.verify(req, plan, report, prog, progress)   # type: ignore[return-value]
    options = VerifyOptions(wait=req.wait, poll=req.poll, elect=req.elect, since=req.since, report=report,
                            progress_file=prog)
    with zkmod.session(zk, auth=req.auth, timeout=req.timeout) as client:
        _connected(client)
        return Verifier(client, plan, options, progress).verify()


def verify_probe(req: VerifyRequest) -> dict[str, Any]:
    """One read-only convergence check of the plan (verify.probe): no lock, no write, no file. What a deferred
    wait polls; the verify that follows it writes the report. Uses req.zk, req.plan, req.auth, req.timeout."""
    from planner.execution.clusterview import ClusterView

    kraft = _backend(req)
    plan = load_plan(req.plan)
    _not_a_roll(plan, req.plan, "verify")
    if kraft:
        from planner.execution import kraftsteps

        return kraftsteps.probe(req, plan)
    with zkmod.session(req.zk, auth=req.auth, timeout=req.timeout) as client:
        _connected(client)
        return probe(ClusterView(client), plan).status(plan.partitions_total)
