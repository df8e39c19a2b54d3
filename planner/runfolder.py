"""The run folder: one path that holds a whole run, and the one way a step writes its output.

    <run>/snapshot/    kplan snapshot        (manifest.json + Parquet)
    <run>/risk/        kplan risk            (summary.json + Parquet)
    <run>/plan/        kplan plan            (plan.json, reassignment.json, rollback.json, solve.json)
    <run>/risk-after/  kplan risk --plan     (the plan's residual risk)
    <run>/apply/       kplan apply           (progress of the apply)
    <run>/verify/      kplan verify
    <run>/report.json  what the run did

An Airflow task is given the run folder and finds every input and output by name; a person runs the same
steps by hand with `kplan ... --out <run>/<step>`.

Execution records (apply/, verify/, report.json) belong to one plan. A plan folder named `plan` is the layout
above and its records go into its parent, the run folder; a plan folder with any other name (plans kept side
by side, `D/p1` and `D/p2`) gets its own records folder beside it, `D/p1-run/` (`records_folder`). Records of
another plan are never overwritten: `check_records` refuses them, naming whose they are.

`step_output(path)` is how every step writes (the CLI's `--out` and the run folder alike): into a temporary
sibling folder, renamed into place only when the step succeeded, so a step's folder is complete or absent,
never half-written, never a mix of two runs. An existing non-empty folder is refused unless `force=True`
(then it is replaced as a whole, at the end, only if the new output is complete).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from planner.errors import BadInput

log = logging.getLogger(__name__)

STEPS = {"snapshot": "snapshot", "risk": "risk", "plan": "plan", "risk_after": "risk-after", "apply": "apply",
         "verify": "verify"}
REPORT = "report.json"
_TMP_MARK = ".kplan-tmp-"


RECORD_FILES = {"apply": ("progress.json", "outcome.json"), "verify": ("progress.json",), "report": (REPORT,)}
# The file that a step writes last (or whose folder is renamed into place with it): its presence says the step's
# folder is complete. Callers outside the planner (the Airflow operators, the review pages) ask through
# `step_complete` / the RunFolder readers and never name these files themselves (tests/test_layering.py).
MAIN_FILES = {"snapshot": "manifest.json", "risk": "summary.json", "risk_after": "summary.json",
              "plan": "plan.json"}


def _describe(e: OSError) -> str:
    return e.strerror or str(e)


def check_output(out: Path, force: bool = False, inputs: tuple[Path, ...] = (), what: str = "out") -> Path:
    """Refuse an output folder the step must not write: a file, a non-empty folder (unless force), or a folder
    that is, or contains, one of the step's inputs. Returns the absolute path."""
    out = Path(out).absolute()
    if out.exists() and not out.is_dir():
        raise BadInput(f"{what} {out} is a file, not a folder")
    for i in inputs:
        i = Path(i).absolute()
        if out == i or out in i.parents:
            raise BadInput(f"{what} {out} would replace the input {i}: write the output to its own folder "
                           "(never over or around an input, with or without force)")
        if i in out.parents:
            raise BadInput(f"{what} {out} is inside the input folder {i}: write the output to its own folder")
    if out.is_dir() and not force:
        try:
            non_empty = any(out.iterdir())
        except OSError as e:
            raise BadInput(f"{what} {out} cannot be read: {_describe(e)}") from None
        if non_empty:
            raise BadInput(f"{what} {out} already exists and is not empty: choose a new folder, or force to "
                           "replace it")
    return out


