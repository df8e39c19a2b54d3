"""The scenario matrix (issue 21) on real Apache Kafka 3.9 brokers, with a live workload throughout.

`make test` runs a reduced set within CI's budget; `python bench/bench_scenarios.py` runs every scenario of
tests/scenario_support.SCENARIOS and the README quotes it. Each scenario asserts (scenario_support.Stage):
0 messages lost or duplicated, no offline / under-min-ISR interval nor failed send beyond what the replay
predicts for the fault itself, every partition where the run record says, no throttle left, the lock released,
and what the product reported.
"""

from __future__ import annotations

import os

import pytest
import scenario_support as ss

pytestmark = pytest.mark.kafka

# The reduced set: a drain whose apply is SIGKILLed mid-batch and resumed, a target broker killed mid-apply
# (the replay's prediction at work: an RF=1 partition goes offline, as predicted), a cancel --revert mid-batch,
# and the restart roll of every broker (the only run of `kplan roll` on real brokers in make test).
REDUCED = ["apply-sigkill-resume", "target-broker-killed", "cancel-revert", "restart-roll"]


@pytest.fixture(scope="module")
def real(kafka_jars, zk_server, tmp_path_factory):
    r = ss.up(tmp_path_factory.mktemp("kafka-scenarios") / "sb", f"{zk_server.connect_string}/scen{os.getpid()}")
    try:
        yield r
    finally:
        r.close()
        r.sb.down()


@pytest.mark.parametrize("name", REDUCED)
def test_scenario(real, tmp_path, name):
    figures = ss.run(real, tmp_path, name)
    assert figures["lost"] == 0 and figures["duplicated"] == 0 and figures["acked"] > 0
