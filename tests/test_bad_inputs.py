"""Bad input and faults, one row each (issue 9): what the user typed, the exit code, the one line they read,
and what must not have happened (a traceback, a half-written or replaced output folder).

Add a row when a new class of mistake turns up. A row's `setup` builds what the command needs (a snapshot
folder, a plan, a cluster in ZooKeeper) and returns the argv; `out` names the path that must be absent (or,
with `keep`, unchanged) afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from plan_support import write_plan_folder

from planner import cli, loader, risk
from planner import snapshot_io as sio
from planner.cluster import parse_cluster
from planner.codec import ReassignEntry

REPO = Path(__file__).resolve().parent.parent

SEED = {"brokers": [{"id": i, "rack": f"r{i}"} for i in (1, 2, 3)],
        "topics": [{"name": "payments", "partitions": [{"replicas": [1]}]},
                   {"name": "orders", "config": {"min.insync.replicas": "2"},
                    "partitions": [{"replicas": [1, 2, 3]}, {"replicas": [2, 3, 1]}, {"replicas": [3, 1, 2]}]}]}


@dataclass
class Ctx:
    tmp: Path
    zk: str = ""            # connect string with this test's chroot (ZooKeeper rows only)
    client: object = None   # kazoo client in that chroot

    @property
    def out(self) -> Path:
        return self.tmp / "out"

    def snapshot(self, name: str = "snap", desc: dict | None = None, maintenance: list[dict] | None = None) -> Path:
        s = risk.snapshot_from_cluster(parse_cluster(desc or SEED))
        manifest = {**s.manifest, "maintenance": maintenance or []}
        return sio.write_snapshot(self.tmp / name, manifest, s.brokers, s.topics, s.partitions)

    def plan(self, snap: Path, entries: list[ReassignEntry], name: str = "plan") -> Path:
        s = sio.read_snapshot(snap)
        p = s.partitions.to_pydict()
        current = {(t, n): r for t, n, r in zip(p["topic"], p["partition"], p["replicas"], strict=True)}
        return write_plan_folder(self.tmp / name, s.fingerprint, current, entries)

    def load(self, desc: dict, znodes: dict[str, bytes] | None = None, created: dict[str, bytes] | None = None
             ) -> str:
        loader.load_cluster(self.client, desc)
        for path, data in (znodes or {}).items():
            self.client.set(path, data)
        for path, data in (created or {}).items():
            self.client.create(path, data, makepath=True)
        return self.zk


@dataclass
class Case:
    id: str
    setup: Callable[[Ctx], list[str]]
    code: int
    message: str                        # a substring of the one error line
    zk: bool = False                    # needs a cluster in ZooKeeper
    keep: bool = False                  # `out` exists before and must be left exactly as it was
    env: dict[str, str] = field(default_factory=dict)
    main: Callable[[list[str]], int] | None = None   # another entry point than `kplan` (the demo's)


def _state(leader, isr, epoch=0) -> bytes:
    return json.dumps({"version": 1, "leader": leader, "leader_epoch": epoch, "controller_epoch": 1,
                       "isr": isr}).encode()


def _drained(broker: int) -> dict:
    return {"broker": broker, "state": "drained", "plan_id": "sha256:" + "d" * 64, "run": None, "by": {},
            "since": "2026-11-25T10:00:00Z", "reason": "disk swap"}


def _filled(c: Ctx) -> None:
    c.out.mkdir()
    (c.out / "keep.txt").write_text("a reviewed plan")


def _truncated(c: Ctx) -> Path:
    snap = c.snapshot()
    f = snap / "partitions.parquet"
    f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])
    return snap


def _edited(c: Ctx) -> Path:
    """A valid Parquet file, edited after the snapshot: replicas of payments-0 changed."""
    snap = c.snapshot()
    t = pq.read_table(snap / "partitions.parquet")
    reps = t.column("replicas").to_pylist()
    reps[0] = [2]
    t = t.set_column(t.schema.get_field_index("replicas"), "replicas", sio.pa.array(reps, sio.INT_LIST))
    pq.write_table(t, snap / "partitions.parquet")
    return snap


def _other_snapshot_plan(c: Ctx) -> list[str]:
    snap = c.snapshot()
    other = c.snapshot("other", {**SEED, "topics": SEED["topics"] + [{"name": "x", "partitions": [
        {"replicas": [2]}]}]})
    plan = c.plan(other, [ReassignEntry("payments", 0, (2,))])
    return ["risk", "--snapshot", str(snap), "--out", str(c.out), "--plan", str(plan)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sizes(c: Ctx, obj: dict) -> Path:
    f = c.tmp / "sizes.json"
    f.write_text(json.dumps(obj))
    return f


def _kraft_plan(c: Ctx) -> Path:
    """A drain plan made by `kplan plan` from a snapshot whose manifest says it was read from a KRaft cluster."""
    s = risk.snapshot_from_cluster(parse_cluster({**SEED, "brokers": [*SEED["brokers"], {"id": 4, "rack": "r1"}]}))
    manifest = {**s.manifest, "maintenance": [], "source": {"backend": "kraft", "bootstrap_servers": "127.0.0.1:9",
                                                             "metadata_version": "4.1-IV1", "features": {}}}
    snap = sio.write_snapshot(c.tmp / "ksnap", manifest, s.brokers, s.topics, s.partitions)
    assert cli.main(["plan", "drain", "--snapshot", str(snap), "--brokers", "3", "--out", str(c.tmp / "kplan"),
                     "--quiet"]) == 0
    assert json.loads((c.tmp / "kplan" / "plan.json").read_text())["snapshot"]["backend"] == "kraft"
    return c.tmp / "kplan"


def _kafka_config(c: Ctx, obj: dict) -> Path:
    f = c.tmp / "kafka.json"
    f.write_text(json.dumps(obj))
    return f


def _sizes_inside_out(c: Ctx, argv_tail: list[str], kind: str = "snapshot") -> list[str]:
    """The output folder already holds the sizes file the command reads (issue 19 item 2): --force must not
    delete it with the folder."""
    c.out.mkdir()
    if kind == "snapshot":
        (c.out / "logdirs.json").write_text(json.dumps({"version": 1, "brokers": [{"broker": 1, "logDirs": [
            {"logDir": "/d", "error": None, "partitions": [{"partition": "payments-0", "size": 7, "offsetLag": 0,
                                                             "isFuture": False}]}]}]}))
        return [*argv_tail, "--sizes", str(c.out / "logdirs.json"), "--out", str(c.out), "--force"]
    (c.out / "s.json").write_text(json.dumps({"payments-0": 7}))
    return [*argv_tail, "--sizes", str(c.out / "s.json"), "--out", str(c.out), "--force"]


def _executing(c: Ctx, command: str, zk_suffix: str = "", extra: tuple[str, ...] = ()) -> list[str]:
    """apply / verify / cancel of a plan of the SEED cluster (in <tmp>/plan, the run folder layout)."""
    zk = c.load(SEED)
    plan = c.plan(c.snapshot(), [ReassignEntry("payments", 0, (2,))])
    # the plan has no sizes: apply is told explicitly that a copy with no rate is meant (issue 18)
    return [command, "--zk", zk + zk_suffix, "--plan", str(plan), *(("--no-throttle",) if command == "apply" else ()),
            *extra]


def _edited_fingerprint(c: Ctx) -> Path:
    """The manifest's fingerprint edited (the tables untouched): plans and risk would copy it."""
    snap = c.snapshot()
    m = json.loads((snap / "manifest.json").read_text())
    m["fingerprint"] = "sha256:" + "1" * 64
    (snap / "manifest.json").write_text(json.dumps(m))
    return snap


def _logdirs(c: Ctx, size: int, broker: int = 1) -> Path:
    f = c.tmp / "logdirs.json"
    f.write_text(json.dumps({"version": 1, "brokers": [{"broker": broker, "logDirs": [
        {"logDir": "/d", "error": None, "partitions": [{"partition": "payments-0", "size": size, "offsetLag": 0,
                                                         "isFuture": False}]}]}]}))
    return f


