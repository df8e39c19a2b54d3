"""The scenario matrix on real Kafka 3.9 brokers with a live workload throughout (issue 21 parts 2-3): shared by
tests/test_scenarios_kafka.py (a reduced set in `make test`) and bench/bench_scenarios.py (every scenario).

A scenario runs on a 5-broker real-Kafka sandbox shared by many scenarios: `Stage` creates the scenario's own
topics (RF 3 with min ISR 2, RF 2, RF 1: the seed incident's shapes) with data in every partition, starts a
`Workload` over them, plans (a drain of broker 1, or a rebalance of a skewed placement), and the scenario
drives apply, cancel and the fault. `Stage.check` then asserts what issue 21 asks of every scenario, each
against an independent source:
- the workload's audit: 0 messages lost, duplicated or out of order, every partition readable;
- no offline or under-min-ISR interval, and no failed send, beyond what the planner's reference replay
  (planner.replay.predict, on a snapshot taken just before the fault) predicts for the fault itself: the
  partitions it predicts offline or under min ISR, and (for a few seconds at most) those whose leader the
  fault takes away;
- every partition where the run record's unit states put it (hand-derived from plan.json: a completed unit's
  target, a reverted unit's starting lists, a pending unit's partitions untouched), read from ZooKeeper
  with plain kazoo + json (apply_support.Checker), every ISR full, no reassignment or election left;
- no throttle left (or exactly the operator's own, where the scenario changed one) and the lock released;
- what the product reports (apply outcome, verify report) says what happened.
`Stage.cleanup` restarts stopped brokers, clears maintenance states and deletes the scenario's topics, so the
next scenario starts from an empty, settled cluster.

Scenarios are functions `(stage) -> dict` registered in SCENARIOS by name; the dict (figures for the bench) is
returned by `run`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apply_support import Background, Checker
from kafka_support import REAL, Real
from kazoo.exceptions import NodeExistsError
from waiting import poll

from planner import api, codec, replay
from planner.sandbox import Sandbox
from planner.sandbox.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
BROKERS = [{"id": i, "rack": f"r{(i - 1) % 3 + 1}"} for i in range(1, 6)]
PARTITION_BYTES = 1_500_000
CANCEL_EXTRA_BYTES = 3_500_000   # the cancel scenarios' first data batch: see cancel_mid_batch
THROTTLE = 700_000          # bytes/s: a 1.5 MB copy takes ~2 s, long enough to act mid-batch
RATE = 100.0                # messages/s over all of a scenario's partitions
TRANSIENT_S = 5.0           # longest offline interval allowed where only leadership moves (an election)


def up(directory: Path, zk: str | None = None) -> Real:
    sb = Sandbox.up(directory, cluster={"brokers": BROKERS, "topics": []}, zk=zk, engine="kafka", timeout=240,
                    **REAL)
    return Real(sb)


def layout(prefix: str, skew: bool = False) -> dict[str, tuple[list[list[int]], dict[str, str]]]:
    """Every partition with data; broker 1 holds an RF=1 partition (the seed incident) and leads others.
    `skew`: everything on brokers 1-3, brokers 4 and 5 empty (a rebalance has work to do)."""
    if skew:
        return {f"{prefix}-orders": ([[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2]], {"min.insync.replicas": "2"}),
                f"{prefix}-events": ([[1, 2], [2, 3], [3, 1], [1, 3], [2, 1]], {}),
                f"{prefix}-solo": ([[1], [2], [3]], {})}
    return {f"{prefix}-orders": ([[1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 1], [5, 1, 2]], {"min.insync.replicas": "2"}),
            f"{prefix}-events": ([[1, 2], [2, 3], [3, 4], [4, 5], [5, 1]], {}),
            f"{prefix}-solo": ([[1], [2], [3]], {})}


@dataclass
class Allowed:
    """What the replay predicts for one fault, and when the fault held."""

    fault: str
    offline: set[tuple[str, int]] = field(default_factory=set)
    under_min_isr: set[tuple[str, int]] = field(default_factory=set)
    transient: set[tuple[str, int]] = field(default_factory=set)   # leadership taken away: an election
    start: float = 0.0
    end: float | None = None     # the fault repaired (broker started again); None: until the end


class Stage:
    def __init__(self, real: Real, work: Path, name: str, skew: bool = False, rate: float = RATE):
        self.real, self.sb, self.zk = real, real.sb, real.zk
        self.check = Checker(real.zk)
        self.work = work / name
        self.name = name
        self.topics = layout(name, skew)
        self.rate = rate
        self.run = api.RunFolder(self.work / "run")
        self.workload: Workload | None = None
        self.report: dict[str, Any] = {}
        self.allowed: list[Allowed] = []
        self.doc: dict[str, Any] = {}
        self.original: dict[tuple[str, int], list[int]] = {}
        self.notes: dict[str, Any] = {}

    # ------------------------------------------------------------------------------------ set-up
    def setup(self) -> Stage:
        for t, (assignment, config) in self.topics.items():
            self.real.topic(t, *assignment, settle=90, **{k.replace(".", "_"): v for k, v in config.items()})
        parts = self.partitions()
        self.sb.produce({p: PARTITION_BYTES for p in parts})
        self.sb.wait_settled(90)
        self.original = {p: self.check.replicas(*p) for p in parts}
        self.workload = Workload(self.sb, topics=list(self.topics), rate=self.rate, delivery_timeout=30).start()
        poll(lambda: self.workload.summary()["acked"] >= self.rate, 60, "the workload's first acknowledgements")
        return self

    def partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, (a, _) in self.topics.items() for p in range(len(a))]

    def plan(self, kind: str = "drain", **kw: Any) -> api.PlanOutcome:
        self.run.root.mkdir(parents=True, exist_ok=True)
        sizes = self.run.root / "logdirs.json"
        sizes.write_text(json.dumps(self.sb.log_dirs()))
        api.snapshot(api.SnapshotRequest(zk=self.sb.connect_string, out=self.run.snapshot, sizes=sizes))
        kw.setdefault("max_concurrent_per_broker", 1)
        if kind == "drain":
            out = api.plan_drain(api.DrainRequest(snapshot=self.run.snapshot, out=self.run.plan,
                                                  brokers=kw.pop("brokers", (1,)), **kw))
        elif kind == "restart":
            out = api.plan_restart(api.RestartRequest(snapshot=self.run.snapshot, out=self.run.plan,
                                                      sizes=sizes, **kw))
        else:
            out = api.plan_rebalance(api.RebalanceRequest(snapshot=self.run.snapshot, out=self.run.plan, **kw))
        self.doc = json.loads((self.run.plan / "plan.json").read_text())
        self.workload.mark(f"planned {kind}: {len(self.doc['batches'])} batches")
        return out

    # ------------------------------------------------------------------------------------ driving
    def apply_request(self, **kw: Any) -> api.ApplyRequest:
        kw.setdefault("throttle", THROTTLE)
        return api.ApplyRequest(zk=self.sb.connect_string, plan=self.run.plan, poll=0.2, **kw)

    def apply(self, **kw: Any) -> api.ApplyOutcome:
        self.workload.mark("apply")
        return api.apply(self.apply_request(**kw))

    def apply_in_background(self, **kw: Any) -> Background:
        self.workload.mark("apply")
        req = self.apply_request(**kw)
        return Background(lambda: api.apply(req))

    def spawn_apply(self, throttle: int = THROTTLE) -> subprocess.Popen:
        """`kplan apply` in a process of its own (to be killed)."""
        self.workload.mark("apply (process)")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        return subprocess.Popen([sys.executable, "-m", "planner.cli", "apply", "--zk", self.sb.connect_string,
                                 "--plan", str(self.run.plan), "--throttle", str(throttle), "--poll", "0.2",
                                 "--connect-timeout", "1"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def verify(self, wait: float = 120) -> api.VerifyOutcome:
        out = api.verify(api.VerifyRequest(zk=self.sb.connect_string, plan=self.run.plan, wait=wait, poll=0.2))
        self.workload.mark("verified")
        return out

    def units(self) -> list[str]:
        return self.check.unit_states(self.doc)

    def data_units(self) -> list[int]:
        return [b["index"] for b in self.doc["batches"] if b["kind"] == "data"]

    def copying(self, unit: int) -> Callable[[], bool]:
        """Unit `unit` submitted and its first partition still adding replicas (its data copying)."""
        t, _ = self.doc["batches"][unit]["partitions"][0]
        return lambda: (self.units()[unit:unit + 1] == ["submitted"]
                        and bool(self.check.topic(t).get("adding_replicas")))

    def wait_copying(self, unit: int, timeout: float = 120) -> None:
        poll(self.copying(unit), timeout, f"unit {unit} copying", every=0.02)
        self.workload.mark(f"unit {unit} copying")

    def admin_cversion(self) -> int:
        """+1 per create and per delete of a child of /admin: 2 per reassignment or election znode."""
        return self.zk.exists("/admin").cversion

    # ------------------------------------------------------------------------------------ faults
    def predict(self, broker: int, fault: str, mode: str = "failure") -> Allowed:
        """What the replay predicts for a hard failure (or, mode "controlled", a controlled shutdown) of
        `broker` now: a snapshot of the cluster as it is (mid-reassignment included), replayed."""
        snap = self.work / f"snapshot-before-{fault.replace(' ', '-')}"
        api.snapshot(api.SnapshotRequest(zk=self.sb.connect_string, out=snap))
        s = api.read_snapshot(snap)
        st = replay.ClusterState.from_snapshot(s)
        min_isr = {st.topic_names[i]: int(m) for i, m in zip(st.topic_idx.tolist(), st.min_isr.tolist(), strict=True)}
        before = {(t, p): lead for t, p, lead in zip(s.partitions.column("topic").to_pylist(),
                                                     s.partitions.column("partition").to_pylist(),
                                                     s.partitions.column("leader").to_pylist(), strict=True)}
        a = Allowed(fault)
        for row in replay.predict(st, [broker], mode).to_pylist():
            key = (row["topic"], row["partition"])
            if row["offline"]:
                a.offline.add(key)
            elif len(row["isr"]) < min_isr[row["topic"]]:
                a.under_min_isr.add(key)
            if before.get(key) == broker and mode == "failure":
                a.transient.add(key)   # a controlled shutdown moves leadership before the broker stops
        return a

    def kill(self, broker: int) -> Allowed:
        allowed = self.predict(broker, f"kill broker {broker}")
        allowed.start = time.time()
        self.workload.mark(f"kill broker {broker}")
        self.sb.kill([broker])
        self.allowed.append(allowed)
        return allowed

    def start(self, allowed: Allowed, broker: int) -> None:
        self.sb.start([broker])
        allowed.end = time.time()
        self.workload.mark(f"start broker {broker}")

    # ------------------------------------------------------------------------------------ checking
    def expected(self) -> dict[tuple[str, int], list[int]]:
        """Where every partition must be, from plan.json and the run record's unit states, by hand: each
        completed unit moves its partitions to its lists; a reverted unit leaves them where they were."""
        want = dict(self.original)
        run = self.check.run(self.doc) or {}
        states = [u[0] for u in run.get("units", [])]
        assert len(states) == len(self.doc["batches"]), (states, len(self.doc["batches"]))
        reverted = (run.get("revert") or {}).get("unit")
        for b, state in zip(self.doc["batches"], states, strict=True):
            if b["index"] == reverted:
                continue   # moved back to where the units before it had left its partitions
            if state == "completed":
                for (t, p), reps in zip(b["partitions"], b["replicas"], strict=True):
                    want[(t, p)] = list(reps)
            else:
                assert state in ("pending", "reverted", "cancelled"), f"unit {b['index']} left {state}"
        return want

    def finish(self) -> dict[str, Any]:
        self.sb.wait_settled(120)
        self.report = self.workload.stop()
        return self.report

    def check_all(self, expect: dict[tuple[str, int], list[int]] | None = None,
                  throttles: dict[str, dict[str, str]] | None = None) -> None:
        if not self.report:
            self.finish()
        r = self.report
        v = r["verdict"]
        a = r["audit"]
        problems: list[str] = []
        if not v["integrity"]:
            problems.append(f"integrity: {v['problems']}")
        if a["lost"] or a["duplicated"] or a["out_of_order"] or a["unreadable_partitions"]:
            problems.append(f"audit: {a}")
        # Only what the replay predicts for each fault, while that fault held.
        for i in r["intervals"]:
            key = (i["topic"], i["partition"])
            ok = False
            for f in self.allowed:
                within = i["start"] >= f.start - 1 and (f.end is None or i["end"] <= f.end + 30)
                if not within:
                    continue
                if i["kind"] == "offline" and (key in f.offline or (key in f.transient
                                                                     and i["duration_s"] <= TRANSIENT_S)):
                    ok = True
                if i["kind"] == "under_min_isr" and (key in f.under_min_isr or key in f.offline):
                    ok = True
            if not ok:
                problems.append(f"interval not predicted for the fault: {i}")
        affected = set().union(*[f.offline | f.under_min_isr | f.transient for f in self.allowed]) if self.allowed \
            else set()
        for x in r["per_partition"]:
            if x["failed"] and (x["topic"], x["partition"]) not in affected:
                problems.append(f"{x['failed']} failed sends on {x['topic']}-{x['partition']}, which no fault touched")
        # Where every partition is (ZooKeeper, plain reads), whole ISRs, nothing left running.
        want = self.expected() if expect is None else expect
        live = self.check.live()
        for (t, p), reps in sorted(want.items()):
            now = self.check.replicas(t, p)
            st = self.check.state(t, p)
            if now != reps:
                problems.append(f"{t}-{p} at {now}, expected {reps}")
            if sorted(st["isr"]) != sorted(now) or st["leader"] not in live:
                problems.append(f"{t}-{p} state {st} (replicas {now})")
        for t in self.topics:
            if self.check.topic(t).get("adding_replicas") or self.check.topic(t).get("removing_replicas"):
                problems.append(f"{t} still reassigning")
        for path in ("/admin/reassign_partitions", "/admin/preferred_replica_election"):
            if self.check.exists(path):
                problems.append(f"{path} left")
        if self.check.throttles() != (throttles or {}):
            problems.append(f"throttles {self.check.throttles()}, expected {throttles or {}}")
        if self.check.lock_holders():
            problems.append(f"lock held: {self.check.lock_holders()}")
        assert not problems, f"scenario {self.name}:\n" + "\n".join(problems)

    def figures(self) -> dict[str, Any]:
        r = self.report
        return {"scenario": self.name, "sent": r["producer"]["sent"], "acked": r["producer"]["acked"],
                "failed": r["producer"]["failed"], "lost": r["audit"]["lost"],
                "duplicated": r["audit"]["duplicated"], "intervals": len(r["intervals"]),
                "longest_interval_s": max((i["duration_s"] for i in r["intervals"]), default=0.0),
                "p99_ms": r["latency_ms"]["p99"], "max_ms": r["latency_ms"]["max"],
                "faults": [f.fault for f in self.allowed], **self.notes}

    # ------------------------------------------------------------------------------------ clean-up
    def cleanup(self) -> None:
        if self.workload is not None and not self.workload.stopped:
            self.workload.abort()
        self.real.restore()
        for row in api.brokers(api.BrokersRequest(zk=self.sb.connect_string)):
            if row.state != "in service":
                api.clear_maintenance(api.ClearRequest(zk=self.sb.connect_string, brokers=(row.broker,),
                                                       reason=f"scenario {self.name} done"))
        delete_topics(self.real, list(self.topics))


def remove_broker_config(real: Real, broker: int, key: str) -> None:
    """As kafka-configs --delete-config does through ZooKeeper: the override set without `key`, then a change
    notification (AdminZkClient.changeEntityConfig)."""
    path = codec.broker_config_path(broker)
    config = json.loads(real.zk.get(path)[0]).get("config", {})
    config.pop(key, None)
    real.zk.set(path, json.dumps({"version": 1, "config": config}).encode())
    real.zk.create(codec.CONFIG_CHANGE_PREFIX, json.dumps({"version": 2, "entity_path": f"brokers/{broker}"}).encode(),
                   sequence=True)


def delete_topics(real: Real, names: list[str], timeout: float = 90) -> None:
    """As Kafka's AdminZkClient.deleteTopic: a child of /admin/delete_topics; the controller does the rest."""
    for t in names:
        try:
            real.zk.create(f"{codec.DELETE_TOPICS}/{t}", b"", makepath=True)
        except NodeExistsError:
            pass
    poll(lambda: not any(real.zk.exists(codec.topic_path(t)) for t in names), timeout, f"topics {names} deleted")


