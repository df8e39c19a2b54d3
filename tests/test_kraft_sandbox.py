"""The `kraft` sandbox engine and the KRaft snapshot: real Apache Kafka 4.1.1 KRaft nodes (one controller, four
brokers), no ZooKeeper.

One cluster for the whole module, its tests in order (up, snapshot, the seed incident's kill, start, stop,
down); the engine's effects are checked through Kafka's own Admin API (DescribeCluster,
DescribeTopicPartitions, DescribeConfigs, ApiVersions), never through the engine's status, and the snapshot's
tables against states worked out by hand from Kafka 4.1.1's controller (ReplicationControlManager,
PartitionChangeBuilder) and what a fresh 4.1.1 format was seen to finalize, never taken from the code under test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import airflow_support as af
import pytest
from kplan_airflow import runs
from waiting import poll

from planner import cli
from planner import kraft_admin as ka
from planner import snapshot_io as sio
from planner.errors import BadInput
from planner.execution.kraftstore import Store
from planner.kafka.broker import find_brokers
from planner.sandbox import Sandbox
from planner.sandbox.api import SandboxError
from planner.zkserver import pid_alive
from tests.kafka_support import racks

pytestmark = pytest.mark.kafka

SEED = {"brokers": racks(4), "topics": [
    {"name": "seed-rf1", "partitions": [{"replicas": [1]}]},
    {"name": "seed-wide", "config": {"min.insync.replicas": "2"},
     "partitions": [{"replicas": [1, 2, 3], "size_bytes": 200_000}, {"replicas": [2, 3, 1]}]},
]}
REPO = Path(__file__).resolve().parent.parent
DRAIN, REBALANCE = "kafka_broker_drain", "kafka_nightly_rebalance"
CONN = "kafka_kraft"
CONN_SSL = "kafka_kraft_ssl"   # the same cluster through its SSL listener (client certificate, key password)
SWEEPS: dict = {}   # planner.kraft_dtp sweeps kept between the tests below
SESSION = 3   # broker.session.timeout.ms = 3 s: a killed broker is fenced 2-3 s after its last heartbeat
# transactions' own topic (kplan's fence uses it) replicated as on a real cluster, in 4 partitions (the sandbox's
# default is RF 1, Kafka's 50 partitions): it exists only once the Airflow drain below uses transactions
TXN = {"transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
       "transaction.state.log.num.partitions": "4"}
THROTTLE_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


@pytest.fixture(scope="module")
def kraft(tmp_path_factory):
    sb = Sandbox.up(tmp_path_factory.mktemp("kraft") / "sb", cluster=SEED, engine="kraft", timeout=120,
                    session_timeout=SESSION, auto_rebalance=False, sasl=True, ssl=True,
                    kafka_settings=TXN)
    try:
        yield sb
    finally:
        if (sb.dir / "sandbox.json").exists():
            sb.down()
        for pid in find_brokers(sb.dir / "kafka"):   # never leave a JVM behind, even on failure
            os.kill(pid, signal.SIGKILL)


class Fresh:
    """Each call through a new Admin client bootstrapped from the brokers running now (a client kept across a
    kill or stop may first pick the gone broker's connection)."""

    def __init__(self, sb: Sandbox):
        self.sb = sb

    def __getattr__(self, name):
        fn = getattr(ka, name)

        def call(*args, **kwargs):
            a = ka.connect(self.sb.bootstrap_servers)
            try:
                return fn(a, *args, **kwargs)
            finally:
                a.close()
        return call


@pytest.fixture
def admin(kraft):
    return Fresh(kraft)


def parts(admin, *topics):
    return {k: (v["leader"], v["isr"], v["elr"], v["last_known_elr"], v["leader_epoch"])
            for k, v in admin.describe_topic_partitions(topics).items()}


def test_up_runs_one_controller_and_four_brokers_with_racks_and_records_the_bootstrap_servers(kraft, admin):
    info = json.loads((kraft.dir / "sandbox.json").read_text())
    assert info["engine"] == "kraft" and info["bootstrap_servers"] == kraft.bootstrap_servers
    assert info["zookeeper_pid"] is None and not (kraft.dir / "zookeeper").exists()
    ctrl = info["kafka"]["controllers"]["1000"]
    cfg = (kraft.dir / "kafka" / "controller-1000" / "server.properties").read_text()
    assert "process.roles=controller\n" in cfg and pid_alive(ctrl["pid"])
    assert sorted(find_brokers(kraft.dir / "kafka")) == sorted([ctrl["pid"], *kraft.broker_pids.values()])
    for b in (1, 2, 3, 4):
        bcfg = (kraft.dir / "kafka" / f"broker-{b}" / "server.properties").read_text()
        assert "process.roles=broker\n" in bcfg and f"node.id={b}\n" in bcfg and "-Xmx256m" in \
            open(f"/proc/{kraft.broker_pids[b]}/cmdline").read()
        assert f"controller.quorum.voters=1000@127.0.0.1:{ctrl['port']}\n" in bcfg
    # DescribeCluster: the four brokers, unfenced, racks r1 r2 r3 r1; the controller is not a broker
    assert admin.brokers() == {b: {"host": "127.0.0.1", "port": int(kraft.kafka_endpoints()[b].split(":")[1]),
                                   "rack": f"r{(b - 1) % 3 + 1}", "fenced": False} for b in (1, 2, 3, 4)}
    assert admin.active_controller() == 1000
    # a fresh 4.1.1 format finalizes metadata.version 4.1-IV1 (level 27) and ELR version 1 (seen on 4.1.1)
    feats = admin.finalized_features()
    assert feats["metadata.version"] == 27 and feats["eligible.leader.replicas.version"] == 1
    # CreateTopics with the exact assignment: leader = first replica, ISR = every replica, ELR empty
    assert parts(admin, "seed-rf1", "seed-wide") == {
        ("seed-rf1", 0): (1, [1], [], [], 0),
        ("seed-wide", 0): (1, [1, 2, 3], [], [], 0),
        ("seed-wide", 1): (2, [2, 3, 1], [], [], 0)}
    cfg = admin.configs("topic", ["seed-wide", "seed-rf1"], ["min.insync.replicas"])
    assert cfg["seed-wide"]["min.insync.replicas"]["value"] == "2"
    assert cfg["seed-rf1"]["min.insync.replicas"]["value"] == "1"


def rows(snap, table: str) -> dict:
    t = getattr(snap, table).to_pylist()
    key = ("topic", "partition") if table == "partitions" else ("broker",)
    return {tuple(r[k] for k in key) if len(key) > 1 else r[key[0]]: r for r in t}


def test_snapshot_through_the_admin_api_writes_the_snapshot_format(kraft, tmp_path, capsys):
    out = tmp_path / "snap"
    assert cli.main(["snapshot", "--bootstrap-server", kraft.bootstrap_servers, "--out", str(out)]) == 0
    assert "snapshot of KRaft cluster" in capsys.readouterr().out
    snap = sio.read_snapshot(out, lazy=False)             # checksums, fingerprint, schema: a normal snapshot
    m = snap.manifest
    assert m["source"] == {"backend": "kraft", "bootstrap_servers": kraft.bootstrap_servers,
                           "metadata_version": "4.1-IV1", "security_protocol": "PLAINTEXT",
                           "features": {"eligible.leader.replicas.version": 1, "group.version": 1,
                                        "metadata.version": 27, "transaction.version": 2}}
    assert sio.backend(m) == "kraft" and m["zxid"] is None
    assert m["controller"]["broker"] == 1000 and m["counts"]["offline"] == 0 and m["counts"]["alive_brokers"] == 4
    p = rows(snap, "partitions")
    assert {k: (r["replicas"], r["leader"], r["isr"], r["elr"], r["last_known_elr"], r["adding_replicas"],
                r["removing_replicas"], r["target_replicas"]) for k, r in p.items()} == {
        ("seed-rf1", 0): ([1], 1, [1], [], [], [], [], None),
        ("seed-wide", 0): ([1, 2, 3], 1, [1, 2, 3], [], [], [], [], None),
        ("seed-wide", 1): ([2, 3, 1], 2, [2, 3, 1], [], [], [], [], None)}
    # sizes through DescribeLogDirs at the brokers' own endpoints: 200,000 payload bytes on each replica
    assert all(200_000 < s < 220_000 for s in p[("seed-wide", 0)]["replica_sizes"])
    t = {r["topic"]: r for r in snap.topics.to_pylist()}
    assert (t["seed-wide"]["min_insync_replicas"], t["seed-rf1"]["min_insync_replicas"]) == (2, 1)
    assert json.loads(t["seed-wide"]["config"]) == {"min.insync.replicas": "2"}     # the override only
    b = rows(snap, "brokers")
    assert {i: (r["alive"], r["fenced"], r["rack"], r["in_controlled_shutdown"], r["is_controller"])
            for i, r in b.items()} == {i: (True, False, f"r{(i - 1) % 3 + 1}", None, False) for i in (1, 2, 3, 4)}
    assert all(r["capacity_bytes"] and r["capacity_bytes"] > 0 for r in b.values())
    # the seam: plan reads it as any snapshot; a KRaft plan given a ZooKeeper connect string is refused before
    # anything is touched (it is applied through the bootstrap servers: tests/test_kraft_apply.py)
    assert cli.main(["plan", "drain", "--snapshot", str(out), "--brokers", "1", "--out", str(tmp_path / "plan"),
                     "--quiet"]) == 0
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["snapshot"]["backend"] == "kraft" and plan["moves"]
    capsys.readouterr()
    assert cli.main(["apply", "--zk", "127.0.0.1:1", "--plan", str(tmp_path / "plan"), "--no-throttle",
                     "--out", str(tmp_path / "run")]) == 2
    assert ("was made from a KRaft snapshot: apply on KRaft needs the Admin API writer, through the cluster's "
            "bootstrap servers") in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_kafka_address_given_as_zookeeper_is_named(kraft, tmp_path, capsys):
    first = kraft.bootstrap_servers.split(",")[0]
    assert cli.main(["snapshot", "--zk", first, "--out", str(tmp_path / "s"), "--timeout", "2", "--no-sizes"]) == 2
    err = capsys.readouterr().err
    assert f"ZooKeeper connect string {first} names a Kafka broker, not ZooKeeper" in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


def test_a_snapshot_over_sasl_never_shows_the_password_even_verbose(kraft, tmp_path):
    """--kafka-config with SASL PLAIN, the password from the environment; kplan -v logs at DEBUG (kafka-python's
    own SASL exchange included): the password reaches no output. A wrong password is one line naming the
    refusal, exit 2, nothing written."""
    import subprocess
    import sys

    sasl = kraft.kafka_sasl
    servers = ",".join(sorted(kraft.kafka_endpoints("SASL_PLAINTEXT").values()))
    cfg = tmp_path / "kafka.json"
    cfg.write_text(json.dumps({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                               "sasl.username": sasl["username"]}))

    def run(password: str, out: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "KPLAN_KAFKA_PASSWORD": password, "PYTHONPATH": str(REPO)}
        return subprocess.run([sys.executable, "-m", "planner.cli", "-v", "snapshot", "--bootstrap-server", servers,
                               "--kafka-config", str(cfg), "--kafka-timeout", "5", "--out", str(tmp_path / out)],
                              capture_output=True, text=True, env=env, timeout=120)

    ok = run(sasl["password"], "ok")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert sasl["password"] not in ok.stdout + ok.stderr
    m = json.loads((tmp_path / "ok" / "manifest.json").read_text())
    assert m["source"]["security_protocol"] == "SASL_PLAINTEXT" and m["log_dirs"]["brokers_answered"] == 4
    assert sasl["password"] not in (tmp_path / "ok" / "manifest.json").read_text()
    bad = run("Wrong-s3cret-24", "bad")
    assert bad.returncode == 2 and "Wrong-s3cret-24" not in bad.stdout + bad.stderr
    assert "refused SASL_PLAINTEXT (PLAIN, user kplan)" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "bad").exists()


