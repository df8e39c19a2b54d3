"""Issue 18 on real Kafka 3.9 brokers, each with its own log-dir volume of a known size: the snapshot's sizes
are exactly what Kafka's own `kafka-log-dirs.sh --describe` reports, over PLAINTEXT, SASL and SSL (mTLS with a
throwaway CA made by keytool; a wrong password or truststore is one clear line, no secret shown); a plan's bytes
are the bytes the apply copies; a drain that would overfill the brokers that stay is refused naming them
(checked against the volumes' own statvfs figures); where mounting those volumes is impossible, one clear line
at once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from planner import api, cli
from planner.kafka.tools import run_tool
from planner.sandbox import Sandbox
from planner.snapshot_io import read_snapshot

pytestmark = pytest.mark.kafka
REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20
DISK = 48 * MiB          # each broker's volume (a tmpfs of exactly this size on its log dir)
# partitions of very different sizes; "big" lives on brokers 1 and 2, so a drain of 1 moves it to 3
SIZES = [(("big", 0), [1, 2], 12 * MiB), (("mid", 0), [1, 3], 3 * MiB), (("mid", 1), [2, 1], 700_000),
         (("tiny", 0), [3, 1], 40_000), (("empty", 0), [1, 2], 0), (("solo", 0), [1], 2 * MiB)]


def _desc() -> dict:
    topics: dict[str, list] = {}
    for (t, p), reps, size in SIZES:
        topics.setdefault(t, []).append((p, reps, size))
    return {"brokers": [{"id": b, "rack": f"r{b}", "disk_bytes": DISK} for b in (1, 2, 3)],
            "topics": [{"name": t, "partitions": [{"replicas": r, "size_bytes": s} for _, r, s in sorted(ps)]}
                       for t, ps in topics.items()]}


@pytest.fixture(scope="module")
def real(tmp_path_factory, zk_server, kafka_jars):
    sb = Sandbox.up(tmp_path_factory.mktemp("sizes_kafka") / "sb", cluster=_desc(), engine="kafka",
                    zk=zk_server.connect_string + "/sizes_kafka", data_scale=1.0, sasl=True, ssl=True, session_timeout=6,
                    auto_rebalance=False)
    yield sb
    sb.down()


def log_dirs_tool(sb) -> dict[tuple[int, str, int], int]:
    """Kafka's own kafka-log-dirs.sh --describe (LogDirsCommand): (broker, topic, partition) -> size."""
    res = run_tool(sb.kafka_jars(), "org.apache.kafka.tools.LogDirsCommand",
                   ["--bootstrap-server", sb.bootstrap_servers, "--describe"])
    doc = json.loads(next(line for line in res.stdout.splitlines() if line.startswith("{")))
    out = {}
    for b in doc["brokers"]:
        for d in b["logDirs"]:
            for p in d["partitions"]:
                t, _, n = p["partition"].rpartition("-")
                out[(b["broker"], t, int(n))] = p["size"]
    return out


def _replica_sizes(snap) -> dict[tuple[int, str, int], int]:
    p = snap.partitions.to_pydict()
    return {(b, t, n): s for t, n, reps, sizes in zip(p["topic"], p["partition"], p["replicas"], p["replica_sizes"],
                                                       strict=True) for b, s in zip(reps, sizes, strict=True)}


