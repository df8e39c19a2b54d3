"""Sizes and disk capacity read from the brokers (DescribeLogDirs at their registered endpoints) on the emulated
engine, whose brokers answer from their own model: every replica's size, each broker's capacity, the gaps
(a broker that does not answer, a log dir in error) named or refused, and no secret in any output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner import cli
from planner.sandbox import Sandbox
from planner.snapshot_io import list_to_matrix, read_snapshot

pytestmark = pytest.mark.sandbox
REPO = Path(__file__).resolve().parent.parent
MB = 1_000_000
# four brokers with 1 GB disks; sizes very different per partition; "solo" lives on broker 2 alone
CLUSTER = {
    "brokers": [{"id": i, "rack": f"r{i}", "disk_bytes": 1000 * MB} for i in (1, 2, 3, 4)],
    "topics": [
        {"name": "big", "partitions": [{"replicas": [1, 2, 3], "size_bytes": 200 * MB},
                                       {"replicas": [2, 3, 4], "size_bytes": 150 * MB}]},
        {"name": "small", "partitions": [{"replicas": [3, 4], "size_bytes": 1234},
                                         {"replicas": [4, 1], "size_bytes": 0}]},
        {"name": "solo", "partitions": [{"replicas": [2], "size_bytes": 7 * MB}]},
    ],
}
SIZE = {("big", 0): 200 * MB, ("big", 1): 150 * MB, ("small", 0): 1234, ("small", 1): 0, ("solo", 0): 7 * MB}


@pytest.fixture(scope="module")
def sb(tmp_path_factory, zk_server):
    s = Sandbox.up(tmp_path_factory.mktemp("sizes") / "sb", cluster=CLUSTER, zk=zk_server.connect_string + "/sizes",
                   catch_up_delay=0.1, auto_rebalance=False)
    yield s
    s.down()


def _snap(sb, out: Path, *extra: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "planner.cli", "snapshot", "--zk", sb.connect_string, "--out",
                           str(out), "--kafka-timeout", "3", *extra], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), **EXTRA_ENV})
    return done.returncode, done.stdout + done.stderr


EXTRA_ENV: dict[str, str] = {}


def _rows(snap):
    p = snap.partitions.to_pydict()
    rs = list_to_matrix(snap.partitions.column("replicas"))
    return {(t, n): (r, s, sz) for t, n, r, s, sz in zip(p["topic"], p["partition"], p["replicas"], p["replica_sizes"],
                                                          p["size_bytes"], strict=True)}, rs


def test_every_replica_size_and_each_brokers_capacity_come_from_the_brokers(sb, tmp_path):
    rc, out = _snap(sb, tmp_path / "s")
    assert rc == 0, out
    snap = read_snapshot(tmp_path / "s")
    rows, _ = _rows(snap)
    for k, (reps, rsizes, size) in rows.items():
        assert rsizes == [SIZE[k]] * len(reps), k          # each replica as its own broker reported it
        assert size == SIZE[k]
    b = snap.brokers.to_pydict()
    held = {i: sum(SIZE[k] for k, (r, _, _) in rows.items() if i in r) for i in (1, 2, 3, 4)}
    assert b["capacity_bytes"] == [1000 * MB] * 4
    assert b["disk_used_bytes"] == [held[i] for i in b["broker"]]
    assert snap.manifest["sizes"] == "brokers" and snap.manifest["log_dirs"]["api_versions"] == [4]
    assert "sizes           from 4 brokers (DescribeLogDirs v4): 11 replicas read" in out


def test_an_unreachable_broker_is_refused_or_named_and_filled_from_other_replicas(sb, tmp_path):
    ep = {b["id"]: b["endpoint"] for b in sb.status()["brokers"]}
    sb.fault([2], unreachable=True)
    try:
        rc, out = _snap(sb, tmp_path / "strict")
        assert rc == 2 and not (tmp_path / "strict").exists(), out
        assert f"sizes from the brokers are incomplete: broker 2 ({ep[2]}): unreachable" in out
        assert "--partial-sizes" in out and "Traceback" not in out
        rc, out = _snap(sb, tmp_path / "partial", "--partial-sizes")
        assert rc == 0, out
    finally:
        sb.fault([2], unreachable=False)
    snap = read_snapshot(tmp_path / "partial")
    rows, _ = _rows(snap)
    reps, rsizes, size = rows[("big", 0)]                  # [1, 2, 3]: broker 2's replica unread
    assert rsizes == [200 * MB, -1, 200 * MB] and size == 200 * MB
    assert rows[("solo", 0)][1:] == ([-1], None)           # no replica readable: unknown
    assert snap.brokers.to_pydict()["capacity_bytes"][1] is None
    problems = [w["problem"] for w in snap.manifest["warnings"]]
    assert any(p.startswith(f"broker 2 ({ep[2]}): unreachable") for p in problems)
    assert "1 partitions have no replica whose size could be read: their size is unknown" in problems


def test_a_log_dir_in_error_is_refused_or_named(sb, tmp_path):
    sb.fault([3], logdir_error=True)
    try:
        rc, out = _snap(sb, tmp_path / "strict")
        assert rc == 2 and not (tmp_path / "strict").exists(), out
        assert "broker 3 log dir /var/lib/kafka/broker-3: KAFKA_STORAGE_ERROR" in out
        rc, out = _snap(sb, tmp_path / "partial", "--partial-sizes")
        assert rc == 0, out
    finally:
        sb.fault([3], logdir_error=False)
    snap = read_snapshot(tmp_path / "partial")
    assert snap.brokers.to_pydict()["log_dir_errors"][2] == ["/var/lib/kafka/broker-3: KAFKA_STORAGE_ERROR"]
    assert snap.brokers.to_pydict()["capacity_bytes"][2] is None
    assert _rows(snap)[0][("small", 0)][1] == [-1, 1234]   # [3, 4]: from broker 4


def test_a_listener_the_brokers_lack_is_a_clear_error_and_no_secret_is_shown(sb, tmp_path):
    secret = "s3cr3t-Pa55word"
    cfg = tmp_path / "kafka.json"
    cfg.write_text(json.dumps({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                               "sasl.username": "kplan", "group.id": "ignored"}))
    EXTRA_ENV["KPLAN_KAFKA_PASSWORD"] = secret
    try:
        rc, out = _snap(sb, tmp_path / "s", "--kafka-config", str(cfg))
    finally:
        EXTRA_ENV.clear()
    assert rc == 2 and not (tmp_path / "s").exists(), out
    assert "no registered broker answered DescribeLogDirs over SASL_PLAINTEXT (PLAIN, user kplan)" in out
    assert "no SASL_PLAINTEXT listener in its registration" in out
    assert secret not in out


def test_a_drain_that_would_overfill_the_disks_is_refused_naming_them(sb, tmp_path, capsys):
    assert cli.main(["snapshot", "--zk", sb.connect_string, "--out", str(tmp_path / "s")]) == 0
    # held now (MB): 1: 200, 2: 357, 3: 350, 4: 150. Draining 2: big-0 (200, on 1 and 3) can only go to 4,
    # big-1 (150, on 3 and 4) only to 1, solo (7) anywhere: 1 and 4 end at 350 (+7 for one of them).
    def drain(limit: str, out: str) -> int:
        capsys.readouterr()
        return cli.main(["plan", "drain", "--snapshot", str(tmp_path / "s"), "--brokers", "2", "--out",
                         str(tmp_path / out), "--max-disk-usage", limit, "--quiet"])

    assert drain("0.45", "ok") == 0
    doc = json.loads((tmp_path / "ok" / "plan.json").read_text())
    after = dict(zip(doc["brokers"]["ids"], doc["after"]["disk_used_bytes"], strict=True))
    assert sorted(after[b] for b in (1, 3, 4)) == [350 * MB, 350 * MB + 1234, 357 * MB + 1234] or \
        sorted(after[b] for b in (1, 3, 4)) == [350 * MB + 1234, 350 * MB + 1234, 357 * MB]
    # 355 MB each: solo's 7 MB fits nowhere (1 and 4 reach 350 with the big ones, 3 holds 350)
    assert drain("0.355", "tight") == 2 and not (tmp_path / "tight").exists()
    err = capsys.readouterr().err
    assert "disk capacity: no broker that may hold solo-0 (6.7 MiB) has that much room under 35.5 % of its " \
           "capacity" in err, err
    # 30 %: broker 3 is already above it: refused before anything is placed
    assert drain("0.30", "refused") == 2 and not (tmp_path / "refused").exists()
    err = capsys.readouterr().err
    assert "1 broker(s) already use more than 30 % of their log dirs' capacity before the plan (broker 3: " in err


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@pytest.mark.parametrize("error", [False, True])
def test_the_emulators_direct_describe_log_dirs_frame_is_kafka_pythons_encoding_byte_for_byte(version, error):
    """The emulated brokers write their DescribeLogDirs answer directly (sandbox/wire.py, for speed at 200k
    partitions); kafka-python's own structs, an independent encoder of Kafka's schema, must produce the same
    bytes, and its decoder must read back every replica."""
    import numpy as np
    from kafka.protocol.admin import DescribeLogDirsResponse

    from planner.sandbox import wire

    names = ["a", "topic-é", "t" * 300]                 # a non-ASCII name; one past a 1-byte varint length
    counts = np.array([1, 3, 130], np.int64)           # 130 entries: a 2-byte compact array length
    pids = np.concatenate([[0], [2, 0, 7], np.arange(130)]).astype(np.int32)
    sizes = np.concatenate([[0], [5, 1 << 40, 123], np.arange(130) * 1_000_003]).astype(np.int64)
    state = wire.LogDirState("/var/lib/kafka/broker-3", 1 << 42, error, names, counts, pids, sizes)
    direct = wire.describe_log_dirs_frame(version, 4242, state)
    reference = wire._framed(wire.describe_log_dirs_structs(version, state, None), 4242)
    assert direct == reference
    resp = DescribeLogDirsResponse.decode(direct[4:], version=version, header=True)
    (res,) = resp.results
    got = [(t.name, p.partition_index, p.partition_size) for t in res.topics for p in t.partitions]
    if error:
        assert res.error_code == wire.KAFKA_STORAGE_ERROR and got == []
    else:
        want = [(n, int(p), int(z)) for n, a, c in zip(names, [0, 1, 4], [1, 3, 130], strict=True)
                for p, z in zip(pids[a:a + c], sizes[a:a + c], strict=True)]
        assert res.error_code == 0 and got == want
        if version >= 4:
            assert (res.total_bytes, res.usable_bytes) == (1 << 42, (1 << 42) - int(sizes.sum()))


def test_a_replica_still_copying_reports_what_it_has_copied_so_far(tmp_path, zk_server):
    """As a real broker's log does: a replica a reassignment is adding grows from 0 to its partition's size."""
    from kazoo.client import KazooClient
    from waiting import poll

    from planner.kafka_admin import KafkaSecurity, describe_log_dirs

    s = Sandbox.up(tmp_path / "sb", cluster=CLUSTER, zk=zk_server.connect_string + "/sizes_copying",
                   catch_up_delay=0.1, auto_rebalance=False, link_rate=2 * MB)     # solo's 7 MB: ~3.5 s
    try:
        zk = KazooClient(hosts=s.connect_string)
        zk.start()
        try:
            reg = json.loads(zk.get("/brokers/ids/4")[0])
            ep = {4: reg["endpoints"][0].split("://", 1)[1]}

            def solo_on_4() -> int | None:
                rec = describe_log_dirs(ep, KafkaSecurity(), 5)[4]
                assert rec.status == "ok", rec.error
                return next((z for t, p, z in zip(rec.topics, rec.partitions, rec.sizes, strict=True)
                             if (t, p) == ("solo", 0)), None)

            assert solo_on_4() is None                             # broker 4 holds no replica of solo yet
            zk.create("/admin/reassign_partitions", json.dumps({"version": 1, "partitions": [
                {"topic": "solo", "partition": 0, "replicas": [2, 4]}]}).encode())
            seen = poll(lambda: (lambda z: z if z is not None and 0 < z < 7 * MB else None)(solo_on_4()),
                        timeout=30, what="solo-0 part way copied on broker 4")
            later = poll(lambda: (lambda z: z if z is not None and z > seen else None)(solo_on_4()),
                         timeout=30, what="solo-0 growing on broker 4")
            assert later <= 7 * MB
            poll(lambda: solo_on_4() == 7 * MB, timeout=30, what="solo-0 complete on broker 4")
        finally:
            zk.stop()
    finally:
        s.down()


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@pytest.mark.parametrize("error", [False, True])
def test_the_clients_array_reader_agrees_with_kafka_pythons_decoder(version, error):
    """planner/kafka_log_dirs.py reads a DescribeLogDirs answer straight into arrays; kafka-python's own decoder
    is the reference, entry by entry. An answer it does not expect (here: a tagged field inside a partition
    entry, which Kafka never writes) goes to that decoder instead, with the same figures."""
    import numpy as np

    from planner import kafka_log_dirs
    from planner.sandbox import wire

    names = ["a", "topic-é", "t" * 300]
    counts = np.array([1, 3, 130], np.int64)
    pids = np.concatenate([[0], [2, 0, 7], np.arange(130)]).astype(np.int32)
    sizes = np.concatenate([[0], [5, 1 << 40, 123], np.arange(130) * 1_000_003]).astype(np.int64)
    state = wire.LogDirState("/var/lib/kafka/broker-3", 1 << 42, error, names, counts, pids, sizes)
    frame = wire.describe_log_dirs_frame(version, 4242, state)
    body = frame[4 + 4 + (1 if version >= 2 else 0):]          # size, correlation id, header tagged fields
    fast = kafka_log_dirs.decode(body, version)
    ref = kafka_log_dirs.from_structs(kafka_log_dirs._structs(body, version), version)
    assert fast.fast and not ref.fast

    def flat(a):
        return [(d.error_code, d.log_dir, d.total_bytes, d.usable_bytes, d.topics, d.counts.tolist(),
                 d.partitions.tolist(), d.sizes.tolist(), d.future.tolist()) for d in a.dirs], a.error_code

    assert flat(fast) == flat(ref)
    assert fast.dirs[0].sizes.tolist() == ([] if error else sizes.tolist())
    if version >= 2 and not error:
        # the first partition entry's tagged-field count (its last byte) set to 1, with one empty tag after it
        at = frame.index(b"\x00" * 4 + b"\x00" * 8 + b"\x00" * 8 + b"\x00\x00") + 21   # topic "a", partition 0
        odd = frame[:at] + b"\x01\x00\x00" + frame[at + 1:]
        odd_body = odd[4 + 4 + 1:]
        got = kafka_log_dirs.decode(odd_body, version)
        assert not got.fast and flat(got) == flat(ref)
        # a tagged field with a payload on topic "a" (after its partition entries: tag 5, 2 bytes) is read past
        # by the fast reader itself (its size varint was once added to the position it started at)
        tagged = frame[:at + 1] + b"\x01\x05\x02\xab\xcd" + frame[at + 2:]
        got = kafka_log_dirs.decode(tagged[4 + 4 + 1:], version)
        assert got.fast and flat(got) == flat(ref)
