"""Ready-made sandbox clusters: `demo` (what `make demo` runs on) and generated clusters of any size."""

from __future__ import annotations

from typing import Any

from planner.errors import BadInput

DEMO_TOPICS = ["orders", "payments", "clicks", "inventory", "shipments", "audit-log"]
PRESETS = ("demo", "generated")
# The demo preset's timing where it differs from settings.Timing's (a keyword given to `up` still wins). A
# replica that finished its copy joins the ISR after 0.5 s, not 2 s: in Kafka a follower that has caught up
# is seen by its leader on its next fetch, which waits at most replica.fetch.wait.max.ms (500 ms by
# default, ReplicationConfigs.REPLICA_FETCH_WAIT_MAX_MS_DEFAULT). A drain of broker 1 is 37 batches, each
# one copy and one catch-up, so this takes a minute off every drain on the demo cluster.
DEMO_TIMING = {"catch_up_delay": 0.5}


def demo_description(seed: int = 0) -> dict[str, Any]:
    """6 brokers on 3 racks, 336 partitions: six RF=3 topics with min.insync.replicas=2, an RF=2 topic and
    the incident's single-replica topic (RF=1). Sizes are tens of MB so drains finish in seconds."""
    from planner import synth

    c = synth.synth_cluster(brokers=6, partitions=300, rf=3, racks=3, partitions_per_topic=50, seed=seed,
                            min_isr=2)
    desc = synth.to_description(c)
    for topic, name in zip(desc["topics"], DEMO_TOPICS, strict=True):
        topic["name"] = name
        for p in topic["partitions"]:
            p["size_bytes"] = int(p["size_bytes"]) // 100
    brokers = [b["id"] for b in desc["brokers"]]
    desc["topics"].append({
        "name": "user-events",
        "config": {"min.insync.replicas": "1"},
        "partitions": [{"replicas": [brokers[i % 6], brokers[(i + 1) % 6]], "size_bytes": 8_000_000 + 50_000 * i}
                       for i in range(24)],
    })
    desc["topics"].append({
        "name": "legacy-rf1",
        "config": {"min.insync.replicas": "1"},
        "partitions": [{"replicas": [brokers[i % 6]], "size_bytes": 20_000_000 + 1_000_000 * i} for i in range(12)],
    })
    return desc


def generated_description(brokers: int, racks: int | None = None, partitions: int | None = None,
                          rf: int | None = None, seed: int = 0) -> dict[str, Any]:
    """A synthetic cluster (planner.synth): `partitions` (default 100 per broker) in topics of 50, replicas
    spread over the brokers, racks r1..rR assigned round-robin."""
    from planner import synth

    if brokers < 1:
        raise BadInput("--brokers must be at least 1")
    racks = min(3, brokers) if racks is None else racks
    rf = min(3, brokers) if rf is None else rf
    partitions = 100 * brokers if partitions is None else partitions
    if racks < 0 or racks > brokers:
        raise BadInput(f"--racks must be between 0 and the number of brokers ({brokers})")
    if rf < 1 or rf > brokers:
        raise BadInput(f"replication factor {rf} needs between 1 and {brokers} brokers")
    if partitions < 1:
        raise BadInput("--partitions must be at least 1")
    c = synth.synth_cluster(brokers=brokers, partitions=partitions, rf=rf, racks=racks, partitions_per_topic=50,
                            seed=seed)
    return synth.to_description(c)


def preset_description(name: str, brokers: int | None = None, racks: int | None = None,
                       partitions: int | None = None, rf: int | None = None, seed: int = 0) -> dict[str, Any]:
    if name == "demo":
        if brokers is not None and brokers != 6:
            raise BadInput("the demo preset has 6 brokers; use --brokers N without --preset for other sizes")
        return demo_description(seed)
    if name == "generated":
        if brokers is None:
            raise BadInput("the generated preset needs --brokers N")
        return generated_description(brokers, racks, partitions, rf, seed)
    raise BadInput(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