def cli_snapshot(sb, out):
    assert cli.main(["snapshot", "--bootstrap-server", sb.bootstrap_servers, "--out", str(out)]) == 0
    return out


def test_seed_incident_kill_of_broker_1_what_kraft_does_to_the_rf1_partition(kraft, admin, tmp_path):
    # predicted first, from a snapshot of the cluster as it is (kplan risk on a KRaft snapshot replays the
    # KRaft controller's rules in-process: planner.replay_kraft), then reproduced by the kill below
    import pyarrow.parquet as pq

    from planner import api

    api.risk(api.RiskRequest(snapshot=cli_snapshot(kraft, tmp_path / "before"), out=tmp_path / "risk",
                             drains=((1,),), modes=("failure",)), progress=lambda m: None)
    predicted = {(r["topic"], r["partition"]): (r["new_leader"], r["new_isr"], r["new_elr"], r["new_last_known_elr"])
                 for r in pq.read_table(tmp_path / "risk" / "partitions.parquet").to_pylist() if r["scenario_id"] == 0}
    SWEEPS["before the kill"] = admin.partition_sweep()
    result = kraft.kill([1])
    # fenced only once broker.session.timeout.ms passed without a heartbeat (sent every second here)
    assert SESSION - 1.2 <= result["controller_reacted_s"] <= SESSION + 10
    assert admin.brokers()[1]["fenced"] is True
    got = parts(admin, "seed-rf1", "seed-wide")
    # ReplicationControlManager.handleBrokerFenced -> PartitionChangeBuilder with ELR on: broker 1 leaves the
    # ISR; the ISR (now empty) is below min ISR 1, so the removed member goes to the ELR (and last-known
    # ELR); no other replica, so the partition is leaderless: leader -1, epoch bumped
    assert got[("seed-rf1", 0)] == (-1, [], [1], [1], 1)
    # the RF=3 partition broker 1 led: new leader 2 (first live ISR member), ISR without 1; ISR 2 >= min ISR 2,
    # so no ELR
    assert got[("seed-wide", 0)] == (2, [2, 3], [], [], 1)
    # the one broker 1 followed: leader unchanged (epoch too), broker 1 out of the ISR
    assert got[("seed-wide", 1)][:4] == (2, [2, 3], [], [])
    assert {k: v[:4] for k, v in got.items()} == {k: predicted[k] for k in got}, "kplan risk predicted otherwise"
    st = kraft.status()
    assert {(o["topic"], o["partition"]) for o in st["offline"]} == {("seed-rf1", 0)}
    assert [b["fenced"] for b in st["brokers"]] == [True, False, False, False]
    # the snapshot of that moment: broker 1 registered but fenced (not alive), the ELR in the table
    snap = sio.read_snapshot(cli_snapshot(kraft, tmp_path / "after"), lazy=False)
    b, p = rows(snap, "brokers"), rows(snap, "partitions")
    assert (b[1]["alive"], b[1]["fenced"], b[1]["rack"]) == (False, True, "r1")
    assert (p[("seed-rf1", 0)]["leader"], p[("seed-rf1", 0)]["isr"], p[("seed-rf1", 0)]["elr"],
            p[("seed-rf1", 0)]["last_known_elr"]) == (-1, [], [1], [1])
    assert snap.manifest["counts"]["offline"] == 1 and snap.manifest["counts"]["alive_brokers"] == 3
    # broker 1 was not asked for sizes (fenced): its replica of seed-wide-0 is unread (-1), the partition's
    # size comes from the other replicas
    sizes = p[("seed-wide", 0)]["replica_sizes"]
    assert sizes[0] == -1 and all(200_000 < s < 220_000 for s in sizes[1:])
    assert 200_000 < p[("seed-wide", 0)]["size_bytes"] < 220_000


