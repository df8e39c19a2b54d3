"""`make airflow`: Airflow's API server, scheduler and dag-processor on SQLite, with a sandbox cluster and this
checkout's DAGs and plugin, so a person can trigger a drain from the form and review the plan.

    python -m kplan_airflow.stack --dir airflow-run [--port 8080]

Everything binds to 127.0.0.1 (the scheduler's and the triggerer's log servers are not started: task logs are
read from disk). The triggerer runs the deferred waits (an approval, verify). The LocalExecutor gets one
worker per CPU (`[core] parallelism`), not Airflow's default of 32. Ctrl-C or SIGTERM stops every process
it started, and the sandbox. DAGs are unpaused, and the nightly rebalance's first run is the next 02:00:
nothing runs until someone triggers it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kplan_airflow import local

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


class Stopped(Exception):
    """SIGTERM (or SIGHUP) arrived: stop everything, as Ctrl-C does."""


def parallelism() -> int:
    """LocalExecutor workers: one per CPU this process may use (at least 2: an approval and a task)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 2
    return max(2, cpus)


def start_component(name: str, env: dict[str, str], logs: Path, port: int | None = None) -> subprocess.Popen:
    """One Airflow component as a child process (its own process group), output to logs/<name>.log."""
    airflow = Path(sys.executable).parent / "airflow"
    cmd = [str(airflow), name] + (["-H", "127.0.0.1", "-p", str(port)] if name == "api-server" else [])
    if name in ("scheduler", "triggerer"):
        # their log servers would listen on every interface; the API server reads the task logs from the disk
        cmd.append("--skip-serve-logs")
    logs.mkdir(parents=True, exist_ok=True)
    out = open(logs / f"{name}.log", "ab")  # noqa: SIM115 (the child owns it)
    return subprocess.Popen(cmd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[1]} exited with {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


def stop(procs: list[subprocess.Popen], timeout: float = 20) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kplan_airflow.stack", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="airflow-run", help="AIRFLOW_HOME, run folders and the sandbox (kept)")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--no-sandbox", action="store_true", help="no sandbox: define zookeeper_default yourself")
    args = ap.parse_args(argv)

    def stopped(signum: int, _frame: Any) -> None:
        raise Stopped(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stopped)
    root = Path(args.dir).absolute()
    sandbox = None
    procs: list[subprocess.Popen] = []
    try:
        if not args.no_sandbox:
            print("starting the sandbox cluster (real ZooKeeper + 6 emulated brokers)...", flush=True)
            sandbox = local.SandboxCluster(root / "sandbox")
            sandbox.up("demo")   # interrupted, `kplan sandbox up` takes down what it started
        base = f"http://127.0.0.1:{args.port}"
        env = local.environment(root / "airflow", zk_connect=sandbox.connect_string if sandbox else None,
                                base_url=base, runs_root=root / "runs")
        env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] = "False"
        env["AIRFLOW__CORE__PARALLELISM"] = str(parallelism())
        env["AIRFLOW__API__WORKERS"] = "1"
        local.activate(env)
        local.init_db()
        logs = root / "logs"
        procs.append(start_component("api-server", env, logs, args.port))
        wait_http(f"{base}/api/v2/monitor/health", 180, procs[0])
        procs += [start_component(n, env, logs) for n in COMPONENTS[1:]]
        pw = json.loads((root / "airflow" / "passwords.json").read_text())[local.USER]
        print(f"\nAirflow is up: {base}   login: {local.USER} / {pw}   (stored in {root / 'airflow' / 'passwords.json'})")
        print(f"  trigger a drain: {base}/dags/kafka_broker_drain (Trigger)   review plans: Browse -> Kafka plans")
        if sandbox:
            print(f"  sandbox: ZooKeeper {sandbox.connect_string}, brokers {sandbox.info.get('brokers')}; sizes file "
                  f"for the form: {sandbox.sizes}")
        print(f"  logs: {logs}   Ctrl-C (or SIGTERM to pid {os.getpid()}) stops everything; LocalExecutor "
              f"parallelism {env['AIRFLOW__CORE__PARALLELISM']}", flush=True)
        while all(p.poll() is None for p in procs):
            time.sleep(1)
        dead = [p.args[1] for p in procs if p.poll() is not None]
        print(f"stopped: {', '.join(dead)} exited (see {logs})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Stopped as e:
        print(f"{e}: stopping Airflow and the sandbox", file=sys.stderr, flush=True)
        return 143
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # a second SIGTERM must not cut the clean-up short
        stop(procs)
        if sandbox:
            sandbox.down()


if __name__ == "__main__":
    sys.exit(main())