def _sized_plan(c: Ctx, nbytes: int) -> Path:
    """A plan whose one data move copies `nbytes` into broker 2 (written from docs/PLAN.md)."""
    from apply_support import write_plan

    write_plan(c.tmp / "plan", [("payments", 0, [1], [2], nbytes)], [("data", [("payments", 0, [2])])])
    return c.tmp / "plan"


def _other_plans_report(c: Ctx) -> list[str]:
    argv = _executing(c, "verify", extra=("--timeout", "0"))
    (c.tmp / "report.json").write_text(json.dumps({"plan_id": "sha256:" + "ab" * 32, "converged": True}))
    return argv


def _risk_over_plan(c: Ctx) -> list[str]:
    """risk of a plan with --out the plan folder itself, --force: the plan would be deleted (issue 19 item 2)."""
    plan = c.plan(c.snapshot(), [ReassignEntry("payments", 0, (2,))])
    return ["risk", "--snapshot", str(c.tmp / "snap"), "--plan", str(plan), "--out", str(plan), "--force"]


def _empty_chroot(c: Ctx) -> str:
    """A chroot that exists and holds no Kafka cluster (the mistyped one does not exist at all)."""
    c.client.ensure_path("/empty")
    return "/empty"


def _kraft_restart_plan(c: Ctx) -> Path:
    """A restart plan made by `kplan plan restart` from a snapshot whose manifest says it was read from KRaft."""
    s = risk.snapshot_from_cluster(parse_cluster(SEED))
    manifest = {**s.manifest, "maintenance": [], "source": {"backend": "kraft", "bootstrap_servers": "127.0.0.1:9",
                                                             "metadata_version": "4.1-IV1", "features": {}}}
    snap = sio.write_snapshot(c.tmp / "krsnap", manifest, s.brokers, s.topics, s.partitions)
    assert cli.main(["plan", "restart", "--snapshot", str(snap), "--brokers", "1", "--out", str(c.tmp / "krplan"),
                     "--quiet"]) == 0
    assert json.loads((c.tmp / "krplan" / "plan.json").read_text())["snapshot"]["backend"] == "kraft"
    return c.tmp / "krplan"


def _restart_plan(c: Ctx, brokers: str = "1", desc: dict | None = None) -> Path:
    snap = c.snapshot("rsnap", desc)
    assert cli.main(["plan", "restart", "--snapshot", str(snap), "--brokers", brokers, "--out",
                     str(c.tmp / "rplan"), "--quiet"]) == 0
    return c.tmp / "rplan"


def _roll(c: Ctx, plan: Path, *extra: str) -> list[str]:
    return ["roll", "--zk", c.zk, "--plan", str(plan), "--out", str(c.out), *(extra or ("--throttle", "50MB"))]


def _lock_held(c: Ctx) -> list[str]:
    plan = _restart_plan(c)
    c.load(SEED)
    holder = {"command": "roll", "host": "ops-1", "pid": 4242, "user": "alice", "plan_id": "sha256:other",
              "since": "2026-11-25T10:00:00Z"}
    c.client.create("/kplan/lock/0123456789abcdef__lock__0000000000", json.dumps(holder).encode(), makepath=True)
    return _roll(c, plan)


def _reassigning(c: Ctx) -> list[str]:
    plan = _restart_plan(c)
    c.load(SEED)
    c.client.create("/admin/reassign_partitions",
                    b'{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[3,2,1]}]}', makepath=True)
    return _roll(c, plan)


def _held_by_a_running_apply(c: Ctx) -> list[str]:
    """Broker 3 is draining for the drain whose apply holds the lock (it is running): clearing it is refused."""
    entry = {"format": "kplan-maintenance/1", **_drained(3), "state": "draining"}
    holder = {"command": "apply", "host": "ops-1", "pid": 4242, "user": "alice", "plan_id": entry["plan_id"],
              "since": "2026-11-25T10:00:00Z"}
    c.load(SEED, {}, {"/kplan/maintenance/3": json.dumps(entry).encode(),
                      "/kplan/lock/0123456789abcdef__lock__0000000000": json.dumps(holder).encode()})
    return ["maintenance", "clear", "--zk", c.zk, "--brokers", "3"]


def _broker_down(c: Ctx) -> list[str]:
    plan = _restart_plan(c, "3")
    c.load({**SEED, "brokers": [*SEED["brokers"][:2], {"id": 3, "rack": "r3", "alive": False}]})
    return _roll(c, plan)


def _demo(argv: list[str]) -> int:
    """`make demo`'s entry point (python -m kplan_airflow.demo): a bad value must stop it before it takes down
    and recreates its --dir or starts a sandbox."""
    from kplan_airflow import demo

    return demo.main(argv)


def _kraft_unknown(c: Ctx) -> Path:
    """A KRaft snapshot whose manifest does not say the finalized features: the risk rules cannot be chosen."""
    s = risk.snapshot_from_cluster(parse_cluster(SEED))
    manifest = {**s.manifest, "source": {"backend": "kraft", "metadata_version": None, "features": None}}
    return sio.write_snapshot(c.tmp / "kraft", manifest, s.brokers, s.topics, s.partitions)