# ----------------------------------------------------------------------------------------- scenarios
def drain(s: Stage) -> dict[str, Any]:
    s.plan()
    out = s.apply()
    assert out.state == "completed" and out.batches_done == len(s.doc["batches"])
    ver = s.verify()
    assert ver.converged and ver.report["run_throttles_remaining"] is False
    s.check_all()
    assert all(1 not in reps for reps in s.expected().values())
    return {"batches": out.batches_total, "apply_s": round(out.seconds, 1)}


def rebalance(s: Stage) -> dict[str, Any]:
    s.plan("rebalance")
    assert any(4 in m["to"] or 5 in m["to"] for m in s.doc["moves"]), "the skewed placement gets brokers 4, 5"
    out = s.apply()
    assert out.state == "completed"
    assert s.verify().converged
    s.check_all()
    return {"batches": out.batches_total, "apply_s": round(out.seconds, 1)}


def apply_killed_then_resumed(s: Stage) -> dict[str, Any]:
    s.plan()
    data = s.data_units()
    assert len(data) >= 2, s.doc["batches"]
    admin = s.admin_cversion()
    proc = s.spawn_apply()
    try:
        s.wait_copying(data[1])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    s.workload.mark("apply SIGKILLed")
    assert s.units()[data[1]] == "submitted" and s.check.throttles(), "killed mid-batch, its throttles still set"
    out = s.apply(lock_wait=60, throttle=20 * THROTTLE)
    assert out.state == "completed" and out.resumed
    n = len(s.doc["batches"])
    assert out.batches_submitted == n - data[1] - 1   # the batch in flight was not submitted again
    elections = sum(1 for b in s.doc["batches"] if b["kind"] == "leadership")
    assert s.admin_cversion() - admin == 2 * (n + elections)   # each znode created once (and deleted)
    assert s.verify().converged
    s.check_all()
    return {"killed_in_unit": data[1], "resubmitted": 0}


