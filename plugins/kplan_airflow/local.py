"""Airflow on one machine, for the demo, `make airflow` and the tests: an AIRFLOW_HOME on SQLite with this
checkout's DAGs and plugin, connections for the sandbox, the apply pool, and an API client that answers an
approval the way the UI does (PATCH .../hitlDetails).

Only the demo and the tests answer approvals programmatically; a deployment answers them in the UI.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CHECKOUT = Path(__file__).resolve().parents[2]
DAGS = CHECKOUT / "dags"
PLUGINS = CHECKOUT / "plugins"
USER = "admin"


def environment(home: Path, *, zk_connect: str | None = None, spark_master: str = "local[2]",
                base_url: str = "http://127.0.0.1:8080", password: str | None = None,
                runs_root: Path | None = None) -> dict[str, str]:
    """The environment of an embedded Airflow in `home` (written: the password file). Nothing is applied."""
    home = Path(home).absolute()
    home.mkdir(parents=True, exist_ok=True)
    pw_file = home / "passwords.json"
    if password is None:
        password = json.loads(pw_file.read_text())[USER] if pw_file.exists() else secrets.token_urlsafe(12)
    pw_file.write_text(json.dumps({USER: password}))
    pw_file.chmod(0o600)
    secret_file = home / "jwt_secret"
    if not secret_file.exists():
        secret_file.write_text(secrets.token_urlsafe(48))
        secret_file.chmod(0o600)
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(pw_file),
        "AIRFLOW__API_AUTH__JWT_SECRET": secret_file.read_text(),
        "AIRFLOW__API__BASE_URL": base_url,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url}/execution/",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": "0",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__KPLAN__RUNS_ROOT": str(runs_root or home / "kplan-runs"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": spark_master}),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    if zk_connect:
        hosts, _, chroot = zk_connect.partition("/")
        env["AIRFLOW_CONN_ZOOKEEPER_DEFAULT"] = json.dumps({"conn_type": "zookeeper", "host": hosts,
                                                           "schema": chroot})
    return env


def activate(env: dict[str, str]) -> None:
    """Apply `env` to this process; when Airflow is already imported, point its settings and ORM at it."""
    os.environ.update(env)
    import sys

    if "airflow.settings" in sys.modules:
        from airflow import settings
        from airflow.configuration import conf

        conf.read_dict({})  # env vars are read at each get; nothing cached to clear for our keys
        settings.AIRFLOW_HOME = env["AIRFLOW_HOME"]
        settings.configure_vars()
        settings.dispose_orm()
        settings.configure_orm()


def init_db(pool: str | None = None) -> None:
    """Create the metadata DB in process (SQLite) and the 1-slot apply pool."""
    from airflow.models.pool import Pool
    from airflow.utils.db import initdb

    from kplan_airflow import runs

    initdb()
    Pool.create_or_update_pool(pool or runs.apply_pool(), slots=1,
                               description="one Kafka reassignment at a time (kplan)", include_deferred=False)


class ApiClient:
    """The Airflow REST API in process (FastAPI's TestClient on airflow's app), logged in like a user."""

    def __init__(self, password: str, apps: str = "core"):
        from airflow.api_fastapi.app import create_app
        from fastapi.testclient import TestClient

        self.client = TestClient(create_app(apps=apps))
        r = self.client.post("/auth/token", json={"username": USER, "password": password})
        r.raise_for_status()
        self.token = r.json()["access_token"]
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str, **kw: Any) -> Any:
        return self.client.get(path, headers=self.headers, **kw)

    def patch(self, path: str, **kw: Any) -> Any:
        return self.client.patch(path, headers=self.headers, **kw)

    def pending_approvals(self, dag_id: str) -> list[dict[str, Any]]:
        r = self.get(f"/api/v2/dags/{dag_id}/dagRuns/~/hitlDetails", params={"response_received": "false"})
        r.raise_for_status()
        return r.json().get("hitl_details", [])

    def answer(self, dag_id: str, run_id: str, task_id: str, option: str) -> Any:
        return self.patch(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails",
                          json={"chosen_options": [option], "params_input": {}})


PARKED = ("awaiting_input", "deferred")   # the states PATCH hitlDetails resumes a task from


@dataclass
class Approver:
    """Answers the first approval of `dag_id` from a background thread (dag.test() runs in the main thread
    and waits for an answer). `decide(detail) -> "Approve" | "Reject"`; a watchdog answers Reject after
    `deadline` seconds so a run can never hang, and records that it had to."""

    api: ApiClient
    dag_id: str
    decide: Callable[[dict[str, Any]], str]
    deadline: float = 600.0
    poll: float = 0.5
    seen: dict[str, Any] | None = None
    answered: str | None = None
    watchdog_fired: bool = False
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Approver:
        self._thread = threading.Thread(target=self._run, name=f"approver-{self.dag_id}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        end = time.monotonic() + self.deadline
        try:
            while not self._stop.is_set():
                expired = time.monotonic() > end
                # only a task parked for its answer: the API resumes a task that is awaiting_input (or
                # deferred) when the answer comes; one answered while it is still running, before it parks,
                # keeps the answer but is never resumed (Airflow 3.3's PATCH hitlDetails), and the run hangs
                pending = [d for d in self.api.pending_approvals(self.dag_id)
                           if (d.get("task_instance") or {}).get("state") in PARKED]
                if pending:
                    d = pending[0]
                    ti = d.get("task_instance") or {}
                    option = "Reject" if expired else self.decide(d)
                    self.watchdog_fired = expired
                    r = self.api.answer(self.dag_id, ti["dag_run_id"], ti["task_id"], option)
                    r.raise_for_status()
                    self.seen, self.answered = d, option
                    return
                self._stop.wait(self.poll)
        except BaseException as e:  # reported to the caller, who is in the main thread
            self.error = e


class SandboxCluster:
    """A sandbox cluster (real ZooKeeper + emulated brokers) through the public `kplan sandbox` commands."""

    def __init__(self, directory: Path):
        self.dir = Path(directory).absolute()

    def _kplan(self, *args: str, quiet: bool = False) -> None:
        import subprocess
        import sys

        kplan = Path(sys.executable).parent / "kplan"
        out = subprocess.DEVNULL if quiet else None
        cmd = [str(kplan), "sandbox", *args, "--dir", str(self.dir)]
        # its own process group, so a terminal's Ctrl-C reaches only us; when we are interrupted (the demo's
        # SIGINT/SIGTERM handler raises), it gets one SIGINT, kplan's Ctrl-C path: it takes down what it
        # started, where a kill would orphan the JVM or daemon it was starting
        proc = subprocess.Popen(cmd, stdout=out, process_group=0)
        try:
            rc = proc.wait()
        except BaseException:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
        if rc:
            raise subprocess.CalledProcessError(rc, cmd)

    def up(self, preset: str = "demo", catch_up_delay: float | None = None) -> SandboxCluster:
        if (self.dir / "sandbox.json").exists():
            self.down()
        self._kplan("up", "--preset", preset,
                    *(("--catch-up-delay", str(catch_up_delay)) if catch_up_delay is not None else ()))
        return self

    def down(self) -> None:
        if (self.dir / "sandbox.json").exists():
            self._kplan("down", quiet=True)

    @property
    def info(self) -> dict[str, Any]:
        return json.loads((self.dir / "sandbox.json").read_text())

    @property
    def connect_string(self) -> str:
        return self.info["connect"]

    @property
    def sizes(self) -> Path:
        return self.dir / "logdirs.json"