CASES = [
    # --- snapshot: znodes Kafka's own parser would refuse (item 2), named by path, exit 2, nothing written
    Case("snapshot-leader-as-string", lambda c: ["snapshot", "--zk", c.load(SEED, {
        "/brokers/topics/orders/partitions/0/state": _state("1", [1, 2, 3])}), "--out", str(c.out)],
         2, "/brokers/topics/orders/partitions/0/state: 'leader' must be an integer, got \"1\"", zk=True),
    Case("snapshot-isr-outside-replicas", lambda c: ["snapshot", "--zk", c.load(SEED, {
        "/brokers/topics/orders/partitions/1/state": _state(2, [2, 3, 7])}), "--out", str(c.out)],
         2, "/brokers/topics/orders/partitions/1/state: isr [2, 3, 7] names brokers [7] that are not replicas",
         zk=True),
    Case("snapshot-isr-lists-a-broker-twice", lambda c: ["snapshot", "--zk", c.load(SEED, {
        "/brokers/topics/orders/partitions/1/state": _state(2, [2, 3, 2])}), "--out", str(c.out)],
         2, "/brokers/topics/orders/partitions/1/state: isr [2, 3, 2] lists a broker twice", zk=True),
    Case("snapshot-leader-outside-replicas", lambda c: ["snapshot", "--zk", c.load(SEED, {
        "/brokers/topics/orders/partitions/1/state": _state(9, [2, 3])}), "--out", str(c.out)],
         2, "/brokers/topics/orders/partitions/1/state: leader 9 is not a replica", zk=True),
    Case("snapshot-negative-epoch", lambda c: ["snapshot", "--zk", c.load(SEED, {
        "/brokers/topics/orders/partitions/1/state": _state(2, [2, 3], epoch=-4)}), "--out", str(c.out)],
         2, "leader_epoch -4 is out of range", zk=True),
    Case("snapshot-partition-ids-not-contiguous", lambda c: ["snapshot", "--zk", c.load(SEED, {
        "/brokers/topics/orders": b'{"version":1,"partitions":{"0":[1,2,3],"1":[2,3,1],"3":[3,1,2]}}'}),
        "--out", str(c.out)], 2, "/brokers/topics/orders: partition ids are not 0..2 (missing 2)", zk=True),
    Case("snapshot-min-isr-zero", lambda c: ["snapshot", "--zk", c.load(
        {**SEED, "topics": [{**SEED["topics"][1], "config": {"min.insync.replicas": "0"}}]}), "--out",
        str(c.out)], 2, "/config/topics/orders: min.insync.replicas '0' is out of range", zk=True),
    # --- outputs (item 4, item 6)
    Case("snapshot-out-not-empty", lambda c: (_filled(c), ["snapshot", "--zk", c.load(SEED), "--out",
                                                           str(c.out)])[1],
         2, "already exists and is not empty", zk=True, keep=True),
    Case("snapshot-out-is-a-file", lambda c: (c.out.write_text("x"), ["snapshot", "--zk", c.load(SEED),
                                                                     "--out", str(c.out)])[1],
         2, "is a file, not a folder", zk=True, keep=True),
    Case("snapshot-out-under-a-file", lambda c: ((c.tmp / "f").write_text("x"), ["snapshot", "--zk",
                                                                                 c.load(SEED), "--out",
                                                                                 str(c.tmp / "f" / "s")])[1],
         2, "cannot create a folder there", zk=True),
    Case("plan-out-not-empty", lambda c: (_filled(c), ["plan", "drain", "--snapshot", str(c.snapshot()),
                                                       "--brokers", "1", "--out", str(c.out)])[1],
         2, "already exists and is not empty", keep=True),
    Case("plan-out-is-the-snapshot", lambda c: ["plan", "drain", "--snapshot", str(c.snapshot("out")),
                                                "--brokers", "1", "--out", str(c.out), "--force"],
         2, "would replace the input", keep=True),
    Case("plan-out-inside-the-snapshot", lambda c: ["plan", "drain", "--snapshot", str(c.snapshot()),
                                                    "--brokers", "1", "--out", str(c.tmp / "snap" / "p")],
         2, "is inside the input folder"),
    Case("risk-out-not-empty", lambda c: (_filled(c), ["risk", "--snapshot", str(c.snapshot()), "--out",
                                                       str(c.out)])[1], 2, "already exists and is not empty",
         keep=True),
    # --- issue 19 item 2: no --out may be or contain an input, sizes files included, with or without --force
    Case("snapshot-force-out-holds-its-sizes-file", lambda c: _sizes_inside_out(c, ["snapshot", "--zk",
                                                                                   c.load(SEED)]),
         2, "would replace the input", zk=True, keep=True),
    Case("plan-force-out-holds-its-sizes-file", lambda c: _sizes_inside_out(c, [
        "plan", "drain", "--snapshot", str(c.snapshot()), "--brokers", "2"], kind="plan"),
         2, "would replace the input", keep=True),
    Case("plan-force-out-contains-the-snapshot", lambda c: ["plan", "drain", "--snapshot", str(c.snapshot()),
                                                            "--brokers", "1", "--out", str(c.tmp), "--force"],
         2, "would replace the input"),
    Case("risk-force-out-is-the-plan", lambda c: _risk_over_plan(c), 2, "would replace the input"),
    # --- issue 19 item 4: a mistyped chroot is refused before anything is written (no /typo/kplan/lock)
    Case("verify-mistyped-chroot", lambda c: _executing(c, "verify", "/typo"), 2, "/typo: the chroot does not exist",
         zk=True),
    Case("apply-mistyped-chroot", lambda c: _executing(c, "apply", "/typo"), 2, "/typo: the chroot does not exist", zk=True),
    Case("cancel-mistyped-chroot", lambda c: _executing(c, "cancel", "/typo"), 2, "/typo: the chroot does not exist",
         zk=True),
    Case("maintenance-clear-mistyped-chroot", lambda c: ["maintenance", "clear", "--zk", c.load(SEED) + "/typo",
                                                         "--brokers", "1"], 2, "/typo: the chroot does not exist",
         zk=True),
    Case("snapshot-mistyped-chroot", lambda c: ["snapshot", "--zk", c.load(SEED) + "/typo", "--out", str(c.out),
                                                "--no-sizes"], 2, "no Kafka cluster at ", zk=True),
    Case("roll-mistyped-chroot", lambda c: _roll(Ctx(c.tmp, c.load(SEED) + "/typo"), _restart_plan(c)), 2,
         "/typo: the chroot does not exist", zk=True),
    Case("brokers-mistyped-chroot", lambda c: ["brokers", "--zk", c.load(SEED) + "/typo"], 2,
         "/typo: the chroot does not exist", zk=True),
    Case("risk-reread-mistyped-chroot", lambda c: [*_risk_over_plan(c)[:5], "--zk", c.load(SEED) + "/typo", "--out",
                                                   str(c.out)], 2, "/typo: the chroot does not exist", zk=True),
    Case("verify-chroot-without-kafka", lambda c: _executing(c, "verify", _empty_chroot(c)), 2,
         "/empty: /brokers/ids and /brokers/topics are missing", zk=True),
    # --- issue 19 item 6: each plan's execution records are its own; never inside or around the plan
    Case("verify-out-is-the-plan-folder", lambda c: _executing(c, "verify", extra=("--out", str(c.tmp / "plan"))),
         2, "is the plan folder", zk=True),
    Case("apply-out-contains-the-plan-folder", lambda c: _executing(c, "apply", extra=("--out", str(c.tmp))),
         2, "contains the plan folder", zk=True),
    Case("apply-out-inside-the-plan-folder", lambda c: _executing(c, "apply", extra=(
        "--out", str(c.tmp / "plan" / "apply"))), 2, "is inside the plan folder", zk=True),
    Case("verify-out-not-empty", lambda c: (_filled(c), _executing(c, "verify", extra=("--out", str(c.out))))[1],
         2, "is not empty (keep.txt)", zk=True, keep=True),
    Case("apply-out-not-empty", lambda c: (_filled(c), _executing(c, "apply", extra=("--out", str(c.out))))[1],
         2, "is not empty (keep.txt)", zk=True, keep=True),
    Case("verify-over-another-plans-report", _other_plans_report, 2, "holds the records of plan sha256:abab",
         zk=True),
    # --- issue 19 item 7: the smaller things
    Case("plan-manifest-fingerprint-edited", lambda c: ["plan", "drain", "--snapshot", str(_edited_fingerprint(c)),
                                                        "--brokers", "1", "--out", str(c.out)],
         2, "manifest.json: its fingerprint sha256:1111111111111111111111111111111111111111111111111111111111111111 "
            "is not the fingerprint of the snapshot's partitions"),
    Case("risk-manifest-fingerprint-edited", lambda c: ["risk", "--snapshot", str(_edited_fingerprint(c)), "--out",
                                                        str(c.out)], 2, "the manifest was edited"),
    Case("snapshot-negative-size", lambda c: ["snapshot", "--zk", c.load(SEED), "--out", str(c.out), "--sizes",
                                              str(_logdirs(c, -5))],
         2, "partition payments-0 on broker 1 has size -5: sizes are never negative", zk=True),
    Case("apply-throttle-1-byte", lambda c: ["apply", "--zk", "127.0.0.1:1", "--plan", str(_sized_plan(c, 10**6)),
                                             "--throttle", "1"],
         2, "throttle 1 B/s is below the floor of 100.0 KiB/s (a replication throttle that low never lets a real "
            "batch finish; at 1 B/s batch 0 would take 11.6 days to copy 976.6 KiB into broker 2)"),
    Case("apply-throttle-too-low-for-the-plan", lambda c: ["apply", "--zk", "127.0.0.1:1", "--plan",
                                                           str(_sized_plan(c, 400 * 2**30)), "--throttle", "200KiB"],
         2, "throttle 200.0 KiB/s is too low for this plan; at 200.0 KiB/s batch 0 would take 24.3 days to copy "
            "400.0 GiB into broker 2, over the limit of 7.0 days per batch; give at least 693.5 KiB/s"),
    # --- corrupt or edited files (item 5)
    Case("plan-truncated-parquet", lambda c: ["plan", "drain", "--snapshot", str(_truncated(c)), "--brokers",
                                              "1", "--out", str(c.out)],
         2, "partitions.parquet: checksum does not match the manifest"),
    Case("risk-truncated-parquet", lambda c: ["risk", "--snapshot", str(_truncated(c)), "--out", str(c.out)],
         2, "partitions.parquet: checksum does not match the manifest"),
    Case("plan-edited-parquet", lambda c: ["plan", "drain", "--snapshot", str(_edited(c)), "--brokers", "1",
                                           "--out", str(c.out)],
         2, "partitions.parquet: checksum does not match the manifest"),
    # --- mismatches (item 8)
    Case("risk-plan-from-another-snapshot", _other_snapshot_plan, 2, "was made from snapshot sha256:"),
    Case("risk-kafka-version-2.0", lambda c: ["risk", "--snapshot", str(c.snapshot()), "--out", str(c.out),
                                              "--kafka-version", "2.0"], 2, "ZooKeeper-mode releases 2.4 to 3.9"),
    Case("risk-kraft-features-unknown", lambda c: ["risk", "--snapshot", str(_kraft_unknown(c)), "--out",
                                                   str(c.out)], 2, "whether ELR (KIP-966) is on is unknown"),
    Case("plan-sizes-match-nothing", lambda c: ["plan", "drain", "--snapshot", str(c.snapshot()), "--brokers",
                                                "1", "--out", str(c.out), "--sizes",
                                                str(_sizes(c, {"nope-0": 5, "nope-1": 7}))],
         2, "names none of the snapshot's partitions"),
    Case("plan-exclude-topics-match-nothing", lambda c: ["plan", "drain", "--snapshot", str(c.snapshot()),
                                                         "--brokers", "2", "--out", str(c.out),
                                                         "--exclude-topics", "paymnts"],
         2, "exclude_topics 'paymnts' matches no topic"),
    # --- refusals and messages (item 9)
    Case("plan-infeasible-drain", lambda c: ["plan", "drain", "--snapshot", str(c.snapshot()), "--brokers",
                                             "1,2", "--out", str(c.out)], 2, "RF 3 but only 1 eligible broker "),
    Case("plan-batch-seconds-zero", lambda c: ["plan", "drain", "--snapshot", str(c.snapshot()), "--brokers",
                                               "2", "--out", str(c.out), "--batch-seconds", "0"],
         2, "batch_seconds must be at least 1, got 0"),
    Case("plan-max-leader-changes-negative", lambda c: ["plan", "rebalance", "--snapshot", str(c.snapshot()),
                                                        "--out", str(c.out), "--max-leader-changes", "-1"],
         2, "max_leader_changes must not be negative, got -1"),
    Case("sandbox-description-leader-true", lambda c: ["sandbox", "up", "--dir", str(c.out), "--cluster", str(
        _sizes(c, {"brokers": [{"id": 1}], "topics": [{"name": "t", "partitions": [
            {"replicas": [1], "leader": True}]}]}))], 2, "leader true must be -1 or one of the replicas [1]"),
    Case("plan-sizes-value-not-a-number", lambda c: ["plan", "drain", "--snapshot", str(c.snapshot()),
                                                     "--brokers", "2", "--out", str(c.out), "--sizes",
                                                     str(_sizes(c, {"payments-0": {"3": 46}}))],
         2, 'must be a non-negative integer, got {"3": 46}'),
    Case("sandbox-workload-zero-rate", lambda c: ["sandbox", "workload", "--dir", str(c.tmp / "sb"), "--rate", "0"],
         2, "rate must be a positive number of messages per second, got 0"),
    # --- restart plans and rolls (issue 17)
    Case("plan-restart-unknown-broker", lambda c: ["plan", "restart", "--snapshot", str(c.snapshot()), "--brokers",
                                                   "1,9", "--out", str(c.out)], 2, "unknown broker(s) [9]"),
    Case("roll-two-at-once", _lock_held, 1, "another kplan holds the lock /kplan/lock: kplan roll of plan sha256:other "
                                            "(pid 4242 on ops-1, user alice", zk=True),
    Case("roll-while-a-reassignment-is-in-flight", _reassigning, 1, "a roll starts only when no reassignment is in "
                                                                    "flight (nothing was written)", zk=True),
    Case("roll-broker-not-registered", _broker_down, 1, "broker(s) [3] of the roll are not registered", zk=True),
    Case("roll-a-drain-plan", lambda c: ["roll", "--zk", "127.0.0.1:1", "--plan", str(c.plan(
        c.snapshot(), [ReassignEntry("payments", 0, (2,))])), "--out", str(c.out)],
         2, "`kplan roll` runs restart plans"),
    Case("roll-unthrottled-copy", lambda c: _roll(Ctx(c.tmp, "127.0.0.1:1"), _restart_plan(c), "--poll", "1"), 2,
         "would copy with no replication throttle (the plan was made without partition sizes, so it suggests no "
         "rate): give a throttle (--throttle RATE, e.g. 50MB), or say --no-throttle"),
    Case("roll-throttle-below-the-floor", lambda c: _roll(Ctx(c.tmp, "127.0.0.1:1"), _restart_plan(c), "--throttle",
                                                          "1000"),
         2, "throttle 1,000 B/s is below the floor of 100.0 KiB/s"),
    Case("apply-a-restart-plan", lambda c: ["apply", "--zk", "127.0.0.1:1", "--plan", str(_restart_plan(c))], 2,
         "is a restart plan: run it with `kplan roll --zk … --plan"),
    Case("roll-restart-command-bad-placeholder", lambda c: _roll(Ctx(c.tmp, "127.0.0.1:1"), _restart_plan(c),
                                                                 "--restart-command", "ssh {hostname} restart"),
         2, "restart command 'ssh {hostname} restart': 'hostname' (placeholders: {broker}, {host}, {port})"),
    # nobody listening: the whole timeout is waited, so the least that says it (as brokers-bootstrap-… does)
    Case("snapshot-nobody-listening", lambda c: ["snapshot", "--zk", f"127.0.0.1:{_free_port()}", "--out",
                                                 str(c.out), "--timeout", "1"],
         2, "could not connect to ZooKeeper at 127.0.0.1:"),
    Case("snapshot-unresolvable-host", lambda c: ["snapshot", "--zk", "no-such-host.invalid:2181", "--out",
                                                  str(c.out), "--timeout", "2"],
         2, "cannot resolve ZooKeeper host no-such-host.invalid"),
    # --- maintenance (issue 17): the way back and the explicit clear
    Case("plan-return-broker-not-registered", lambda c: ["plan", "return", "--snapshot", str(c.snapshot(
        desc={**SEED, "brokers": [{**b, "alive": b["id"] != 3} for b in SEED["brokers"]]},
        maintenance=[_drained(3)])), "--brokers", "3", "--out", str(c.out)],
         2, "broker(s) [3] are not registered (not in /brokers/ids when the snapshot was taken)"),
    Case("plan-return-broker-not-in-maintenance", lambda c: ["plan", "return", "--snapshot", str(c.snapshot()),
                                                             "--brokers", "2", "--out", str(c.out)],
         2, "broker 2 is not in maintenance"),
    Case("plan-return-unknown-broker", lambda c: ["plan", "return", "--snapshot", str(c.snapshot(
        maintenance=[_drained(3)])), "--brokers", "7", "--out", str(c.out)], 2, "unknown broker(s) [7]"),
    Case("maintenance-carry-without-bootstrap", lambda c: ["maintenance", "carry", "--zk", "127.0.0.1:9"],
         2, "maintenance carry reads ZooKeeper and writes the KRaft brokers: give both --zk"),
    Case("maintenance-carry-bootstrap-with-path", lambda c: ["maintenance", "carry", "--zk", "127.0.0.1:9",
                                                             "--bootstrap-server", "127.0.0.1:9/kafka"],
         2, "bootstrap server '127.0.0.1:9/kafka' has a path"),
    Case("maintenance-clear-no-state", lambda c: ["maintenance", "clear", "--zk", c.load(SEED), "--brokers", "2"],
         2, "broker 2 is not in maintenance: nothing to clear (brokers in maintenance: none)", zk=True),
    Case("maintenance-clear-unknown-broker", lambda c: ["maintenance", "clear", "--zk", c.load(SEED),
                                                        "--brokers", "42"],
         2, "broker 42 is not a registered broker and has no maintenance state", zk=True),
    Case("maintenance-clear-another-state", lambda c: ["maintenance", "clear", "--zk", c.load(SEED, {}, {
        "/kplan/maintenance/3": json.dumps({"format": "kplan-maintenance/1", **_drained(3)}).encode()}),
        "--brokers", "3", "--state", "draining"], 2, "broker 3 is drained, not draining: nothing was cleared",
         zk=True),
    Case("maintenance-clear-held-by-a-running-apply", _held_by_a_running_apply, 1,
         "broker 3 is draining for kplan apply of plan sha256:dddddddddddd", zk=True),

    # issue 18: brokers registered in ZooKeeper that do not answer DescribeLogDirs (here their hosts do not
    # resolve): the snapshot names them instead of coming out count-only
    Case("snapshot-brokers-unreachable", lambda c: ["snapshot", "--zk", c.load(SEED), "--out", str(c.out),
                                                    "--kafka-timeout", "2"],
         2, "no registered broker answered DescribeLogDirs over PLAINTEXT (broker 1 at broker-1:9092", zk=True),
    # ... and over SASL (the listener named, as a broker's own name for it): the password never shows
    Case("snapshot-brokers-unreachable-sasl", lambda c: ["snapshot", "--zk", c.load(SEED), "--out", str(c.out),
                                                         "--kafka-timeout", "2", "--kafka-security-protocol",
                                                         "SASL_PLAINTEXT", "--kafka-listener", "PLAINTEXT",
                                                         "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username",
                                                         "kplan"],
         2, "no registered broker answered DescribeLogDirs over SASL_PLAINTEXT (PLAIN, user kplan", zk=True,
         env={"KPLAN_KAFKA_PASSWORD": "Unreachable-s3cret-9"}),
    Case("snapshot-sizes-and-no-sizes", lambda c: ["snapshot", "--zk", "127.0.0.1:1", "--out", str(c.out),
                                                   "--sizes", str(_sizes(c, {"payments-0": 1})), "--no-sizes"],
         2, "give either --sizes FILE or --no-sizes, not both"),
    # SSL settings are checked before ZooKeeper or any broker is asked (and the key's password never shown)
    Case("snapshot-ssl-ca-file-missing", lambda c: ["snapshot", "--zk", "127.0.0.1:1", "--out", str(c.out),
                                                    "--kafka-security-protocol", "SSL", "--kafka-config",
                                                    str(_kafka_config(c, {"ssl.ca.location": str(c.tmp / "no-ca.pem")}))],
         2, "no-ca.pem: No such file or directory"),
    Case("snapshot-ssl-ca-file-not-pem", lambda c: ["snapshot", "--zk", "127.0.0.1:1", "--out", str(c.out),
                                                    "--kafka-config", str(_kafka_config(c, {
                                                        "security.protocol": "SSL",
                                                        "ssl.ca.location": str(_sizes(c, {"payments-0": 1}))}))],
         2, "not a PEM CA certificate file"),
    Case("sandbox-ssl-without-kafka-engine", lambda c: ["sandbox", "up", "--dir", str(c.out), "--ssl"],
         2, "--sasl and --ssl need --engine kafka"),
    Case("sandbox-layout-without-kraft-engine", lambda c: ["sandbox", "up", "--dir", str(c.out), "--engine", "kafka",
                                                           "--layout", "combined"], 2, "--layout needs --engine kraft"),
    Case("sandbox-migrate-without-sandbox", lambda c: ["sandbox", "migrate", "--dir", str(c.out), "--to", "hybrid"],
         2, "no sandbox in"),
    # the sandbox's numbers: nan passes a `< 0` check and inf never ends a wait; both refused before anything starts
    Case("sandbox-catch-up-delay-not-finite", lambda c: ["sandbox", "up", "--dir", str(c.out), "--catch-up-delay",
                                                         "inf"],
         2, "sandbox setting catch_up_delay must be a finite number, got inf"),
    Case("sandbox-tick-nan", lambda c: ["sandbox", "up", "--dir", str(c.out), "--tick", "nan"],
         2, "sandbox setting tick must be a finite number, got nan"),
    Case("sandbox-up-timeout-negative", lambda c: ["sandbox", "up", "--dir", str(c.out), "--timeout", "-5"],
         2, "--timeout must be a positive number of seconds, got -5"),
    # the other sandbox subcommands' numbers, refused by argparse before the sandbox is read: nan reached a socket's
    # timeout (a traceback), inf overflowed it, a negative one stopped the broker and then failed, 0 meant the default
    Case("sandbox-wait-timeout-nan", lambda c: ["sandbox", "wait", "--dir", str(c.out), "--timeout", "nan"],
         2, "argument --timeout: must be a positive number of seconds, got 'nan'"),
    Case("sandbox-kill-timeout-zero", lambda c: ["sandbox", "kill", "--dir", str(c.out), "1", "--timeout", "0"],
         2, "argument --timeout: must be a positive number of seconds, got '0'"),
    Case("sandbox-stop-timeout-negative", lambda c: ["sandbox", "stop", "--dir", str(c.out), "1", "--timeout", "-5"],
         2, "argument --timeout: must be a positive number of seconds, got '-5'"),
    Case("sandbox-start-timeout-inf", lambda c: ["sandbox", "start", "--dir", str(c.out), "1", "--timeout", "inf"],
         2, "argument --timeout: must be a positive number of seconds, got 'inf'"),
    Case("sandbox-migrate-timeout-nan", lambda c: ["sandbox", "migrate", "--dir", str(c.out), "--to", "hybrid",
                                                   "--timeout", "nan"],
         2, "argument --timeout: must be a positive number of seconds, got 'nan'"),
    Case("sandbox-workload-delivery-timeout-inf", lambda c: ["sandbox", "workload", "--dir", str(c.tmp / "sb"),
                                                             "--delivery-timeout", "inf"],
         2, "argument --delivery-timeout: must be a positive number of seconds, got 'inf'"),
    Case("sandbox-workload-every-inf", lambda c: ["sandbox", "workload", "--dir", str(c.tmp / "sb"), "--every", "inf"],
         2, "argument --every: must be a positive number of seconds, got 'inf'"),
    Case("sandbox-workload-size-zero", lambda c: ["sandbox", "workload", "--dir", str(c.tmp / "sb"), "--size", "0"],
         2, "message size must be 28 to 1048576 bytes, got 0"),
    # kafka engine: --data-scale nan / inf failed only after ZooKeeper had started (and left it running)
    Case("sandbox-up-data-scale-nan", lambda c: ["sandbox", "up", "--dir", str(c.out), "--engine", "kafka",
                                                 "--data-scale", "nan"],
         2, "argument --data-scale: must be a number, zero or more, got 'nan'"),
    Case("sandbox-up-data-bytes-negative", lambda c: ["sandbox", "up", "--dir", str(c.out), "--engine", "kafka",
                                                      "--data-bytes", "-1"],
         2, "argument --data-bytes: must be a whole number of bytes, zero or more, got '-1'"),
    # `make demo`'s own flags (python -m kplan_airflow.demo), refused before it recreates --dir or starts a sandbox
    Case("demo-catch-up-delay-negative", lambda c: ["--dir", str(c.out), "--catch-up-delay", "-0.5"],
         2, "argument --catch-up-delay: must be a number of seconds, zero or more, got '-0.5'", main=_demo),
    Case("demo-catch-up-delay-nan", lambda c: ["--dir", str(c.out), "--catch-up-delay", "nan"],
         2, "argument --catch-up-delay: must be a number of seconds, zero or more, got 'nan'", main=_demo),
    Case("demo-throttle-below-the-floor", lambda c: ["--dir", str(c.out), "--throttle", "1000"],
         2, "argument --throttle: must be at least 102400 bytes/s (the apply's floor), got '1000'", main=_demo),
    Case("demo-brokers-not-ids", lambda c: ["--dir", str(c.out), "--brokers", "1,x"],
         2, "argument --brokers: must be comma-separated broker ids (non-negative integers), got '1,x'", main=_demo),
    # issue 24: KRaft clusters through --bootstrap-server. Nobody listening (the SASL password never shows)
    Case("snapshot-bootstrap-nobody-listening", lambda c: [
        "snapshot", "--bootstrap-server", f"127.0.0.1:{_free_port()}", "--out", str(c.out), "--kafka-timeout", "1",
        "--kafka-security-protocol", "SASL_PLAINTEXT", "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username",
        "kplan"], 2, "no Kafka broker answered at 127.0.0.1:", env={"KPLAN_KAFKA_PASSWORD": "Unreachable-s3cret-24"}),
    # a ZooKeeper given as Kafka: told by what answers there (its four-letter word), not by a timeout alone
    Case("snapshot-zookeeper-given-as-bootstrap", lambda c: ["snapshot", "--bootstrap-server", c.zk.split("/")[0],
                                                             "--out", str(c.out), "--kafka-timeout", "2"],
         2, "is a ZooKeeper server, not a Kafka broker: read a ZooKeeper-mode cluster through its ZooKeeper", zk=True),
    Case("snapshot-bootstrap-with-a-chroot", lambda c: ["snapshot", "--bootstrap-server", c.zk, "--out", str(c.out)],
         2, "has a path: a ZooKeeper connect string with a chroot?", zk=True),
    Case("snapshot-zk-and-bootstrap", lambda c: ["snapshot", "--zk", "127.0.0.1:1", "--bootstrap-server",
                                                 "127.0.0.1:2", "--out", str(c.out)],
         2, "(a KRaft cluster), not both"),
    # a plan and a cluster of different backends, refused before any cluster is asked: a KRaft plan is applied,
    # verified and cancelled through the Admin API (--bootstrap-server), a ZooKeeper one through ZooKeeper
    Case("apply-a-kraft-plan-through-zookeeper", lambda c: ["apply", "--zk", "127.0.0.1:1", "--plan",
                                                            str(_kraft_plan(c)), "--no-throttle"],
         2, "was made from a KRaft snapshot: apply on KRaft needs the Admin API writer, through the cluster's bootstrap servers"),
    Case("verify-a-kraft-plan-through-zookeeper", lambda c: ["verify", "--zk", "127.0.0.1:1", "--plan",
                                                             str(_kraft_plan(c))],
         2, "was made from a KRaft snapshot: verify on KRaft needs the Admin API writer, through the cluster's bootstrap servers"),
    Case("cancel-a-kraft-plan-through-zookeeper", lambda c: ["cancel", "--zk", "127.0.0.1:1", "--plan",
                                                             str(_kraft_plan(c))],
         2, "was made from a KRaft snapshot: cancel on KRaft needs the Admin API writer, through the cluster's bootstrap servers"),
    Case("apply-a-zookeeper-plan-through-bootstrap", lambda c: [
        "apply", "--bootstrap-server", "127.0.0.1:1", "--plan",
        str(c.plan(c.snapshot(), [ReassignEntry("payments", 0, (2,))])), "--throttle", "1MB"],
         2, "was made from a ZooKeeper snapshot: apply it through its ZooKeeper connect string"),
    Case("apply-zk-and-bootstrap", lambda c: ["apply", "--zk", "127.0.0.1:1", "--bootstrap-server", "127.0.0.1:2",
                                              "--plan", str(_kraft_plan(c)), "--no-throttle"],
         2, "(a KRaft cluster), not both"),
    Case("apply-kraft-nobody-listening", lambda c: [
        "apply", "--bootstrap-server", f"127.0.0.1:{_free_port()}", "--plan", str(_kraft_plan(c)), "--no-throttle",
        "--kafka-timeout", "1", "--kafka-security-protocol", "SASL_PLAINTEXT", "--kafka-sasl-mechanism", "PLAIN",
        "--kafka-sasl-username", "kplan"], 2, "no Kafka broker answered at 127.0.0.1:",
         env={"KPLAN_KAFKA_PASSWORD": "Unreachable-s3cret-24"}),
    Case("verify-kraft-zookeeper-given-as-bootstrap", lambda c: [
        "verify", "--bootstrap-server", c.zk.split("/")[0], "--plan", str(_kraft_plan(c)), "--kafka-timeout", "2"],
         2, "is a ZooKeeper server, not a Kafka broker", zk=True),
    Case("apply-kraft-lease-not-positive", lambda c: ["apply", "--bootstrap-server", "127.0.0.1:2", "--plan",
                                                      str(_kraft_plan(c)), "--no-throttle", "--lease", "0"],
         2, "the lease must be a positive number of seconds"),
    Case("roll-a-kraft-plan-through-zookeeper", lambda c: ["roll", "--zk", "127.0.0.1:1", "--plan",
                                                           str(_kraft_restart_plan(c)), "--no-throttle"],
         2, "was made from a KRaft snapshot: roll on KRaft needs the Admin API writer, through the cluster's bootstrap servers"),
    Case("roll-a-zookeeper-plan-through-bootstrap", lambda c: ["roll", "--bootstrap-server", "127.0.0.1:1", "--plan",
                                                               str(_restart_plan(c)), "--throttle", "50MB"],
         2, "was made from a ZooKeeper snapshot: roll it through its ZooKeeper connect string"),
    Case("roll-kraft-lease-not-positive", lambda c: ["roll", "--bootstrap-server", "127.0.0.1:2", "--plan",
                                                     str(_kraft_restart_plan(c)), "--throttle", "50MB", "--lease", "0"],
         2, "the lease must be a positive number of seconds"),
    # the brokers' maintenance state on KRaft (`__kplan`): read and cleared through the bootstrap servers too
    Case("brokers-bootstrap-nobody-listening", lambda c: [
        "brokers", "--bootstrap-server", f"127.0.0.1:{_free_port()}", "--kafka-timeout", "1"],
         2, "no Kafka broker answered at 127.0.0.1:"),
    Case("maintenance-clear-zookeeper-given-as-bootstrap", lambda c: [
        "maintenance", "clear", "--bootstrap-server", c.zk.split("/")[0], "--brokers", "1", "--kafka-timeout", "2"],
         2, "is a ZooKeeper server, not a Kafka broker", zk=True),
    Case("maintenance-clear-zk-and-bootstrap", lambda c: ["maintenance", "clear", "--zk", "127.0.0.1:1",
                                                          "--bootstrap-server", "127.0.0.1:2", "--brokers", "1"],
         2, "(a KRaft cluster), not both"),
    Case("maintenance-clear-kraft-lease-not-positive", lambda c: [
        "maintenance", "clear", "--bootstrap-server", "127.0.0.1:2", "--brokers", "1", "--lease", "-1"],
         2, "the lease must be a positive number of seconds"),
    Case("apply-copy-with-no-rate", lambda c: ["apply", "--zk", "127.0.0.1:1", "--plan",
                                               str(c.plan(c.snapshot(), [ReassignEntry("payments", 0, (2,))]))],
         2, "1 data batches of plan sha256:"),
]


