"""The DAGs for real: DagBag import (no errors, no heavy imports), dag.test() of the drain and the nightly
rebalance on a sandbox cluster with the risk tasks on a real Spark standalone master and worker, an approval
answered through Airflow's REST API, the plans applied and verified (the cluster checked afterwards, then
broker 1 killed: nothing offline), and the refusals (bad form, unknown broker, rejected approval, busy
cluster) ending with nothing applied. The cluster is read straight from ZooKeeper to check what happened.

One AIRFLOW_HOME (SQLite, migrated in process) and one sandbox for the module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import airflow_support as af
import pytest
from kplan_airflow import runs

from planner.sandbox import Sandbox

DRAIN, RETURN, REBALANCE = "kafka_broker_drain", "kafka_broker_return", "kafka_nightly_rebalance"
# set, like every throttle, and removed by verify (checked below); high enough that the sandbox copies the
# demo cluster's 1.9 GiB in seconds rather than at the plans' 10 MiB/s floor
THROTTLE = 1_000_000_000


@pytest.fixture(scope="module")
def env(tmp_path_factory, zk_server):
    base = tmp_path_factory.mktemp("airflow_dags")
    # the demo cluster at the tests' pace: a moved replica joins the ISR one 0.1 s tick after its copy, not the
    # demo's 0.5 s, which each of the drain's 37 batches waited (apply: 21.7 s then, 0.2 s: 10.7 s)
    sandbox = Sandbox.up(base / "sandbox", preset="demo", zk=zk_server.connect_string, chroot="/airflow_dags",
                         catch_up_delay=0.1)
    try:
        with af.airflow_env(base / "home", zk_connect=sandbox.connect_string, spark_master="local[2]") as e:
            yield {"sandbox": sandbox, "zk": sandbox.connect_string, "env": e, "base": base,
                   "sizes": str(sandbox.dir / "logdirs.json"), "runs": runs.runs_root()}
    finally:
        sandbox.down()


def run_folder(dr):
    return runs.run_folder(dr.dag_id, dr.run_id)


def run_note(dr) -> str | None:
    """The DAG run's note as stored in Airflow's database (what the UI shows)."""
    from airflow.models import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.query(DagRun).filter(DagRun.dag_id == dr.dag_id, DagRun.run_id == dr.run_id).one().note


def test_dagbag_imports_both_dags_without_errors_or_heavy_imports():
    code = """
import json, sys, time
from datetime import UTC, datetime
from airflow.dag_processing.dagbag import DagBag


def nightly(dag):
    # the scheduler's view: the serialized DAG's timetable asked for the first run, as for a new DAG
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.base import TimeRestriction

    s = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    first = s.timetable.next_dagrun_info(last_automated_data_interval=None, restriction=TimeRestriction(
        earliest=s.start_date, latest=None, catchup=s.catchup))
    return {"cron": s.timetable._expression, "catchup": s.catchup, "max_active_runs": dag.max_active_runs,
            "first_run_in_future": first.run_after > datetime.now(UTC)}


def ok(p, value):
    try:
        p.resolve(value)
        return True
    except Exception:
        return False


t = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1], safe_mode=False)
heavy = [m for m in ("ortools", "pyspark", "kazoo", "pandas", "pyarrow", "numpy", "plotly") if m in sys.modules]
d = bag.dags["kafka_broker_drain"]
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dags),
                  "heavy": heavy, "seconds": time.perf_counter() - t,
                  "brokers": d.params.get_param("brokers").schema,
                  "leader_scope": d.params.get_param("leader_scope").schema, "retries": {t.task_id: t.retries for t in d.tasks},
                  "pools": {t.task_id: t.pool for t in d.tasks},
                  "approval": [d.get_task("approve").defaults, d.get_task("approve").response_timeout.total_seconds(),
                               type(d.get_task("approve")).__mro__[1].__name__],
                  "nightly": nightly(bag.dags["kafka_nightly_rebalance"]),
                  "throttle_ok": {i: [ok(dag.params.get_param("throttle"), v) for v in (102_399, 102_400, None)]
                                  for i, dag in bag.dags.items()}}))
