"""`make demo`: the drain DAG end to end on the embedded sandbox, through Airflow.

Sandbox (real ZooKeeper + emulated 6-broker cluster) -> Airflow on SQLite in <dir>/airflow -> dag.test() of
kafka_broker_drain for broker 1: snapshot, risk (spark-submit through the Spark provider, local[2]), plan,
risk after the plan, publish, approval (answered through Airflow's REST API: demo mode only), apply, verify,
report. Prints the risk before/after, the plan summary, the verification report and where the time went.

    python -m kplan_airflow.demo --dir demo-run [--brokers 1] [--keep] [--throttle B] [--skip-risk]
                                 [--catch-up-delay S]

Ctrl-C (SIGINT) and SIGTERM stop it cleanly, exit 130: an apply in flight is cancelled through
planner.api.cancel (it stops after its batch in flight: ZooKeeper cannot stop a running reassignment; its
throttles are removed and its lock released), the DAG run's process group (Spark included) is killed and
the sandbox is taken down (left running with --keep). That is why the DAG runs in a child process:
dag.test() runs each task in its own process with its own SIGTERM handler (the task's on_kill) and keeps
going, so the process that runs it cannot be the one that has to stop.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

INTERRUPTED = 130
CANCEL_WAIT = 300.0  # seconds for the batch in flight to finish (a batch is minutes at most at a sane throttle)


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the demo."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signame = signal.Signals(signum).name


class _Signals:
    """SIGINT / SIGTERM raise Interrupted in the main thread, once; while the demo is stopping (or finishing)
    a further signal only says that it is."""

    def __init__(self) -> None:
        self.stopping = False
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        if self.stopping:
            print(f"\n=== {signal.Signals(signum).name}: already stopping (an apply in flight is let finish its "
                  "batch; kill -9 would leave the sandbox running)", file=sys.stderr, flush=True)
            return
        self.stopping = True
        raise Interrupted(signum)


def _seconds(text: str) -> float:
    """--catch-up-delay: a finite number of seconds, zero or more (argparse's `type`: a bad value is refused with one
    line and exit 2 before anything is started or written)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, zero or more, got {text!r}")
    return value