@pytest.fixture
def ctx(request, tmp_path) -> Ctx:
    c = Ctx(tmp_path)
    if request.node.callspec.params["case"].zk:
        c.zk = request.getfixturevalue("zk_connect")
        c.client = request.getfixturevalue("zk_client")
    return c


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gets_one_clear_line_and_writes_nothing(case, ctx, capsys, monkeypatch):
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    argv = case.setup(ctx)
    before = sorted(p.relative_to(ctx.tmp) for p in ctx.tmp.rglob("*"))
    zk_before = _zk_tree(ctx.client) if ctx.client is not None else None
    capsys.readouterr()
    try:
        rc = (case.main or cli.main)(argv)
    except SystemExit as e:   # argparse refusing a value: its one `error:` line, exit 2
        rc = e.code
    out, err = capsys.readouterr()
    assert rc == case.code, err
    assert case.message in err, err
    assert "Traceback" not in err and "Traceback" not in out
    for k, v in case.env.items():
        if "PASSWORD" in k:
            assert v not in out + err, k          # no secret in any output
    lines = [x for x in err.splitlines() if "error:" in x]
    assert len(lines) == 1, err
    assert not [x for x in err.splitlines() if "WARNING" in x or "kazoo" in x], err   # no retry noise
    after = sorted(p.relative_to(ctx.tmp) for p in ctx.tmp.rglob("*"))
    assert after == before   # nothing written, nothing left behind (no temporary folder either)
    if zk_before is not None:   # ... and nothing written to ZooKeeper, read raw (no lock znode, no /typo)
        assert _zk_tree(ctx.client) == zk_before


