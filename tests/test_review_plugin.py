"""The "Kafka plans" plugin on Airflow's API app (FastAPI TestClient): refused without credentials (401) or with
a bad token (403); with a user's token, the plan list, the plan page and their JSON, the move filter, the
plan's files and batch files, plotly.js served by the plugin itself. The run folder holds a real plan made
by planner.api from a snapshot of a cluster in a real ZooKeeper."""

from __future__ import annotations

import json

import airflow_support as af
import pytest
from kplan_airflow import runs

from planner import api, loader

DAG, RUN = "kafka_broker_drain", "manual__2026-01-01T02:00:00+00:00"
NIGHTLY = "kafka_nightly_rebalance"
CLUSTER = {
    "brokers": [{"id": i, "rack": f"r{i % 3}"} for i in range(1, 7)],
    "topics": [
        {"name": "orders", "partitions": [{"replicas": [1 + i % 6, 1 + (i + 1) % 6, 1 + (i + 2) % 6],
                                           "size_bytes": 1000 * (i + 1)} for i in range(24)]},
        {"name": "legacy", "partitions": [{"replicas": [1], "size_bytes": 5000}, {"replicas": [2], "size_bytes": 7000}]},
    ],
}


@pytest.fixture(scope="module")
def plugin(tmp_path_factory, zk_server):
    base = tmp_path_factory.mktemp("review_plugin")
    from planner import zk as zkmod

    connect = zk_server.connect_string + "/review_plugin"
    root = zkmod.connect(zk_server.connect_string)
    root.ensure_path("/review_plugin")
    root.stop()
    client = zkmod.connect(connect)  # the brokers' registrations live as long as this session
    try:
        loader.load_cluster(client, CLUSTER)
        with af.airflow_env(base / "home"):
            folder = runs.run_folder(DAG, RUN)
            api.snapshot(api.SnapshotRequest(zk=connect, out=folder.snapshot, sizes_from="none"))
            published = _publish(folder)
            # a nightly rebalance while broker 6 is drained (its maintenance state as a drain's verify writes it)
            entry = {"format": "kplan-maintenance/1", "broker": 6, "state": "drained", "plan_id": "sha256:" + "c" * 64,
                     "run": None, "by": {"user": "ann", "host": "ops1", "command": "kplan verify"},
                     "since": "2026-01-01T03:00:00Z", "reason": "disk swap"}
            client.create("/kplan/maintenance/6", json.dumps(entry).encode(), makepath=True)
            nightly = runs.run_folder(NIGHTLY, RUN)
            api.snapshot(api.SnapshotRequest(zk=connect, out=nightly.snapshot, sizes_from="none"))
            published["nightly"] = api.plan_rebalance(api.RebalanceRequest(snapshot=nightly.snapshot,
                                                                            out=nightly.plan)).plan
            runs.update_review(nightly, dag_id=NIGHTLY, run_id=RUN, run_key=runs.run_key(RUN), kind="rebalance",
                               plan_id=published["nightly"].id, status="awaiting approval")
            yield published
    finally:
        client.stop()
        client.close()


def _publish(folder) -> dict:
    """A drain plan of broker 1 as the DAG's plan task makes it, its review record, and a broken run."""
    plan = api.plan_drain(api.DrainRequest(snapshot=folder.snapshot, out=folder.plan, brokers=(1,),
                                           max_concurrent_per_broker=2)).plan
    runs.update_review(folder, dag_id=DAG, run_id=RUN, run_key=runs.run_key(RUN), kind="drain",
                       plan_id=plan.id, status="awaiting approval", approval_task_id="approve")
    broken = runs.run_folder(DAG, "manual__broken")
    broken.plan.mkdir(parents=True)
    (broken.plan / "plan.json").write_text("{not json")
    return {"api": af.local.ApiClient(af.PASSWORD), "plan": plan, "folder": folder}


def test_refused_without_credentials(plugin):
    raw = plugin["api"].client
    for path in ("/kafka-plans/", "/kafka-plans/api/plans", f"/kafka-plans/runs/{DAG}/{runs.run_key(RUN)}",
                 "/kafka-plans/static/plotly.min.js", f"/kafka-plans/runs/{DAG}/{runs.run_key(RUN)}/files/plan.json"):
        assert raw.get(path).status_code == 401, path
        assert raw.get(path, headers={"Authorization": "Bearer not-a-token"}).status_code == 403, path
        assert raw.get(path, cookies={"_token": "forged"}).status_code == 403, path


