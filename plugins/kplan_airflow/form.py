"""The trigger forms' broker picker: the cluster's brokers, with their racks, as a multi-select in Airflow's
form, read from the brokers the latest snapshot saw (`<runs_root>/known-brokers.json`, written by every
snapshot task). Read when the DAG file is parsed, so it is a small JSON file, never the snapshot itself.

Airflow 3.3's form shows a `type: array` param with `examples` as a multi-select whose values are strings;
the schema takes those strings of digits, and integers (a trigger through the REST API or a follow-up run),
and the operators read both as broker ids. The form checks nothing else, so the API server does
(kplan_airflow.trigger_check): a trigger naming an id the latest snapshot did not see is refused with the
reason before a run exists. A broker that joined after the latest snapshot is therefore neither offered nor
accepted until a run's snapshot has seen it; a run started otherwise (dag.test(), a follow-up run) with an id
the cluster does not have fails its first planner step with the planner's message (on the run and the plan
page).
"""

from __future__ import annotations

from typing import Any

from kplan_airflow import runs

KNOWN = "known-brokers.json"
ITEM = {"type": ["integer", "string"], "minimum": 0, "pattern": "^[0-9]+$"}


def known_brokers() -> dict[str, Any]:
    """{"taken_at", "zk_conn_id", "brokers": [{"id", "rack", "alive", "maintenance"}]}, or {} (no snapshot yet)."""
    try:
        doc = runs.read_json(runs.runs_root() / KNOWN) or {}
    except Exception:  # noqa: BLE001 (a form without choices beats a DAG that does not parse)
        return {}
    return doc if isinstance(doc.get("brokers"), list) else {}


def write_known_brokers(rows: list[dict[str, Any]], taken_at: str | None, zk_conn_id: str | None) -> None:
    brokers = [{"id": int(r["broker"]), "rack": r.get("rack"), "alive": bool(r.get("alive", True)),
                "maintenance": r.get("maintenance")} for r in sorted(rows, key=lambda r: int(r["broker"]))]
    runs.write_json(runs.runs_root() / KNOWN, {"taken_at": taken_at, "zk_conn_id": zk_conn_id, "brokers": brokers})


def label(b: dict[str, Any]) -> str:
    extra = [] if b.get("alive", True) else ["down"]
    if b.get("maintenance"):
        extra.append(str(b["maintenance"]))
    return f"broker {b['id']}" + (f" · rack {b['rack']}" if b.get("rack") else "") + (
        f" ({', '.join(extra)})" if extra else "")


def broker_picker(title: str, description: str) -> Any:
    """The brokers Param: a multi-select of the known brokers (ids and racks), at least one, no repeats."""
    from airflow.sdk import Param

    known = known_brokers()
    extra: dict[str, Any] = {}
    if known.get("brokers"):
        ids = [str(b["id"]) for b in known["brokers"]]
        extra = {"examples": ids, "values_display": {str(b["id"]): label(b) for b in known["brokers"]}}
        description += (f". Offered: the brokers of the latest snapshot ({known.get('taken_at') or 'time unknown'}); "
                        "a broker that joined since is accepted once a run's snapshot has seen it")
    return Param(type="array", items=ITEM, minItems=1, uniqueItems=True, title=title, description=description,
                 **extra)


def _given(conn_id: Any) -> str | None:
    """A connection id from a form field, or None for an empty one (null, "", the text "None")."""
    text = str(conn_id).strip() if conn_id is not None else ""
    return text if text and text != "None" else None


def cluster_defaults() -> dict[str, str | None]:
    """The form's default cluster connections: `[kplan] kafka_conn_id` (AIRFLOW__KPLAN__KAFKA_CONN_ID) when the
    deployment's cluster is KRaft, else the ZooKeeper connection `zookeeper_default`. Exactly one is set, so a
    scheduled run (the nightly rebalance) and a trigger that leaves both fields alone name one cluster."""
    from airflow.sdk import conf

    kafka = _given(conf.get("kplan", "kafka_conn_id", fallback=None))
    return {"zk_conn_id": None if kafka else "zookeeper_default", "kafka_conn_id": kafka}


def cluster_problem(zk_conn_id: Any, kafka_conn_id: Any) -> str | None:
    """Why a run's two connection fields do not name exactly one cluster, or None. The trigger check refuses
    such a trigger, and the first task of a run started otherwise (dag.test(), a follow-up) fails with it."""
    zk, kafka = _given(zk_conn_id), _given(kafka_conn_id)
    if zk and kafka:
        return (f"both a ZooKeeper connection ({zk}) and a Kafka connection ({kafka}) are given: name the cluster by "
                "one of them, the ZooKeeper connection for a ZooKeeper-mode cluster or the Kafka connection "
                "(bootstrap.servers and its SASL / SSL settings) for a KRaft cluster, and clear the other")
    if not zk and not kafka:
        return ("no cluster is named: give a ZooKeeper connection (a ZooKeeper-mode cluster) or a Kafka connection of "
                "the Apache Kafka provider's type (a KRaft cluster)")
    return None


def cluster_params() -> dict[str, Any]:
    """The two Params that name the cluster, exactly one of them (kplan_airflow.trigger_check refuses both or
    neither before a run exists)."""
    from airflow.sdk import Param

    default = cluster_defaults()
    return {
        "zk_conn_id": Param(default["zk_conn_id"], type=["null", "string"], title="ZooKeeper connection",
                            description="A ZooKeeper-mode cluster: a connection of type zookeeper (hosts, chroot, "
                            "digest auth). Leave empty for a KRaft cluster"),
        "kafka_conn_id": Param(default["kafka_conn_id"], type=["null", "string"], title="Kafka connection",
                               description="A KRaft cluster: a connection of the Apache Kafka provider's type whose "
                               "extra holds bootstrap.servers and the client's security.protocol, sasl.*, ssl.* "
                               "(never logged). Leave empty for a ZooKeeper-mode cluster"),
    }


def sizes_params() -> dict[str, Any]:
    """The Param every planning DAG with sizes shares: where sizes come from (the brokers are asked through the
    run's cluster connection; for a ZooKeeper-mode cluster whose brokers need SASL or SSL, the ZooKeeper
    connection's extra names a Kafka connection with those settings: {"kafka_conn_id": "..."})."""
    from airflow.sdk import Param

    return {
        "sizes_from": Param("brokers", enum=["brokers", "none"], title="Sizes from",
                            description="brokers = partition sizes and disk capacity from the brokers' "
                            "DescribeLogDirs; none = count-only (the plan then needs a throttle or no_throttle)"),
    }


def throttle_param(description: str, title: str = "Throttle (bytes/s)") -> dict[str, Any]:
    """The Param of a replication throttle, with the executor's own floor as the form's minimum: a rate the apply
    or the roll would refuse is refused by the form, not hours later after the review."""
    from airflow.sdk import Param

    from planner.api import MIN_THROTTLE

    return {"throttle": Param(None, type=["null", "integer"], minimum=MIN_THROTTLE, title=title,
                              description=description)}


def no_throttle_param() -> dict[str, Any]:
    """The Param of every DAG whose plan may copy data: a copy at full speed only when asked for on purpose."""
    from airflow.sdk import Param

    return {"no_throttle": Param(False, type="boolean", title="Copy without a throttle",
                                 description="Only when neither a throttle nor the plan's suggestion gives a batch a "
                                 "rate (a plan without sizes): copy it at full speed on purpose. Off: such a plan is "
                                 "refused before approval")}