def test_start_brings_the_rf1_partition_back_from_its_elr(kraft, admin):
    kraft.start([1])
    kraft.wait_settled(60)
    got = parts(admin, "seed-rf1", "seed-wide")
    # broker 1 unfenced: the ELR member is elected (a clean election, ELR) and the ISR is it again
    assert got[("seed-rf1", 0)][:4] == (1, [1], [], [])
    assert got[("seed-wide", 0)][0] == 2 and sorted(got[("seed-wide", 0)][1]) == [1, 2, 3]
    assert got[("seed-wide", 0)][2:4] == ([], [])


def test_the_column_reader_agrees_with_kafka_python_and_rereads_only_what_changed(kraft):
    """planner.kraft_dtp reads real DescribeTopicPartitions answers as kafka-python's decoder does, field by field;
    a re-read answered byte for byte alike is the same sweep (not decoded again); after the seed incident's kill
    and start (leader epochs moved, the ELR came and went) a re-read against the sweep from before differs."""
    a = ka.connect(kraft.bootstrap_servers)
    try:
        kraft.wait_settled(60)
        now = ka.partition_sweep(a)
        assert now.fast and now.as_dicts() == ka.describe_topic_partitions(a)
        assert ka.partition_sweep(a, now) is now
        before = SWEEPS["before the kill"]
        again = ka.partition_sweep(a, before)
        assert again is not before and not again.same_state(before) and again.same_state(now)
    finally:
        a.close()