def test_plan_list_json_and_page(plugin):
    c, plan = plugin["api"], plugin["plan"]
    r = c.get("/kafka-plans/api/plans")
    assert r.status_code == 200
    rows = {row["run_key"]: row for row in r.json()["plans"]}
    good = rows[runs.run_key(RUN)]
    assert good["plan_id"] == plan.id and good["kind"] == "drain" and good["brokers"] == [1]
    # independent count: replicas on broker 1 in the cluster description
    on_1 = sum(1 in p["replicas"] for t in CLUSTER["topics"] for p in t["partitions"])
    assert good["moves"] == on_1 and good["status"] == "awaiting approval"
    assert "error" in rows["manual__broken"] and "plan_id" not in rows["manual__broken"]
    page = c.get("/kafka-plans/")
    assert page.status_code == 200 and plan.id[7:19] in page.text and "approve / reject" in page.text
    # the cookie the Airflow UI sets reaches the iframe: it is enough on its own
    assert c.client.get("/kafka-plans/", cookies={"_token": c.token}).status_code == 200


def test_plan_page_and_json(plugin):
    c, plan = plugin["api"], plugin["plan"]
    key = runs.run_key(RUN)
    r = c.get(f"/kafka-plans/api/runs/{DAG}/{key}")
    assert r.status_code == 200
    d = r.json()
    assert d["figures"]["plan_id"] == plan.id
    b = d["brokers"]
    assert b["ids"] == [1, 2, 3, 4, 5, 6] and b["drained"] == [True] + [False] * 5
    assert b["replicas_after"][0] == 0 and sum(b["replicas_after"]) == sum(b["replicas_before"])
    total = sum(len(p["replicas"]) for t in CLUSTER["topics"] for p in t["partitions"])
    assert sum(b["replicas_before"]) == total
    assert [x["index"] for x in d["batches"]] == [x.index for x in plan.batches]
    # the leadership trade, against the cluster description: a drain of 1 must give every partition led by
    # broker 1 a new preferred leader, and the default scope touches no partition without a replica on 1
    lead = d["figures"]["leadership"]
    parts = [p["replicas"] for t in CLUSTER["topics"] for p in t["partitions"]]
    assert lead["scope"] == "touched" and lead["alternative"]["scope"] == "all"
    assert lead["necessary"] == sum(r[0] == 1 for r in parts)
    assert lead["necessary"] <= lead["changes"] <= sum(1 in r for r in parts)
    html = c.get(f"/kafka-plans/runs/{DAG}/{key}")
    assert f"Preferred leaders: scope touched: {lead['changes']} changes" in html.text
    assert html.status_code == 200
    assert "/kafka-plans/static/plotly.min.js" in html.text and "chart-replicas" in html.text
    assert "reassignment.json" in html.text and "rollback.json" in html.text
    assert c.get(f"/kafka-plans/runs/{DAG}/no_such_run").status_code == 404
    assert c.get(f"/kafka-plans/api/runs/{DAG}/..").status_code == 404
    # broker 4 is r1's only other broker and every "orders" partition spans the 3 racks, so it takes all 12 of
    # broker 1's "orders" replicas: 24 of the 74 replicas on 5 brokers, a hot spot. plan.json's warnings name
    # it; the page shows it once, from hot_spots, not a second time as a warning line
    hot = [w for w in plan.warnings if w.startswith("hot spot: ")]
    assert len(hot) == 1 and hot[0].startswith("hot spot: broker 4 (rack r1) ends +62.2% above the mean of the "
                                               "eligible brokers (24 replicas vs a mean of 14.8)"), plan.warnings
    assert html.text.count("Hot spot: broker 4 (r1)") == 1 and "hot spot: broker 4" not in html.text
    assert not [w for w in d["figures"]["warnings"] if "hot spot" in w]


