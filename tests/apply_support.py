"""Helpers for the apply / verify / cancel tests: hand-written plans and an independent checker.

The checker reads ZooKeeper with its own kazoo session and plain JSON parsing (not the product's cluster
view), so "nothing was lost" is established independently of the code under test: every partition led by a
registered broker, replication factors intact, the plan's partitions exactly at their targets (or back at
their starting lists), no reassignment left, no throttle key left, the lock released.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from waiting import poll  # noqa: F401 - re-exported for the apply tests

from planner import cli
from planner import zk as zkmod
from planner.sandbox import Sandbox

THROTTLE_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
                 "leader.replication.throttled.rate", "follower.replication.throttled.rate")

MB = 1_000_000
FAST = dict(catch_up_delay=0.2, shutdown_retries=2, shutdown_retry_interval=0.2, auto_rebalance=False, tick=0.05)


# ---------------------------------------------------------------------------------------- descriptions
def brokers(n: int, racks: int = 0) -> list[dict[str, Any]]:
    return [{"id": i, "rack": f"r{(i - 1) % racks + 1}"} if racks else {"id": i} for i in range(1, n + 1)]


def topic(name: str, *partitions: dict[str, Any], **config: str) -> dict[str, Any]:
    return {"name": name, "config": {k.replace("_", "."): v for k, v in config.items()},
            "partitions": list(partitions)}


def part(replicas: list[int], size: int = 1000, leader: int | None = None, isr: list[int] | None = None) -> dict:
    p: dict[str, Any] = {"replicas": replicas, "size_bytes": size}
    if leader is not None:
        p["leader"] = leader
    if isr is not None:
        p["isr"] = isr
    return p


# ------------------------------------------------------------------------------------------------ plans
def _canonical_id(doc: dict[str, Any]) -> str:
    """docs/PLAN.md: sha256 of the canonical JSON of the document without its id (written out here, not
    imported, so a test plan follows the documented format rather than the code's idea of it)."""
    body = {k: v for k, v in doc.items() if k != "id"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canon.encode("utf-8")).hexdigest()


def write_plan(folder: Path, moves: list[tuple[str, int, list[int], list[int], int]],
               batches: list[tuple[str, list[tuple[str, int, list[int]]]]], kind: str = "rebalance",
               drained: Iterable[int] = (), max_concurrent: int = 5, broker_ids: Iterable[int] = ()) -> dict[str, Any]:
    """A plan folder in the kplan-plan/1 format: moves (topic, partition, from, to, bytes) and batches
    (kind, [(topic, partition, replicas written)])."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = sorted(set(broker_ids) | {b for m in moves for b in (*m[2], *m[3])})
    drained = set(drained)
    doc: dict[str, Any] = {
        "format": "kplan-plan/1", "id": "", "kind": kind,
        "snapshot": {"fingerprint": "sha256:" + "0" * 64, "taken_at": "2026-01-01T00:00:00Z"},
        "parameters": {"brokers": sorted(drained), "exclude_topics": None, "rack_aware": False,
                       "sizes": {"source": "snapshot"}, "max_moves": None, "max_bytes": None,
                       "max_concurrent_per_broker": max_concurrent, "order": "smallest-first", "balance": None},
        "summary": {},
        "brokers": {"ids": ids, "racks": [None] * len(ids), "alive": [True] * len(ids),
                    "drained": [b in drained for b in ids], "eligible": [b not in drained for b in ids]},
        "moves": [{"topic": t, "partition": p, "from": f, "to": to, "bytes": (n if set(f) != set(to) else 0),
                   "kind": "data" if set(f) != set(to) else "leader"} for t, p, f, to, n in moves],
        "batches": [{"index": i, "kind": k, "partitions": [[t, p] for t, p, _ in entries],
                     "replicas": [r for _, _, r in entries]} for i, (k, entries) in enumerate(batches)],
        "solver": {}, "warnings": [],
    }
    doc["id"] = _canonical_id(doc)
    (folder / "plan.json").write_text(json.dumps(doc, indent=1) + "\n")
    for name, key in (("reassignment.json", "to"), ("rollback.json", "from")):
        entries = [{"topic": m["topic"], "partition": m["partition"], "replicas": m[key]} for m in doc["moves"]]
        (folder / name).write_text(json.dumps({"version": 1, "partitions": entries}, separators=(",", ":")) + "\n")
    return doc


def plan_hex(doc: dict[str, Any]) -> str:
    return doc["id"].split(":", 1)[1]


# ---------------------------------------------------------------------------------------------- waiting
class Background:
    """Run a callable in a thread; `result()` re-raises its exception."""

    def __init__(self, fn: Callable[[], Any]):
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def result(self, timeout: float = 120.0) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "background call did not finish"
        if self.error is not None:
            raise self.error
        return self.value


# ---------------------------------------------------------------------------------------------- checker
class Checker:
    """Independent reads of the cluster (plain kazoo + json)."""

    def __init__(self, client: KazooClient):
        self.zk = client

    def json(self, path: str) -> Any:
        data, _ = self.zk.get(path)
        return json.loads(data)

    def exists(self, path: str) -> bool:
        return self.zk.exists(path) is not None

    def replicas(self, t: str, p: int) -> list[int]:
        return self.json(f"/brokers/topics/{t}")["partitions"][str(p)]

    def topic(self, t: str) -> dict[str, Any]:
        return self.json(f"/brokers/topics/{t}")

    def state(self, t: str, p: int) -> dict[str, Any]:
        return self.json(f"/brokers/topics/{t}/partitions/{p}/state")

    def live(self) -> set[int]:
        return {int(x) for x in self.zk.get_children("/brokers/ids")}

    def config(self, entity: str) -> dict[str, str]:
        try:
            return self.json(f"/config/{entity}").get("config", {})
        except NoNodeError:
            return {}

    def throttles(self) -> dict[str, dict[str, str]]:
        """Every throttle key on every topic and broker config znode."""
        out = {}
        for kind in ("topics", "brokers"):
            try:
                names = self.zk.get_children(f"/config/{kind}")
            except NoNodeError:
                continue
            for n in names:
                cfg = {k: v for k, v in self.config(f"{kind}/{n}").items() if k in THROTTLE_KEYS}
                if cfg:
                    out[f"{kind}/{n}"] = cfg
        return out

    def config_changes(self) -> list[str]:
        """Entity paths of the /config/changes notifications, in sequence order."""
        try:
            names = sorted(self.zk.get_children("/config/changes"))
        except NoNodeError:
            return []
        return [self.json(f"/config/changes/{n}")["entity_path"] for n in names]

    def lock_holders(self) -> list[str]:
        try:
            return self.zk.get_children("/kplan/lock")
        except NoNodeError:
            return []

    def run(self, doc: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return self.json(f"/kplan/runs/{plan_hex(doc)}")
        except NoNodeError:
            return None

    def unit_states(self, doc: dict[str, Any]) -> list[str]:
        run = self.run(doc)
        return [u[0] for u in run["units"]] if run else []

    def tree(self, root: str = "/") -> dict[str, tuple[int, int, bytes]]:
        """Every persistent znode: path -> (mzxid, cversion, data). Ephemeral znodes (sessions) are left out."""
        out: dict[str, tuple[int, int, bytes]] = {}

        def walk(path: str) -> None:
            try:
                data, stat = self.zk.get(path)
                children = self.zk.get_children(path)
            except NoNodeError:
                return
            if not stat.ephemeralOwner:
                out[path] = (stat.mzxid, stat.cversion, data)
            for c in children:
                walk(f"{path.rstrip('/')}/{c}")

        walk(root)
        return out

    # -------------------------------------------------------------------------------- nothing lost
    def assert_nothing_lost(self, rf: dict[tuple[str, int], int], expect: dict[tuple[str, int], list[int]],
                            preserved_throttles: dict[str, dict[str, str]] | None = None) -> None:
        """Every partition led by a registered broker, RF as in `rf`, the listed partitions exactly at
        `expect`, no reassignment or election pending, no throttle left (but `preserved_throttles`, which
        were there before and must still be), the lock released."""
        live = self.live()
        problems = []
        for t in self.zk.get_children("/brokers/topics"):
            parts = self.topic(t)
            if parts.get("adding_replicas") or parts.get("removing_replicas"):
                problems.append(f"{t} still reassigning: {parts}")
            for p, reps in parts["partitions"].items():
                key = (t, int(p))
                st = self.state(t, int(p))
                if st["leader"] == -1 or st["leader"] not in live:
                    problems.append(f"{t}-{p} not led by a registered broker: {st}")
                if key in rf and len(reps) != rf[key]:
                    problems.append(f"{t}-{p} has RF {len(reps)}, expected {rf[key]}")
                if sorted(st["isr"]) != sorted(reps):
                    problems.append(f"{t}-{p} ISR {st['isr']} is not its replicas {reps}")
                if key in expect and reps != expect[key]:
                    problems.append(f"{t}-{p} is at {reps}, expected {expect[key]}")
        if self.exists("/admin/reassign_partitions"):
            problems.append(f"/admin/reassign_partitions left: {self.json('/admin/reassign_partitions')}")
        if self.exists("/admin/preferred_replica_election"):
            problems.append("/admin/preferred_replica_election left")
        if self.throttles() != (preserved_throttles or {}):
            problems.append(f"throttles left: {self.throttles()} (expected {preserved_throttles or {}})")
        if self.lock_holders():
            problems.append(f"lock not released: {self.lock_holders()}")
        assert not problems, "\n".join(problems)


def rf_of(desc: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(t["name"], i): len(p["replicas"]) for t in desc["topics"] for i, p in enumerate(t["partitions"])}


# ------------------------------------------------------------------------------------------- fixtures
class Env:
    def __init__(self, sb: Sandbox, desc: dict[str, Any], tmp: Path):
        self.sb = sb
        self.desc = desc
        self.tmp = tmp
        self.zk = zkmod.connect(sb.connect_string)
        self.check = Checker(self.zk)

    @property
    def connect(self) -> str:
        return self.sb.connect_string

    def kplan(self, *argv: str) -> int:
        return cli.main(list(argv))


def make_cluster(tmp_path: Path, zk_connect: str) -> Iterator[Callable[..., Env]]:
    """Body of each test module's `cluster` fixture: sandboxes on the session's ZooKeeper, one chroot each."""
    made: list[Env] = []

    def _make(desc: dict[str, Any], **settings: Any) -> Env:
        sb = Sandbox.up(tmp_path / f"sb{len(made)}", cluster=desc, zk=zk_connect + (f"_{len(made)}" if made else ""),
                        timeout=60, **{**FAST, **settings})
        env = Env(sb, desc, tmp_path)
        made.append(env)
        return env

    yield _make
    for env in made:
        env.zk.stop()
        env.zk.close()
        env.sb.down()




# A drain of broker 1 on four brokers, written by hand:
#   a-0 [1,2] leader 1 -> leadership batch [2,1] -> data [2,3]
#   a-1 [2,1]          ->                          data [4,2] (leader 2 stays: verify elects 4)
#   b-0 [1,3] leader 1 -> leadership batch [3,1] -> data [3,4]
#   a-2 [3,4], b-1 [4,2] untouched
def drain_desc(size: int = 1000) -> dict[str, Any]:
    return {"brokers": brokers(4), "topics": [
        topic("a", part([1, 2], size), part([2, 1], size), part([3, 4], size), min_insync_replicas="1"),
        topic("b", part([1, 3], size), part([4, 2], size)),
    ]}


def drain_plan(folder: Path, size: int = 1000) -> dict[str, Any]:
    return write_plan(folder, moves=[
        ("a", 0, [1, 2], [2, 3], size), ("a", 1, [2, 1], [4, 2], size), ("b", 0, [1, 3], [3, 4], size)],
        batches=[("leadership", [("a", 0, [2, 1]), ("b", 0, [3, 1])]),
                 ("data", [("a", 0, [2, 3])]),
                 ("data", [("a", 1, [4, 2]), ("b", 0, [3, 4])])],
        kind="drain", drained=[1])


FINAL = {("a", 0): [2, 3], ("a", 1): [4, 2], ("b", 0): [3, 4], ("a", 2): [3, 4], ("b", 1): [4, 2]}