def _zk_tree(client, path: str = "/") -> dict[str, int]:
    """Every znode under the test's chroot: path -> mzxid (a created, changed or deleted znode shows)."""
    out: dict[str, int] = {}
    stat = client.exists(path)
    if stat is None:
        return out
    out[path] = stat.mzxid
    for child in client.get_children(path):
        out.update(_zk_tree(client, f"{path.rstrip('/')}/{child}"))
    return out


# ------------------------------------------------------------------------- beyond one line: each class's root
def test_lenient_keeps_a_partition_whose_state_is_unknown_and_plans_refuse_to_guess(zk_client, zk_connect,
                                                                                     tmp_path, capsys):
    """Item 1: the assignment of orders-1 is intact, only its state znode is malformed."""
    loader.load_cluster(zk_client, SEED)
    zk_client.set("/brokers/topics/orders/partitions/1/state", b'{"leader":"two","isr":[2,3,1]}')
    snap = tmp_path / "snap"
    assert cli.main(["snapshot", "--zk", zk_connect, "--out", str(snap), "--lenient", "--no-sizes"]) == 0
    out = capsys.readouterr().out
    assert "state unknown   1" in out and "/brokers/topics/orders/partitions/1/state" in out
    s = sio.read_snapshot(snap)
    rows = {(t, p): e for t, p, e in zip(s.partitions.column("topic").to_pylist(),
                                         s.partitions.column("partition").to_pylist(),
                                         s.partitions.column("state_error").to_pylist(), strict=True)}
    assert len(rows) == 4 and rows[("orders", 1)] and rows[("orders", 0)] is None
    # a drain that would move it is refused and names it; one that does not touch it leaves it alone
    assert cli.main(["plan", "drain", "--snapshot", str(snap), "--brokers", "3", "--out", str(tmp_path / "p1")]) == 2
    err = capsys.readouterr().err
    assert "unknown" in err and "orders-1" in err and not (tmp_path / "p1").exists()
    assert cli.main(["plan", "rebalance", "--snapshot", str(snap), "--out", str(tmp_path / "p2")]) == 0
    plan = json.loads((tmp_path / "p2" / "plan.json").read_text())
    assert ("orders", 1) not in {(m["topic"], m["partition"]) for m in plan["moves"]}
    assert any("unknown state" in w for w in plan["warnings"])