"""
    out = subprocess.run([sys.executable, "-c", code, str(af.local.DAGS)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["errors"] == {}
    assert r["dags"] == [DRAIN, "kafka_broker_restart", RETURN, REBALANCE]
    assert r["heavy"] == [], f"DAG files imported {r['heavy']} at parse time"
    assert r["brokers"]["type"] == "array" and r["brokers"]["minItems"] == 1 and r["brokers"]["uniqueItems"]
    assert r["leader_scope"]["enum"] == ["touched", "all"]
    assert r["retries"]["apply"] == 0 and r["retries"]["snapshot"] > 0 and r["retries"]["verify"] > 0
    assert r["pools"]["apply"] == r["pools"]["verify"] == "kplan_apply"
    # no answer in time -> the scheduler takes the defaults as the answer: Reject
    assert r["approval"] == [["Reject"], 24 * 3600, "ApprovalOperator"]
    # issue 20: a new deployment (or `make airflow`) does not start a rebalance for the 02:00 just past
    assert r["nightly"] == {"cron": "0 2 * * *", "catchup": False, "max_active_runs": 1, "first_run_in_future": True}
    # every form refuses a throttle below the executor's floor (100 KiB/s), which the apply or roll would refuse
    # only after the review
    assert r["throttle_ok"] == {i: [False, True, True] for i in r["dags"]}


@pytest.mark.parametrize("conf", [{"brokers": []}, {"brokers": ["one"]}, {"brokers": [1, 1]}, {}])
def test_invalid_form_is_refused_before_any_task(env, conf):
    from airflow.sdk.definitions.param import ParamValidationError

    before = set(env["runs"].rglob("*")) if env["runs"].exists() else set()
    with pytest.raises(ParamValidationError):
        af.load_dag(DRAIN).test(run_conf=conf)
    after = set(env["runs"].rglob("*")) if env["runs"].exists() else set()
    assert after == before, "a refused trigger wrote files"


@pytest.fixture(scope="module")
def drain_run(env):
    """One drain of broker 1, approved, applied and verified (Spark: spark_default = local[2])."""
    start = af.assignment(env["zk"])
    af.WAITING.clear()
    with pytest.MonkeyPatch.context() as mp:   # the approval's notifier calls a deployment's hook too
        mp.setenv("AIRFLOW__KPLAN__APPROVAL_NOTIFY_CALLBACK", "airflow_support:record_waiting")
        dr, approver = af.run_dag(DRAIN, {"brokers": [1], "sizes": env["sizes"], "shutdown_mode": "both",
                                          "throttle": THROTTLE}, decide=lambda d: "Approve")
    return {"dr": dr, "approver": approver, "start": start, "end": af.cluster_state(env["zk"]),
            "waiting": list(af.WAITING)}


def check_applied(plan: dict, end: af.ClusterState, report: dict) -> None:
    """The cluster, read raw from ZooKeeper, is exactly at the plan's targets: led, fully in sync, nothing
    reassigning, no throttle left anywhere; and report.json says the same."""
    for m in plan["moves"]:
        k = (m["topic"], m["partition"])
        assert end.assignment[k] == m["to"], (k, end.assignment[k], m["to"])
        leader, isr = end.leader_isr[k]
        assert leader in m["to"] and sorted(isr) == sorted(m["to"]), (k, leader, isr)
    assert not end.reassigning and end.throttles == {}, end.throttles
    assert report["converged"] is True
    assert report["partitions"]["converged"] == report["partitions"]["total"] == len(plan["moves"])
    assert report["offline_count"] == 0 and report["throttles_remaining"] == []
    assert report["run_throttles_remaining"] is False  # the run's own throttle record is empty


def test_drain_end_to_end(env, drain_run):
    dr, approver, start, end = drain_run["dr"], drain_run["approver"], drain_run["start"], drain_run["end"]
    st = af.states(dr)
    assert str(dr.state) in ("success", "DagRunState.SUCCESS"), st
    assert st.pop("follow_up") == "skipped", st   # broker 1 is empty: no follow-up drain to offer
    assert all(v == "success" for v in st.values()), st
    folder = run_folder(dr)
    plan = json.loads((folder.plan / "plan.json").read_text())
    # Independent check of the plan against the cluster as ZooKeeper had it: every partition that had a
    # replica on broker 1 is moved, and its target leaves broker 1 with the same replication factor.
    on_1 = {k for k, r in start.items() if 1 in r}
    moved = {(m["topic"], m["partition"]): m for m in plan["moves"]}
    # the form's default leader scope: only those partitions change, not even a preferred leader elsewhere
    assert plan["parameters"]["leader_scope"] == "touched" and set(moved) == on_1
    for k in on_1:
        assert 1 not in moved[k]["to"] and len(moved[k]["to"]) == len(start[k])
    # The approval showed the plan, the risk before and after, and the plan page's link.
    body = approver.seen["body"]
    assert plan["id"][:19] in body and "CRITICAL" in body and "LOW" in body
    page = f"{runs.PLUGIN_PAGES}/runs/{DRAIN}/{runs.run_key(dr.run_id)}"
    assert page in body
    # a person was told the plan waits: the approval's notifier, in its file and through the deployment's hook
    told = [json.loads(x) for x in (env["runs"] / "waiting-approvals.jsonl").read_text().splitlines()]
    mine = [m for m in told if m["run_id"] == dr.run_id]
    assert len(mine) == 1 and drain_run["waiting"] == mine, (mine, drain_run["waiting"])
    assert (mine[0]["plan_id"], mine[0]["task_id"], mine[0]["kind"]) == (plan["id"], "approve", "drain")
    assert mine[0]["plan_url"].endswith(page) and mine[0]["approval_url"].endswith(
        f"/dags/{DRAIN}/runs/{quote(dr.run_id, safe='')}/tasks/approve/required_actions")
    assert f"Plan {plan['id'][7:19]} (drain) waits for approval in {DRAIN} run {dr.run_id}" in mine[0]["text"]
    after = json.loads((folder.risk_after / "summary.json").read_text())
    assert after["level_by_state"] == {"current": "critical", "plan": "low"}  # the RF=1 partitions move
    review = json.loads((folder.root / runs.REVIEW).read_text())
    assert review["plan_id"] == plan["id"] and review["approved_by"] and review["status"] == "done"
    # applied and verified: the cluster holds nothing on broker 1 any more
    check_applied(plan, end, json.loads(folder.report.read_text()))
    assert not any(1 in r for r in end.assignment.values())
    assert json.loads((folder.apply / "outcome.json").read_text())["state"] == "completed"


def test_after_the_drain_killing_broker_1_takes_nothing_offline(env, drain_run):
    """The incident, prevented: after the applied drain, a hard failure of broker 1 leaves every partition led
    (before it, the RF=1 partitions on broker 1 went offline: leader -1)."""
    sandbox = env["sandbox"]
    sandbox.kill([1])
    try:
        after = af.cluster_state(env["zk"])
        offline = sorted(k for k, (leader, _) in after.leader_isr.items() if leader < 0)
        assert offline == [], offline
        assert after.assignment == drain_run["end"].assignment
    finally:
        sandbox.start([1])
        sandbox.wait_settled(60)


@pytest.fixture(scope="module")
def ui(env, tmp_path_factory):
    """One real `airflow api-server` (this module's AIRFLOW_HOME) and one headless Chromium for the module's
    browser checks, started when the first test needs them."""
    tmp = tmp_path_factory.mktemp("ui")
    with af.api_server(dict(os.environ), tmp / "logs") as base, af.chromium(tmp / "profile") as browser:
        yield {"base": base, "browser": browser, "token": af.token(base)}


def seen(ui, path: str, *texts: str, timeout: float = 60) -> str:
    """Open `path` in the browser (logged in) and wait until the page shows every one of `texts`; returns
    the page's visible text. What a person sees, not what an API returns."""
    from selenium.webdriver.common.by import By

    browser = ui["browser"]
    if not browser.get_cookie("_token"):
        browser.get(f"{ui['base']}/api/v2/monitor/health")
        browser.add_cookie({"name": "_token", "value": ui["token"], "path": "/"})
    browser.get(f"{ui['base']}{path}")

    def shown():
        body = browser.find_element(By.TAG_NAME, "body").text
        return body if all(t in body for t in texts) else None

    try:
        return af.wait_for(shown, timeout, f"{path} to show {texts}")
    except TimeoutError:
        raise AssertionError(f"{path} does not show {texts}; it shows:\n"
                             f"{browser.find_element(By.TAG_NAME, 'body').text[:3000]}") from None


def test_review_ui_in_headless_chromium(env, drain_run, ui):
    """The plan page of the drain above, served by a real `airflow api-server`, in Debian's Chromium."""
    from selenium.webdriver.common.by import By

    dr = drain_run["dr"]
    plan = json.loads((run_folder(dr).plan / "plan.json").read_text())
    page = f"/kafka-plans/runs/{DRAIN}/{runs.run_key(dr.run_id)}"
    base, browser = ui["base"], ui["browser"]
    browser.get(f"{base}/api/v2/monitor/health")
    browser.delete_all_cookies()
    browser.get(f"{base}{page}")
    assert "Kafka plans" not in browser.title  # refused: no token yet
    browser.add_cookie({"name": "_token", "value": ui["token"], "path": "/"})
    browser.get(f"{base}{page}")
    af.wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#chart-replicas .main-svg .point"), 60,
                "the replicas chart")
    af.wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#chart-leaders .main-svg .point"), 30,
                "the preferred-leaders chart")
    rows = af.wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#moves tbody tr"), 30, "move rows")
    assert len(rows) == len(plan["moves"])
    browser.find_element(By.ID, "move-filter").send_keys("legacy-rf1")
    want = sorted(m["partition"] for m in plan["moves"] if m["topic"] == "legacy-rf1")
    af.wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#moves tbody tr")) == len(want), 30,
                "the filtered move rows")
    got = sorted(int(r.find_elements(By.TAG_NAME, "td")[1].text)
                 for r in browser.find_elements(By.CSS_SELECTOR, "#moves tbody tr"))
    assert got == want
    risk = browser.find_element(By.ID, "risk").text
    assert "drain 1 [controlled]" in risk and "CRITICAL" in risk and "LOW" in risk
    assert "reassignment.json" in browser.find_element(By.TAG_NAME, "body").text
    shot = env["base"] / "plan.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 20_000
    # the drain's snapshot was taken before broker 1 was drained: none in maintenance then, and it says so,
    # with an icon Chromium draws (an SVG: the emoji before it had no font here and showed as a box)
    maintenance = browser.find_element(By.ID, "maintenance")
    assert maintenance.text == "brokers in maintenance: none (when the snapshot was taken)"
    icon = maintenance.find_element(By.CSS_SELECTOR, "svg.icon")
    assert icon.size["width"] >= 10 and icon.size["height"] >= 10, icon.size
    # who approved it, on the plan page and the run's note (Airflow's runs list and run page)
    note = f"Approved by {af.local.USER}: plan {plan['id'][7:19]} applied and verified"
    assert browser.find_element(By.ID, "decision").text == f"Approval: approved by {af.local.USER}"
    assert run_note(dr) == note
    seen(ui, f"/dags/{DRAIN}/runs/{quote(dr.run_id, safe='')}", note)
    # the plan page inside Airflow's UI: the route names the plugin once; the old doubled one lands there too
    key = runs.run_key(dr.run_id)
    for path in (f"{runs.PLUGIN_PAGES}/runs/{DRAIN}/{key}", f"/plugin/kafka-plans/kafka-plans/runs/{DRAIN}/{key}"):
        browser.get(f"{base}{path}")
        af.wait_for(lambda: browser.current_url == f"{base}{runs.PLUGIN_PAGES}/runs/{DRAIN}/{key}", 30,
                    f"{path} at the new route")
        frame = af.wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "iframe[title='Kafka plans']"), 60,
                            "the plan page's frame")[0]
        browser.switch_to.frame(frame)
        try:
            af.wait_for(lambda: plan["id"][7:19] in browser.find_element(By.TAG_NAME, "body").text, 60,
                        "the plan page in the frame")
        finally:
            browser.switch_to.default_content()
    # a restart plan of broker 2 made now, with broker 1 drained by the run above: its page shows the roll
    # step by step and names broker 1 as left out (no temporary replica goes to a drained broker)
    from planner import api

    snap = env["base"] / "snap-after-drain"
    api.snapshot(api.SnapshotRequest(zk=env["zk"], out=snap, sizes=Path(env["sizes"])))
    rf = runs.run_folder("kafka_broker_restart", "manual__chromium")
    restart = api.plan_restart(api.RestartRequest(snapshot=snap, out=rf.plan, brokers=(2,))).plan
    assert restart.moves and all(1 not in m.to_replicas for m in restart.moves)
    runs.update_review(rf, dag_id="kafka_broker_restart", run_id="manual__chromium", run_key="manual__chromium",
                       kind="restart", plan_id=restart.id, status="awaiting approval", approval_task_id="approve")
    body = seen(ui, "/kafka-plans/runs/kafka_broker_restart/manual__chromium", "Restart roll", "step 1/1: broker 2",
                "step-001-broker-2-demote.json")
    assert "Restart roll" in body
    assert ("left out (in maintenance: no replica, no preferred leadership): broker 1 drained since"
            in browser.find_element(By.ID, "maintenance").text)