def test_kafka_4_reassign_tool_executes_our_plan_and_rollback_restores_it(kraft, admin, tmp_path):
    """Issue 24: Kafka 4.1.1's own kafka-reassign-partitions (org.apache.kafka.tools.reassign, no ZooKeeper)
    takes the files of a plan made from a KRaft snapshot, moves the data off the drained broker, and the plan's
    rollback file puts every partition back where it was."""
    from planner.kafka.tools import reassign, verify_status

    kraft.wait_settled(60)
    topics = ["seed-rf1", "seed-wide"]
    before = {k: v["replicas"] for k, v in admin.describe_topic_partitions(topics).items()}
    assert any(1 in reps for reps in before.values())
    assert cli.main(["plan", "drain", "--snapshot", str(cli_snapshot(kraft, tmp_path / "snap")), "--brokers", "1",
                     "--out", str(tmp_path / "plan"), "--quiet"]) == 0
    jars, bootstrap = kraft.kafka_jars(), kraft.bootstrap_servers
    assert jars.reassign_class == "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"

    def run(file: Path) -> dict[tuple[str, int], list[int]]:
        reassign(jars, bootstrap, file, "execute")
        poll(lambda: set(verify_status(reassign(jars, bootstrap, file, "verify").stdout).values()) == {"completed"},
             timeout=120, what=f"kafka-reassign-partitions --verify of {file.name}")
        return {(e["topic"], e["partition"]): e["replicas"] for e in json.loads(file.read_text())["partitions"]}

    moved = run(tmp_path / "plan" / "reassignment.json")
    now = {k: v["replicas"] for k, v in admin.describe_topic_partitions(topics).items()}
    assert moved and all(now[k] == reps for k, reps in moved.items())
    assert not any(1 in reps for reps in now.values()), now    # broker 1 holds nothing
    restored = run(tmp_path / "plan" / "rollback.json")
    assert restored.keys() == moved.keys()
    assert {k: v["replicas"] for k, v in admin.describe_topic_partitions(topics).items()} == before


def test_cli_status_stop_and_start_on_kraft(kraft, admin, capsys):
    d = str(kraft.dir)
    capsys.readouterr()
    assert cli.main(["sandbox", "status", "--dir", d]) == 0
    out = capsys.readouterr().out
    assert "KRaft" in out and "settled: yes" in out and "active controller: node 1000" in out
    assert cli.main(["sandbox", "kill", "--dir", d, "9"]) == 2
    assert cli.main(["sandbox", "start", "--dir", d, "3"]) == 2     # already running
    assert cli.main(["sandbox", "stop", "--dir", d, "3"]) == 0
    assert "broker 3 stopped after moving its leaders" in capsys.readouterr().out
    # controlled shutdown: broker 3 led nothing it could not hand over; it leaves every ISR (not fenced-out
    # data: it is still registered, fenced, and in no ISR)
    assert admin.brokers()[3]["fenced"] is True
    assert all(3 not in isr for _, isr, *_ in parts(admin, "seed-wide").values())
    assert cli.main(["sandbox", "start", "--dir", d, "3"]) == 0
    assert cli.main(["sandbox", "wait", "--dir", d, "--timeout", "60"]) == 0
    assert "settled: 0 offline" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------------------
# Airflow on this cluster, named only by a Kafka connection (issue 24 item 4). An Airflow connection of the
# Apache Kafka provider's type whose extra holds bootstrap.servers (the SASL_PLAINTEXT listener) and the SASL
# settings; real Airflow (dag.test(), the REST API in process); no ZooKeeper connection anywhere. The drain runs
# snapshot (Admin API over SASL, sizes through DescribeLogDirs over SASL) -> plan -> publish -> approve (a person
# through the REST API, as the ZooKeeper DAG tests approve) -> apply (throttled, in batches, fenced by __kplan)
# -> verify -> report. Its effects are read with kafka-python's own KafkaAdminClient on the PLAINTEXT listener
# (Metadata, DescribeConfigs), never through kplan: broker 1 holds no replica of any topic, internal ones
# included, and no throttle is left; a sampler saw the throttle set while the apply ran. The nightly rebalance
# takes its cluster from the deployment's default (`[kplan] kafka_conn_id`), as a scheduled run does, here a
# Kafka connection to the SSL listener (CA, client certificate and key, key password), while another kplan holds
# the cluster's fence: its apply is refused, nothing written (the holder's producer is not fenced: the refused
# apply never took the fence). Both connections, or none, are refused at trigger time by the API server. The
# SASL password and the SSL key password are in no file under AIRFLOW_HOME (task logs, run folders, the metadata
# DB) and in nothing the runs printed; the same scan finds them in the sandbox's private sandbox.json, so it can
# fail. The
# risk tasks (spark-submit of the risk job, ~20 s each) are marked successful to stay within the CI budget: the
# KRaft rules through spark-submit are tested in test_kraft_risk_spark, and the re-read risk_after does first
# (api.reread through the connection's bootstrap and SASL) is run below.

