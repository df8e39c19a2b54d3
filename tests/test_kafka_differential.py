"""Differential tests against Kafka's own controller: the same scripted scenarios on real Kafka 3.9 brokers, on
the emulated engine, and in the planner's replay; every partition's leader and ISR compared, exactly.

Random small clusters (topics on 4-6 of the brokers, RF 1-3, min ISR and unclean overrides), then one broker
killed or stopped, several at once, or several in sequence. The real run goes first, and the controller's
own log says how it received them; that is what the emulated engine and the replay are given:
- controlled shutdowns of several brokers: the order of the requests ("Shutting down broker N"), since Kafka
  handles them one at a time in arrival order (signals sent together do not arrive in the order sent);
- brokers killed together: the controller events their deaths landed in ("Broker failure callback for
  1,3"). SIGKILLs sent together are noticed when the brokers' ZooKeeper sessions expire, in one event or in
  several. `kill-1-event` makes them one: the controller's JVM is held (SIGSTOP, with a session timeout of
  its own long enough) until ZooKeeper has dropped every killed broker, then released, and the log must show
  one event. Within one event Kafka removes the dead from the ISRs in its Scala HashMap order
  (planner.scala_hashmap), so a leaderless partition's ISR keeps a member the replay must name exactly.
The emulated cluster starts from the real cluster's state (leaders, ISRs, configs). The replay given the
steps as the test sent them (each kill one event) must agree too, except where it says the outcome
depends on how the deaths are grouped into events (isr_order_dependent): there the real ISR must be one it
named (isr_alternatives).

The controller stays on broker 6, which no scenario stops or kills: when the controller is itself among the
stopped brokers, requests it logged may be cut short by its resignation and retried against its successor,
so no log shows the order in which they took effect (seen: the log said 5, 1, 4 while the ISRs show 4 went
before 1). Each test checks the controller did not move.

The figures (agreement per engine, per kind of scenario) are printed and written to fidelity.json in the
test's folder.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from waiting import poll

from planner import codec, replay
from planner.sandbox import Sandbox
from planner.scala_hashmap import visit_order
from planner.snapshot import take_snapshot
from planner.snapshot_io import list_to_matrix, read_snapshot
from tests.kafka_support import REAL, Real, racks

pytestmark = pytest.mark.kafka

CONTROLLER = 6  # never stopped nor killed by a scenario (see the module's docstring)
# its ZooKeeper session outlives a hold (SIGSTOP) of its JVM of up to ~25 s; the other brokers' expire in 6 s
CONTROLLER_SETTINGS = {str(CONTROLLER): {"zookeeper.session.timeout.ms": "30000"}}
FAST = dict(catch_up_delay=0.3, shutdown_retries=2, shutdown_retry_interval=0.2, auto_rebalance=False, tick=0.05)

# (seed, brokers used by the topics, steps); a step is (action, brokers)
SCENARIOS = [
    (1, 4, [("kill", [1])]),
    (2, 5, [("stop", [2])]),
    (3, 6, [("kill", [1, 3])]),
    (4, 4, [("stop", [1, 2])]),
    (5, 6, [("stop", [3]), ("kill", [1])]),
    (6, 4, [("kill", [2]), ("stop", [1, 3])]),
    (7, 5, [("stop", [4, 1, 5])]),
    (8, 4, [("kill-1-event", [1, 2, 3])]),     # visited 1, 2, 3: the highest id stays, as before
    (9, 5, [("kill-1-event", [1, 5])]),          # issue 22: visited 5 then 1, so {1,5} keeps 1
    (10, 5, [("kill-1-event", [2, 4, 5]), ("stop", [1])]),  # visited 5, 2, 4
]


def scenario_topics(seed: int, n: int) -> list[dict[str, Any]]:
    """Four topics (RF 1, 2, 3 and 2 again, in a random order) of 8 partitions on brokers 1..n, min ISR 1-3,
    unclean election on for some."""
    rng = np.random.default_rng(seed)
    topics = []
    for t, rf in enumerate(rng.permutation([1, 2, 3, 2])):
        cfg = {"min.insync.replicas": str(int(rng.integers(1, 4)))}
        if rng.random() < 0.4:
            cfg["unclean.leader.election.enable"] = "true"
        parts = [[int(b) for b in rng.permutation(np.arange(1, n + 1))[:rf]] for _ in range(8)]
        topics.append({"name": f"d{seed}-t{t}", "config": cfg, "partitions": parts})
    return topics


def event_topic(seed: int, steps: list[tuple[str, list[int]]]) -> list[dict[str, Any]]:
    """For a scenario whose first step kills brokers in one event: topics whose partitions are held by two (every
    assignment order) or three of those brokers only, so that each goes leaderless and its ISR keeps the member
    Kafka's order says (issue 22: {1,5} keeps 1, not the highest id)."""
    action, brokers = steps[0]
    if action != "kill-1-event":
        return []
    pairs = [[a, b] for a in brokers for b in brokers if a != b]
    triples = [list(p) for p in ([brokers[0], brokers[1], brokers[2]], [brokers[2], brokers[0], brokers[1]])
               ] if len(brokers) >= 3 else []
    return [{"name": f"d{seed}-event{rf}", "config": {"min.insync.replicas": "1"}, "partitions": parts}
            for rf, parts in ((2, pairs), (3, triples)) if parts]