def _throttle(text: str) -> int:
    """--throttle: bytes/s, an integer at least the floor every apply refuses to go below (planner MIN_THROTTLE),
    refused here rather than by the DAG's apply task a minute into the run."""
    from planner.api import MIN_THROTTLE

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of bytes/s, got {text!r}") from None
    if value < MIN_THROTTLE:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_THROTTLE} bytes/s (the apply's floor), got {text!r}")
    return value


def _broker_list(text: str) -> list[int]:
    """--brokers: comma-separated broker ids (non-negative integers), at least one."""
    items = [b.strip() for b in text.split(",") if b.strip()]
    if not items or not all(b.isdigit() for b in items):
        raise argparse.ArgumentTypeError(f"must be comma-separated broker ids (non-negative integers), got {text!r}")
    return [int(b) for b in items]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kplan_airflow.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="demo-run", help="run folder (recreated)")
    ap.add_argument("--brokers", type=_broker_list, default=[1], metavar="IDS", help="brokers to drain, comma-separated")
    ap.add_argument("--keep", action="store_true", help="leave the sandbox running afterwards")
    ap.add_argument("--throttle", type=_throttle, default=200_000_000, metavar="B",
                    help="replication throttle in bytes/s for the demo's apply (default 200 MB/s; the plan's "
                    "own suggestion, at least 10 MiB/s per batch, would copy the demo's 1.9 GiB in about 3 minutes)")
    ap.add_argument("--skip-risk", action="store_true",
                    help="mark the two Spark risk tasks successful without running them (their ~30-50 s)")
    ap.add_argument("--catch-up-delay", type=_seconds, default=None, metavar="S",
                    help="seconds a moved replica of the sandbox needs to join the ISR once copied (the demo "
                    "preset's 0.5; each of the apply's 37 batches waits it)")
    ap.add_argument("--run-dag", action="store_true", help=argparse.SUPPRESS)   # the child: see the docstring
    ap.add_argument("--since", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--sandbox-seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    brokers = args.brokers
    root = Path(args.dir).absolute()
    if args.run_dag:
        return run_dag(root, brokers, args.throttle, args.skip_risk, args.since, args.sandbox_seconds)

    from kplan_airflow import local

    signals = _Signals()
    t0 = time.monotonic()
    sandbox = local.SandboxCluster(root / "sandbox")
    child: subprocess.Popen | None = None
    stopped: str | None = None  # what stopping did, said last
    try:
        sandbox.down()
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        print(f"=== sandbox: real ZooKeeper + 6 emulated brokers on 3 racks ({sandbox.dir})", flush=True)
        sandbox.up("demo", catch_up_delay=args.catch_up_delay)
        up = time.monotonic() - t0
        cmd = [sys.executable, "-m", "kplan_airflow.demo", "--run-dag", "--dir", str(root), "--brokers",
               ",".join(map(str, brokers)), "--throttle", str(args.throttle), "--since", repr(t0),
               "--sandbox-seconds", f"{up:.3f}"] + (["--skip-risk"] if args.skip_risk else [])
        # its own process group: a terminal's Ctrl-C reaches this process only, which then stops it in order
        child = subprocess.Popen(cmd, process_group=0)
        rc = child.wait()
    except Interrupted as e:
        signals.stopping = True
        rc = INTERRUPTED
        stopped = f"=== demo interrupted by {e.signame}: " + stop(e.signame, root, sandbox, child)
    finally:
        signals.stopping = True
        if child is not None and child.poll() is None:
            _kill_group(child)
        if not args.keep:
            sandbox.down()
    if stopped:
        kept = args.keep and (sandbox.dir / "sandbox.json").exists()
        print(stopped + ("; the sandbox is left running (--keep): " + sandbox.connect_string if kept
                         else "; the sandbox is down (its daemon and ZooKeeper stopped)"),
              file=sys.stderr, flush=True)
    return rc


def stop(signame: str, root: Path, sandbox, child: subprocess.Popen | None) -> str:
    """Stop in order: cancel any apply in flight (it finishes its batch, removes its throttles, releases its
    lock), kill the DAG run's process group, then cancel whatever a killed apply left recorded. Returns what
    it did, in one line."""
    print(f"\n=== {signame}: stopping the demo (exit {INTERRUPTED}); an apply in flight finishes its batch "
          "first", file=sys.stderr, flush=True)
    connect = sandbox.connect_string if (sandbox.dir / "sandbox.json").exists() else None
    done = _cancel_applies(root / "runs", connect) if connect else {}
    if child is not None:
        _kill_group(child)
    if connect:  # an apply that started after the first pass, or was killed mid-way: finish its cancel here
        for plan_id, msg in _cancel_applies(root / "runs", connect).items():
            if done.get(plan_id) is None:
                done[plan_id] = msg
    said = [m for m in done.values() if m]
    return "; ".join(said) if said else "no apply had started: nothing to cancel"


def _cancel_applies(runs_root: Path, connect: str) -> dict[str, str | None]:
    """planner.api.cancel for every plan of this demo's runs: plan id -> what happened (None: no apply of it
    is recorded on the cluster)."""
    from planner import api
    from planner.api import PlannerError

    out: dict[str, str | None] = {}
    for run_dir in sorted(runs_root.glob("*/*/")):
        plan = api.RunFolder(run_dir).plan
        if not api.RunFolder(run_dir).complete("plan"):
            continue
        try:
            res = api.cancel(api.CancelRequest(zk=connect, plan=plan, wait=CANCEL_WAIT, poll=0.2))
        except PlannerError as e:
            out[str(plan)] = f"cancel of the apply of {plan} failed: {e}"
            continue
        out[res.plan_id] = None if res.state == "none" else f"apply of plan {res.plan_id[:19]} {res.state} ({res.message})"
    return out


def _kill_group(child: subprocess.Popen) -> None:
    """SIGKILL the DAG run's process group (dag.test() ignores SIGTERM; Spark's JVM is in the group too)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()


def _die_with_parent() -> None:
    """Linux: the child gets SIGKILL if the demo process dies first (e.g. kill -9), instead of applying on."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Quiet:
    """The child's own lines go to the terminal; everything else written to stdout / stderr (Airflow's and
    Spark's logs, some 500 lines a run) goes to `log`. While a task runs, one line says which."""

    def __init__(self, log: Path):
        import threading

        log.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self.term = os.fdopen(os.dup(1), "w", buffering=1)
        self.log = log
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)

    def say(self, text: str = "") -> None:
        self.term.write(text + "\n")
        self.term.flush()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()   # the follower reads what is left of the log first
        self._thread.join(5)

    def _follow(self) -> None:
        """Name each task as dag.test() starts and ends it (its own log lines, `[DAG TEST] ... task_id=X`)."""
        import re

        started: dict[str, float] = {}
        ended: set[str] = set()
        rx = re.compile(r"\[DAG TEST\] (starting|end task) task_id=(\w+)")
        with open(self.log, errors="replace") as fh:
            fh.seek(0, os.SEEK_END)
            while True:
                line = fh.readline()
                if not line:
                    if self._stop.is_set():
                        return
                    self._stop.wait(0.2)
                    continue
                m = rx.search(line)
                if not m:
                    continue
                what, task = m.groups()
                if what == "starting":
                    started[task] = time.monotonic()
                elif task in started:
                    secs = time.monotonic() - started.pop(task)
                    if task == "approve" and task not in ended:   # it defers until someone answers
                        self.say(f"  task {task:<11} deferred: waiting for an answer")
                    else:
                        self.say(f"  task {task:<11} done in {secs:6.1f} s")
                    ended.add(task)