@pytest.fixture(scope="module")
def env(kraft, tmp_path_factory):
    sasl = kraft.kafka_sasl
    extra = {"bootstrap.servers": ",".join(sorted(kraft.kafka_endpoints("SASL_PLAINTEXT").values())),
             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.username": sasl["username"], "sasl.password": sasl["password"]}
    home = tmp_path_factory.mktemp("airflow_kraft") / "home"
    with af.airflow_env(home, spark_master="local[2]") as e:   # no ZooKeeper connection at all
        os.environ[f"AIRFLOW_CONN_{CONN.upper()}"] = json.dumps({"conn_type": "kafka", "extra": extra})
        tls = kraft.kafka_ssl   # security.protocol SSL, the CA, the client's certificate, key and key password
        ssl_extra = {"bootstrap.servers": ",".join(sorted(kraft.kafka_endpoints("SSL").values())), **tls}
        os.environ[f"AIRFLOW_CONN_{CONN_SSL.upper()}"] = json.dumps({"conn_type": "kafka", "extra": ssl_extra})
        yield {"home": home, "env": e, "password": sasl["password"], "username": sasl["username"],
               "key_password": tls["ssl.key.password"]}


@contextmanager
def kafka_admin(kraft: Sandbox):
    """kafka-python's own KafkaAdminClient on the PLAINTEXT listener: no kplan code between the test and Kafka."""
    from kafka.admin import KafkaAdminClient

    a = KafkaAdminClient(bootstrap_servers=kraft.bootstrap_servers, client_id="test-kraft-airflow")
    try:
        yield a
    finally:
        a.close()


def replicas_now(kraft: Sandbox) -> dict[tuple[str, int], list[int]]:
    """Every partition of every topic, internal ones included, and its replicas (Metadata, through kafka-python)."""
    with kafka_admin(kraft) as a:
        return {(t["name"], p["partition_index"]): list(p["replica_nodes"]) for t in a.describe_topics()
                for p in t["partitions"]}


def throttles_now(kraft: Sandbox) -> dict[str, str]:
    """Every replication throttle set now, on any topic or broker: the topics' throttled-replica lists and the
    brokers' rates, as Kafka resolves them (DescribeConfigs through kafka-python; dynamic entries only)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    with kafka_admin(kraft) as a:
        topics = sorted({t["name"] for t in a.describe_topics()})
        brokers = [str(b["broker_id"]) for b in a.describe_cluster()["brokers"]]
        res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
                                 + [ConfigResource(ConfigResourceType.BROKER, b) for b in brokers],
                                 config_filter="all")
    out = {}
    for kind, keys, source in (("topic", THROTTLE_KEYS, "DYNAMIC_TOPIC_CONFIG"),
                               ("broker", RATE_KEYS, "DYNAMIC_BROKER_CONFIG")):
        for name, cfg in res.get(kind, {}).items():
            out.update({f"{kind} {name}: {k}": c["value"] for k, c in cfg.items()
                        if k in keys and c.get("config_source") == source and c.get("value")})
    return out


class ThrottleSampler:
    """Samples throttles_now every 0.2 s in a thread while the DAG runs in the main thread: what was seen set."""

    def __init__(self, kraft: Sandbox):
        self.kraft, self.seen, self.done = kraft, {}, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.wait(0.2):
            try:
                for k, v in throttles_now(self.kraft).items():
                    self.seen.setdefault(k, set()).add(v)
            except Exception:  # noqa: BLE001 - a sample lost to a broker busy moving; the next one counts
                pass

    def __enter__(self) -> ThrottleSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def in_maintenance(sb) -> dict[int, tuple[str, str | None]]:
    """The brokers in maintenance now (`kplan brokers --bootstrap-server`'s rows): broker -> (state, plan)."""
    from planner import api

    return {r.broker: (r.state, r.plan_id) for r in api.brokers(api.BrokersRequest(bootstrap=sb.bootstrap_servers))
            if r.state != "in service"}


def secret_in(root: Path, secret: str) -> list[str]:
    """Every file under `root` whose bytes contain `secret`."""
    needle = secret.encode()
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


@contextmanager
def output_to(path: Path):
    """Everything this process writes to stdout and stderr (fds 1 and 2: the tasks' logs under dag.test(), the
    Spark job's output) also goes to `path`, until the block ends."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "wb") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


@pytest.fixture(scope="module")
def drain(env, kraft, pytestconfig):
    # A cluster that has used transactions (and kplan) before, as test_kraft_apply's: __transaction_state and
    # __kplan exist before the snapshot, so the drain moves them off broker 1 too (made after it, they would be
    # named by verify's intent check as topics created since the snapshot, and follow_up would offer their drain)
    store = Store(kraft.bootstrap_servers, lease=5)
    store.open()
    store.close({"released": True, "holder": {"command": "fixture"}})
    start = replicas_now(kraft)
    out = env["home"].parent / "drain-output.log"
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled(), output_to(out), ThrottleSampler(kraft) as sampler:
        dr, approver = af.run_dag(DRAIN, {"brokers": [1], "zk_conn_id": None, "kafka_conn_id": CONN,
                                          "throttle": 50_000_000, "max_concurrent_per_broker": 2},
                                  decide=lambda d: "Approve", mark_success="risk|risk_after", deadline=240)
    return {"dr": dr, "approver": approver, "start": start, "end": replicas_now(kraft), "seen": sampler.seen,
            "throttles_after": throttles_now(kraft), "run": runs.run_folder(DRAIN, dr.run_id), "output": out}


def test_drain_through_the_kafka_connection_is_applied_throttled_in_batches_and_verified(env, kraft, drain):
    dr, run, start, end = drain["dr"], drain["run"], drain["start"], drain["end"]
    st = af.states(dr)
    done = ("snapshot", "plan", "publish", "approve", "apply", "verify", "report")
    assert {k: st[k] for k in done} == dict.fromkeys(done, "success"), st
    assert st["follow_up"] == "skipped", st         # the drain's intent holds: nothing to follow up
    assert drain["approver"].answered == "Approve"  # a person approved, through the REST API
    # the snapshot: the cluster as described above (+ __transaction_state's 4 and __kplan's 1), read over SASL,
    # sizes from every broker over SASL
    m = json.loads((run.root / "snapshot" / "manifest.json").read_text())
    assert m["source"]["backend"] == "kraft" and m["source"]["security_protocol"] == "SASL_PLAINTEXT"
    assert m["log_dirs"]["brokers_answered"] == 4
    assert m["counts"]["partitions"] == 3 + 4 + 1 and m["counts"]["brokers"] == 4
    # Kafka, read without kplan: broker 1 holds no replica of any partition, each keeps its replica count, and a
    # partition broker 1 did not hold is where it was
    assert set(end) == set(start) and len(start) == 8, (start, end)
    assert [k for k, r in end.items() if 1 in r] == [], end
    assert {k: len(r) for k, r in end.items()} == {k: len(r) for k, r in start.items()}
    assert {k: r for k, r in end.items() if 1 not in start[k]} == {k: r for k, r in start.items() if 1 not in r}
    moved = [k for k, r in start.items() if 1 in r]
    assert len(moved) >= 4, start                    # seed-rf1-0, seed-wide-0/1 and RF 3 internal partitions
    # throttled: the sampler saw the run's rate (50 MB/s, the throttle param) on the brokers, and the moving
    # replicas listed as throttled on their topics; none is left afterwards
    rates = {v for k, vals in drain["seen"].items() if k.endswith(RATE_KEYS) for v in vals}
    assert rates == {"50000000"}, drain["seen"]
    assert any(k.startswith("topic seed-wide: ") for k in drain["seen"]), drain["seen"]
    assert drain["throttles_after"] == {}
    # in batches: at most 2 moves into a broker at a time (the form's max concurrent moves per broker)
    outcome = json.loads((run.root / "apply" / "outcome.json").read_text())
    assert outcome["state"] == "completed" and outcome["units_total"] >= 3, outcome
    assert outcome["units_done"] == outcome["units_total"] == outcome["units_submitted"], outcome
    report = json.loads((run.root / "report.json").read_text())
    assert report["converged"] is True and report["plan_id"] == outcome["plan_id"]
    # broker 1 in maintenance now (`__kplan`, as `kplan brokers --bootstrap-server` reads it): drained by this plan
    assert report["maintenance"]["set"] == {"1": "drained"}, report["maintenance"]
    assert in_maintenance(kraft) == {1: ("drained", outcome["plan_id"])}
    review = json.loads((run.root / runs.REVIEW).read_text())
    assert review["status"] == "done" and review["approved_by"], review
    # the task log: apply's progress as counts (as on ZooKeeper), and the fence taken
    text = drain["output"].read_text(errors="replace")
    assert re.search(rf"apply: \d+/{len(moved)}\b", text), text[-3000:]
    assert f"apply of {outcome['plan_id']}: completed ({outcome['units_total']}/{outcome['units_total']} batches)" in text


def test_risk_afters_reread_reads_the_cluster_through_the_connection(env, kraft, drain, tmp_path):
    """What the drain's risk_after does before its Spark job: api.reread with the connection's bootstrap servers
    and SASL settings (through the provider's parsing), yielding the job's request with no cluster in it."""
    from kplan_airflow.kafka_conn import KafkaClusterHook

    from planner import api

    target = KafkaClusterHook(kafka_config_id=CONN).target()
    run, out = drain["run"], tmp_path / "risk-after.tmp"
    out.mkdir()
    req = api.RiskRequest(snapshot=run.snapshot, out=out, plan=run.plan, drains=((1,),), zk=None,
                          bootstrap=target.bootstrap, kafka=target.security)
    assert env["password"] not in repr(req)
    with api.reread(req, tmp_path / "risk-after") as job:
        again = json.loads((job.snapshot / "manifest.json").read_text())
        assert (job.zk, job.bootstrap, job.kafka, job.plan_snapshot) == (None, None, None, run.snapshot)
        (out / "summary.json").write_text(json.dumps({"snapshot": {"path": str(job.snapshot)}}))  # the job's part
    assert again["source"]["backend"] == "kraft" and again["source"]["security_protocol"] == "SASL_PLAINTEXT"
    assert again["log_dirs"]["brokers_answered"] == 4 and again["counts"]["partitions"] == 8
    assert json.loads((out / "summary.json").read_text())["snapshot"]["path"] == str(tmp_path / "risk-after" / "cluster")


def test_no_credential_in_any_task_log_run_folder_or_output(env, kraft, drain):
    home, pw = env["home"], env["password"]
    logs = [p for p in (home / "logs").rglob("*") if p.is_file()] if (home / "logs").exists() else []
    text = drain["output"].read_text(errors="replace") + "".join(p.read_text(errors="replace") for p in logs)
    # the capture holds the tasks' own lines (the snapshot task names where it read, over SASL, as whom; apply
    # and verify wrote through the same connection) ...
    assert f"SASL PLAIN user {env['username']}; Kafka connection '{CONN}'" in text
    assert "apply of " in text and "batches)" in text
    # ... and no password: not in a log, the run folders, Airflow's DB, nor anything printed
    assert pw not in text
    assert secret_in(home, pw) == []
    # the same scan finds it where it is (the sandbox's private record of its SASL user)
    assert str(kraft.dir / "sandbox.json") in secret_in(kraft.dir, pw)


def test_a_plan_of_the_other_backend_is_refused_by_apply_and_verify_with_nothing_written(env, kraft, drain,
                                                                                       monkeypatch, tmp_path):
    """A plan made from a ZooKeeper snapshot (plan.json names no KRaft backend) in a run named by the Kafka
    connection, and the drain's KRaft plan in a run named by a ZooKeeper connection: the apply and verify tasks
    (the operators alone, as Airflow's task runner calls them) fail with one line before any cluster is asked;
    no apply record is made and Kafka (kafka-python) is as it was."""
    import shutil
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException
    from apply_support import write_plan
    from kplan_airflow.operators import ApplyOperator, VerifyOperator

    # nothing listens there: the refusal must come before any connection
    monkeypatch.setenv("AIRFLOW_CONN_ZK_NOWHERE", json.dumps({"conn_type": "zookeeper", "host": "127.0.0.1",
                                                             "port": 9}))
    start = replicas_now(kraft)
    zk_run = runs.run_folder(DRAIN, "manual__zookeeper_plan")
    zk_doc = write_plan(zk_run.plan, moves=[("seed-rf1", 0, start[("seed-rf1", 0)], [3], 0)],
                        batches=[("data", [("seed-rf1", 0, [3])])], kind="drain", drained=[4])
    kraft_run = runs.run_folder(DRAIN, "manual__kraft_plan")
    shutil.copytree(drain["run"].plan, kraft_run.plan)
    kraft_id = json.loads((kraft_run.plan / "plan.json").read_text())["id"]
    cases = [(zk_run, "manual__zookeeper_plan", zk_doc["id"], {"zk_conn_id": None, "kafka_conn_id": CONN},
              "was made from a ZooKeeper snapshot, but this run names a KRaft cluster (a Kafka connection): "
              "nothing was written"),
             (kraft_run, "manual__kraft_plan", kraft_id, {"zk_conn_id": "zk_nowhere", "kafka_conn_id": None},
              "was made from a KRaft snapshot: {step} on KRaft needs the Admin API writer, through the cluster's "
              "bootstrap servers (not a ZooKeeper connect string); nothing was written")]
    for run, run_id, plan_id, conns, words in cases:
        context = {"dag": SimpleNamespace(dag_id=DRAIN), "run_id": run_id,
                   "ti": SimpleNamespace(xcom_pull=lambda task_ids, plan_id=plan_id: {"plan_id": plan_id})}
        for step, op in (("apply", ApplyOperator(task_id="apply", throttle=50_000_000, **conns)),
                         ("verify", VerifyOperator(task_id="verify", timeout=5, **conns))):
            with pytest.raises(AirflowFailException) as e:
                op.execute(context)
            assert words.format(step=step) in str(e.value) and "\n" not in str(e.value), (run_id, step, str(e.value))
        assert not (run.root / "apply").exists() and not (run.root / "report.json").exists(), run_id
    assert replicas_now(kraft) == start and throttles_now(kraft) == {}


REFUSED: dict = {}   # the rebalance run whose apply the held fence refused (its plan, for the trigger below)


def test_nightly_rebalance_over_ssl_takes_the_deployments_kafka_connection_and_a_held_fence_refuses_its_apply(
        env, kraft, drain, monkeypatch, pytestconfig):
    # a KRaft deployment's default, as scheduled: this one reaches the cluster through its SSL listener
    monkeypatch.setenv("AIRFLOW__KPLAN__KAFKA_CONN_ID", CONN_SSL)
    # the drain's broker 1 back in service, by the operator's explicit act: drained, the rebalance would leave it
    # out (and find nothing to do on the other three)
    assert cli.main(["maintenance", "clear", "--bootstrap-server", kraft.bootstrap_servers, "--brokers", "1",
                     "--state", "drained"]) == 0
    assert in_maintenance(kraft) == {}
    dag = af.load_dag(REBALANCE)
    assert dag.params["kafka_conn_id"] == CONN_SSL and dag.params["zk_conn_id"] is None
    # Another kplan writes to this cluster (an apply on another host, say): it holds the fence (its producer's
    # epoch on __kplan) and a live lock
    holder = Store(kraft.bootstrap_servers, lease=30)
    holder.open()
    who = {"command": "apply", "plan_id": "sha256:" + "0" * 64, "pid": os.getpid(), "host": socket.gethostname(),
           "user": "ops", "since": "2026-11-26T10:00:00Z"}
    holder.transact({"lock": {"holder": who, "heartbeat": time.time(), "released": False}})
    try:
        start = replicas_now(kraft)
        # the defaults, as a scheduled run has them; approved by a person through the REST API (the risk after
        # the plan is not scored here, so auto-approve does not apply)
        capture = pytestconfig.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled(), output_to(env["home"].parent / "rebalance-output.log"):
            dr, approver = af.run_dag(REBALANCE, {}, decide=lambda d: "Approve", mark_success="risk_after",
                                      deadline=180)
        assert approver.answered == "Approve"
        st = af.states(dr)
        assert {k: st[k] for k in ("snapshot", "check_idle", "plan", "publish", "approve")} == dict.fromkeys(
            ("snapshot", "check_idle", "plan", "publish", "approve"), "success"), st
        assert st["apply"] == "failed" and st["verify"] == "upstream_failed", st
        run = runs.run_folder(REBALANCE, dr.run_id)
        source = json.loads((run.root / "snapshot" / "manifest.json").read_text())["source"]
        assert source["backend"] == "kraft" and source["security_protocol"] == "SSL", source
        moves = json.loads((run.root / "plan" / "reassignment.json").read_text())["partitions"]
        assert moves, "the rebalance planned nothing: the refusal below would prove nothing"
        review = json.loads((run.root / runs.REVIEW).read_text())
        assert review["status"] == "apply refused", review
        assert review["error"].startswith("another kplan holds this cluster's lock (kplan apply of plan sha256:000")
        assert "nothing was written" in review["error"] and "\n" not in review["error"]
        # nothing written: Kafka as before, no throttle, and the holder still holds the fence (the refused apply
        # never ran initTransactions, which would have fenced it: this commit would raise Fenced)
        assert replicas_now(kraft) == start and throttles_now(kraft) == {}
        holder.transact({"lock": {"holder": who, "heartbeat": time.time(), "released": False}})
        REFUSED.update(plan=run.plan, run_id=dr.run_id)
    finally:
        holder.close({"holder": who, "heartbeat": time.time(), "released": True})


def test_verify_trigger_polls_the_kraft_cluster_through_the_kafka_connection(env, drain):
    """The deferrable verify's trigger on KRaft, serialized as the triggerer stores it (the connection's id, no
    secret), polling through the Kafka connection: the drained plan converged; the refused rebalance's plan
    still waiting at its deadline."""
    import asyncio

    from airflow.sdk.module_loading import import_string
    from kplan_airflow.triggers import VerifyTrigger

    def fire(plan: Path, deadline_in: float, conn: str) -> dict:
        now = time.time()
        path, kwargs = VerifyTrigger(kafka_conn_id=conn, plan=str(plan), started=now - 5, deadline=now + deadline_in,
                                     poll=0.2).serialize()
        assert kwargs["zk_conn_id"] is None and kwargs["kafka_conn_id"] == conn
        assert env["password"] not in json.dumps(kwargs) and env["key_password"] not in json.dumps(kwargs)
        trigger = import_string(path)(**json.loads(json.dumps(kwargs)))

        async def first():
            async for event in trigger.run():
                return event.payload

        return asyncio.run(first())

    done = fire(drain["run"].plan, 30, CONN)
    assert (done["status"], done["pending"]) == ("converged", []) and done["converged"] == done["total"], done
    waiting = fire(REFUSED["plan"], 0.5, CONN_SSL)   # through the SSL listener
    assert waiting["status"] == "timeout" and waiting["converged"] < waiting["total"], waiting


def test_sigterm_to_the_apply_task_on_kraft_stops_after_the_batch_in_flight(env, kraft):
    """Airflow's task runner answers SIGTERM with the operator's on_kill, as on ZooKeeper
    (tests/test_apply_operator_kill.py): the refused rebalance's plan applied by the apply task of its run (the
    operator alone, in a thread, through the Kafka connection; one move per batch), on_kill once the first batch's
    throttle shows on the brokers. The batch in flight finishes, nothing else is submitted, no throttle and no
    reassignment is left (kafka-python), the task fails saying so and the review record says "apply stopped"."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException
    from kplan_airflow.operators import ApplyOperator

    plan_dir = REFUSED["plan"]
    plan_id = json.loads((plan_dir / "plan.json").read_text())["id"]
    start = replicas_now(kraft)
    op = ApplyOperator(task_id="apply", zk_conn_id=None, kafka_conn_id=CONN, throttle=50_000_000,
                       max_concurrent_per_broker=1)
    context = {"dag": SimpleNamespace(dag_id=REBALANCE), "run_id": REFUSED["run_id"],
               "ti": SimpleNamespace(xcom_pull=lambda task_ids: {"plan_id": plan_id})}
    ended: dict = {}

    def task() -> None:
        try:
            ended["result"] = op.execute(context)
        except BaseException as e:   # noqa: BLE001 - what the task ended with is the test's subject
            ended["error"] = e

    runner = threading.Thread(target=task, daemon=True)
    runner.start()
    poll(lambda: any(k.endswith(RATE_KEYS) for k in throttles_now(kraft)) or not runner.is_alive(), timeout=60,
         every=0.05, what="the first batch's throttle on the brokers")
    op.on_kill()
    runner.join(60)
    assert not runner.is_alive(), "the apply did not stop"
    err = ended.get("error")
    assert isinstance(err, AirflowFailException), ended
    assert f"apply of {plan_id} stopped on request: " in str(err) and "none in flight" in str(err), str(err)
    outcome = json.loads((plan_dir.parent / "apply" / "outcome.json").read_text())
    assert outcome["state"] == "interrupted" and outcome["units_total"] >= 3, outcome
    assert 1 <= outcome["units_done"] < outcome["units_total"], outcome
    # Kafka, read without kplan: nothing moving, no throttle left, and some but not all of the plan's moves made
    with kafka_admin(kraft) as a:
        assert a.list_partition_reassignments() in ({}, []), "a reassignment was left in flight"
    assert throttles_now(kraft) == {}
    end = replicas_now(kraft)
    targets = {(p["topic"], p["partition"]): p["replicas"]
               for p in json.loads((plan_dir / "reassignment.json").read_text())["partitions"]}
    done = [k for k, r in targets.items() if end[k] == r and start[k] != r]
    assert 1 <= len(done) < len(targets), (done, targets)
    assert (runs.read_json(plan_dir.parent / runs.REVIEW) or {})["status"] == "apply stopped"


def test_no_ssl_key_password_in_any_task_log_run_folder_or_output(env, kraft):
    """After the rebalance over SSL: the client key's password is in no task log, run folder, Airflow's DB, nor
    anything the run printed; the scan finds it in the sandbox's private sandbox.json."""
    home, pw = env["home"], env["key_password"]
    out = (env["home"].parent / "rebalance-output.log").read_text(errors="replace")
    assert f"{REBALANCE}" in out and "another kplan holds this cluster's lock" in out   # the run's own lines
    assert pw not in out
    assert secret_in(home, pw) == []
    assert str(kraft.dir / "sandbox.json") in secret_in(kraft.dir, pw)


def test_both_connections_or_none_are_refused_at_trigger_time(env):
    """Through Airflow's REST API in process, with the plugin's trigger check in front of it."""
    af.sync_dags()
    api = af.local.ApiClient(af.PASSWORD)

    def trigger(dag_id: str, conf: dict) -> tuple[int, str]:
        r = api.client.post(f"/api/v2/dags/{dag_id}/dagRuns", headers=api.headers,
                            json={"logical_date": None, "conf": conf})
        return r.status_code, r.json().get("detail") if r.status_code == 400 else ""

    both = trigger(REBALANCE, {"zk_conn_id": "zookeeper_default", "kafka_conn_id": CONN})
    assert both == (400, "Cluster: both a ZooKeeper connection (zookeeper_default) and a Kafka connection "
                         f"({CONN}) are given: name the cluster by one of them, the ZooKeeper connection for a "
                         "ZooKeeper-mode cluster or the Kafka connection (bootstrap.servers and its SASL / SSL "
                         "settings) for a KRaft cluster, and clear the other. Nothing was triggered.")
    code, why = trigger(DRAIN, {"brokers": [1], "zk_conn_id": None, "kafka_conn_id": ""})
    assert code == 400 and why.startswith("Cluster: no cluster is named: give a ZooKeeper connection")
    # the form's default (zookeeper_default) plus a Kafka connection is two as well
    assert trigger(DRAIN, {"brokers": [1], "kafka_conn_id": CONN})[0] == 400
    # exactly one passes the check and becomes a run (queued: no scheduler here)
    assert trigger(DRAIN, {"brokers": [1], "zk_conn_id": None, "kafka_conn_id": CONN})[0] == 200


def test_down_leaves_no_jvm(kraft):
    pids = [*kraft.broker_pids.values(), kraft.info["kafka"]["controllers"]["1000"]["pid"]]
    assert all(pid_alive(p) for p in pids)
    assert cli.main(["sandbox", "down", "--dir", str(kraft.dir)]) == 0
    assert find_brokers(kraft.dir / "kafka") == {} and not any(pid_alive(p) for p in pids)
    assert not (kraft.dir / "sandbox.json").exists()


def test_kraft_bad_input_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(BadInput, match="too old for the kraft engine"):
        Sandbox.up(tmp_path / "a", brokers=3, engine="kraft", kafka_version="3.6.2")
    with pytest.raises(BadInput, match="no ZooKeeper"):
        Sandbox.up(tmp_path / "b", brokers=3, engine="kraft", zk="127.0.0.1:2181")
    dead = {"brokers": [{"id": 1}, {"id": 2, "alive": False}], "topics": []}
    with pytest.raises(BadInput, match="kill or stop them after up"):
        Sandbox.up(tmp_path / "c", cluster=dead, engine="kraft")
    assert not any((tmp_path / x).exists() for x in "abc")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "sandbox.json").write_text(json.dumps({"engine": "kraft"}))
    with pytest.raises(SandboxError, match="no ZooKeeper"):
        Sandbox(tmp_path / "d").connect_string  # noqa: B018