def _kplan(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner.cli", *argv], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def test_snapshot_sizes_equal_kafka_log_dirs_over_plaintext_and_sasl(real, tmp_path):
    tool = log_dirs_tool(real)
    assert tool[(1, "big", 0)] > 12 * MiB > tool[(1, "mid", 0)] > 3 * MiB > tool[(2, "mid", 1)] > 700_000
    done = _kplan("snapshot", "--zk", real.connect_string, "--out", str(tmp_path / "plain"))
    assert done.returncode == 0, done.stderr
    snap = read_snapshot(tmp_path / "plain")
    assert _replica_sizes(snap) == tool                      # every replica, byte for byte
    b = snap.brokers.to_pydict()
    assert b["capacity_bytes"] == [DISK] * 3                 # the volumes' own size, from DescribeLogDirs v4
    for bid, used, dirs in zip(b["broker"], b["disk_used_bytes"], b["log_dirs"], strict=True):
        st = os.statvfs(dirs[0])
        assert abs(used - (st.f_blocks - st.f_bavail) * st.f_frsize) < MiB   # Kafka's figure vs the volume's
        assert used >= sum(s for (x, _, _), s in tool.items() if x == bid)
    sasl = real.kafka_sasl
    cfg = tmp_path / "kafka.json"
    cfg.write_text(json.dumps({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                               "sasl.username": sasl["username"]}))
    done = _kplan("snapshot", "--zk", real.connect_string, "--out", str(tmp_path / "sasl"), "--kafka-config",
                  str(cfg), env={"KPLAN_KAFKA_PASSWORD": sasl["password"]})
    assert done.returncode == 0, done.stderr
    assert _replica_sizes(read_snapshot(tmp_path / "sasl")) == tool
    assert read_snapshot(tmp_path / "sasl").manifest["log_dirs"]["security_protocol"] == "SASL_PLAINTEXT"
    assert sasl["password"] not in done.stdout + done.stderr


def test_wrong_sasl_credentials_are_a_clear_error_with_no_secret_and_nothing_written(real, tmp_path):
    wrong = "not-the-Password-42"
    done = _kplan("-v", "snapshot", "--zk", real.connect_string, "--out", str(tmp_path / "s"),
                  "--kafka-security-protocol", "SASL_PLAINTEXT", "--kafka-sasl-mechanism", "PLAIN",
                  "--kafka-sasl-username", "kplan", env={"KPLAN_KAFKA_PASSWORD": wrong})
    assert done.returncode == 2 and not (tmp_path / "s").exists(), done.stderr
    err = [x for x in done.stderr.splitlines() if "error:" in x]
    assert len(err) == 1 and "refused SASL_PLAINTEXT (PLAIN, user kplan): " in err[0], done.stderr[-2000:]
    # Kafka's own answer (SaslAuthenticate v1+, KIP-152; PlainSaslServer's message) or, when kafka-python read it
    # in one go with the close that follows it and dropped it (planner/kafka_admin.py), that close said as such
    assert "Authentication failed: Invalid username or password" in err[0] or \
        "the broker closed the connection during SASL PLAIN authentication, as Kafka does when it rejects the " \
        "credentials" in err[0], err[0]
    assert "check the Kafka credentials" in err[0] and "Traceback" not in done.stderr
    for secret in (wrong, real.kafka_sasl["password"]):
        assert secret not in done.stdout + done.stderr       # not even with -v (debug logging)


def _secrets(sb) -> list[str]:
    info = json.loads((sb.dir / "sandbox.json").read_text())["kafka"]
    tls = info["ssl"]
    return [tls["keystore_password"], tls["truststore_password"], tls["client_key_password"],
            info["sasl"]["password"]]


def _stray_ca(where: Path) -> Path:
    """A CA that did not sign the brokers' certificates (its own throwaway key pair, made with keytool)."""
    from planner.kafka.tls import keytool

    env = {**os.environ, "STRAY_PW": "stray-ca-store"}
    kt = [keytool(), "-J-XX:TieredStopAtLevel=1"]
    store = ["-keystore", str(where / "stray.p12"), "-storetype", "PKCS12", "-storepass:env", "STRAY_PW"]
    subprocess.run([*kt, "-genkeypair", "-alias", "ca", "-keyalg", "EC", "-groupname", "secp256r1", "-dname",
                    "CN=kplan-sandbox-ca", "-ext", "bc:c", "-validity", "2", *store], env=env, check=True,
                   capture_output=True)
    subprocess.run([*kt, "-exportcert", "-rfc", "-alias", "ca", *store, "-file", str(where / "stray.pem")], env=env,
                   check=True, capture_output=True)
    return where / "stray.pem"


def test_snapshot_sizes_over_ssl_and_a_wrong_truststore_is_one_clear_line_with_no_secret(real, tmp_path):
    tool = log_dirs_tool(real)
    ssl_cfg = dict(real.kafka_ssl)
    assert ssl_cfg["security.protocol"] == "SSL" and Path(ssl_cfg["ssl.ca.location"]).is_file()
    key_pw = ssl_cfg.pop("ssl.key.password")               # from the environment, as the CLI takes it
    cfg = tmp_path / "ssl.json"
    cfg.write_text(json.dumps(ssl_cfg))
    env = {"KPLAN_KAFKA_SSL_KEY_PASSWORD": key_pw}
    done = _kplan("-v", "snapshot", "--zk", real.connect_string, "--out", str(tmp_path / "ssl"), "--kafka-config",
                  str(cfg), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    snap = read_snapshot(tmp_path / "ssl")
    assert _replica_sizes(snap) == tool                      # every replica, byte for byte, over TLS
    assert snap.manifest["log_dirs"]["security_protocol"] == "SSL"
    assert snap.brokers.column("capacity_bytes").to_pylist() == [DISK] * 3
    secrets = _secrets(real)
    for secret in secrets:                                   # not even with -v (debug logging)
        assert secret not in done.stdout + done.stderr
        assert all(secret not in f.read_text(errors="replace") for f in (tmp_path / "ssl").rglob("*.json"))

    def refused(name: str, config: dict, env: dict) -> str:
        (tmp_path / f"{name}.json").write_text(json.dumps(config))
        out = tmp_path / name
        d = _kplan("-v", "snapshot", "--zk", real.connect_string, "--out", str(out), "--kafka-config",
                   str(tmp_path / f"{name}.json"), env=env)
        assert d.returncode == 2 and not out.exists(), (name, d.stderr[-3000:])
        err = [x for x in d.stderr.splitlines() if "error:" in x]
        assert len(err) == 1 and "Traceback" not in d.stderr, (name, d.stderr[-3000:])
        for secret in secrets:
            assert secret not in d.stdout + d.stderr, name
        return err[0]

    # the brokers' certificates are signed by another CA than the one the client trusts
    line = refused("wrong-ca", {**ssl_cfg, "ssl.ca.location": str(_stray_ca(tmp_path))}, env)
    assert "TLS with Kafka broker " in line and "certificate was not accepted" in line, line
    assert "ssl.ca.location" in line, line
    # the client key's password is wrong: named, and checked before any broker is asked
    line = refused("wrong-key-password", ssl_cfg, {"KPLAN_KAFKA_SSL_KEY_PASSWORD": "not-the-key-password-7"})
    assert "could not be loaded" in line and "ssl.key.password is wrong" in line, line
    assert "not-the-key-password-7" not in line
    # no client certificate: the SSL listener requires one (ssl.client.auth=required)
    line = refused("no-client-cert", {"security.protocol": "SSL", "ssl.ca.location": ssl_cfg["ssl.ca.location"]}, {})
    assert "TLS with Kafka broker " in line and "requires a client certificate" in line, line
    assert "ssl.certificate.location" in line, line


def test_disk_bytes_where_mounting_is_impossible_is_one_clear_line_at_once(tmp_path):
    """Volumes of a given size (disk_bytes) need mount rights. Without them (not root, or root without
    CAP_SYS_ADMIN as in an unprivileged container; as root the test drops that capability with setpriv) `sandbox
    up` says so in one line before anything starts, instead of failing, or hanging, part way."""
    desc = tmp_path / "cluster.json"
    desc.write_text(json.dumps(_desc()))
    cmd = [sys.executable, "-m", "planner.cli", "sandbox", "up", "--engine", "kafka", "--cluster", str(desc),
           "--dir", str(tmp_path / "sb")]
    if os.geteuid() == 0:
        assert shutil.which("setpriv"), "setpriv (util-linux) drops CAP_SYS_ADMIN for this test"
        cmd = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    err = [x for x in done.stderr.splitlines() if "error:" in x]
    assert done.returncode == 2 and len(err) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "disk_bytes" in err[0] and "mounting is not possible here" in err[0], err[0]
    assert "permission denied" in err[0] or "superuser" in err[0], err[0]
    assert not (tmp_path / "sb").exists()                    # nothing started, nothing written


def test_a_drain_that_would_overfill_the_brokers_that_stay_is_refused_naming_them(real, tmp_path, capsys):
    assert cli.main(["snapshot", "--zk", real.connect_string, "--out", str(tmp_path / "s")]) == 0
    tool = log_dirs_tool(real)
    moving = sum(s for (b, _, _), s in tool.items() if b == 1)      # every replica on broker 1 moves
    snap = read_snapshot(tmp_path / "s")
    dirs = dict(zip(snap.brokers.column("broker").to_pylist(), snap.brokers.column("log_dirs").to_pylist(),
                    strict=True))
    used = {}
    for b in (2, 3):
        st = os.statvfs(dirs[b][0])
        used[b] = (st.f_blocks - st.f_bavail) * st.f_frsize
    # a limit above both brokers' use now, with together half as much room under it as the drain moves
    limit = max(max(used.values()) + 64 * 1024, (moving // 2 + sum(used.values())) // 2)
    frac = f"{limit / DISK:.6f}"
    capsys.readouterr()
    rc = cli.main(["plan", "drain", "--snapshot", str(tmp_path / "s"), "--brokers", "1", "--out",
                   str(tmp_path / "p"), "--max-disk-usage", frac, "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and not (tmp_path / "p").exists(), err
    if sum(limit - u for u in used.values()) < moving - MiB:      # the bytes alone do not fit: named as such
        assert "disk capacity: the drain of brokers [1] moves " in err and "the 2 brokers that stay have only" \
            in err and "(2: " in err and ", 3: " in err, err
    else:                                                         # they would, but no partition fits anywhere
        assert "disk capacity: no broker that may hold " in err and "over the limit" in err, err
    # with room to spare the same drain is planned, and no broker ends above the limit given
    assert cli.main(["plan", "drain", "--snapshot", str(tmp_path / "s"), "--brokers", "1", "--out",
                     str(tmp_path / "ok"), "--max-disk-usage", "0.95", "--quiet"]) == 0


def test_a_plans_bytes_are_the_bytes_the_apply_copies(real, tmp_path):
    run = api.RunFolder(tmp_path / "run")
    api.snapshot(api.SnapshotRequest(zk=real.connect_string, out=run.snapshot))
    plan = api.plan_drain(api.DrainRequest(snapshot=run.snapshot, out=run.plan, brokers=(1,))).plan
    before = log_dirs_tool(real)
    moved = {(m.topic, m.partition): (set(m.to_replicas) - set(m.from_replicas), m.bytes) for m in plan.moves
             if m.kind == "data"}
    assert plan.summary["bytes_moved"] == sum(b for _, b in moved.values())
    api.apply(api.ApplyRequest(zk=real.connect_string, plan=run.plan, poll=0.5))     # at the plan's suggested rates
    api.verify(api.VerifyRequest(zk=real.connect_string, plan=run.plan, wait=120, fail=True))
    after = log_dirs_tool(real)
    copied = sum(after[(b, t, p)] for (t, p), (new, _) in moved.items() for b in new)
    assert copied == plan.summary["bytes_moved"], (copied, plan.summary["bytes_moved"])
    # and each new replica holds exactly what its partition's largest replica held before
    for (t, p), (new, nbytes) in moved.items():
        assert nbytes == len(new) * max(s for (b, tt, pp), s in before.items() if (tt, pp) == (t, p))
