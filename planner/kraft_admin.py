"""Reading a KRaft cluster through Kafka's Admin API (kafka-python 3.0.12, pinned): the requests the KRaft
backend needs, each as Kafka defines it, with the answers as plain dicts.

kafka-python 3.0.12 generates its request classes from Kafka's own JSON message schemas
(kafka/protocol/schemas/resources/*.json), flexible versions included, so DescribeTopicPartitions (API key 75,
KIP-966, flexible from v0) is `kafka.protocol.admin.DescribeTopicPartitionsRequest`. Its admin method
(`describe_topic_partitions`) turns an empty ELR into None; here the answer is read as sent, because on a
cluster with eligible.leader.replicas.version >= 1 an empty ELR ([]) is a fact and a null one means the
broker did not say (Kafka's PartitionRegistration keeps both lists; DescribeTopicPartitionsRequestHandler
returns them only when the ELR feature is on: `eligible_leader_replicas` null otherwise).

Nothing here logs a config or a credential; kafka-python's loggers are held at WARNING (kafka_admin.quiet).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from planner.errors import BadInput, KafkaUnavailable

log = logging.getLogger(__name__)

DTP_PAGE = 2000          # partitions per DescribeTopicPartitions answer (Kafka's own default limit)
DESCRIBE_TOPIC_PARTITIONS_KEY = 75


def connect(bootstrap: str, client_config: dict[str, Any] | None = None, timeout: float = 10) -> Any:
    """A KafkaAdminClient bootstrapped from `bootstrap` (host:port,...), within `timeout` seconds; raises
    KafkaUnavailable naming the servers (never the credentials) when none answers."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    servers = [s.strip() for s in bootstrap.split(",") if s.strip()]
    if not servers:
        raise BadInput("no bootstrap server given (HOST:PORT[,HOST:PORT...])")
    ms = int(timeout * 1000)
    try:
        return KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=ms, bootstrap_timeout_ms=ms,
                                reconnect_backoff_max_ms=1000, **(client_config or {}))
    except KafkaError as e:
        if "Authentication" in type(e).__name__ or "Sasl" in type(e).__name__:
            # Kafka's own reason ("Authentication failed: Invalid username or password"), never the config
            raise BadInput(f"Kafka at {','.join(servers)} refused the client's credentials "
                           f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else 'no reason given'}); "
                           "check the Kafka credentials (kafka security settings)") from None
        raise KafkaUnavailable(f"no Kafka broker answered at {','.join(servers)} within {timeout:g}s "
                               f"({type(e).__name__})") from None


def topic_names(admin: Any) -> list[str]:
    """Every topic, internal ones included (Metadata with a null topic list)."""
    return sorted(t["name"] for t in admin.describe_topics())


def describe_topic_partitions(admin: Any, topics: Iterable[str] | None = None, page: int = DTP_PAGE
                              ) -> dict[tuple[str, int], dict]:
    """DescribeTopicPartitions (KIP-966) for these topics, or for every topic (None: an empty topic list, which
    Kafka's DescribeTopicPartitionsRequestHandler answers with all topics), every page (the answer's
    NextCursor); per (topic, partition): leader, leader_epoch, replicas, isr, elr, last_known_elr (None where
    the broker sent null), offline_replicas, topic_id, internal, error (a Kafka error name, or None; a topic
    whose error is not per partition is keyed (topic, -1))."""
    from kafka.protocol.admin import DescribeTopicPartitionsRequest as Req

    names = [] if topics is None else sorted(set(topics))
    out: dict[tuple[str, int], dict] = {}
    if topics is not None and not names:
        return out
    cursor = None
    while True:
        req = Req(topics=[Req.TopicRequest(name=t) for t in names], response_partition_limit=page,
                  cursor=Req.Cursor(topic_name=cursor[0], partition_index=cursor[1]) if cursor else None)
        resp = send(admin, req)
        for t in resp.topics:
            tid = str(t.topic_id) if t.topic_id is not None else None
            if t.error_code:
                out[(t.name, -1)] = {"error": _error_name(t.error_code), "topic_id": tid}
                continue
            for p in t.partitions:
                out[(t.name, p.partition_index)] = {
                    "leader": p.leader_id, "leader_epoch": p.leader_epoch, "replicas": list(p.replica_nodes),
                    "isr": list(p.isr_nodes),
                    "elr": None if p.eligible_leader_replicas is None else list(p.eligible_leader_replicas),
                    "last_known_elr": None if p.last_known_elr is None else list(p.last_known_elr),
                    "offline_replicas": list(p.offline_replicas or []), "topic_id": tid,
                    "error": _error_name(p.error_code) if p.error_code else None,
                    "internal": bool(t.is_internal)}
        nxt = resp.next_cursor
        if nxt is None:
            return out
        # the cursor names the first partition of the next page; listed topics before it are done (Kafka
        # requires the cursor's topic in the list)
        cursor = (nxt.topic_name, nxt.partition_index)
        names = [t for t in names if t >= nxt.topic_name]