def test_an_unhealthy_cluster_is_reported_as_it_is(zk_client, zk_connect, tmp_path):
    """Item 3: no broker registered, no controller; every led partition is offline, and says so."""
    from planner import replay

    loader.load_cluster(zk_client, {**SEED, "brokers": [{**b, "alive": True} for b in SEED["brokers"]]},
                        brokers=False, controller=False)
    assert cli.main(["snapshot", "--zk", zk_connect, "--out", str(tmp_path / "s"), "--no-sizes"]) == 0
    s = sio.read_snapshot(tmp_path / "s")
    c = s.manifest["counts"]
    assert (c["alive_brokers"], c["offline"], c["under_replicated"]) == (0, 4, 0)
    problems = " | ".join(w["problem"] for w in s.manifest["warnings"])
    assert "no broker is registered" in problems and "no controller is registered" in problems
    assert "4 partitions led by brokers that are not registered" in problems
    # risk's current-state line counts the same way (the Spark job and the reference replay share the rule)
    base = replay.baseline(replay.ClusterState.from_snapshot(s))
    assert base["offline"] == 4


def test_a_replica_on_a_missing_broker_is_under_replicated(zk_client, zk_connect, tmp_path):
    desc = {**SEED, "brokers": SEED["brokers"] + [{"id": 4, "alive": False}],
            "topics": [{"name": "t", "partitions": [{"replicas": [1, 2, 4], "leader": 1, "isr": [1, 2, 4]}]}]}
    loader.load_cluster(zk_client, desc)
    assert cli.main(["snapshot", "--zk", zk_connect, "--out", str(tmp_path / "s"), "--no-sizes"]) == 0
    c = sio.read_snapshot(tmp_path / "s").manifest["counts"]
    assert (c["offline"], c["under_replicated"]) == (0, 1)


