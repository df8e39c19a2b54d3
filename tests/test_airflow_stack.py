"""`make airflow` (python -m kplan_airflow.stack) for real: the sandbox, the API server, the scheduler, the
dag-processor and the triggerer started as a user does. Once everything is up and the DAGs are parsed and
unpaused, no DAG has a run (the nightly rebalance's first run is the next 02:00, not the one just past),
every component reports healthy (the triggerer too), the LocalExecutor has no more workers than CPUs; under
the real API server and scheduler, a trigger with a bad broker is refused with its reason and a run that fails
gets the planner's message as its note (the listener, in the scheduler's transaction); and a SIGTERM to the
stack leaves no process behind: every descendant and every process of its folder is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime

import airflow_support as af
import psutil

DAGS = {"kafka_broker_drain", "kafka_broker_restart", "kafka_broker_return", "kafka_nightly_rebalance"}


def _get(base: str, token: str, path: str) -> dict:
    req = urllib.request.Request(f"{base}{path}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _ours(root: str, pids: set[int]) -> list[psutil.Process]:
    """Processes started for this stack: the given pids and anything whose command line names its folder."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if p.pid in pids or root in " ".join(p.info["cmdline"] or ()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def _post(base: str, token: str, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"{base}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def failed_run_shows_its_reason(base: str, token: str) -> None:
    """Under the real scheduler (not dag.test()): a trigger with a negative broker is refused by the API
    server's check with its reason; a drain of broker 42, which the sandbox does not have, fails at risk and
    the plugin's listener writes the planner's message as the run's note, in the scheduler's transaction."""
    url = "/api/v2/dags/kafka_broker_drain/dagRuns"
    code, body = _post(base, token, url, {"logical_date": None, "conf": {"brokers": [-1]}})
    assert (code, body.get("detail")) == (400, "Brokers to drain: -1 is not a broker id: broker ids are 0 or "
                                               "more. Nothing was triggered."), body
    code, body = _post(base, token, url, {"logical_date": None, "conf": {"brokers": [42], "sizes_from": "none"}})
    assert code == 200, body
    run = f"{url}/{urllib.parse.quote(body['dag_run_id'], safe='')}"

    def ended():
        r = _get(base, token, run)
        return r if r["state"] in ("failed", "success") else None

    r = af.wait_for(ended, 180, "the drain of broker 42 to end")
    states = {t["task_id"]: t["state"] for t in _get(base, token, f"{run}/taskInstances")["task_instances"]}
    assert r["state"] == "failed" and (states["snapshot"], states["risk"]) == ("success", "failed"), (r, states)
    assert (r["note"] or "").startswith("Failed at risk: unknown broker id(s) [42]"), r


def test_make_airflow_runs_nothing_until_triggered_and_sigterm_stops_everything(tmp_path):
    root = tmp_path / "stack"
    (root / "airflow").mkdir(parents=True)
    (root / "airflow" / "passwords.json").write_text(json.dumps({af.local.USER: af.PASSWORD}))
    port = af.free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "KPLAN"))}
    proc = subprocess.Popen([sys.executable, "-m", "kplan_airflow.stack", "--dir", str(root), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        af.wait_for(lambda: any("Airflow is up" in x for x in lines) or proc.poll() is not None, 240,
                    "the stack to say it is up")
        assert proc.poll() is None, "".join(lines)[-3000:]
        token = af.token(base)

        def parsed():
            dags = {d["dag_id"]: d for d in _get(base, token, "/api/v2/dags")["dags"]}
            return DAGS <= set(dags) and all(not dags[d]["is_paused"] for d in DAGS) and \
                dags["kafka_nightly_rebalance"].get("next_dagrun_run_after") and dags

        dags = af.wait_for(parsed, 180, "the DAGs parsed and unpaused")

        def healthy():
            h = _get(base, token, "/api/v2/monitor/health")
            return all((h.get(c) or {}).get("status") == "healthy"
                       for c in ("metadatabase", "scheduler", "triggerer", "dag_processor")) and h

        af.wait_for(healthy, 120, "scheduler, triggerer and dag-processor healthy")
        first = datetime.fromisoformat(dags["kafka_nightly_rebalance"]["next_dagrun_run_after"].replace("Z", "+00:00"))
        assert first > datetime.now(UTC), first
        # the scheduler has looped with the DAGs unpaused (health above): nothing was started for anyone
        runs = _get(base, token, "/api/v2/dags/~/dagRuns")
        assert runs["total_entries"] == 0, runs
        pending = _get(base, token, "/api/v2/dags/~/dagRuns/~/hitlDetails?response_received=false")
        assert pending["total_entries"] == 0, pending
        failed_run_shows_its_reason(base, token)

        started = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        ours = _ours(str(root), started)
        names = " ".join(" ".join(p.cmdline()) for p in ours)
        for part in ("api_server", "scheduler", "dag-processor", "triggerer", "zookeeper", "planner.sandbox.daemon"):
            assert part in names, f"{part} not found among {names[:2000]}"   # the check sees what it must stop
        workers = [p for p in ours if "LocalExecutor" in " ".join(p.cmdline())]   # their process titles
        assert len(workers) == max(2, len(os.sched_getaffinity(0))), [p.cmdline() for p in workers]

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 143, "".join(lines)[-3000:]
        left = [(p.pid, " ".join(p.cmdline())[:200]) for p in _ours(str(root), {p.pid for p in ours})
                if p.is_running()]
        assert left == [], left
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in _ours(str(root), set()):
            p.kill()