@pytest.fixture(scope="module")
def cluster(kafka_jars, zk_server, tmp_path_factory):
    sb = Sandbox.up(tmp_path_factory.mktemp("kdiff") / "sb", cluster={"brokers": racks(6), "topics": []},
                    zk=f"{zk_server.connect_string}/kdiff{os.getpid()}", engine="kafka", timeout=120,
                    kafka_settings=CONTROLLER_SETTINGS, **REAL)
    real = Real(sb)
    real.move_controller(CONTROLLER)
    yield real
    real.close()
    sb.down()


def states(snapshot_dir: Path, topics: set[str]) -> dict[tuple[str, int], tuple[int, tuple[int, ...]]]:
    parts = read_snapshot(snapshot_dir).partitions.to_pydict()
    return {(str(t), p): (lead, tuple(isr))
            for t, p, lead, isr in zip(parts["topic"], parts["partition"], parts["leader"], parts["isr"], strict=True)
            if str(t) in topics}


def description(snapshot_dir: Path, topics: list[dict[str, Any]]) -> dict[str, Any]:
    """The real cluster's state of these topics as a description for the emulated engine."""
    st = states(snapshot_dir, {t["name"] for t in topics})
    out = []
    for t in topics:
        parts = []
        for p, reps in enumerate(t["partitions"]):
            leader, isr = st[(t["name"], p)]
            parts.append({"replicas": reps, "leader": leader, "isr": list(isr)})
        out.append({"name": t["name"], "config": t["config"], "partitions": parts})
    return {"brokers": racks(6), "topics": out}


def controller_log(real: Real, offsets: dict[int, int], pattern: str) -> list[tuple[str, str]]:
    """(time, match) of the controller's log lines matching `pattern` since `offsets` (every broker's
    server.log: whichever broker is controller logs there), in time order."""
    found: list[tuple[str, str]] = []
    for b, off in offsets.items():
        log = real.sb.dir / "kafka" / f"broker-{b}" / "server.log"
        with open(log, "rb") as f:
            f.seek(off)
            for line in f.read().decode(errors="replace").splitlines():
                m = re.match(r"\[([^\]]+)\] INFO \[Controller id=\d+\] " + pattern, line)
                if m:
                    found.append((m.group(1), m.group(2)))
    return sorted(found)


def log_offsets(real: Real) -> dict[int, int]:
    return {b: (real.sb.dir / "kafka" / f"broker-{b}" / "server.log").stat().st_size for b in range(1, 7)}


def arrival_order(real: Real, offsets: dict[int, int]) -> list[int]:
    """The brokers whose ControlledShutdown requests the controller handled since `offsets`, in order."""
    return list(dict.fromkeys(int(b) for _, b in controller_log(real, offsets, r"Shutting down broker (\d+)")))


def failure_events(real: Real, offsets: dict[int, int]) -> list[list[int]]:
    """The controller events in which it learnt of broker deaths since `offsets` (onBrokerFailure)."""
    return [[int(x) for x in ids.split(",")]
            for _, ids in controller_log(real, offsets, r"Broker failure callback for ([\d,]+)")]