def cancel_mid_batch(s: Stage, revert: bool = False) -> dict[str, Any]:
    s.plan()
    data = s.data_units()
    # Kafka's replication quota lets ~10 x its rate (plus one fetch of up to replica.fetch.max.bytes, 1 MiB) through
    # at once: the rate is measured over a window padded to (quota.window.num - 1) x 1 s = 10 s. At 233 kB/s a
    # 1.5 MB partition finished 0.2 s after its submission, before the cancel (and a watch-driven apply noticed at
    # once). 3.5 MB more in the first data batch's partitions keeps it copying for ~15 s: the cancel lands mid-batch.
    s.sb.produce({(t, p): CANCEL_EXTRA_BYTES for t, p in s.doc["batches"][data[0]]["partitions"]})
    bg = s.apply_in_background(throttle=THROTTLE // 3)
    s.wait_copying(data[0])
    s.workload.mark("cancel" + (" --revert" if revert else ""))
    c = api.cancel(api.CancelRequest(zk=s.sb.connect_string, plan=s.run.plan, revert=revert, wait=120, poll=0.2))
    assert c.state == ("reverted" if revert else "cancelled"), c
    applied = bg.result(180)
    assert applied.state in ("cancelled", "reverted"), applied
    run = s.check.run(s.doc)
    states = [u[0] for u in run["units"]]
    assert run["state"] == c.state and states[data[0]] == "completed", run
    assert all(x == "pending" for x in states[data[0] + 1:]), states
    assert f"the run is {c.state}" in c.message, c.message   # the running apply did it, and cancel says so
    if revert:
        assert run["revert"]["unit"] == data[0] and run["revert"]["state"] == "completed", run["revert"]
        assert any("reverted" in h[1] for h in run["history"]), run["history"]
    s.check_all()
    return {"cancelled_in_unit": data[0], "state": c.state}


def cancel_revert_mid_batch(s: Stage) -> dict[str, Any]:
    return cancel_mid_batch(s, revert=True)


def target_broker_killed(s: Stage) -> dict[str, Any]:
    s.plan(max_concurrent_per_broker=5)
    unit = s.data_units()[0]
    batch = s.doc["batches"][unit]
    adding = {b for (t, p), reps in zip(batch["partitions"], batch["replicas"], strict=True)
              for b in reps if b not in s.original[(t, p)]}
    victim = min(adding)
    bg = s.apply_in_background(throttle=THROTTLE // 3)   # ~6 s of copying: the kill lands mid-batch
    s.wait_copying(unit)
    fault = s.kill(victim)
    assert s.units()[unit] == "submitted", f"the batch waits for its dead target: {s.units()}"
    s.start(fault, victim)
    out = bg.result(240)
    assert out.state == "completed"
    assert s.verify().converged
    s.check_all()
    return {"victim": victim, "predicted_offline": sorted(f"{t}-{p}" for t, p in fault.offline)}


def controller_killed(s: Stage) -> dict[str, Any]:
    s.plan(max_concurrent_per_broker=5)
    data = s.data_units()
    ctrl = s.real.controller()
    if ctrl == 1:   # keep the drained broker out of it: the fault is the controller's, not the drain's
        s.real.move_controller(4)
        ctrl = 4
    bg = s.apply_in_background()
    s.wait_copying(data[0])
    fault = s.kill(ctrl)
    new = poll(lambda: (c := s.real.controller()) not in (None, ctrl) and c, 60, "a new controller")
    s.start(fault, ctrl)
    out = bg.result(240)
    assert out.state == "completed"
    assert s.verify().converged
    s.check_all()
    return {"controller": ctrl, "new_controller": new}


def session_expired(s: Stage) -> dict[str, Any]:
    from kazoo.client import KazooClient

    from planner import zk as zkmod
    from planner.execution.executor import Executor, Options
    from planner.execution.steps import load_plan

    s.plan()
    data = s.data_units()
    client = zkmod.connect(s.sb.connect_string, timeout=4)
    try:
        ex = Executor(client, load_plan(s.run.plan), Options(throttle=THROTTLE, poll=0.2))
        s.workload.mark("apply")
        bg = Background(ex.apply)
        s.wait_copying(data[0])
        holders = s.check.lock_holders()
        # Expire the applier's session as ZooKeeper does: another connection takes it over and closes it.
        thief = KazooClient(hosts=s.sb.connect_string.split("/", 1)[0], client_id=client.client_id)
        thief.start(10)
        thief.stop()
        thief.close()
        s.workload.mark("applier's session expired")
        result = bg.result(240)
    finally:
        client.stop()
        client.close()
    assert holders and result.state == "completed" and result.resumed
    assert s.verify().converged
    s.check_all()
    return {"resumed": result.resumed}


def throttle_changed(s: Stage) -> dict[str, Any]:
    """An operator changes a broker's rate with Kafka's own kafka-configs while a batch copies."""
    from planner.kafka.tools import run_tool

    s.plan()
    data = s.data_units()
    bg = s.apply_in_background()
    s.wait_copying(data[0])
    brokers = sorted(int(k.split("/")[1]) for k in s.check.throttles() if k.startswith("brokers/"))
    b = brokers[0]
    new_rate = str(3 * THROTTLE)
    s.workload.mark(f"kafka-configs sets broker {b}'s follower rate")
    run_tool(s.sb.kafka_jars(), "kafka.admin.ConfigCommand",
             ["--bootstrap-server", s.sb.bootstrap_servers, "--entity-type", "brokers", "--entity-name", str(b),
              "--alter", "--add-config", f"follower.replication.throttled.rate={new_rate}"])
    poll(lambda: s.check.config(f"brokers/{b}").get("follower.replication.throttled.rate") == new_rate, 30,
         "the operator's rate written by the broker")
    out = bg.result(240)
    assert out.state == "completed"
    ver = s.verify()
    assert ver.converged and ver.report["run_throttles_remaining"] is False
    left = {f"brokers/{b}": {"follower.replication.throttled.rate": new_rate}}
    assert [(x["entity"], x["key"], x["value"]) for x in ver.report["throttles_remaining"]] == [
        (f"brokers/{b}", "follower.replication.throttled.rate", new_rate)], (ver.report, s.check.throttles(),
                                                                             s.check.run(s.doc)["history"])
    s.check_all(throttles=left)
    remove_broker_config(s.real, b, "follower.replication.throttled.rate")   # the operator's own clean-up
    return {"operator_rate_left": left}


def foreign_reassignment(s: Stage) -> dict[str, Any]:
    """An operator moves a partition the plan does not touch with Kafka's own tool while a batch copies."""
    from planner.kafka.tools import reassign

    s.plan()
    data = s.data_units()
    planned = {(m["topic"], m["partition"]) for m in s.doc["moves"]}
    t, p = next(k for k in s.partitions() if k not in planned and len(s.original[k]) == 2)
    target = [b for b in (5, 4, 3, 2) if b not in s.original[(t, p)]][:1] + [s.original[(t, p)][0]]
    f = s.work / "foreign.json"
    f.write_text(json.dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": target}]}))
    bg = s.apply_in_background()
    s.wait_copying(data[0])
    s.workload.mark(f"kafka-reassign-partitions moves {t}-{p}")
    # --additional: Kafka's tool refuses to start one while another reassignment (the batch) is running
    reassign(s.sb.kafka_jars(), s.sb.bootstrap_servers, f, "execute", extra=["--additional"])
    out = bg.result(240)
    assert out.state == "completed"
    assert s.verify().converged
    poll(lambda: s.check.replicas(t, p) == target and not s.check.topic(t).get("adding_replicas"), 120,
         "the foreign reassignment")
    want = s.expected()
    want[(t, p)] = target
    s.check_all(expect=want)
    return {"foreign": f"{t}-{p} -> {target}"}


def restart_roll(s: Stage) -> dict[str, Any]:
    """Every broker restarted (controlled shutdown, then start) one at a time by `kplan roll` under traffic:
    the restart plan's temporary replicas, demotion and gates keep every partition online and at min ISR, as
    the replay predicts for each controlled shutdown of the cluster as it stands just before it; everything
    ends as it was (lists, no temporary replica, no maintenance state)."""
    brokers = tuple(b["id"] for b in BROKERS)
    s.plan("restart", brokers=brokers)
    assert s.doc["protection"]["reasons"]["rf1"] == 3, s.doc["protection"]   # the solo topic's partitions
    order: list[int] = []

    def restart(b: int) -> None:
        fault = s.predict(b, f"restart broker {b}", mode="controlled")
        fault.start = time.time()
        s.allowed.append(fault)
        s.workload.mark(f"stop broker {b}")
        s.sb.stop([b])
        s.sb.start([b])
        fault.end = time.time()
        s.workload.mark(f"start broker {b}")
        order.append(b)

    s.workload.mark("roll")
    out = api.roll(api.RollRequest(zk=s.sb.connect_string, plan=s.run.plan, poll=0.2, throttle=20 * THROTTLE,
                                   restart_timeout=180, gate_timeout=180), restart=restart)
    assert (out.state, out.steps_done, out.steps_total) == ("completed", len(brokers), len(brokers)), out
    assert order == s.doc["roll"]["order"] and sorted(order) == list(brokers), (order, s.doc["roll"])
    record = s.check.json(f"/kplan/rolls/{s.doc['id'].split(':')[1]}")
    assert (record["state"], record["phase"]) == ("completed", "done"), record
    assert [x["state"] for x in record["steps"]] == ["done"] * len(brokers), record["steps"]
    outcome = json.loads((s.run.plan.parent / "roll" / "outcome.json").read_text())
    assert outcome["state"] == "completed" and outcome["steps_done"] == len(brokers), outcome
    assert [r.state for r in api.brokers(api.BrokersRequest(zk=s.sb.connect_string))] == ["in service"] * 5
    predicted = sorted({f"{t}-{p}" for f in s.allowed for t, p in f.offline | f.under_min_isr})
    assert predicted == [], f"the replay predicts {predicted} for the plan's own roll"
    s.check_all(expect=s.original)
    return {"order": order, "cannot_move": list(out.cannot_move), "roll_s": round(out.seconds, 1)}


SCENARIOS: dict[str, Callable[[Stage], dict[str, Any]]] = {
    "drain": drain,
    "rebalance": rebalance,
    "restart-roll": restart_roll,
    "apply-sigkill-resume": apply_killed_then_resumed,
    "cancel": cancel_mid_batch,
    "cancel-revert": cancel_revert_mid_batch,
    "target-broker-killed": target_broker_killed,
    "controller-killed": controller_killed,
    "session-expired": session_expired,
    "throttle-changed": throttle_changed,
    "foreign-reassignment": foreign_reassignment,
}
SKEWED = {"rebalance"}


def run(real: Real, work: Path, name: str) -> dict[str, Any]:
    """One scenario from an empty cluster, cleaned up after (pass or fail); returns its figures."""
    started = time.monotonic()
    stage = Stage(real, work, name, skew=name in SKEWED)
    try:
        stage.setup()
        notes = SCENARIOS[name](stage)
        stage.notes.update(notes or {})
        if not stage.report:
            stage.check_all()
        return {**stage.figures(), "seconds": round(time.monotonic() - started, 1)}
    finally:
        stage.cleanup()