def test_move_filter(plugin):
    c = plugin["api"]
    url = f"/kafka-plans/api/runs/{DAG}/{runs.run_key(RUN)}/moves"
    every = c.get(url).json()
    assert every["matched"] == every["total"] == len(plugin["plan"].moves)
    legacy = c.get(url, params={"q": "legacy"}).json()
    assert [(m["topic"], m["partition"]) for m in legacy["moves"]] == [("legacy", 0)]
    assert legacy["moves"][0]["from"] == [1] and 1 not in legacy["moves"][0]["to"]
    to_4 = c.get(url, params={"q": "broker:4 orders"}).json()
    assert to_4["matched"] > 0
    assert all(4 in m["from"] + m["to"] and m["topic"] == "orders" for m in to_4["moves"])
    assert c.get(url, params={"q": "no-such-topic"}).json()["matched"] == 0
    # `leader`: every move that gives its partition a new preferred leader, data moves included (issue 20: it
    # showed 0 rows for a drain whose moves all move data); at least every partition broker 1 led
    leader = c.get(url, params={"q": "leader"}).json()
    led_by_1 = sum(p["replicas"][0] == 1 for t in CLUSTER["topics"] for p in t["partitions"])
    changes = c.get(f"/kafka-plans/api/runs/{DAG}/{runs.run_key(RUN)}").json()["figures"]["leadership"]["changes"]
    assert leader["matched"] == changes >= led_by_1 > 0
    assert all(m["from"][0] != m["to"][0] for m in leader["moves"])