def test_no_verbosity_prints_a_credential(zk_server, zk_chroot, tmp_path):
    """Item 7: kazoo's debug log shows the Auth request it sends; the password must never appear."""
    from planner import zk as zkmod

    secret = "s3cr3t-Pw!"
    client = zkmod.connect(zk_server.connect_string, auth=("kplan", secret))
    try:
        client.default_acl = [zkmod.digest_acl("kplan", secret)]
        client.ensure_path(zk_chroot)
        client.chroot = zk_chroot
        loader.load_cluster(client, SEED)
    finally:
        client.stop()
        client.close()
    env = {**os.environ, "KPLAN_ZK_AUTH": f"kplan:{secret}", "PYTHONPATH": str(REPO)}
    for verbose in (["-v"], []):
        done = subprocess.run([sys.executable, "-m", "planner.cli", *verbose, "snapshot", "--zk",
                               zk_server.connect_string + zk_chroot, "--out", str(tmp_path / f"s{len(verbose)}"),
                               "--no-sizes"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert secret not in done.stdout + done.stderr
        if verbose:
            assert "Auth(" in done.stderr and "***" in done.stderr   # the request was logged, redacted


def test_ctrl_c_during_risk_exits_130_leaving_nothing(tmp_path):
    """Item 6: Ctrl-C as a terminal sends it (to the whole process group) while Spark is starting."""
    c = Ctx(tmp_path)
    snap = c.snapshot()
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "risk", "--snapshot", str(snap), "--out",
                             str(c.out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO)})

    def jvms() -> list[int]:
        return [pid for pid, cmd in _descendants(proc.pid).items() if "SparkSubmit" in cmd]

    deadline = time.monotonic() + 120
    while not jvms() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    started = jvms()
    assert started, "Spark's JVM did not start"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap"]   # no output, no temporary folder
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in started), "the JVM outlived kplan"


def test_ctrl_c_while_spark_writes_prints_no_java_stack_trace(tmp_path):
    """Issue 19: Ctrl-C during risk printed ~250 lines of Java stack traces (Spark logging every job it aborts,
    at ERROR, while it stops). Interrupted while the job writes partitions.parquet: one line, no trace."""
    from planner import synth

    snap = synth.to_snapshot(synth.synth_cluster(brokers=60, partitions=30_000, rf=3, racks=3, seed=3,
                                                 partitions_per_topic=100), tmp_path / "snap")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "risk", "--snapshot", str(snap), "--out",
                             str(out), "--all-brokers", "--all-racks"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})

    def writing() -> bool:   # Spark's output committer's working folder: the job is running
        return any(tmp_path.glob(".kplan-tmp-out-*/partitions.parquet/_temporary")) or proc.poll() is not None

    deadline = time.monotonic() + 180
    while not writing() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the job ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted by SIGINT" in err
    assert "\tat org.apache" not in err and " ERROR " not in err, err[-3000:]
    assert len(err.splitlines()) <= 8, err   # the progress lines, Spark's start-up banner, the one line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap"]


