"""Kafka's configuration keys the planner reads, and the one rule for a topic's effective settings.

A topic's setting is its override in /config/topics/<t>, else the cluster-wide broker default in
/config/brokers/<default>, else Kafka's built-in default (docs/KAFKA_ZK.md §1). The snapshot resolves it when it
reads ZooKeeper and the risk model's test clusters resolve it the same way, through `topic_settings`.

Values are parsed as Kafka's ConfigDef parses them: integers with surrounding blanks trimmed, booleans
"true"/"false" in any case; min.insync.replicas must be at least 1. A bad value raises CodecError naming the
znode, the key and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.errors import CodecError

MIN_ISR = "min.insync.replicas"
UNCLEAN = "unclean.leader.election.enable"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
LEADER_THROTTLE_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLE_RATE = "follower.replication.throttled.rate"

DEFAULT_MIN_ISR = 1
DEFAULT_UNCLEAN = False


def int_config(config: Mapping[str, str], key: str, where: str, minimum: int | None = None) -> int | None:
    """The integer value of `key`, None when unset."""
    v = config.get(key)
    if v is None:
        return None
    try:
        n = int(str(v).strip())
    except ValueError:
        raise CodecError(where, f"{key} {v!r} is not an integer") from None
    if not -(2**31) <= n < 2**31 or (minimum is not None and n < minimum):
        raise CodecError(where, f"{key} {v!r} is out of range" + (f" (at least {minimum})" if minimum is not None
                                                                   else ""))
    return n


def long_config(config: Mapping[str, str], key: str, where: str) -> int | None:
    """A Kafka LONG setting (throttle rates): at least 0 and below 2**63."""
    v = config.get(key)
    if v is None:
        return None
    try:
        n = int(str(v).strip())
    except ValueError:
        raise CodecError(where, f"{key} {v!r} is not an integer") from None
    if not 0 <= n < 2**63:
        raise CodecError(where, f"{key} {v!r} is out of range (0 or more)")
    return n


def bool_config(config: Mapping[str, str], key: str, where: str) -> bool | None:
    v = config.get(key)
    if v is None:
        return None
    s = str(v).strip().lower()
    if s not in ("true", "false"):
        raise CodecError(where, f"{key} {v!r} is not true or false")
    return s == "true"


@dataclass(frozen=True)
class TopicSettings:
    """The settings the risk model needs, as in effect for one topic."""

    min_insync_replicas: int
    unclean_leader_election: bool


def broker_default_settings(defaults: Mapping[str, str], where: str) -> TopicSettings:
    """The cluster-wide defaults (/config/brokers/<default>) over Kafka's built-in ones."""
    mi = int_config(defaults, MIN_ISR, where, minimum=1)
    ue = bool_config(defaults, UNCLEAN, where)
    return TopicSettings(DEFAULT_MIN_ISR if mi is None else mi, DEFAULT_UNCLEAN if ue is None else ue)


def topic_settings(config: Mapping[str, str], defaults: TopicSettings, where: str) -> TopicSettings:
    """A topic's effective settings: its override, else the broker default (already resolved)."""
    mi = int_config(config, MIN_ISR, where, minimum=1)
    ue = bool_config(config, UNCLEAN, where)
    return TopicSettings(defaults.min_insync_replicas if mi is None else mi,
                         defaults.unclean_leader_election if ue is None else ue)