def partition_sweep(admin: Any, previous: Any = None, page: int = DTP_PAGE) -> Any:
    """Every partition through DescribeTopicPartitions (all topics, paged by its cursor), as columns
    (planner.kraft_dtp.Sweep). With `previous` (an earlier sweep): the same requests are sent while the answers
    are byte for byte those of `previous`, and `previous` itself is returned when every one is: the same
    states, nothing decoded. Otherwise the answers are decoded into a new sweep."""
    from planner import kraft_dtp

    bodies: list[bytes] = []
    cursor = None
    same = previous is not None
    while True:
        body = send(admin, kraft_dtp.request([], page, cursor))
        i = len(bodies)
        bodies.append(body)
        if same and i < len(previous.pages) and body[4:] == previous.pages[i]:
            cursor = previous.cursors[i]
        else:
            same = False
            cursor = kraft_dtp.cursor_of(body)
        if cursor is None:
            break
    if same and len(bodies) == len(previous.pages):
        return previous
    return kraft_dtp.decode(bodies)


def topic_overrides(admin: Any, names: Iterable[str], batch: int = 500
                    ) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Every topic's own config overrides (DescribeConfigs, ConfigSource TOPIC_CONFIG: what ZooKeeper's
    /config/topics holds), read from the answers' bytes (planner.kraft_dtp.topic_overrides), and
    {topic: error} for each topic Kafka answered with an error (never taken as "no overrides")."""
    from planner import kraft_dtp

    names = [str(n) for n in names]
    out: dict[str, dict[str, str]] = {}
    errors: dict[str, str] = {}
    for i in range(0, len(names), batch):
        version, body = send(admin, kraft_dtp.configs_request(names[i:i + batch]))
        got, bad = kraft_dtp.topic_overrides(version, body)
        out.update(got)
        errors.update(bad)
    return out, errors


def metadata_partitions(admin: Any) -> dict[tuple[str, int], dict]:
    """Every partition from a Metadata answer (all topics), in describe_topic_partitions' form: what a broker in
    ZooKeeper mode can say (no ELR: `elr` and `last_known_elr` None)."""
    out: dict[tuple[str, int], dict] = {}
    for t in admin.describe_topics():
        tid = str(t["topic_id"]) if t.get("topic_id") is not None else None
        if t.get("error_code"):
            out[(t["name"], -1)] = {"error": _error_name(t["error_code"]), "topic_id": tid}
            continue
        for p in t["partitions"]:
            out[(t["name"], p["partition_index"])] = {
                "leader": p["leader_id"], "leader_epoch": p.get("leader_epoch", -1),
                "replicas": list(p["replica_nodes"]), "isr": list(p["isr_nodes"]), "elr": None,
                "last_known_elr": None, "offline_replicas": list(p.get("offline_replicas") or []), "topic_id": tid,
                # a partition without a live leader answers LEADER_NOT_AVAILABLE: a state, not a refusal
                "error": None, "internal": bool(t.get("is_internal"))}
    return out


def send(admin: Any, request: Any, node_id: int | None = None) -> Any:
    """One request through the admin client's connection manager (the least loaded broker, or `node_id`),
    as kafka-python's own admin methods send theirs; returns the decoded response."""
    manager = admin._manager

    async def go() -> Any:
        return await manager.send(request, node_id=node_id)

    return manager.run(go)


def brokers(admin: Any) -> dict[int, dict[str, Any]]:
    """DescribeCluster v2 with fenced brokers included (KIP-1073): id -> host, port, rack, fenced."""
    d = admin.describe_cluster()
    return {int(b["broker_id"]): {"host": b["host"], "port": int(b["port"]), "rack": b.get("rack"),
                                  "fenced": bool(b.get("is_fenced", False))} for b in d["brokers"]}


def active_controller(admin: Any) -> int | None:
    """The KRaft quorum's leader (DescribeQuorum of __cluster_metadata-0): the active controller. (DescribeCluster's
    ControllerId, answered by a broker, is "a random alive broker ID" in KRaft: Kafka's own schema says so.)"""
    q = admin.describe_metadata_quorum()
    for t in q.get("topics", []):
        for p in t.get("partitions", []):
            leader = p.get("leader_id")
            return int(leader) if leader is not None and leader >= 0 else None
    return None


def finalized_features(admin: Any) -> dict[str, int]:
    """ApiVersions' finalized features (KIP-584): name -> finalized level (metadata.version as its level
    number, eligible.leader.replicas.version, kraft.version...)."""
    out = {}
    for name, f in admin.describe_features().items():
        if "finalized" in f:
            out[name] = int(f["finalized"][1])
    return out


def configs(admin: Any, kind: str, names: Iterable[str], keys: Iterable[str] | None = None,
            batch: int = 500) -> dict[str, dict[str, dict[str, Any]]]:
    """DescribeConfigs of topics (`kind` "topic") or brokers ("broker"; each asked of that broker): name ->
    {key: {"value", "source"}} with Kafka's resolution (topic override, then dynamic broker default, then the
    static or built-in default: the `source` says which), only `keys` when given."""
    from kafka.admin import ConfigResource, ConfigResourceType

    rtype = ConfigResourceType.TOPIC if kind == "topic" else ConfigResourceType.BROKER
    wanted = None if keys is None else {k: None for k in keys}
    names = [str(n) for n in names]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for i in range(0, len(names), batch):
        res = admin.describe_configs([ConfigResource(rtype, n, configs=wanted) for n in names[i:i + batch]],
                                     config_filter="all")
        for name, cfg in res.get(rtype.name.lower(), {}).items():
            out[name] = {k: {"value": c.get("value"), "source": c.get("config_source")} for k, c in cfg.items()}
    return out


def _error_name(code: int) -> str:
    from kafka import errors

    return errors.for_code(code).__name__