def test_rejected_approval_applies_nothing(env, ui):
    """Also the risk task on a real standalone Spark master and worker, through spark_default."""
    start = af.assignment(env["zk"])
    with af.spark_standalone(env["base"] / "spark") as spark, pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": spark.url}))
        dr, approver = af.run_dag(DRAIN, {"brokers": [2], "sizes": env["sizes"], "shutdown_mode": "controlled"},
                                  decide=lambda d: "Reject", mark_success="risk_after")
        apps = [a["name"] for a in spark.applications()]
    assert apps == ["kplan-drain-risk"], apps
    risk = json.loads((run_folder(dr).risk / "summary.json").read_text())
    assert [s["name"] for s in risk["scenarios"]] == ["drain 2 [controlled]"]
    st = af.states(dr)
    assert approver.answered == "Reject"
    # a rejected run reads as rejected, not as a green success: the approval fails saying who rejected it
    assert "failed" in str(dr.state) and st["approve"] == "failed", st
    assert st["apply"] == st["verify"] == st["report"] == "upstream_failed", st
    assert af.assignment(env["zk"]) == start
    assert not af.znode_exists(env["zk"], "/admin/reassign_partitions")
    folder = run_folder(dr)
    assert not folder.apply.exists()
    review = json.loads((folder.root / runs.REVIEW).read_text())
    assert review["status"] == "rejected" and review["rejected_by"] == af.local.USER
    assert review["error"].startswith(f"Rejected by {af.local.USER}: plan {review['plan_id'][7:19]} was not applied")
    assert run_note(dr) == review["error"]
    assert not (folder.root / "report.json").exists()
    # seen in the browser: the run in Airflow's runs list (failed, with its note), the plan list, the plan page
    seen(ui, f"/dags/{DRAIN}/runs/{quote(dr.run_id, safe='')}", review["error"])
    listing = seen(ui, "/kafka-plans/", review["error"])
    row = next(x for x in listing.splitlines() if review["plan_id"][7:19] in x)
    assert "rejected" in row, row
    seen(ui, f"/kafka-plans/runs/{DRAIN}/{runs.run_key(dr.run_id)}", review["error"],
         "Apply and verify\nnot started: rejected by admin")


