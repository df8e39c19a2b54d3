"""Take the README's screenshots from a real run (not a test; run by hand):

    .venv/bin/python tests/screenshots.py [--dir screenshot-run] [--out docs]

Sandbox + Airflow on SQLite + a real `airflow api-server`; the drain DAG runs with dag.test() and, while its
approval waits, headless Chromium photographs the Required Actions page, then approves through the API; then
the plan page (after apply and verify), the plan list inside the Airflow UI (Browse -> Kafka plans) and the
drain DAG's trigger form (its params; broker 1 picked in the broker picker, not submitted), then broker 99
typed in its JSON conf and refused with the reason.
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
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402


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
            shoot("kafka-plans-in-airflow.png", f"{base}{runs.PLUGIN_PAGES}/", settle=6, height=700)
            af.sync_dags()   # the form as the dag-processor shows it once the drain's snapshot saw the brokers
            trigger_form(browser, base, out / "airflow-trigger-form.png")
            refused(browser, out / "airflow-trigger-refused.png")
    finally:
        sandbox.down()
    return 0


def trigger_form(browser, base: str, path: Path) -> None:
    """The DAG page's Trigger button opens the form (Airflow 3.3 has no URL for it); pick broker 1 in the broker
    picker (the brokers of the latest snapshot, with their racks), open the list again to show the choices,
    and photograph it, unsubmitted."""
    browser.set_window_size(1360, 2300)
    browser.get(f"{base}/dags/kafka_broker_drain")

    def button():
        return [b for b in browser.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Trigger"]

    af.wait_for(button, 60, "the Trigger button on the DAG page")[0].click()
    af.wait_for(lambda: "Brokers to drain" in browser.find_element(By.TAG_NAME, "body").text, 60, "the trigger form")
    field = af.wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "[id^='element_brokers'] input"), 30,
                        "the broker picker")[0]
    field.click()
    field.send_keys("broker 1 ")
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    af.wait_for(lambda: "broker 1 · rack" in browser.find_element(By.CSS_SELECTOR, "[id^='element_brokers']").text,
                10, "broker 1 picked")
    ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()   # the list of the other brokers, open
    af.wait_for(lambda: "broker 2 · rack" in browser.find_element(By.TAG_NAME, "body").text, 10, "the options")
    time.sleep(1)  # the menu's opening animation; nothing to poll for
    browser.save_screenshot(str(path))
    print("wrote", path, flush=True)


def refused(browser, path: Path) -> None:
    """In the same dialog: broker 99 typed in the form's JSON conf (Advanced Options), Trigger pressed: the
    API server's reason at the top of the dialog; nothing triggered."""
    browser.find_element(By.XPATH, "//*[starts-with(text(), 'Trigger Dag')]").click()   # the picker's list closes
    af.trigger_dialog_conf(browser, '{"brokers": ["99"]}', "Nothing was triggered.")
    browser.execute_script("document.querySelector('.chakra-dialog__content').scrollIntoView()")
    browser.set_window_size(1360, 960)
    time.sleep(1)  # the resize's relayout; nothing to poll for
    browser.save_screenshot(str(path))
    print("wrote", path, flush=True)


if __name__ == "__main__":
    sys.exit(main())