def test_downloads_and_plotly(plugin):
    c, plan, folder = plugin["api"], plugin["plan"], plugin["folder"]
    base = f"/kafka-plans/runs/{DAG}/{runs.run_key(RUN)}/files"
    for name in ("reassignment.json", "rollback.json", "plan.json"):
        r = c.get(f"{base}/{name}")
        assert r.status_code == 200 and r.content == (folder.plan / name).read_bytes()
        assert "attachment" in r.headers["content-disposition"]
    last = plan.batches[-1]
    doc = c.get(f"{base}/batch-{last.index:03d}.json").json()
    assert doc["version"] == 1
    assert [(p["topic"], p["partition"], tuple(p["replicas"])) for p in doc["partitions"]] == [
        (t, p, r) for (t, p), r in zip(last.partitions, last.replicas, strict=True)]
    for bad in ("solve.json", "..%2Fsnapshot%2Fmanifest.json", "batch-999.json"):
        assert c.get(f"{base}/{bad}").status_code == 404, bad
    js = c.get("/kafka-plans/static/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000 and b"plotly" in js.content[:2000].lower()
    assert js.headers["content-type"].startswith("application/javascript")
    assert json.loads(c.get("/kafka-plans/api/plans").text)["runs_root"] == str(runs.runs_root())


def test_brokers_in_maintenance_are_shown_on_both_pages(plugin):
    c, plan = plugin["api"], plugin["nightly"]
    key = runs.run_key(RUN)
    assert not [m for m in plan.moves if 6 in set(m.to_replicas) - set(m.from_replicas)
                or (m.to_replicas[0] == 6 != m.from_replicas[0])]
    assert plan.brokers.in_maintenance == {6: "drained"}
    html = c.get(f"/kafka-plans/runs/{NIGHTLY}/{key}").text
    assert ("left out (in maintenance: no replica, no preferred leadership): broker 6 drained since "
            "2026-01-01T03:00:00Z by ann@ops1, plan sha256:cccccccccccc…: disk swap") in html
    d = c.get(f"/kafka-plans/api/runs/{NIGHTLY}/{key}").json()
    assert d["brokers"]["maintenance"] == [None] * 5 + ["drained"]
    rows = {(r["dag_key"], r["run_key"]): r for r in c.get("/kafka-plans/api/plans").json()["plans"]}
    assert rows[(NIGHTLY, key)]["maintenance"] == "6 drained" and rows[(DAG, key)]["maintenance"] == ""
    # the drain made before the state existed says none was in maintenance when its snapshot was taken
    assert "brokers in maintenance: none (when the snapshot was taken)" in c.get(f"/kafka-plans/runs/{DAG}/{key}").text


def test_a_restart_plan_page_shows_the_roll_step_by_step(plugin):
    """A restart plan's page: the order, the temporary replicas beside a full drain, one row per step (with the
    risk when the run has it: here it has none), and each step's files in Kafka's format."""
    c, folder = plugin["api"], plugin["folder"]
    run = "manual__restart"
    rf = runs.run_folder("kafka_broker_restart", run)
    plan = api.plan_restart(api.RestartRequest(snapshot=folder.snapshot, out=rf.plan, brokers=(2, 1))).plan
    runs.update_review(rf, dag_id="kafka_broker_restart", run_id=run, run_key=run, kind="restart", plan_id=plan.id,
                       status="awaiting approval", approval_task_id="approve")
    rows = {r["run_key"]: r for r in c.get("/kafka-plans/api/plans").json()["plans"]}
    assert rows[run]["kind"] == "restart" and rows[run]["brokers"] == plan.section("roll")["order"]
    page = c.get(f"/kafka-plans/runs/kafka_broker_restart/{run}")
    assert page.status_code == 200, page.text[:2000]
    html = page.text
    order = plan.section("roll")["order"]
    assert "<h2>Restart roll</h2>" in html and f"Order {order[0]}, {order[1]}" in html
    # legacy-0 [1] and legacy-1 [2] (RF=1) each get one temporary replica; a drain of 1 and 2 moves every replica
    # on them
    on = sum(len({1, 2} & set(p["replicas"])) for t in CLUSTER["topics"] for p in t["partitions"])
    assert "temporary replicas <b>2</b> on 2 partitions" in html and f"a full drain would move {on} replicas" in html
    for k, b in enumerate(order, start=1):
        assert f"<tr><td>step {k}/2: broker {b}</td>" in html
        name = f"step-{k:03d}-broker-{b}-demote.json"
        r = c.get(f"/kafka-plans/runs/kafka_broker_restart/{run}/files/{name}")
        assert r.status_code == 200 and r.json()["version"] == 1


def test_failures_rejections_and_refusals_read_as_such(plugin, monkeypatch):
    """Issue 20 item 1-2: review records as the operators leave them (hand-written here; the DAG tests make
    them for real) read as failed / rejected / refused on the plan list and the plan page, with the reason."""
    import shutil

    from kplan_airflow import listener

    c, folder = plugin["api"], plugin["folder"]
    msg = "unknown broker id(s) [99]: the snapshot has brokers 1..6"
    failed = runs.run_folder(DAG, "manual__failed")
    runs.update_review(failed, dag_id=DAG, run_id="manual__failed", status="failed at risk", failed_task="risk",
                       error=msg)
    rejected = runs.run_folder(DAG, "manual__rejected")
    shutil.copytree(folder.plan, rejected.plan)
    why = "Rejected by admin: plan 0123456789ab was not applied (nothing on the cluster changed)"
    runs.update_review(rejected, dag_id=DAG, run_id="manual__rejected", status="rejected", rejected_by="admin",
                       failed_task="approve", error=why)
    stale = runs.run_folder(DAG, "manual__stale")
    shutil.copytree(folder.plan, stale.plan)
    refusal = "the cluster changed since the plan was made: 1 partitions no longer match (orders-3 ...)"
    runs.update_review(stale, dag_id=DAG, run_id="manual__stale", status="apply refused", failed_task="apply",
                       error=refusal)
    rows = {r["run_key"]: r for r in c.get("/kafka-plans/api/plans").json()["plans"]}
    assert rows["manual__failed"]["outcome"]["headline"] == f"Failed at risk: {msg}"
    assert not rows["manual__failed"].get("error")   # not "plan.json is missing": why the run failed instead
    assert rows["manual__rejected"]["outcome"]["bad"] and rows["manual__stale"]["outcome"]["bad"]
    assert not rows[runs.run_key(RUN)]["outcome"]["bad"]
    listing = c.get("/kafka-plans/").text
    assert f"Failed at risk: {msg}" in listing and why in listing and f"Apply refused: {refusal}" in listing
    page = c.get(f"/kafka-plans/runs/{DAG}/manual__failed").text
    assert f"Failed at risk: {msg}" in page and "No plan was made in this run" in page
    assert "cannot be shown" not in page
    page = c.get(f"/kafka-plans/runs/{DAG}/manual__stale").text
    assert f"refused: {refusal}</p>" in page and 'id="apply-outcome" class="error">' in page
    page = c.get(f"/kafka-plans/runs/{DAG}/manual__rejected").text
    assert why in page and "not started: rejected by admin" in page
    # the run's note, from the same records
    assert listener.failure_note(runs.read_json(failed.root / runs.REVIEW)) == f"Failed at risk: {msg}"
    assert listener.failure_note(runs.read_json(rejected.root / runs.REVIEW)) == why
    assert listener.failure_note(runs.read_json(stale.root / runs.REVIEW)) == f"Apply refused: {refusal}"
    assert listener.failure_note({"status": "applied"}) is None
    for r in (failed, rejected, stale):
        shutil.rmtree(r.root)


def test_a_pending_plan_warns_once_its_snapshot_is_older_than_the_configured_age(plugin, monkeypatch):
    c, plan = plugin["api"], plugin["plan"]
    url = f"/kafka-plans/runs/{DAG}/{runs.run_key(RUN)}"
    # the snapshot was taken when the module started: seconds ago, well under an hour
    monkeypatch.setenv("AIRFLOW__KPLAN__SNAPSHOT_MAX_AGE", "3600")
    assert "stale-snapshot" not in c.get(url).text
    monkeypatch.setenv("AIRFLOW__KPLAN__SNAPSHOT_MAX_AGE", "0.001")
    html = c.get(url).text
    assert 'id="stale-snapshot"' in html and "[kplan] snapshot_max_age" in html
    assert plan.snapshot["taken_at"]  # the age is measured from it


def test_a_trigger_naming_brokers_the_cluster_lacks_is_refused_with_the_reason(plugin):
    """Issue 20 item 3: the trigger form's JSON conf and the REST API take anything; the API server refuses
    a drain naming brokers that are not ids of the cluster (as the latest snapshot saw it) with one readable
    line, the `detail` the trigger dialog shows, and creates no run. The browser test walks the dialog."""
    from kplan_airflow import form

    c = plugin["api"]
    af.sync_dags()
    form.write_known_brokers([{"broker": b["id"], "rack": b.get("rack")} for b in CLUSTER["brokers"]],
                             "2026-11-26T01:00:00Z", "zookeeper_default")
    url = f"/api/v2/dags/{DAG}/dagRuns"

    def trigger(conf, headers=c.headers):
        return c.client.post(url, headers=headers, json={"logical_date": None, "conf": conf})

    have = "the latest snapshot (2026-11-26T01:00:00Z) has brokers 1, 2, 3, 4, 5, 6"
    cases = {
        "99": ["99"], "99b": [2, 99],
        "-1": [-1], "-1s": ["-1"], "1,2": ["1,2"], "twice": ["3", 3], "none": [], "word": ["one"],
        "scalar": "1",
    }
    want = {
        "99": f"Brokers to drain: broker 99 is not in the cluster: {have}. Nothing was triggered.",
        "99b": f"Brokers to drain: broker 99 is not in the cluster: {have}. Nothing was triggered.",
        "-1": "Brokers to drain: -1 is not a broker id: broker ids are 0 or more. Nothing was triggered.",
        "-1s": "Brokers to drain: -1 is not a broker id: broker ids are 0 or more. Nothing was triggered.",
        "1,2": 'Brokers to drain: "1,2" names several brokers in one entry: choose each broker on its own '
               '(in JSON: ["1", "2"] or [1, 2]). Nothing was triggered.',
        "twice": "Brokers to drain: broker 3 is named twice. Nothing was triggered.",
        "none": "Brokers to drain: choose at least one broker. Nothing was triggered.",
        "word": 'Brokers to drain: "one" is not a broker id: a broker id is a whole number such as 3. '
                "Nothing was triggered.",
        "scalar": "Brokers to drain: choose the brokers from the list (in JSON: a list of broker ids, e.g. [1, 2]). "
                  "Nothing was triggered.",
    }
    for name, brokers in cases.items():
        r = trigger({"brokers": brokers})
        assert (r.status_code, r.json()["detail"]) == (400, want[name]), (name, r.text)
    # the caller must be logged in first: Airflow answers an anonymous or forged caller, and says no broker id
    for headers in ({}, {"Authorization": "Bearer forged"}):
        r = trigger({"brokers": [99]}, headers)
        assert r.status_code in (401, 403) and "broker" not in r.text, r.text
    assert c.get(url).json()["total_entries"] == 0, "a refused trigger created a run"
    # the brokers of the snapshot pass (as strings from the picker, or integers): the run is created
    r = trigger({"brokers": ["2", 5]})
    assert r.status_code == 200, r.text
    runs_now = c.get(url).json()
    assert runs_now["total_entries"] == 1 and runs_now["dag_runs"][0]["conf"]["brokers"] == ["2", 5]
    c.client.delete(f"{url}/{runs_now['dag_runs'][0]['dag_run_id']}", headers=c.headers).raise_for_status()


def test_the_plugin_route_names_the_plugin_once_and_the_old_one_redirects(plugin):
    """Issue 20 item 8: Airflow 3.3 shows an external view at /plugin/<url_route> followed by its iframe's path;
    the route was the app's own name, so the UI showed /plugin/kafka-plans/kafka-plans/. Now /plugin/kplan/
    kafka-plans/..., and a bookmark of the old route lands on the same page."""
    import kafka_plans

    c = plugin["api"]
    views = c.get("/api/v2/plugins").json()["plugins"]
    view = next(v for p in views if p["name"] == "kafka_plans" for v in p["external_views"])
    assert (view["url_route"], view["href"]) == ("kplan", "/kafka-plans/")
    assert runs.PLUGIN_PAGES == f"/plugin/{kafka_plans.URL_ROUTE}{kafka_plans.URL_PREFIX}" == "/plugin/kplan/kafka-plans"
    old = f"/plugin/kafka-plans/kafka-plans/runs/{DAG}/{runs.run_key(RUN)}?q=broker%3A3"
    r = c.client.get(old, follow_redirects=False)
    assert r.status_code == 308 and r.headers["location"] == \
        f"/plugin/kplan/kafka-plans/runs/{DAG}/{runs.run_key(RUN)}?q=broker%3A3"
    # the new route is Airflow's UI (its page, which frames the plan page)
    assert c.client.get(r.headers["location"]).status_code == 200


def test_the_answered_approval_names_the_decision_and_who_made_it(plugin):
    """Issue 20 item 2: the plan page, the plan list and the run's note say "approved by X" (or that no
    review was needed), not only that a response was received."""
    import shutil

    from kplan_airflow import listener

    c, folder, plan = plugin["api"], plugin["folder"], plugin["plan"]
    done = runs.run_folder(DAG, "manual__approved")
    shutil.copytree(folder.plan, done.plan)
    runs.update_review(done, dag_id=DAG, run_id="manual__approved", plan_id=plan.id, status="done",
                       approved_by="ann")
    auto = runs.run_folder(NIGHTLY, "scheduled__auto")
    shutil.copytree(folder.plan, auto.plan)
    runs.update_review(auto, dag_id=NIGHTLY, run_id="scheduled__auto", plan_id=plan.id, status="done",
                       approved_by="auto")
    try:
        page = c.get(f"/kafka-plans/runs/{DAG}/manual__approved").text
        assert '<p id="decision" class="ok">Approval: approved by ann</p>' in page
        row = next(r for r in c.get("/kafka-plans/api/plans").json()["plans"] if r["run_key"] == "manual__approved")
        assert row["outcome"]["decision"] == "approved by ann" and not row["outcome"]["bad"]
        assert "approved by ann" in c.get("/kafka-plans/").text
        assert "Approval: auto-approved: no review needed (within the auto-approve limits)" in \
            c.get(f"/kafka-plans/runs/{NIGHTLY}/scheduled__auto").text
        # nobody answered yet: nothing claimed
        assert 'id="decision"' not in c.get(f"/kafka-plans/runs/{DAG}/{runs.run_key(RUN)}").text
        assert listener.success_note(runs.read_json(done.root / runs.REVIEW)) == \
            f"Approved by ann: plan {plan.id[7:19]} applied and verified"
        assert listener.success_note(runs.read_json(auto.root / runs.REVIEW)) == \
            f"Auto-approved (no review needed): plan {plan.id[7:19]} applied and verified"
        assert listener.success_note({"status": "skipped"}) is None
    finally:
        shutil.rmtree(done.root)
        shutil.rmtree(auto.root)