def kill_in_one_event(real: Real, brokers: list[int]) -> None:
    """SIGKILL `brokers` while the controller's JVM is held, and release it once ZooKeeper has dropped all of
    them: it then reads /brokers/ids once and finds them all gone, one event (as after a pause of the
    controller, or when the sessions expire in the same ZooKeeper tick)."""
    pid = next(b["pid"] for b in real.sb.status(limit=0)["brokers"] if b["id"] == CONTROLLER)
    errors: list[BaseException] = []

    def kill() -> None:
        try:
            real.sb.kill(brokers)
        except BaseException as e:   # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    worker = threading.Thread(target=kill)
    os.kill(pid, signal.SIGSTOP)
    try:
        worker.start()
        poll(lambda: not set(brokers) & {int(x) for x in real.zk.get_children(codec.BROKER_IDS)}, 60,
             f"ZooKeeper to drop brokers {brokers}")
    finally:
        os.kill(pid, signal.SIGCONT)
        worker.join()
    if errors:
        raise errors[0]


def predict_steps(snapshot_dir: Path, steps: list[tuple[str, list[int]]]) -> dict:
    """The replay's prediction, step after step (each step from the state the previous one left; the
    brokers of a kill die in one event): (leader, ISR, the other ISRs it may keep) per partition."""
    snap = read_snapshot(snapshot_dir)
    st = replay.ClusterState.from_snapshot(snap)
    for action, brokers in steps:
        table = replay.predict(st, brokers, "controlled" if action == "stop" else "failure")
        isr = list_to_matrix(table.column("isr"), st.isr.shape[1])
        gone = np.isin(st.broker_ids, brokers)
        st = replace(st, leader=table.column("leader").to_numpy().astype(np.int32), isr=isr,
                     has_state=table.column("has_state").to_numpy(zero_copy_only=False).astype(bool),
                     alive=st.alive & ~gone)
        last = table
    d = last.to_pydict()
    return {(t, p): (lead, tuple(isr), tuple(alt)) for t, p, lead, isr, alt in
            zip(d["topic"], d["partition"], d["leader"], d["isr"], d["isr_alternatives"], strict=True)}


def within_alternatives(got: tuple[int, tuple[int, ...], tuple[int, ...]], real: tuple[int, tuple[int, ...]]) -> bool:
    """The prediction or one of the ISRs it said the partition may keep instead (separate events)."""
    return got[:2] == real or (got[0] == real[0] < 0 and len(real[1]) == 1 and real[1][0] in got[2])


RESULTS: list[dict[str, Any]] = []


@pytest.mark.parametrize(("seed", "n", "steps"), SCENARIOS,
                         ids=["-".join(f"{a}{','.join(map(str, b))}" for a, b in s[2]) for s in SCENARIOS])
