"""The kraft engine's node configurations per layout (no JVM: what Kafka's KafkaConfig requires of each role,
from Kafka's docs "KRaft" / "Combined Servers", checked on the server.properties text). The combined layout
runs for real in bench/bench_kraft_combined.py (the KRaft differential on it; docs/KAFKA_SANDBOX.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.cluster import parse_cluster
from planner.errors import BadInput
from planner.sandbox import kraft_engine as kre
from planner.sandbox.settings import Timing


def engine(tmp_path: Path, layout: str) -> kre.KraftEngine:
    desc = parse_cluster({"brokers": [{"id": 1, "rack": "a"}, {"id": 2, "rack": "b"}, {"id": 3}], "topics": []})
    nodes = kre.node_records(tmp_path, desc, 1, False, False, layout)
    info = {"dir": str(tmp_path), "timing": Timing().to_dict(),
            "kafka": {"version": "4.1.1", "heap_mb": 256, "extra_settings": {}, **nodes}}
    return kre.KraftEngine(tmp_path, info)


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_combined_nodes_are_brokers_and_voters(tmp_path):
    e = engine(tmp_path, "combined")
    assert e.controller_records() == {}
    ports = {b: e.kinfo["brokers"][str(b)]["controller_port"] for b in (1, 2, 3)}
    assert len(set(ports.values())) == 3
    for b in (1, 2, 3):
        p = props(e.broker_node_properties(e.records()[b]))
        assert p["process.roles"] == "broker,controller" and p["node.id"] == str(b)
        assert p["controller.quorum.voters"] == ",".join(f"{i}@127.0.0.1:{ports[i]}" for i in (1, 2, 3))
        assert f"CONTROLLER://127.0.0.1:{ports[b]}" in p["listeners"].split(",")
        assert "CONTROLLER" not in p["advertised.listeners"]       # clients never see the controller listener
        assert "CONTROLLER:PLAINTEXT" in p["listener.security.protocol.map"].split(",")


def test_separate_layout_keeps_one_controller_node(tmp_path):
    e = engine(tmp_path, "separate")
    assert list(e.controller_records()) == [1000]
    p = props(e.broker_node_properties(e.records()[1]))
    assert p["process.roles"] == "broker" and "CONTROLLER" not in p["listeners"]
    assert p["controller.quorum.voters"] == f"1000@127.0.0.1:{e.controller_records()[1000].port}"


def test_unknown_layout_is_refused(tmp_path):
    with pytest.raises(BadInput, match="unknown KRaft layout 'mixed'"):
        engine(tmp_path, "mixed")
