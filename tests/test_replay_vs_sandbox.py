"""Prediction against reality: the planner's reference replay predicts what a drain does; the sandbox (an
independent implementation of the ZooKeeper-mode controller) then actually does it on a real ZooKeeper; a
snapshot of the result must match the prediction on every partition's leader, ISR and offline state.

Any difference is a bug in one of the two implementations, to be pinned by a hand-written test in
test_replay.py or test_sandbox.py once found.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner import replay, synth
from planner.sandbox.api import Sandbox
from planner.snapshot import take_snapshot
from planner.snapshot_io import read_snapshot

FAST = dict(catch_up_delay=0.3, shutdown_retries=2, shutdown_retry_interval=0.2, auto_rebalance=False,
            tick=0.05)


def _cluster(seed: int) -> dict:
    """A varied cluster: RF 1/2/3 mix, shrunk ISRs, moved leaders, unclean topics, an offline partition."""
    rng = np.random.default_rng(seed)
    c = synth.synth_cluster(brokers=6, partitions=90, rf=[1, 2, 3], racks=3, partitions_per_topic=15,
                            seed=seed, shrunk_isr_fraction=0.3, moved_leader_fraction=0.3, sizes=False)
    desc = synth.to_description(c)
    for t in desc["topics"]:
        if rng.random() < 0.3:
            t["config"]["unclean.leader.election.enable"] = "true"
    # One partition already offline: leader -1, its ISR holding one replica (as Kafka leaves it).
    victim = next(p for t in desc["topics"] for p in t["partitions"] if len(p["replicas"]) >= 2)
    victim["leader"], victim["isr"] = -1, [victim["replicas"][-1]]
    return desc


def _by_key(table) -> dict[tuple[str, int], tuple[int, tuple[int, ...], bool]]:
    d = table.to_pydict()
    return {
        (t, p): (lead, tuple(isr), off)
        for t, p, lead, isr, off in zip(d["topic"], d["partition"], d["leader"], d["isr"], d["offline"], strict=True)
    }


def _observed(snapshot_dir) -> dict[tuple[str, int], tuple[int, tuple[int, ...], bool]]:
    parts = read_snapshot(snapshot_dir).partitions.to_pydict()
    return {
        (t, p): (lead, tuple(isr), lead < 0)
        for t, p, lead, isr in zip(parts["topic"], parts["partition"], parts["leader"], parts["isr"], strict=True)
    }


CASES = [(seed, mode) for seed in (11, 12, 13, 14) for mode in ("failure", "controlled")]


@pytest.mark.parametrize(("seed", "mode"), CASES, ids=[f"seed{s}-{m}" for s, m in CASES])
def test_replay_predicts_what_the_sandbox_does(seed, mode, tmp_path, zk_connect):
    rng = np.random.default_rng(seed * 7 + (mode == "controlled"))
    brokers = sorted(int(b) for b in rng.choice(np.arange(1, 7), size=int(rng.integers(1, 4)), replace=False))
    sb = Sandbox.up(tmp_path / "sb", cluster=_cluster(seed), zk=zk_connect, timeout=60, **FAST)
    try:
        take_snapshot(sb.connect_string, tmp_path / "before")
        before = read_snapshot(tmp_path / "before")
        predicted = _by_key(replay.predict(before, brokers, mode))
        (sb.kill if mode == "failure" else sb.stop)(brokers)
        sb.wait_settled(60)
        take_snapshot(sb.connect_string, tmp_path / "after")
        observed = _observed(tmp_path / "after")
    finally:
        sb.down()
    assert predicted.keys() == observed.keys()
    wrong = {k: (predicted[k], observed[k]) for k in predicted if predicted[k] != observed[k]}
    affected = sum(1 for k in predicted if predicted[k] != _observed(tmp_path / "before")[k])
    assert affected > 0, "the scenario changed nothing: the comparison would prove nothing"
    assert not wrong, (
        f"{len(wrong)} of {len(predicted)} partitions differ after {mode} of brokers {brokers} "
        f"(predicted, observed): {dict(list(wrong.items())[:10])}"
    )