def test_replay_and_emulated_engine_against_real_kafka(cluster, zk_server, tmp_path, seed, n, steps):
    real = cluster
    topics = scenario_topics(seed, n) + event_topic(seed, steps)
    names = {t["name"] for t in topics}
    for t in topics:
        real.topic(t["name"], *t["partitions"], **{k.replace(".", "_"): v for k, v in t["config"].items()})
    take_snapshot(real.sb.connect_string, tmp_path / "before")
    before = states(tmp_path / "before", names)
    as_asked = predict_steps(tmp_path / "before", steps)  # the order the test sends the signals in

    assert all(CONTROLLER not in b for _, b in steps)
    assert real.controller() == CONTROLLER, "the controller moved: the order of requests would be unknowable"
    # the real thing
    orders: list[tuple[str, list[int]]] = []
    try:
        for action, brokers in steps:
            logs = log_offsets(real)
            if action == "stop":
                real.sb.stop(brokers)
                got = arrival_order(real, logs)
                assert sorted(got) == sorted(brokers), f"controller log shows requests from {got}"
                orders.append((action, got))
            else:
                if action == "kill-1-event":
                    kill_in_one_event(real, brokers)
                else:
                    real.sb.kill(brokers)
                events = failure_events(real, logs)
                assert sorted(b for e in events for b in e) == sorted(brokers), f"controller log: {events}"
                if action == "kill-1-event":
                    assert len(events) == 1, f"the deaths landed in several controller events: {events}"
                orders += [("kill", e) for e in events]
        take_snapshot(real.sb.connect_string, tmp_path / "real")
        observed = states(tmp_path / "real", names)
        assert real.controller() == CONTROLLER, "the controller moved during the scenario"
    finally:
        real.restore()

    # the emulated engine, from the same state, with the requests and deaths as Kafka received them
    emu = Sandbox.up(tmp_path / "emu", cluster=description(tmp_path / "before", topics),
                     zk=f"{zk_server.connect_string}/kdiff-emu{os.getpid()}-{seed}", timeout=60, **FAST)
    try:
        for action, brokers in orders:
            (emu.stop if action == "stop" else emu.kill)(brokers)
        emu.wait_settled(60)
        take_snapshot(emu.connect_string, tmp_path / "emu-after")
        emulated = states(tmp_path / "emu-after", names)
    finally:
        emu.down()

    # the replay, given the order and the events in which the controller actually received them
    predicted = predict_steps(tmp_path / "before", orders)
    assert observed.keys() == before.keys() == emulated.keys()
    changed = [k for k in observed if observed[k] != before[k]]
    assert changed, "the scenario changed nothing: the comparison would prove nothing"
    emu_wrong = {k: (emulated[k], observed[k]) for k in observed if emulated[k] != observed[k]}
    rep_wrong = {k: (predicted[k][:2], observed[k]) for k in observed if predicted[k][:2] != observed[k]}
    asked_wrong = {k: (as_asked[k], observed[k]) for k in observed if not within_alternatives(as_asked[k], observed[k])}
    several = {k for k in observed if predicted[k][0] < 0 and sum(b in before[k][1] for a, bs in orders
                                                                  if a == "kill" for b in bs) >= 2}
    # the partitions whose whole ISR died in the first step's one event: the ISR kept the member Kafka visited
    # last; `highest_kept`: how many of them the old rule (the highest id stays) would have got right
    event = set(steps[0][1]) if steps[0][0] == "kill-1-event" else set()
    by_order = [k for k in observed if len(before[k][1]) >= 2 and set(before[k][1]) <= event]
    highest_kept = sum(observed[k][1] == (max(before[k][1]),) for k in by_order)
    # controlled shutdowns take effect in the order they arrive, which the test does not control: the steps as
    # sent are held to Kafka only where the requests arrived in the order sent
    stops_as_sent = [b for a, b in orders if a == "stop"] == [b for a, b in steps if a == "stop"]
    RESULTS.append({"scenario": [(a, b) for a, b in orders], "asked": steps, "partitions": len(observed),
                    "changed": len(changed), "isr_members_dying_together": len(several),
                    "whole_isr_in_one_event": len(by_order), "highest_id_kept": highest_kept,
                    "stops_arrived_as_sent": stops_as_sent,
                    "order_dependent_as_asked": sum(1 for v in as_asked.values() if v[2]),
                    "emulated_exact": len(observed) - len(emu_wrong), "replay_exact": len(observed) - len(rep_wrong),
                    "replay_as_asked_exact": sum(as_asked[k][:2] == observed[k] for k in observed),
                    "replay_as_asked_within_alternatives": len(observed) - len(asked_wrong),
                    "replay_wrong": {f"{t}-{p}": v for (t, p), v in rep_wrong.items()}})
    report = tmp_path.parent / "fidelity.json"
    report.write_text(json.dumps(RESULTS, indent=1, default=str) + "\n")
    print(f"\n{orders}: {len(observed)} partitions ({len(changed)} changed, {len(several)} leaderless with several "
          f"ISR members dying; {len(by_order)} whose whole ISR died in one event, {highest_kept} of them kept the "
          f"highest id): emulated {len(observed) - len(emu_wrong)}, replay {len(observed) - len(rep_wrong)} "
          f"agree exactly with Kafka (in the steps as asked: {RESULTS[-1]['replay_as_asked_exact']} exactly, "
          f"{len(observed) - len(asked_wrong)} within the alternatives it names)")
    assert not emu_wrong, f"emulated engine differs from Kafka (emulated, real): {emu_wrong}"
    assert not rep_wrong, f"replay differs from Kafka (predicted, real): {rep_wrong}"
    if stops_as_sent:
        assert not asked_wrong, f"replay (steps as asked) differs from Kafka beyond its alternatives: {asked_wrong}"
    assert not event or by_order, "no partition lost its whole ISR in the event: the order was not exercised"
    if event and visit_order(event) != sorted(event):
        # Kafka visits these brokers out of id order: the old rule (the highest id stays) must fail somewhere
        # here, or this scenario could not tell the rules apart
        assert highest_kept < len(by_order), f"all {len(by_order)} partitions kept the highest id"