def run_dag(root: Path, brokers: list[int], throttle: int, skip_risk: bool, since: float | None,
            sandbox_seconds: float) -> int:
    """The child: Airflow on SQLite and dag.test() of the drain, then the report. Returns 0 when the run
    succeeded. Airflow's own logging goes to <dir>/airflow/dag-run.log; the terminal gets the summary, once."""
    _die_with_parent()
    t0 = since if since is not None else time.monotonic()
    marks: list[tuple[str, float]] = [("sandbox up", t0 + sandbox_seconds)]

    def mark(what: str) -> None:
        marks.append((what, time.monotonic()))

    quiet = _Quiet(root / "airflow" / "dag-run.log")
    say = quiet.say
    from kplan_airflow import local, runs
    from kplan_airflow import summary as sm

    sandbox = local.SandboxCluster(root / "sandbox")
    env = local.environment(root / "airflow", zk_connect=sandbox.connect_string, runs_root=root / "runs")
    local.activate(env)
    say(f"=== Airflow on SQLite in {root / 'airflow'}: migrating the metadata DB (Airflow's and Spark's logs: "
        f"{quiet.log})")
    local.init_db()
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(local.DAGS), safe_mode=False).dags["kafka_broker_drain"]
    api = local.ApiClient(json.loads((root / "airflow" / "passwords.json").read_text())[local.USER])
    mark("Airflow ready (DB, DAGs, API client)")

    def approve(detail: dict) -> str:
        say(f"  approval requested (Required Actions): {detail.get('subject')}; demo mode answers Approve "
            "through the REST API (the plan and its risk are shown below)")
        return "Approve"

    approver = local.Approver(api, dag.dag_id, approve, deadline=900, poll=1.0).start()
    say(f"=== dag.test(): kafka_broker_drain with brokers={brokers}, throttle {throttle:,} B/s"
        + (" (risk tasks skipped: --skip-risk)" if skip_risk else ""))
    quiet.start()
    try:
        dr = dag.test(run_conf={"brokers": brokers, "sizes": str(sandbox.sizes), "throttle": throttle},
                      mark_success_pattern="risk|risk_after" if skip_risk else None)
    finally:
        approver.stop()
        quiet.stop()
    mark("DAG run")
    tis = sorted(dr.get_task_instances(), key=lambda t: t.start_date or t.end_date or dr.start_date)
    folder = runs.run_folder(dr.dag_id, dr.run_id)
    from planner.api import read_plan, verify_report_text

    plan = read_plan(folder.plan) if folder.complete("plan") else None
    before, after = folder.risk_summary(), folder.risk_summary(after_plan=True)
    if plan:
        say("\n=== plan summary and risk before / after\n" + sm.text_report(plan, sm.scenario_pairs(after, before)))
    report = runs.read_json(folder.report)
    say("\n=== verification report (" + str(folder.report) + ")\n"
        + (verify_report_text(report) if report else "(none: apply / verify did not run)"))
    outcome = folder.outcome("apply")
    if outcome:
        say(f"  apply: {outcome.get('state')}, {outcome.get('units_done')}/{outcome.get('units_total')} batches, "
            f"{outcome.get('partitions_done')}/{outcome.get('partitions_total')} partitions in "
            f"{outcome.get('seconds', 0):.1f} s")
    say("\n=== where the time went")
    for ti in tis:
        secs = (ti.end_date - ti.start_date).total_seconds() if ti.start_date and ti.end_date else 0.0
        state = ti.state.value if hasattr(ti.state, "value") else ti.state
        say(f"  task {ti.task_id:<11} {str(state):<16} {secs:6.1f} s")
    prev = t0
    for what, t in marks:
        say(f"  {what:<38} {t - prev:6.1f} s")
        prev = t
    say(f"  total {time.monotonic() - t0:.1f} s; run folder {folder.root}; Airflow's log {quiet.log}")
    ok = str(dr.state).endswith("success") and not approver.watchdog_fired and approver.error is None
    say(f"\nDAG run {dr.run_id}: {dr.state}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