def _descendants(root: int) -> dict[int, str]:
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, todo = {}, [root]
    while todo:
        me = todo.pop()
        for pid, pp in parent.items():
            if pp == me and pid not in out:
                try:
                    out[pid] = (Path("/proc") / str(pid) / "cmdline").read_bytes().decode(errors="replace")
                except OSError:
                    out[pid] = ""
                todo.append(pid)
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.sandbox
def test_sandbox_down_twice_and_up_after_its_daemon_died(tmp_path, capsys):
    """Item 9: down is idempotent; up over a sandbox whose daemon was killed starts a fresh one."""
    from planner.sandbox import Sandbox

    d = tmp_path / "sb"
    fast = ["--catch-up-delay", "0.3", "--no-auto-rebalance"]
    assert cli.main(["sandbox", "up", "--dir", str(d), "--brokers", "3", "--racks", "3", "--partitions", "6",
                     *fast]) == 0
    old = Sandbox(d)
    os.kill(old.daemon_pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _alive(old.daemon_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert cli.main(["sandbox", "up", "--dir", str(d), "--brokers", "3", "--racks", "3", "--partitions",
                         "6", *fast]) == 0
        new = Sandbox(d)
        assert new.daemon_alive() and new.daemon_pid != old.daemon_pid
        assert not _alive(old.zookeeper_pid)     # the dead sandbox's ZooKeeper was stopped, not left behind
    finally:
        assert cli.main(["sandbox", "down", "--dir", str(d)]) == 0
    capsys.readouterr()
    assert cli.main(["sandbox", "down", "--dir", str(d)]) == 0
    assert "nothing to stop" in capsys.readouterr().out


@pytest.mark.sandbox
def test_sandbox_workload_on_the_emulated_engine_is_refused(tmp_path, capsys):
    """The emulated engine has no data path: no broker answers a produce or a fetch."""
    d = tmp_path / "sb"
    assert cli.main(["sandbox", "up", "--dir", str(d), "--brokers", "3", "--partitions", "6",
                     "--no-auto-rebalance"]) == 0
    try:
        before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if "zookeeper" not in p.parts)
        capsys.readouterr()
        assert cli.main(["sandbox", "workload", "--dir", str(d), "--duration", "1"]) == 2
        err = capsys.readouterr().err
        assert "runs the emulated engine, which has no data path" in err and "--engine kafka" in err, err
        assert len([x for x in err.splitlines() if "error:" in x]) == 1 and "Traceback" not in err
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if "zookeeper" not in p.parts) == before
    finally:
        assert cli.main(["sandbox", "down", "--dir", str(d)]) == 0


def test_a_zero_throttle_is_refused_naming_the_way_to_copy_unthrottled(tmp_path, capsys):
    plan = Ctx(tmp_path).plan(Ctx(tmp_path).snapshot(), [ReassignEntry("payments", 0, (2,))])
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as e:
        cli.main(["apply", "--zk", "127.0.0.1:1", "--plan", str(plan), "--throttle", "0"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --throttle: a throttle of 0 would stall the copy" in err and "--no-throttle" in err
    assert sorted(tmp_path.rglob("*")) == before


# ------------------------------------------------------------------------------- issue 19: the smaller things
def test_sizes_from_a_broker_the_cluster_does_not_know_are_named_and_not_used(zk_client, zk_connect, tmp_path,
                                                                              capsys):
    loader.load_cluster(zk_client, SEED)
    c = Ctx(tmp_path)
    f = tmp_path / "logdirs.json"
    f.write_text(json.dumps({"version": 1, "brokers": [
        {"broker": b, "logDirs": [{"logDir": "/d", "error": None, "partitions": [
            {"partition": "payments-0", "size": n, "offsetLag": 0, "isFuture": False}]}]}
        for b, n in ((1, 700), (9, 10**12))]}))
    assert cli.main(["snapshot", "--zk", zk_connect, "--out", str(c.out), "--sizes", str(f)]) == 0
    out = capsys.readouterr().out
    assert "sizes from broker(s) the cluster does not know, not used: 9 (1 replica sizes)" in out
    s = sio.read_snapshot(c.out)
    sizes = dict(zip(s.partitions.column("topic").to_pylist(), s.partitions.column("size_bytes").to_pylist(),
                     strict=True))
    assert sizes["payments"] == 700   # broker 9's terabyte is not taken for payments-0


def test_kplan_into_a_closed_pipe_says_nothing_and_exits_as_sigpipe_would(tmp_path):
    snap = Ctx(tmp_path).snapshot()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(f"{sys.executable} -m planner.cli plan rebalance --snapshot {snap} --out "
                          f"{tmp_path / 'p'} --quiet | head -1", shell=True, capture_output=True, text=True, env=env,
                          timeout=120, executable="/bin/bash")
    assert done.stdout.startswith("plan sha256:") and done.stdout.count("\n") == 1
    assert done.stderr == "", done.stderr   # not "error: Broken pipe"
    status = subprocess.run(f"set -o pipefail; {sys.executable} -m planner.cli plan rebalance --snapshot {snap} "
                            f"--out {tmp_path / 'p2'} --quiet | head -1 > /dev/null", shell=True,
                            executable="/bin/bash", env=env, timeout=120)
    assert status.returncode in (0, 141)   # the whole summary may fit the pipe before head closes it
    assert (tmp_path / "p2" / "plan.json").is_file()   # the work was done and kept


def test_an_empty_rebalance_says_already_balanced_and_no_bound_it_did_not_need(tmp_path, capsys):
    balanced = {"brokers": [{"id": i, "rack": f"r{i}"} for i in (1, 2, 3)], "topics": [
        {"name": "t", "partitions": [{"replicas": [1, 2]}, {"replicas": [2, 3]}, {"replicas": [3, 1]}]}]}
    snap = Ctx(tmp_path).snapshot(desc=balanced)
    assert cli.main(["plan", "rebalance", "--snapshot", str(snap), "--out", str(tmp_path / "p"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert json.loads((tmp_path / "p" / "plan.json").read_text())["summary"]["replica_moves"] == 0
    assert "replica moves      0: already balanced (replica spread 0, leader spread 0)" in out
    assert "lower bound" not in out and "x0.0" not in out


def test_balance_bytes_with_unknown_sizes_warns_and_balances_counts(tmp_path, capsys):
    snap = Ctx(tmp_path).snapshot()   # no sizes
    assert cli.main(["plan", "rebalance", "--snapshot", str(snap), "--balance", "bytes", "--out",
                     str(tmp_path / "p"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "warning            balance bytes was asked, but the sizes of 4 partitions are unknown" in out
    doc = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert doc["parameters"]["balance"] == "count"
    assert any(w.startswith("balance bytes was asked") for w in doc["warnings"])


def test_the_replica_spread_says_what_it_counts(tmp_path, capsys):
    """The demo's "replica spread 30 -> 48" read as if the drain made things worse: it counts the brokers that
    stay, and the drained broker ends at 0 (worked out by hand for SEED: brokers 1..3 hold 4, 3, 3 replicas)."""
    seed_rf2 = {**SEED, "brokers": SEED["brokers"] + [{"id": 4, "rack": "r1"}]}
    snap = Ctx(tmp_path).snapshot("snap4", seed_rf2)
    assert cli.main(["plan", "drain", "--snapshot", str(snap), "--brokers", "1", "--out", str(tmp_path / "p"),
                     "--quiet"]) == 0
    out = " ".join(capsys.readouterr().out.split())   # the line wraps
    # before: brokers 2, 3, 4 hold 3, 3, 0 (broker 1: 4); each orders-N is on 2 and 3 already, so its third
    # replica goes to 4, payments-0 to 2 or 3: after 3..4; the drained broker ends at 0 and is not counted
    assert "replica spread replicas per broker on the 3 brokers that stay: 0..3 (spread 3) -> 3..4 (spread 1); " \
           "drained: broker 1 4 -> 0" in out
