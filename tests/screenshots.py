"""Take the README's screenshots from a real run (not a test; run by hand):

    .venv/bin/python tests/screenshots.py [--dir screenshot-run] [--out docs]

Sandbox + Airflow on SQLite + a real `airflow api-server`; the drain DAG runs with dag.test() and, while its
approval waits, headless Chromium photographs the Required Actions page, then approves through the API; then
the plan page and the plan list inside the Airflow UI (Browse -> Kafka plans).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import airflow_support as af  # noqa: E402
from kplan_airflow import local, runs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="screenshot-run")
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    root, out = Path(args.dir).absolute(), Path(args.out).absolute()
    shutil.rmtree(root, ignore_errors=True)
    sandbox = local.SandboxCluster(root / "sandbox").up("demo")
    try:
        with af.airflow_env(root / "airflow", zk_connect=sandbox.connect_string, runs_root=root / "runs") as env, \
                af.api_server(env, root / "logs") as base, af.chromium(root / "profile", 1360, 960) as browser:
            browser.get(f"{base}/api/v2/monitor/health")
            browser.add_cookie({"name": "_token", "value": af.token(base), "path": "/"})

            def shoot(name: str, url: str, settle: float = 4.0, height: int | None = None) -> None:
                browser.set_window_size(1360, height or 960)
                browser.get(url)
                time.sleep(settle)  # the React UI renders asynchronously; nothing to poll for in general
                browser.save_screenshot(str(out / name))
                print("wrote", out / name, flush=True)

            def approve(detail: dict) -> str:
                ti = detail["task_instance"]
                shoot("airflow-approval.png", f"{base}/dags/{ti['dag_id']}/runs/{ti['dag_run_id']}/tasks/"
                      f"{ti['task_id']}/required_actions", settle=6, height=1100)
                return "Approve"

            dr, _ = af.run_dag("kafka_broker_drain", {"brokers": [1], "sizes": str(sandbox.sizes),
                                                      "throttle": 1_000_000_000},
                               decide=approve)
            page = f"{base}/kafka-plans/runs/kafka_broker_drain/{runs.run_key(dr.run_id)}"
            shoot("kafka-plan-page.png", page, height=2000)
            shoot("kafka-plans-in-airflow.png", f"{base}/plugin/kafka-plans", settle=6, height=700)
    finally:
        sandbox.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