@contextmanager
def step_output(out: Path | str, force: bool = False, inputs: tuple[Path, ...] = (),
                what: str = "out") -> Iterator[Path]:
    """Yield a temporary folder beside `out`; on success it becomes `out`, on any failure (Ctrl-C included)
    it is removed and `out` is left as it was."""
    final = check_output(Path(out), force, inputs, what)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f"{_TMP_MARK}{final.name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
    except OSError as e:
        raise BadInput(f"{what} {final}: cannot create a folder there ({_describe(e)})") from None
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        _replace(tmp, final, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _replace(tmp: Path, final: Path, force: bool) -> None:
    if final.exists():
        if not force and any(final.iterdir()):
            # Someone wrote there while this step ran: keep theirs, drop ours.
            raise BadInput(f"{final} was filled by someone else while this step ran; nothing replaced")
        old = final.parent / f"{_TMP_MARK}{final.name}-old-{uuid.uuid4().hex[:8]}"
        os.rename(final, old)
        try:
            os.rename(tmp, final)
        except BaseException:
            os.rename(old, final)
            raise
        shutil.rmtree(old, ignore_errors=True)
        log.info("replaced %s", final)
    else:
        os.rename(tmp, final)


def step_complete(folder: Path | str, step: str) -> bool:
    """Whether `folder` holds a complete output of `step` (snapshot, risk, risk_after, plan): its main file."""
    if step not in MAIN_FILES:
        raise ValueError(f"no main file for step {step!r}; steps with one are {', '.join(MAIN_FILES)}")
    return (Path(folder) / MAIN_FILES[step]).is_file()


def read_main_file(folder: Path | str, step: str) -> dict[str, Any] | None:
    """The JSON of a step's main file in `folder` (a snapshot's manifest, a risk summary), or None when it is
    absent or unreadable (a step that has not run, or did not finish)."""
    if step not in MAIN_FILES:
        raise ValueError(f"no main file for step {step!r}; steps with one are {', '.join(MAIN_FILES)}")
    return _json_or_none(Path(folder) / MAIN_FILES[step])


def _json_or_none(f: Path) -> Any | None:
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


class RunFolder:
    """The layout of one run under `root` (module docstring)."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.root)!r})"

    def step(self, name: str) -> Path:
        if name not in STEPS:
            raise ValueError(f"unknown step {name!r}; steps are {', '.join(STEPS)}")
        return self.root / STEPS[name]

    @property
    def snapshot(self) -> Path:
        return self.step("snapshot")

    @property
    def risk(self) -> Path:
        return self.step("risk")

    @property
    def plan(self) -> Path:
        return self.step("plan")

    @property
    def risk_after(self) -> Path:
        return self.step("risk_after")

    @property
    def apply(self) -> Path:
        return self.step("apply")

    @property
    def verify(self) -> Path:
        return self.step("verify")

    @property
    def report(self) -> Path:
        return self.root / REPORT

    def complete(self, name: str) -> bool:
        """The step's folder is there and complete (`step_complete`)."""
        return step_complete(self.step(name), name)

    def manifest(self) -> dict[str, Any] | None:
        """The snapshot's manifest (None: no complete snapshot)."""
        return read_main_file(self.snapshot, "snapshot")

    def risk_summary(self, after_plan: bool = False) -> dict[str, Any] | None:
        """The risk summary (kplan-risk/1) of risk/, or of risk-after/ (None: that risk step did not finish)."""
        step = "risk_after" if after_plan else "risk"
        return read_main_file(self.step(step), step)

    def progress(self, step: str) -> dict[str, Any] | None:
        """The live progress record of apply, verify or roll in this run (None: that step has not started)."""
        return _json_or_none(self._records(step) / "progress.json")

    def outcome(self, step: str) -> dict[str, Any] | None:
        """How the last apply (or cancel) or roll in this run ended (None: none ended)."""
        return _json_or_none(self._records(step) / "outcome.json")

    def _records(self, step: str) -> Path:
        if step == "roll":   # <run>/roll/: planner.execution.roll's records
            return self.root / "roll"
        if step not in ("apply", "verify"):
            raise ValueError(f"no records for step {step!r}; steps with records are apply, verify, roll")
        return self.step(step)

    def step_writer(self, name: str, force: bool = False, inputs: tuple[Path, ...] = ()):
        """Context manager: a temporary folder that becomes the step's folder when the block succeeds."""
        return step_output(self.step(name), force=force, inputs=inputs)

    def write_report(self, data: bytes) -> Path:
        """report.json, written through a temporary name (a reader sees the old or the new one, whole)."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"{_TMP_MARK}{REPORT}-{uuid.uuid4().hex[:8]}"
        tmp.write_bytes(data)
        os.replace(tmp, self.report)
        return self.report


# ------------------------------------------------------------------------------------ execution records
def records_folder(plan_path: Path | str) -> Path:
    """Where apply / verify / cancel keep a plan's records by default (module docstring): the run folder for
    `<run>/plan`, else `<plan folder>-run` beside the plan folder, so two plans never share records."""
    plan = Path(os.path.abspath(plan_path))
    return plan.parent if plan.name == STEPS["plan"] else plan.parent / f"{plan.name}-run"


def _owner(f: Path) -> str | None:
    """The plan id a record file names (None: unreadable, or a record from before records named their plan)."""
    try:
        doc = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return doc.get("plan_id") if isinstance(doc, dict) else None


def check_records(folder: Path, plan_id: str, names: tuple[str, ...], plan_path: Path, what: str,
                  explicit: bool) -> Path:
    """Refuse a records folder that would overwrite another plan's records or touch the plan folder itself.

    `names`: the record files the step writes there. An explicit folder (`--out`) must not be, contain or lie
    inside the plan folder, must not be a file, and may hold nothing but this plan's own records (a resumed
    apply, a verify run again); the default folder may hold anything else (it is the run folder) but not
    another plan's records under those names."""
    folder = Path(os.path.abspath(folder))
    plan = Path(os.path.abspath(plan_path))
    if explicit:
        if folder == plan:
            raise BadInput(f"{what} {folder} is the plan folder: a reviewed plan is never written into; give a "
                           "folder of its own")
        if folder in plan.parents:
            raise BadInput(f"{what} {folder} contains the plan folder {plan}: give a folder of its own")
        if plan in folder.parents:
            raise BadInput(f"{what} {folder} is inside the plan folder {plan}: a reviewed plan is never written "
                           "into; give a folder of its own")
        if folder.exists() and not folder.is_dir():
            raise BadInput(f"{what} {folder} is a file, not a folder")
        if folder.is_dir():
            try:
                others = sorted(p.name for p in folder.iterdir() if p.name not in names
                                and not p.name.startswith("."))
            except OSError as e:
                raise BadInput(f"{what} {folder} cannot be read: {_describe(e)}") from None
            if others:
                shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
                raise BadInput(f"{what} {folder} is not empty ({shown}): it may hold only this plan's own "
                               f"records ({', '.join(names)}); choose a new folder")
    for n in names:
        owner = _owner(folder / n)
        if owner is not None and owner != plan_id:
            raise BadInput(f"{folder / n} holds the records of plan {owner}, not of plan {plan_id}: each plan's "
                           "records stay its own; give another records folder (out), or move the old records away")
    return folder
