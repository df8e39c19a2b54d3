"""The write gate is the product's only ZooKeeper writer, and it writes only where docs/DESIGN.md allows.

Three independent proofs:
1. Static: an AST walk of planner/ finds every kazoo write call (create, set, delete, ensure_path,
   transaction, write recipes such as Lock, raw `_call` requests) outside planner/zkgate.py. Only the
   emulated sandbox (which plays Kafka's brokers and controller) and the loader it uses may write, and no
   product module imports them.
2. The gate's own check refuses every other path before anything is sent (the ZooKeeper tree is unchanged).
3. At run time: every request the product's kazoo sessions send during apply, verify and cancel is recorded at
   kazoo's request level (below the gate) and each write's path is checked against the allowed paths, written
   out here a second time.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from apply_support import FAST, Background, Checker, brokers, part, poll, topic, write_plan
from kazoo.client import KazooClient
from kazoo.protocol import serialization as ser

from planner import cli
from planner import zk as zkmod
from planner.errors import SafetyRefusal
from planner.sandbox import Sandbox
from planner.zkgate import GateViolation, Op, WriteGate, check_write

ROOT = Path(__file__).resolve().parents[1] / "planner"
WRITE_METHODS = {"create", "create_async", "set", "set_async", "delete", "delete_async", "ensure_path",
                 "ensure_path_async", "transaction", "set_acls", "set_acls_async", "reconfig", "reconfig_async",
                 "set_data", "commit", "commit_async"}
WRITE_RECIPES = {"Lock", "ReadLock", "WriteLock", "Semaphore", "Election", "Counter", "Barrier", "DoubleBarrier",
                 "Party", "ShallowParty", "Queue", "LockingQueue", "Lease", "NonBlockingLease",
                 "MultiNonBlockingLease"}
READ_REQUESTS = {"MultiRead", "AddWatch"}
# Modules that write to ZooKeeper on purpose and are not the product: the emulated Kafka cluster.
EXEMPT = ("sandbox/", "loader.py", "zkgate.py")
# Calls whose names collide with a write method but whose receiver is not ZooKeeper (threading.Event.set).
NOT_ZOOKEEPER = {("execution/waiter.py", "self.event"),
                 ("commands/sandbox.py", "done"),
                 ("commands/apply.py", "stop"), ("commands/roll.py", "stop")}   # stop requests: threading.Event
# The gate itself, as the other modules hold it.
GATE = {"gate", "self.gate"}


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if not str(p.relative_to(ROOT)).startswith(EXEMPT))


def test_no_module_but_the_gate_calls_a_kazoo_write():
    found = []
    for path in _modules():
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kazoo"):
                found += [f"{rel}:{node.lineno} imports {a.name}" for a in node.names if a.name in WRITE_RECIPES]
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in WRITE_RECIPES and isinstance(f, ast.Attribute):
                if ast.unparse(f.value) != "threading":
                    found.append(f"{rel}:{node.lineno} {ast.unparse(node)[:80]}")
            elif name == "_call":
                req = node.args[0] if node.args else None
                req_name = req.func.id if isinstance(req, ast.Call) and isinstance(req.func, ast.Name) else None
                if req_name not in READ_REQUESTS:
                    found.append(f"{rel}:{node.lineno} {ast.unparse(node)[:80]}")
            elif name in WRITE_METHODS and isinstance(f, ast.Attribute):
                receiver = ast.unparse(f.value)
                if (rel, receiver) not in NOT_ZOOKEEPER and receiver not in GATE:
                    found.append(f"{rel}:{node.lineno} {ast.unparse(node)[:80]}")
    assert not found, "ZooKeeper writes outside planner/zkgate.py:\n" + "\n".join(found)


def test_the_walk_finds_a_write_when_there_is_one(tmp_path):
    # The check above can fail: the same walk flags a planted write.
    planted = "def f(client):\n    client.set('/brokers/ids/1', b'x')\n"
    tree = ast.parse(planted)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr in WRITE_METHODS]
    assert len(calls) == 1


def test_product_modules_do_not_import_the_sandbox_or_the_loader():
    bad = []
    for path in _modules():
        rel = str(path.relative_to(ROOT))
        if rel == "commands/sandbox.py" or rel == "demo.py":
            continue  # `kplan sandbox` and the demo drive the sandbox itself
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for n in names:
                if n.startswith("planner.sandbox") or n == "planner.loader":
                    bad.append(f"{rel}: {n}")
    assert not bad, bad


@pytest.mark.parametrize("kind,path", [
    ("create", "/admin/reassign_partitions"),
    ("create", "/admin/preferred_replica_election"),
    ("set", "/config/topics/orders.v2-x_y"),
    ("create", "/config/brokers/7"),
    ("set", "/config/brokers/<default>"),
    ("create_sequential", "/config/changes/config_change_"),
    ("create", "/kplan"),
    ("set", "/kplan/runs/abc123"),
    ("delete", "/kplan/runs/abc123/throttles"),
])
def test_allowed_writes(kind, path):
    check_write(kind, path)


@pytest.mark.parametrize("kind,path", [
    ("set", "/admin/reassign_partitions"),        # Kafka ignores data changes: never set
    ("delete", "/admin/reassign_partitions"),     # deleting loses the controller's watch
    ("delete", "/admin/preferred_replica_election"),
    ("set", "/brokers/topics/a"),
    ("set", "/brokers/topics/a/partitions/0/state"),
    ("create", "/brokers/ids/1"),
    ("set", "/controller"),
    ("set", "/controller_epoch"),
    ("create", "/admin/delete_topics/a"),
    ("delete", "/config/topics/a"),
    ("create", "/config/users/alice"),
    ("create", "/config/changes/config_change_0000000001"),
    ("create", "/config/topics/a/../../brokers"),
    ("create", "/kplanx"),
    ("create", "/kplan//x"),
    ("create", "/migration"),
    ("create", "kplan/relative"),
])
def test_refused_writes(kind, path):
    with pytest.raises(GateViolation):
        check_write(kind, path)


def test_a_refused_op_sends_nothing_even_inside_an_allowed_transaction(zk_client):
    zk_client.ensure_path("/config/topics")
    before = Checker(zk_client).tree()
    gate = WriteGate(zk_client)
    gate.fence = None
    with pytest.raises(GateViolation):
        gate.commit([Op("create", "/kplan", b""), Op("set", "/brokers/topics/a", b"{}")], fenced=False)
    with pytest.raises(GateViolation, match="without holding the apply lock"):
        gate.commit([Op("create", "/kplan", b"")])
    assert Checker(zk_client).tree() == before
    assert isinstance(GateViolation("x"), SafetyRefusal)


# ------------------------------------------------------------------------------------------- runtime
ALLOWED = [
    (re.compile(r"/admin/reassign_partitions"), {"create"}),
    (re.compile(r"/admin/preferred_replica_election"), {"create"}),
    (re.compile(r"/config/(topics/[A-Za-z0-9._-]+|brokers/(\d+|<default>))"), {"create", "set"}),
    (re.compile(r"/config/changes/config_change_"), {"create-sequential"}),
    (re.compile(r"/kplan(/.*)?"), {"create", "create-sequential", "set", "delete"}),
]


def _writes(request, chroot: str) -> list[tuple[str, str]]:
    def rel(p: str) -> str:
        assert p.startswith(chroot), p
        return p[len(chroot):] or "/"

    if isinstance(request, ser.Transaction):
        return [w for op in request.operations for w in _writes(op, chroot)]
    if isinstance(request, ser.Create | ser.Create2):
        return [("create-sequential" if request.flags & 2 else "create", rel(request.path))]
    if isinstance(request, ser.SetData):
        return [("set", rel(request.path))]
    if isinstance(request, ser.Delete):
        return [("delete", rel(request.path))]
    if isinstance(request, ser.SetACL | ser.Reconfig):
        return [("acl/reconfig", rel(getattr(request, "path", "")))]
    return []


def test_every_write_of_apply_verify_cancel_is_allowed(tmp_path, zk_connect, monkeypatch):
    desc = {"brokers": brokers(4), "topics": [
        topic("a", part([1, 2], 30_000_000), part([2, 1], 30_000_000), part([3, 4])),
        topic("b", part([1, 3], 30_000_000), part([4, 2]))]}
    sb = Sandbox.up(tmp_path / "sb", cluster=desc, zk=zk_connect, timeout=60, **FAST)
    checker_zk = zkmod.connect(sb.connect_string)
    chroot = "/" + zk_connect.split("/", 1)[1]
    recorded: list[tuple[str, str]] = []
    original = KazooClient._call

    def recording(self, request, async_object):
        if self is not checker_zk:
            recorded.extend(_writes(request, chroot))
        return original(self, request, async_object)

    monkeypatch.setattr(KazooClient, "_call", recording)
    try:
        run = tmp_path / "run"
        # Plan 1: drain broker 1 (leadership batch with an election, then throttled data batches), verified.
        doc = write_plan(run / "plan", [("a", 0, [1, 2], [2, 3], 30_000_000), ("a", 1, [2, 1], [4, 2], 30_000_000),
                                        ("b", 0, [1, 3], [3, 4], 30_000_000)],
                         [("leadership", [("a", 0, [2, 1]), ("b", 0, [3, 1])]),
                          ("data", [("a", 0, [2, 3])]), ("data", [("a", 1, [4, 2]), ("b", 0, [3, 4])])],
                         kind="drain", drained=[1])
        assert cli.main(["apply", "--zk", sb.connect_string, "--plan", str(run / "plan"), "--throttle", "100MB",
                         "--poll", "0.2"]) == 0
        assert cli.main(["verify", "--zk", sb.connect_string, "--plan", str(run / "plan"), "--timeout", "30"]) == 0
        # The drain left broker 1 drained: only an explicit clear lets a plan put replicas back on it.
        assert Checker(checker_zk).json("/kplan/maintenance/1")["state"] == "drained"
        assert cli.main(["maintenance", "clear", "--zk", sb.connect_string, "--brokers", "1", "--state",
                         "drained"]) == 0
        # Plan 2: move a-0 back in two batches, cancelled with revert while its first batch is in flight.
        doc2 = write_plan(tmp_path / "run2" / "plan", [("a", 0, [2, 3], [1, 4], 30_000_000),
                                                     ("b", 0, [3, 4], [1, 3], 30_000_000)],
                          [("data", [("a", 0, [1, 4])]), ("data", [("b", 0, [1, 3])])])
        check = Checker(checker_zk)
        bg = Background(lambda: cli.main(["apply", "--zk", sb.connect_string, "--plan", str(tmp_path / "run2" / "plan"),
                                          "--throttle", "10MB", "--poll", "0.2"]))
        poll(lambda: check.unit_states(doc2)[:1] == ["submitted"], what="the first batch in flight")
        assert cli.main(["cancel", "--zk", sb.connect_string, "--plan", str(tmp_path / "run2" / "plan"), "--revert",
                         "--timeout", "60"]) == 0
        assert bg.result() == 1
        assert check.run(doc2)["state"] == "reverted"
        assert check.run(doc)["state"] == "completed"
    finally:
        monkeypatch.undo()
        checker_zk.stop()
        checker_zk.close()
        sb.down()
    assert recorded, "the recording saw no write at all"
    bad = [(k, p) for k, p in recorded
           if not any(rx.fullmatch(p) and k in kinds for rx, kinds in ALLOWED)]
    assert not bad, bad
    kinds = {(k, p.split("/")[1] + "/" + (p.split("/")[2] if p.count("/") > 1 else "")) for k, p in recorded}
    # the run really exercised every kind of write it may make
    assert ("create", "admin/reassign_partitions") in kinds
    assert ("create", "admin/preferred_replica_election") in kinds
    assert ("create-sequential", "config/changes") in kinds
    assert any(k == "set" and p.startswith("/config/topics/") for k, p in recorded)
    assert any(p.startswith("/kplan/lock/") for _, p in recorded)
    assert ("create", "/kplan/maintenance/1") in recorded and ("set", "/kplan/maintenance/1") in recorded
    assert ("delete", "/kplan/maintenance/1") in recorded
    json.dumps(recorded)
