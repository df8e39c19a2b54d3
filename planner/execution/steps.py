"""apply / verify / cancel as whole steps: read and check the plan (before any connection), open the ZooKeeper
session, run the executor or verifier, write the run folder's files. planner.api and the CLI call these.

Files (the run folder is the plan folder's parent, `<run>/plan/` by convention; docs/APPLY.md):
    <run>/apply/progress.json   live progress of apply / cancel, replaced atomically at most once per poll
    <run>/apply/outcome.json    how the last apply / cancel ended
    <run>/verify/progress.json  live progress of verify
    <run>/report.json           verify's report
Nothing is written anywhere for a dry run, and nothing for input that is refused before connecting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from planner import zk as zkmod
from planner.errors import BadInput
from planner.execution.executor import Executor, Options, Result
from planner.execution.planview import RunPlan, from_plan
from planner.execution.progress import Progress, write_json_atomic
from planner.execution.verify import Verifier, VerifyOptions, VerifyResult

log = logging.getLogger(__name__)


def load_plan(path: Path | str, max_concurrent: int | None = None) -> RunPlan:
    """The reviewed plan, checked (id, files agree) by the plan reader, as execution units."""
    from planner.plan_model import read_plan

    return from_plan(read_plan(path), max_concurrent)


def run_folder(plan_path: Path | str) -> Path:
    return Path(plan_path).absolute().parent


def apply_folder(plan_path: Path | str, out: Path | str | None) -> Path:
    return Path(out) if out is not None else run_folder(plan_path) / "apply"


def _check_positive(name: str, value: float | None, allow_zero: bool = False) -> None:
    if value is None:
        return
    if not (value >= 0 if allow_zero else value > 0):
        raise BadInput(f"{name} must be {'zero or more' if allow_zero else 'positive'}, got {value}")


def apply(zk: str, plan_path: Path | str, options: Options, *, max_concurrent: int | None = None,
          auth: tuple[str, str] | None = None, connect_timeout: float = 10.0, out: Path | str | None = None,
          progress: Callable[[Progress], None] | None = None) -> Result:
    _check_positive("poll", options.poll)
    _check_positive("timeout", options.timeout)
    _check_positive("lock wait", options.lock_wait, allow_zero=True)
    if options.throttle is not None and options.throttle < 1:
        raise BadInput(f"throttle must be at least 1 byte/s, got {options.throttle}")
    zkmod.parse_connect(zk)
    plan = load_plan(plan_path, max_concurrent)
    folder = None if options.dry_run else apply_folder(plan_path, out)
    if folder is not None:
        options.progress_file = folder / "progress.json"
    with zkmod.session(zk, auth=auth, timeout=connect_timeout) as client:
        result = Executor(client, plan, options, progress, "apply").apply()
    if folder is not None:
        write_json_atomic(folder / "outcome.json", {"command": "apply", **asdict(result)})
    return result


def cancel(zk: str, plan_path: Path | str, *, mode: str = "after-batch", timeout: float = 300.0, poll: float = 1.0,
           auth: tuple[str, str] | None = None, connect_timeout: float = 10.0, out: Path | str | None = None,
           progress: Callable[[Progress], None] | None = None) -> Result:
    if mode not in ("after-batch", "revert"):
        raise BadInput(f"cancel mode must be after-batch or revert, got {mode!r}")
    _check_positive("timeout", timeout)
    _check_positive("poll", poll)
    zkmod.parse_connect(zk)
    plan = load_plan(plan_path)
    folder = apply_folder(plan_path, out)
    opts = Options(poll=poll, progress_file=folder / "progress.json")
    with zkmod.session(zk, auth=auth, timeout=connect_timeout) as client:
        result = Executor(client, plan, opts, progress, "cancel").cancel(mode, timeout)
    if result.state != "none":
        write_json_atomic(folder / "outcome.json", {"command": "cancel", **asdict(result)})
    return result


def verify(zk: str, plan_path: Path | str, options: VerifyOptions, *, auth: tuple[str, str] | None = None,
           connect_timeout: float = 10.0, progress: Callable[[Progress], None] | None = None) -> VerifyResult:
    _check_positive("timeout", options.timeout, allow_zero=True)
    _check_positive("poll", options.poll)
    zkmod.parse_connect(zk)
    plan = load_plan(plan_path)
    if options.report is None:
        options.report = run_folder(plan_path) / "report.json"
    if options.progress_file is None:
        options.progress_file = run_folder(plan_path) / "verify" / "progress.json"
    with zkmod.session(zk, auth=auth, timeout=connect_timeout) as client:
        return Verifier(client, plan, options, progress).verify()
