"""Apply, verify and cancel on real KRaft brokers (Kafka 4.1.1, the kraft sandbox engine: one controller, four
brokers, a SASL listener), through the Admin API only, fenced by `__kplan` (docs/KRAFT.md).

The emulated engine is ZooKeeper-based and has no Admin API, so every KRaft write is tested here, on real
brokers. One cluster for the module, its tests in order. Every effect is checked through Kafka's own Admin
API with a fresh client (DescribeTopicPartitions, ListPartitionReassignments, DescribeConfigs) and `__kplan`
through an independent read_committed consumer, against expectations worked out by hand, never through the
code under test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kafka.admin import NewTopic
from waiting import poll

from planner import cli
from planner import kraft_admin as ka
from planner.execution.kraftstore import Store
from tests.kafka_support import racks
from tests.kraft_support import admin_call, kplan_kraft_cluster

pytestmark = pytest.mark.kafka

SIZE = 400_000
CLUSTER = {"brokers": racks(4), "topics": [
    {"name": "orders", "config": {"min.insync.replicas": "2"},
     "partitions": [{"replicas": [1, 2, 3], "size_bytes": SIZE}, {"replicas": [2, 3, 1], "size_bytes": SIZE},
                    {"replicas": [3, 1, 4], "size_bytes": SIZE}, {"replicas": [4, 2, 3], "size_bytes": SIZE}]},
    {"name": "audit", "partitions": [{"replicas": [1, 4], "size_bytes": SIZE}, {"replicas": [2, 1], "size_bytes": SIZE}]},
    {"name": "fragile", "partitions": [{"replicas": [3]}]},     # RF 1
]}
REPO = Path(__file__).resolve().parent.parent
TOPICS = ["orders", "audit", "fragile"]
THROTTLE_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


@pytest.fixture(scope="module")
def kraft(tmp_path_factory):
    with kplan_kraft_cluster(tmp_path_factory.mktemp("kraftapply") / "sb", CLUSTER, lease=5, sasl=True) as sb:
        yield sb


def replicas(sb) -> dict[tuple[str, int], list[int]]:
    return {k: v["replicas"] for k, v in admin_call(sb, ka.describe_topic_partitions, TOPICS).items()}


def leaders(sb) -> dict[tuple[str, int], int]:
    return {k: v["leader"] for k, v in admin_call(sb, ka.describe_topic_partitions, TOPICS).items()}


def throttles_now(sb) -> dict[str, str]:
    """Every throttle config set now on the two topics and the four brokers (DescribeConfigs, dynamic only)."""
    out = {}
    for t, cfg in admin_call(sb, ka.configs, "topic", ["orders", "audit"], THROTTLE_KEYS).items():
        out.update({f"{t}:{k}": v["value"] for k, v in cfg.items() if v["source"] == "DYNAMIC_TOPIC_CONFIG"
                    and v["value"]})
    for b, cfg in admin_call(sb, ka.configs, "broker", ["1", "2", "3", "4"], RATE_KEYS).items():
        out.update({f"broker {b}:{k}": v["value"] for k, v in cfg.items() if v["source"] == "DYNAMIC_BROKER_CONFIG"})
    return out


def reassigning(sb) -> dict:
    return admin_call(sb, lambda a: a.list_partition_reassignments())


def kplan_records(sb) -> dict[str, object]:
    """`__kplan` as a read_committed consumer of our own sees it (latest value per key)."""
    return {k: v for k, v in kplan_log(sb)}


def kplan_log(sb) -> list[tuple[str, object]]:
    """Every committed record of `__kplan` in order (the active segment is never compacted)."""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition("__kplan", 0)
    c = KafkaConsumer(bootstrap_servers=sb.bootstrap_servers.split(","), group_id=None, enable_auto_commit=False,
                      isolation_level="read_committed")
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        out: list[tuple[str, object]] = []
        deadline = time.monotonic() + 20
        while c.position(tp) < end and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                for r in recs:
                    out.append((r.key.decode(), None if r.value is None else _json_or_bytes(r.value)))
        return out
    finally:
        c.close()


def _json_or_bytes(value: bytes) -> object:
    try:
        return json.loads(value)
    except ValueError:
        return value      # a record that is not JSON (written by a test on purpose)


def snapshot_and_plan(sb, tmp: Path, *plan_args: str) -> Path:
    assert cli.main(["snapshot", "--bootstrap-server", sb.bootstrap_servers, "--out", str(tmp / "snap")]) == 0
    assert cli.main(["plan", *plan_args, "--snapshot", str(tmp / "snap"), "--out", str(tmp / "run" / "plan"),
                     "--quiet"]) == 0
    return tmp / "run" / "plan"


class ConfigWatcher(threading.Thread):
    """Samples the throttle configs while an apply runs: every distinct value seen."""

    def __init__(self, sb):
        super().__init__(daemon=True)
        self.sb, self.seen, self.done = sb, {}, threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                for k, v in throttles_now(self.sb).items():
                    self.seen.setdefault(k, set()).add(v)
            except Exception:  # noqa: BLE001 - a sample lost is not a failure
                pass
            time.sleep(0.2)


def test_maintenance_records_on_kplan_read_by_snapshot_brokers_and_cleared(kraft, tmp_path, capsys):
    """planner/maintenance_kraft.py on real brokers: a transition as its own fenced transaction (a `maintenance/<id>`
    record of the same JSON as ZooKeeper's znode), refused by the table and by a live lock with nothing written, a
    record that does not parse read as `unknown`, both read by a fresh `--bootstrap-server` snapshot and by
    `kplan brokers`, and `kplan maintenance clear` ending them in one transaction (tombstones)."""
    from kafka import KafkaProducer

    from planner import maintenance as mt
    from planner import maintenance_kraft as mk
    from planner import snapshot_io as sio

    plan_a, plan_b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    store = Store(kraft.bootstrap_servers, lease=5)
    got = mk.change(store, [3], mt.RESTART, mt.RESTARTING, plan_id=plan_a, run="runs/r1", reason="OS patch",
                    command="roll")
    assert [(c.broker, c.before, c.after) for c in got] == [(3, None, "restarting")]
    recs = kplan_records(kraft)                 # an independent read_committed consumer
    assert {k: v for k, v in recs["maintenance/3"].items() if k not in ("since", "by")} == {
        "format": "kplan-maintenance/1", "broker": 3, "state": "restarting", "plan_id": plan_a, "run": "runs/r1",
        "reason": "OS patch"}
    assert recs["maintenance/3"]["by"]["command"] == "kplan roll" and recs["lock"]["released"] is True
    # the table refuses another plan's move, before anything is written
    n = len(kplan_log(kraft))
    with pytest.raises(mt.MaintenanceConflict, match="belongs to another plan"):
        mk.change(store, [3], mt.RESTART, None, plan_id=plan_b, command="roll")
    store.close()
    assert len(kplan_log(kraft)) == n
    # a live holder of the lock (an apply of plan A writing now): clear refuses naming it, nothing written
    holder = Store(kraft.bootstrap_servers, lease=5)
    holder.open()
    try:
        holder.transact({"lock": {"holder": {"command": "apply", "plan_id": plan_a, "pid": 1, "host": "elsewhere"},
                                  "heartbeat": time.time(), "released": False}})
        n += 1
        assert cli.main(["maintenance", "clear", "--bootstrap-server", kraft.bootstrap_servers, "--brokers", "3",
                         "--lease", "5"]) == 1
        assert "which is running: stop it first" in capsys.readouterr().err
        assert len(kplan_log(kraft)) == n
    finally:
        holder.close({"holder": {"command": "apply"}, "released": True})
    # a record that does not parse: `unknown`, in maintenance until cleared
    p = KafkaProducer(bootstrap_servers=kraft.bootstrap_servers.split(","), acks="all")
    p.send("__kplan", key=b"maintenance/4", value=b"{not json", partition=0).get(timeout=30)
    p.close()
    assert cli.main(["snapshot", "--bootstrap-server", kraft.bootstrap_servers, "--out", str(tmp_path / "s")]) == 0
    snap = sio.read_snapshot(tmp_path / "s")
    states = {d["broker"]: d["state"] for d in snap.manifest["maintenance"]}
    assert {b: s for b, s in states.items() if b in (3, 4)} == {3: "restarting", 4: "unknown"}, states
    col = dict(zip(snap.brokers.column("broker").to_pylist(), snap.brokers.column("maintenance").to_pylist(),
                   strict=True))
    assert col[3] == "restarting" and col[4] == "unknown" and col[1] is None
    rows = brokers_now(kraft, capsys)
    assert rows[3]["state"] == "restarting" and rows[3]["reason"] == "OS patch" and rows[3]["registered"]
    assert rows[4]["state"] == "unknown" and "__kplan record maintenance/4" in rows[4]["reason"]
    assert rows[1]["state"] == "in service" and rows[1]["rack"] == "r1"
    # the operator's clear: one fenced transaction, tombstones for both
    assert cli.main(["maintenance", "clear", "--bootstrap-server", kraft.bootstrap_servers, "--brokers", "3,4",
                     "--lease", "5"]) == 0
    assert "broker 3 was restarting, broker 4 was unknown" in capsys.readouterr().out
    log = kplan_log(kraft)
    assert log[-1][0] == "lock" and {k for k, _ in log[-3:]} == {"maintenance/3", "maintenance/4", "lock"}
    assert kplan_records(kraft)["maintenance/3"] is None and kplan_records(kraft)["maintenance/4"] is None
    reader = Store(kraft.bootstrap_servers)
    try:
        assert mk.read_all(reader).entries == {}, "nothing left in maintenance for the tests after"
    finally:
        reader.close()


def test_drain_applied_in_batches_throttled_and_verified_through_the_admin_api(kraft, tmp_path, capsys):
    before = replicas(kraft)
    plan = snapshot_and_plan(kraft, tmp_path, "drain", "--brokers", "1", "--max-concurrent-per-broker", "3")
    doc = json.loads((plan / "plan.json").read_text())
    assert doc["snapshot"]["backend"] == "kraft"
    watcher = ConfigWatcher(kraft)
    watcher.start()
    try:
        rc = cli.main(["apply", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(plan),
                       "--throttle", "400KB", "--poll", "0.2", "--lease", "6"])
    finally:
        watcher.done.set()
        watcher.join()
    out = capsys.readouterr()
    assert rc == 0, out
    after = replicas(kraft)
    # broker 1 hosts and leads nothing; every other replica stays; RF intact
    assert all(1 not in r for r in after.values()), after
    assert all(len(after[k]) == len(before[k]) for k in before)
    assert all(set(before[k]) - {1} <= set(after[k]) for k in before)
    assert 1 not in leaders(kraft).values()
    assert reassigning(kraft) == {} and throttles_now(kraft) == {}
    # the throttles were those of Kafka's own tool, worked out by hand for orders-0 [1,2,3] -> x: its
    # sources 1,2,3 as leader entries, the new broker as the follower entry, and the rate on every broker
    moved_to = (set(after[("orders", 0)]) - {2, 3}).pop()
    assert "0:1,0:2,0:3" in "|".join(watcher.seen.get("orders:leader.replication.throttled.replicas", ())), \
        watcher.seen
    assert f"0:{moved_to}" in "|".join(watcher.seen.get("orders:follower.replication.throttled.replicas", ()))
    assert {"400000"} == watcher.seen.get("broker 1:leader.replication.throttled.rate")
    # the run record on __kplan: every unit intended before submitted, then completed; the lock released
    recs = kplan_records(kraft)
    run = next(v for k, v in recs.items() if k.startswith("run/"))
    assert run["state"] == "completed" and all(u[0] == "completed" for u in run["units"])
    assert len(run["units"]) == len(doc["batches"]) >= 3
    # each unit's states as committed, in order: pending -> intended -> submitted (-> electing) -> completed,
    # never submitted without intended before it
    key = next(k for k in recs if k.startswith("run/"))
    versions = [v for k, v in kplan_log(kraft) if k == key]
    for i in range(len(run["units"])):
        seen = [v["units"][i][0] for v in versions]
        order = [st for n, st in enumerate(seen) if n == 0 or st != seen[n - 1]]
        assert order in (["pending", "intended", "submitted", "completed"],
                         ["pending", "intended", "submitted", "electing", "completed"]), (i, order)
    assert recs["lock"]["released"] is True
    assert not [k for k, v in recs.items() if k.startswith("throttles/") and v]
    outcome = json.loads((tmp_path / "run" / "apply" / "outcome.json").read_text())
    assert outcome["state"] == "completed" and outcome["units_submitted"] == len(run["units"])
    # the apply put broker 1 into maintenance (draining) in the transaction of the run record's first save: the
    # records of one transaction are adjacent in __kplan (one writer; lock, run record, then the broker's state)
    log = kplan_log(kraft)
    first = next(i for i, (k, _) in enumerate(log) if k == key)
    assert log[first + 1][0] == "maintenance/1" and log[first + 1][1]["state"] == "draining", log[first:first + 2]
    assert log[first][1]["state"] == "running" and log[first - 1][0] == "lock"
    assert brokers_now(kraft, capsys)[1]["state"] == "draining"
    assert brokers_now(kraft, capsys)[1]["plan_id"] == doc["id"]
    # a topic created mid-drain with a replica on broker 1: verify is not converged and names it; 1 stays draining
    admin_call(kraft, lambda a: a.create_topics([NewTopic("middrain", replica_assignments={0: [1, 2]})]))
    poll(lambda: ("middrain", 0) in admin_call(kraft, ka.describe_topic_partitions, ["middrain"]), timeout=30,
         what="middrain created")
    assert cli.main(["verify", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(plan), "--timeout",
                     "60"]) == 1
    err = capsys.readouterr().err
    assert "the drain is not complete" in err and "middrain-0 replicas [1, 2]" in err, err
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert not report["converged"] and report["plan_converged"] and report["maintenance"]["set"] == {}
    assert brokers_now(kraft, capsys)[1]["state"] == "draining"
    admin_call(kraft, lambda a: a.delete_topics(["middrain"]))
    poll(lambda: "middrain" not in admin_call(kraft, ka.topic_names), timeout=30, what="middrain deleted")
    # verify through the Admin API: converged, report written, broker 1 drained
    assert cli.main(["verify", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(plan), "--timeout",
                     "60"]) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["converged"] and report["partitions"]["converged"] == report["partitions"]["total"]
    assert report["intent"]["holds"] and report["throttles_remaining"] == []
    assert report["maintenance"]["set"] == {"1": "drained"}
    row = brokers_now(kraft, capsys)[1]
    assert row["state"] == "drained" and row["plan_id"] == doc["id"]
    assert kplan_records(kraft)["maintenance/1"]["state"] == "drained"
    # applying it again does nothing
    assert cli.main(["apply", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(plan),
                     "--throttle", "400KB"]) == 0
    assert "already applied" in capsys.readouterr().out


def test_a_drained_broker_gets_nothing_from_a_kraft_rebalance_until_cleared(kraft, tmp_path, capsys):
    """Broker 1 drained (the test before): a fresh `--bootstrap-server` snapshot records it, and `kplan plan
    rebalance` gives it no replica and no preferred leadership although it holds nothing (a rebalance of a cluster
    with an empty broker fills it, as it does once the state is cleared); `kplan maintenance clear` ends it."""
    assert brokers_now(kraft, capsys)[1]["state"] == "drained", "the drain test before leaves broker 1 drained"
    assert all(1 not in r for r in replicas(kraft).values())
    plan = snapshot_and_plan(kraft, tmp_path / "a", "rebalance")
    doc = json.loads((plan / "plan.json").read_text())
    targets = [e["replicas"] for e in json.loads((plan / "reassignment.json").read_text())["partitions"]]
    assert not [t for t in targets if 1 in t], "a drained broker was given replicas"
    assert [b["broker"] for b in doc["maintenance"]["left_out"]] == [1], doc["maintenance"]
    # the operator's clear, the state named: broker 1 in service again, and the next rebalance fills it
    assert cli.main(["maintenance", "clear", "--bootstrap-server", kraft.bootstrap_servers, "--brokers", "1",
                     "--state", "drained", "--reason", "test: back in service"]) == 0
    assert "broker 1 was drained" in capsys.readouterr().out
    assert brokers_now(kraft, capsys)[1]["state"] == "in service"
    plan = snapshot_and_plan(kraft, tmp_path / "b", "rebalance")
    targets = [e["replicas"] for e in json.loads((plan / "reassignment.json").read_text())["partitions"]]
    assert [t for t in targets if 1 in t], "broker 1 is usable again: the rebalance gives it replicas"


def brokers_now(sb, capsys) -> dict[int, dict]:
    """`kplan brokers --bootstrap-server … --json`, by broker."""
    capsys.readouterr()
    assert cli.main(["brokers", "--bootstrap-server", sb.bootstrap_servers, "--json"]) == 0
    return {r["broker"]: r for r in json.loads(capsys.readouterr().out)}


def spawn(*argv: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "planner.cli", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def unit_states(sb) -> list[str]:
    run = next((v for k, v in kplan_records(sb).items() if k.startswith("run/") and v and v["state"] == "running"),
               None)
    return [u[0] for u in run["units"]] if run else []


def test_cancel_aborts_the_batch_in_flight_with_an_empty_target(kraft, tmp_path, capsys):
    """A rebalance onto the emptied broker 1, applied at the lowest throttle in another process; `kplan cancel`
    while a data batch is in flight: the apply aborts it (AlterPartitionReassignments with no target), its
    partitions keep the replicas they had before it, the batches completed before stay, no throttle is left."""
    from planner.execution.steps import load_plan

    # partitions larger than one replica fetch (replica.fetch.max.bytes, 1 MiB): a throttle holds them back
    _big(kraft)
    plan = snapshot_and_plan(kraft, tmp_path, "rebalance", "--max-concurrent-per-broker", "1", "--order",
                             "largest-first", "--exclude-topics", "__.*")
    units = load_plan(plan).units
    start = replicas(kraft)
    proc = spawn("apply", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(plan), "--throttle",
                 "100KiB", "--poll", "0.2", "--lease", "6")
    try:
        def data_in_flight():
            states = unit_states(kraft)
            return proc.poll() is not None or any(st == "submitted" and units[n].kind == "data"
                                                  for n, st in enumerate(states))
        poll(data_in_flight, timeout=60, what="a data batch submitted")
        assert proc.poll() is None, proc.communicate()
        states = unit_states(kraft)
        i = states.index("submitted")
        assert reassigning(kraft), "the batch must still be copying when the cancel comes"
        assert cli.main(["cancel", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(plan), "--timeout",
                         "60", "--poll", "0.2"]) == 0
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (out, err)                     # cancelled: exit 1, as on ZooKeeper
    assert "reverted" in out and "aborted in flight" in out, out
    assert reassigning(kraft) == {} and throttles_now(kraft) == {}
    # the units completed before the cancel are at the plan's targets; the aborted one's partitions where they
    # were before it; every other partition as it was before the apply
    expected = dict(start)
    for u in units[:i]:
        expected.update({e.key: list(e.replicas) for e in u.entries})
    for e, b in zip(units[i].entries, units[i].before, strict=True):
        assert list(b) == expected[e.key]
    assert replicas(kraft) == expected
    run = next(v for k, v in kplan_records(kraft).items() if k.startswith("run/") and v["state"] == "reverted")
    assert run["revert"]["unit"] == i and run["revert"]["state"] == "completed"
    # a cancelled plan is not applied again
    assert cli.main(["apply", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(plan), "--throttle",
                     "1MB"]) == 1
    assert "a cancelled plan is not applied again" in capsys.readouterr().err


def test_over_sasl_no_credential_reaches_any_output_even_verbose(kraft, tmp_path):
    """apply and verify over the SASL listener, -v (kafka-python's own SASL exchange logged at DEBUG): the
    password reaches no output and no file; a wrong password is one line naming the refusal, exit 2."""
    sasl = kraft.kafka_sasl
    servers = ",".join(sorted(kraft.kafka_endpoints("SASL_PLAINTEXT").values()))
    cfg = tmp_path / "kafka.json"
    cfg.write_text(json.dumps({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                               "sasl.username": sasl["username"]}))
    plan = snapshot_and_plan(kraft, tmp_path, "rebalance", "--exclude-topics", "__.*")
    ok = subprocess.run([sys.executable, "-m", "planner.cli", "-v", "apply", "--bootstrap-server", servers,
                         "--kafka-config", str(cfg), "--plan", str(plan), "--throttle", "50MB", "--poll", "0.2"],
                        cwd=REPO, capture_output=True, text=True, timeout=120,
                        env={**os.environ, "KPLAN_KAFKA_PASSWORD": sasl["password"]})
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert sasl["password"] not in ok.stdout + ok.stderr
    for f in (tmp_path / "run").rglob("*.json"):
        assert sasl["password"] not in f.read_text(), f
    assert not any(sasl["password"] in json.dumps(v) for v in kplan_records(kraft).values())
    bad = subprocess.run([sys.executable, "-m", "planner.cli", "verify", "--bootstrap-server", servers,
                          "--kafka-config", str(cfg), "--plan", str(plan), "--kafka-timeout", "5"],
                         cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "KPLAN_KAFKA_PASSWORD": "wrong-" + sasl["password"]})
    assert bad.returncode == 2 and "refused" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert sasl["password"] not in bad.stdout + bad.stderr



def _big(sb) -> None:
    """Every user partition larger than one replica fetch (1 MiB), so that a throttle holds a batch in flight."""
    if min(v for k, v in sb.log_end_offsets(list(replicas(sb))).items()) < 1000:
        sb.produce({k: 1_600_000 for k in replicas(sb)})


LEFT: dict[str, Path] = {}   # what a test leaves for a later one (the module's tests run in order)


def test_killed_mid_batch_and_resumed_loses_nothing_under_a_live_workload(kraft, tmp_path):
    """Issue 24's must-show on real KRaft brokers: a drain applied throttled in batches, the apply SIGKILLed while
    a data batch copies, run again: it resumes (the batch in flight is not submitted again), converges, and a
    workload producing and consuming throughout loses, duplicates and reorders nothing."""
    from planner.execution.steps import load_plan
    from planner.sandbox.workload import Workload

    _big(kraft)
    plan = snapshot_and_plan(kraft, tmp_path, "drain", "--brokers", "2", "--max-concurrent-per-broker", "8",
                             "--order", "largest-first")
    units = load_plan(plan).units
    with Workload(kraft, topics=["orders", "audit"], rate=100) as w:
        proc = spawn("apply", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(plan), "--throttle",
                     "100KiB", "--poll", "0.2", "--lease", "4")
        try:
            poll(lambda: proc.poll() is not None or any(st == "submitted" and units[n].kind == "data"
                                                        for n, st in enumerate(unit_states(kraft))),
                 timeout=60, what="a data batch submitted")
            assert proc.poll() is None, proc.communicate()
            assert reassigning(kraft)
            w.mark("apply killed (SIGKILL) mid-batch")
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        states = unit_states(kraft)
        assert "submitted" in states and reassigning(kraft), "the batch keeps moving in Kafka after the kill"
        left = states.count("pending")
        w.mark("apply resumed")
        assert cli.main(["apply", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(plan), "--throttle",
                         "2MB", "--poll", "0.2", "--lease", "4"]) == 0
        outcome = json.loads((tmp_path / "run" / "apply" / "outcome.json").read_text())
        # resumed, and only the units still pending at the kill were submitted: the one in flight was not
        assert outcome["resumed"] is True and outcome["units_submitted"] == left, (outcome, states)
        n = w.summary()["acked"]      # traffic after the last batch too, for the workload's audit
        poll(lambda: w.summary()["acked"] > n + 50, timeout=30, what="traffic after the apply")
    report = w.report()
    assert report["verdict"]["integrity"], report["verdict"]
    assert report["audit"]["lost"] == 0 and report["producer"]["acked"] > 200, report["producer"]
    after = replicas(kraft)
    assert all(2 not in r for r in after.values()) and reassigning(kraft) == {} and throttles_now(kraft) == {}
    assert 2 not in leaders(kraft).values()
    LEFT["drain of 2"] = plan          # broker 2 stays draining (no verify yet): the return test at the end


@pytest.mark.parametrize("lease", [2.0, 1000.0])
def test_a_second_writer_fences_the_first_whose_late_admin_writes_the_lease_bounds(kraft, lease):
    """Two writers of one cluster's __kplan. B's initTransactions fences A: A's next transition fails with
    PRODUCER_FENCED. A stalled writer (one that committed "intended" and then hung, as a GC pause or a stopped
    process does) may still hold a live Admin client: its guard refuses the late write once its lease has run
    out. With a lease longer than the stall (1000 s: the unprotected case) the guard lets the late write through,
    so the bound really is the lease."""
    from planner.execution.kraftstore import Fenced, LeaseExpired

    a = Store(kraft.bootstrap_servers, lease=lease)
    b = Store(kraft.bootstrap_servers, lease=lease)
    try:
        a.open()
        # fail at once, not after the whole lease, if an earlier test left the lock unreleased
        assert a.not_before <= time.monotonic(), "an earlier test left __kplan's lock unreleased"
        a.transact({"lock": {"holder": {"command": "A"}, "heartbeat": time.time(), "released": False},
                    "test/a": {"batch": 1, "state": "intended"}})
        stalled_at = time.monotonic()
        opened = time.monotonic()
        b.open()                                    # B takes over: A is fenced from here on
        b.transact({"test/b": {"took": "over"}})
        if lease < 100:
            # A did not release its lock: B's first Admin write waits one lease after its initTransactions
            b.wait_initial()
            assert time.monotonic() - opened >= lease
            b.transact({"test/b": {"took": "over", "heartbeat": 1}})
            b.guard()
        # A's stall outlasts a 2 s lease: the late write A would send now is refused by its guard...
        poll(lambda: time.monotonic() - stalled_at > 2.2, timeout=5, what="A's stall")
        if lease < 100:
            with pytest.raises(LeaseExpired):
                a.guard()
        else:
            a.guard()                               # ...unless the lease is longer than the stall
        with pytest.raises(Fenced, match="took over"):
            a.transact({"test/a": {"batch": 1, "state": "submitted"}})
        with pytest.raises(Fenced):
            a.guard()                               # and nothing more once A knows it was fenced
        recs = kplan_records(kraft)
        assert recs["test/a"] == {"batch": 1, "state": "intended"} and recs["test/b"]["took"] == "over"
    finally:
        a.close()
        b.close({"holder": {"command": "B"}, "released": True})


def test_a_return_on_kraft_takes_the_drained_broker_back_and_out_of_maintenance(kraft, tmp_path, capsys):
    """The way back on KRaft: broker 2, drained by the killed-and-resumed drain (its apply left it draining), is
    verified drained, then `kplan plan return` (the drain's plan found through the state's run) applied: broker 2
    returning, then its verify takes it out of maintenance (a tombstone), with replicas on it again."""
    drain = LEFT["drain of 2"]
    assert brokers_now(kraft, capsys)[2]["state"] == "draining"
    assert cli.main(["verify", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(drain), "--timeout",
                     "60"]) == 0
    assert brokers_now(kraft, capsys)[2]["state"] == "drained"
    # the user topics only, in few batches (a return of the internal topics' partitions is the same code, slower)
    plan = snapshot_and_plan(kraft, tmp_path, "return", "--brokers", "2", "--exclude-topics", "__.*",
                             "--max-concurrent-per-broker", "20")
    assert cli.main(["apply", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(plan), "--throttle",
                     "50MB", "--poll", "0.2"]) == 0
    row = brokers_now(kraft, capsys)[2]
    assert row["state"] == "returning" and row["plan_id"] == json.loads((plan / "plan.json").read_text())["id"]
    assert [k for k, r in replicas(kraft).items() if 2 in r], "the return moved nothing back onto broker 2"
    assert cli.main(["verify", "--bootstrap-server", kraft.bootstrap_servers, "--plan", str(plan), "--timeout",
                     "60"]) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["converged"] and report["maintenance"]["set"] == {"2": None}, report["maintenance"]
    assert brokers_now(kraft, capsys)[2]["state"] == "in service"
    assert kplan_records(kraft)["maintenance/2"] is None