def test_trigger_form_offers_the_clusters_brokers_with_their_racks(env, drain_run, ui):
    """The drain's snapshot recorded the brokers; the form (DAG page -> Trigger; the DAG as the runs above
    stored it) offers them as a multi-select labelled with id and rack, read here raw from ZooKeeper."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    racks = {b: (af.znode_json(env["zk"], f"/brokers/ids/{b}") or {}).get("rack") for b in range(1, 7)}
    assert all(racks.values()), racks
    labels = [f"broker {b} · rack {racks[b]}" for b in range(1, 7)]
    af.sync_dags()   # the DAG files parsed again, as the dag-processor would, now that a snapshot saw the brokers
    browser = ui["browser"]
    seen(ui, f"/dags/{DRAIN}", "Trigger")
    next(b for b in browser.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Trigger").click()
    af.wait_for(lambda: "Brokers to drain" in browser.find_element(By.TAG_NAME, "body").text, 60, "the form")
    field = af.wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "[id^='element_brokers'] input"), 30,
                        "the brokers field")[0]
    field.click()
    ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()
    def options() -> str | None:
        text = browser.find_element(By.TAG_NAME, "body").text
        return text if labels[0] in text else None

    body = af.wait_for(options, 30, "the broker options")
    assert all(label in body for label in labels), body[-2000:]
    # pick brokers 2 and 5: the field shows their labels, nothing typed
    for b in (2, 5):
        field.send_keys(f"broker {b} ")
        ActionChains(browser).send_keys(Keys.ENTER).perform()
    chosen = browser.find_element(By.CSS_SELECTOR, "[id^='element_brokers']").text
    assert labels[1] in chosen and labels[4] in chosen and labels[0] not in chosen, chosen
    browser.save_screenshot(str(env["base"] / "trigger-form.png"))
    # a broker the cluster does not have cannot be chosen at all
    field.send_keys("99")
    af.wait_for(lambda: "No options" in browser.find_element(By.TAG_NAME, "body").text, 30, "'No options'")
    field.send_keys(Keys.BACKSPACE, Keys.BACKSPACE)
    browser.find_element(By.XPATH, "//*[starts-with(text(), 'Trigger Dag')]").click()   # the list closes
    # ... and typed in the form's JSON conf (Advanced Options), it is refused with the reason, in the dialog,
    # before any run exists (the API server's check, kplan_airflow.trigger_check)
    before = runs_of(ui, DRAIN)
    have = ", ".join(str(b) for b in range(1, 7))
    for brokers, reason in (('["99"]', "Brokers to drain: broker 99 is not in the cluster: the latest snapshot "),
                            ("[-1]", "Brokers to drain: -1 is not a broker id: broker ids are 0 or more. Nothing "
                                     "was triggered."),
                            ('["1,2"]', 'Brokers to drain: "1,2" names several brokers in one entry')):
        shown = af.trigger_dialog_conf(browser, '{"brokers": ' + brokers + "}", reason)
        if brokers == '["99"]':
            assert f"has brokers {have}. Nothing was triggered." in shown, shown
    assert runs_of(ui, DRAIN) == before, "a refused trigger created a run"
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)


def runs_of(ui, dag_id: str) -> list[str]:
    """The DAG's runs, through Airflow's REST API."""
    import urllib.request

    req = urllib.request.Request(f"{ui['base']}/api/v2/dags/{dag_id}/dagRuns?limit=100",
                                 headers={"Authorization": f"Bearer {ui['token']}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return sorted(d["dag_run_id"] for d in json.loads(r.read())["dag_runs"])


def test_unknown_broker_fails_the_run_early_and_applies_nothing(env, ui):
    start = af.assignment(env["zk"])
    dr, _ = af.run_dag(DRAIN, {"brokers": [1, 42]}, decide=lambda d: "Approve", deadline=120)
    st = af.states(dr)
    assert "failed" in str(dr.state), st
    assert st["snapshot"] == "success" and st["risk"] == "failed", st
    assert {st[t] for t in ("plan", "risk_after", "publish", "approve", "apply", "verify", "report")} == {
        "upstream_failed"}, st
    folder = run_folder(dr)
    assert not folder.plan.exists() and not folder.risk.exists()
    assert af.assignment(env["zk"]) == start
    # the planner's one-line message where operators look: the run's note and the review record (plan pages)
    msg = "unknown broker id(s) [42]"
    review = json.loads((folder.root / runs.REVIEW).read_text())
    assert (review["status"], review["failed_task"]) == ("failed at risk", "risk")
    assert review["error"].startswith(msg) and "Traceback" not in review["error"]
    assert run_note(dr).startswith(f"Failed at risk: {msg}")
    # seen in the browser: the message on the run's page in Airflow, and on the run's page in Kafka plans
    seen(ui, f"/dags/{DRAIN}/runs/{quote(dr.run_id, safe='')}", f"Failed at risk: {msg}")
    seen(ui, f"/kafka-plans/runs/{DRAIN}/{runs.run_key(dr.run_id)}", f"Failed at risk: {msg}",
         "No plan was made in this run")


def test_nightly_rebalance_end_to_end(env, drain_run):
    """After the drain of broker 1 (issue 17: the nightly run put 160 replicas back on it): broker 1 is drained,
    the plan gives it nothing and its approval says why."""
    assert af.znode_json(env["zk"], "/kplan/maintenance/1")["state"] == "drained"
    start = af.assignment(env["zk"])
    assert not any(1 in r for r in start.values())
    dr, approver = af.run_dag(REBALANCE, {"sizes": env["sizes"], "max_moves": 40, "throttle": THROTTLE},
                              decide=lambda d: "Approve")
    st = af.states(dr)
    assert all(v == "success" for v in st.values()), st
    folder = run_folder(dr)
    plan = json.loads((folder.plan / "plan.json").read_text())
    assert plan["kind"] == "rebalance" and 0 < plan["summary"]["replica_moves"] <= 40
    for m in plan["moves"]:
        assert m["from"] == start[(m["topic"], m["partition"])]
    end = af.cluster_state(env["zk"])
    check_applied(plan, end, json.loads(folder.report.read_text()))
    moved = {(m["topic"], m["partition"]) for m in plan["moves"]}
    assert {k: r for k, r in end.assignment.items() if k not in moved} == {
        k: r for k, r in start.items() if k not in moved}, "a partition outside the plan changed"
    # the sweep after the plan still finds the RF=1 topic critical: above the auto-approve level, so a
    # person was asked
    assert approver.answered == "Approve"
    assert "auto-approve" in approver.seen["body"]
    # the drained broker got nothing, and everyone who reads the plan is told why
    assert not [m for m in plan["moves"] if 1 in m["to"]] and not any(1 in r for r in end.assignment.values())
    assert plan["summary"]["left_out_brokers"] == [1]
    assert "left out (in maintenance: no replica, no preferred leadership): broker 1 drained since" in \
        approver.seen["body"]
    assert any(w.startswith("left out:") and "broker 1 (drained" in w for w in plan["warnings"])


def test_return_brings_broker_1_back_to_its_share_and_out_of_maintenance(env, drain_run):
    """The way back (issue 17 part 3), after the drain and the nightly rebalance above: replicas move only onto
    broker 1, which ends at its share of replicas, leading again, and out of maintenance."""
    start = af.assignment(env["zk"])
    # every move lands on broker 1: 40 at a time keeps the batches few (the per-broker default of 5 would make
    # ~40 batches of this demo cluster, each a round trip of the emulated controller)
    dr, approver = af.run_dag(RETURN, {"brokers": [1], "sizes": env["sizes"], "throttle": THROTTLE,
                                       "reason": "disk replaced", "max_concurrent_per_broker": 40},
                              decide=lambda d: "Approve", mark_success="risk_after")
    st = af.states(dr)
    assert all(v == "success" for v in st.values()), st
    folder = run_folder(dr)
    plan = json.loads((folder.plan / "plan.json").read_text())
    assert plan["kind"] == "return" and plan["parameters"]["drain_plans"] == [
        json.loads((run_folder(drain_run["dr"]).plan / "plan.json").read_text())["id"]]
    for m in plan["moves"]:
        assert m["from"] == start[(m["topic"], m["partition"])]
        assert set(m["to"]) - set(m["from"]) <= {1}, m
    body = approver.seen["body"]
    assert "returning: broker 1 drained since" in body and "moves reversed" in body
    end = af.cluster_state(env["zk"])
    check_applied(plan, end, json.loads(folder.report.read_text()))
    counts: dict[int, int] = {}
    for reps in end.assignment.values():
        for b in reps:
            counts[b] = counts.get(b, 0) + 1
    total, n = sum(counts.values()), len(counts)
    assert total // n <= counts[1] <= -(-total // n), counts   # its share of the replicas
    assert any(leader == 1 for leader, _ in end.leader_isr.values())   # and it leads again
    assert af.znode_json(env["zk"], "/kplan/maintenance/1") is None
    assert json.loads(folder.report.read_text())["maintenance"]["set"] == {"1": None}


def test_nightly_rebalance_skips_while_a_broker_is_in_maintenance_part_way(env, zk_client, zk_connect,
                                                                           monkeypatch):
    from planner import loader

    loader.load_cluster(zk_client, {"brokers": [{"id": 1, "rack": "a"}, {"id": 2, "rack": "b"}], "topics": [
        {"name": "t", "partitions": [{"replicas": [1, 2]}, {"replicas": [2, 1]}]}]})
    entry = {"format": "kplan-maintenance/1", "broker": 2, "state": "restarting", "plan_id": "sha256:" + "e" * 64,
             "run": None, "by": {}, "since": "2026-11-25T10:00:00Z", "reason": "OS patch"}
    zk_client.create("/kplan/maintenance/2", json.dumps(entry).encode(), makepath=True)
    hosts, _, chroot = zk_connect.partition("/")
    monkeypatch.setenv("AIRFLOW_CONN_ZK_MAINT", json.dumps({"conn_type": "zookeeper", "host": hosts,
                                                            "schema": chroot}))
    # nothing listens at these brokers' registered endpoints: a count-only snapshot, said explicitly
    dr, approver = af.run_dag(REBALANCE, {"zk_conn_id": "zk_maint", "sizes_from": "none"})
    st = af.states(dr)
    assert st["snapshot"] == "success" and st["check_idle"] == "skipped", st
    assert approver.answered is None and not run_folder(dr).plan.exists()


def test_nightly_rebalance_skips_while_a_reassignment_is_in_flight(env, zk_client, zk_connect, monkeypatch):
    # A cluster with no controller running (loaded straight into ZooKeeper), so the reassignment stays.
    from planner import loader

    loader.load_cluster(zk_client, {"brokers": [{"id": 1, "rack": "a"}, {"id": 2, "rack": "b"}], "topics": [
        {"name": "t", "partitions": [{"replicas": [1, 2]}, {"replicas": [1, 2]}, {"replicas": [1, 2]}]}]})
    body = {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 1]}]}
    zk_client.create("/admin/reassign_partitions", json.dumps(body).encode(), makepath=True)
    hosts, _, chroot = zk_connect.partition("/")
    monkeypatch.setenv("AIRFLOW_CONN_ZK_BUSY", json.dumps({"conn_type": "zookeeper", "host": hosts, "schema": chroot}))
    # nothing listens at these brokers' registered endpoints: a count-only snapshot, said explicitly
    dr, approver = af.run_dag(REBALANCE, {"zk_conn_id": "zk_busy", "sizes_from": "none"})
    st = af.states(dr)
    assert st["snapshot"] == "success" and st["check_idle"] == "skipped", st
    assert {st[t] for t in ("plan", "risk_after", "publish", "approve", "apply", "verify", "report")} == {"skipped"}
    assert approver.answered is None
    assert not run_folder(dr).plan.exists()
    assert zk_client.exists("/admin/reassign_partitions"), "the foreign reassignment must be left alone"


def test_a_plan_the_cluster_no_longer_matches_is_refused_with_its_reason(env, ui):
    """While the plan waits for approval, someone reorders one of its partitions' replicas: apply refuses the
    stale plan (nothing submitted) and the refusal's reason is what the run's note and the plan page say."""
    from kazoo.client import KazooClient

    changed: dict = {}

    def reorder_then_approve(detail: dict) -> str:
        ti = detail["task_instance"]
        plan = json.loads((runs.run_folder(DRAIN, ti["dag_run_id"]).plan / "plan.json").read_text())
        move = next(m for m in plan["moves"] if len(m["from"]) > 1)
        zk = KazooClient(hosts=env["zk"])
        zk.start(timeout=15)
        try:
            path = f"/brokers/topics/{move['topic']}"
            raw, stat = zk.get(path)
            doc = json.loads(raw)
            old = doc["partitions"][str(move["partition"])]
            doc["partitions"][str(move["partition"])] = old[1:] + old[:1]
            zk.set(path, json.dumps(doc).encode(), version=stat.version)
            changed.update(path=path, partition=str(move["partition"]), old=old)
        finally:
            zk.stop()
            zk.close()
        env["sandbox"].wait_settled(60)
        return "Approve"

    start = af.assignment(env["zk"])
    try:
        dr, approver = af.run_dag(DRAIN, {"brokers": [5], "throttle": THROTTLE, "sizes": env["sizes"]},
                                  decide=reorder_then_approve, mark_success="risk|risk_after")
        st = af.states(dr)
        assert approver.answered == "Approve" and st["apply"] == "failed", st
        folder = run_folder(dr)
        review = json.loads((folder.root / runs.REVIEW).read_text())
        assert review["status"] == "apply refused", review
        assert review["error"].startswith("the cluster changed since the plan was made: 1 partitions no longer "
                                          "match"), review["error"]
        assert run_note(dr) == f"Apply refused: {review['error']}"
        seen(ui, f"/kafka-plans/runs/{DRAIN}/{runs.run_key(dr.run_id)}",
             f"Apply and verify\nrefused: {review['error'][:80]}")
        seen(ui, f"/dags/{DRAIN}/runs/{quote(dr.run_id, safe='')}", f"Apply refused: {review['error'][:80]}")
        end = af.assignment(env["zk"])
        assert {k: v for k, v in end.items() if k != (changed["path"].rsplit("/", 1)[1], int(changed["partition"]))
                } == {k: v for k, v in start.items() if k != (changed["path"].rsplit("/", 1)[1],
                                                                int(changed["partition"]))}, "apply moved something"
    finally:
        if changed:   # put the replica order back for the tests after this one
            zk = KazooClient(hosts=env["zk"])
            zk.start(timeout=15)
            try:
                raw, stat = zk.get(changed["path"])
                doc = json.loads(raw)
                doc["partitions"][changed["partition"]] = changed["old"]
                zk.set(changed["path"], json.dumps(doc).encode(), version=stat.version)
            finally:
                zk.stop()
                zk.close()
            env["sandbox"].wait_settled(60)


def test_a_topic_created_after_the_snapshot_fails_verify_and_offers_a_follow_up_drain(env):
    """Issue 19 item 1 in Airflow: the topic appears while the plan waits for approval. Apply finishes the
    plan, verify fails naming the topic, and follow_up offers the drain of what is left as a new run of the
    DAG, for review. (Last in the module: it leaves broker 3 half drained; the offered run is removed.)"""
    from airflow.models import DagRun
    from airflow.utils.session import create_session

    from planner import codec
    from planner import zk as zkmod

    def create_late_topic_then_approve(detail: dict) -> str:
        zk = zkmod.connect(env["zk"])
        try:
            ta = codec.TopicAssignment({0: [3, 4], 1: [3]}, topic_id="TGF0ZVRvcGljT25Ccm9rMw", version=3)
            zk.create(codec.topic_config_path("late"), codec.encode_config({}), makepath=True)
            zk.create(codec.topic_path("late"), codec.encode_topic(ta), makepath=True)
        finally:
            zk.stop()
            zk.close()
        env["sandbox"].wait_settled(60)
        return "Approve"

    dr, approver = af.run_dag(DRAIN, {"brokers": [3], "sizes": env["sizes"], "throttle": THROTTLE,
                                      "max_concurrent_per_broker": 1000},  # two batches: quick
                              decide=create_late_topic_then_approve, mark_success="risk|risk_after")
    st = af.states(dr)
    assert approver.answered == "Approve"
    assert (st["apply"], st["verify"], st["report"], st["follow_up"]) == ("success", "failed", "upstream_failed",
                                                                          "success"), st
    folder = run_folder(dr)
    report = json.loads(folder.report.read_text())
    assert (report["plan_converged"], report["converged"], report["intent"]["holds"]) == (True, False, False)
    assert {(r["topic"], r["partition"]) for r in report["intent"]["remaining"]} == {("late", 0), ("late", 1)}
    review = json.loads((folder.root / runs.REVIEW).read_text())
    assert review["status"] == "drain not complete: follow-up offered"
    assert review["follow_up_run"] == f"follow_up__{dr.run_id}"
    late = af.assignment(env["zk"])
    assert late[("late", 0)] == [3, 4] and late[("late", 1)] == [3]   # raw: still on broker 3
    with create_session() as session:
        offered = session.query(DagRun).filter(DagRun.dag_id == DRAIN,
                                               DagRun.run_id == f"follow_up__{dr.run_id}").one()
        conf = dict(offered.conf)
        state = str(offered.state)
        session.delete(offered)
    assert state.endswith("queued"), state   # waits for a person: the new run plans, then asks for approval
    assert conf["brokers"] == [3] and "require_approval" not in conf and conf["throttle"] == THROTTLE
