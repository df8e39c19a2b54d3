"""`kplan snapshot --zk HOST:PORT[/chroot] --out DIR`: read a ZooKeeper-mode Kafka cluster into a snapshot
folder (docs/SNAPSHOT.md) and print a readable summary. Progress goes to stderr, the summary to stdout.
`kplan snapshot --bootstrap-server HOST:PORT[,...] --out DIR` reads a KRaft cluster through the Admin API
into the same format (docs/KRAFT.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from planner.text import count


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "snapshot",
        help="read the cluster's state (ZooKeeper, or a KRaft cluster's Admin API) into a snapshot folder "
        "(never writes to the cluster)",
        description="Read brokers, controller, topics, partition states, configs and pending admin "
        "operations of a ZooKeeper-mode Kafka cluster (--zk) or of a KRaft cluster through Kafka's Admin API "
        "(--bootstrap-server) into DIR (manifest.json + Parquet). Nothing is ever written to the cluster.",
    )
    src = p   # --zk or --bootstrap-server, one of them (checked in _run: one clear line, exit 2)
    src.add_argument("--zk", metavar="HOST:PORT[/chroot]",
                     help="ZooKeeper connect string, with Kafka's chroot if it has one (e.g. zk1:2181/kafka)")
    src.add_argument("--bootstrap-server", dest="bootstrap", metavar="HOST:PORT[,HOST:PORT...]",
                     help="a KRaft cluster's brokers: read through the Admin API only (DescribeCluster, "
                     "DescribeTopicPartitions, DescribeConfigs, ListPartitionReassignments, DescribeLogDirs); "
                     "security from --kafka-config / --kafka-*")
    p.add_argument("--out", required=True, metavar="DIR", help="snapshot folder to write")
    p.add_argument("--sizes", metavar="FILE",
                   help="override: partition sizes from `kafka-log-dirs.sh --describe` output instead of asking "
                   "the brokers")
    p.add_argument("--no-sizes", action="store_true",
                   help="do not ask the brokers for sizes and disk capacity (plans then count replicas, and "
                   "apply needs an explicit --throttle or --no-throttle)")
    p.add_argument("--partial-sizes", action="store_true",
                   help="accept brokers that do not answer DescribeLogDirs and log dirs in error (named in the "
                   "manifest's warnings) instead of failing")
    k = p.add_argument_group("Kafka (with --zk: sizes and capacity come from the brokers' DescribeLogDirs, at the "
                             "endpoints their ZooKeeper registrations give; with --bootstrap-server: every read)")
    k.add_argument("--kafka-config", metavar="FILE",
                   help="JSON object of librdkafka-style client keys, as an Airflow Kafka connection's extra: "
                   "security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.ca.location, ...")
    k.add_argument("--kafka-security-protocol", choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
                   help="overrides the config file's (default PLAINTEXT)")
    k.add_argument("--kafka-sasl-mechanism", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    k.add_argument("--kafka-sasl-username", metavar="USER")
    k.add_argument("--kafka-password-env", metavar="VAR", default="KPLAN_KAFKA_PASSWORD",
                   help="environment variable holding the SASL password (default KPLAN_KAFKA_PASSWORD; never "
                   "an argument)")
    k.add_argument("--kafka-ssl-key-password-env", metavar="VAR", default="KPLAN_KAFKA_SSL_KEY_PASSWORD",
                   help="environment variable holding the password of the client key (ssl.key.location; default "
                   "KPLAN_KAFKA_SSL_KEY_PASSWORD; never an argument)")
    k.add_argument("--kafka-listener", metavar="NAME",
                   help="use this listener of each registration (default: the first of the security protocol)")
    k.add_argument("--kafka-timeout", type=float, default=10.0, metavar="S",
                   help="seconds for the brokers to answer (default 10)")
    p.add_argument("--lenient", action="store_true",
                   help="skip malformed topics/partitions (listed in the manifest's warnings) instead of failing")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for ZooKeeper to answer the connection (default 10)")
    p.add_argument("--zk-auth-env", metavar="VAR",
                   help="environment variable holding digest credentials user:password "
                   "(default: KPLAN_ZK_AUTH when set)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="worker processes (each with its own ZooKeeper session) reading partition states; "
                   "default 1, the fastest measured on 2 cores next to a local ZooKeeper")
    p.add_argument("--force", action="store_true", help="replace --out if it is not empty")
    p.add_argument("--read-mode", choices=["auto", "multiread", "plain"], default="auto", help=argparse.SUPPRESS)
    p.set_defaults(func=_run)


def _progress(p) -> None:
    print(f"kplan snapshot: {p.message}", file=sys.stderr, flush=True)


def _run(args: argparse.Namespace) -> int:
    from planner import api
    from planner import zk as zkmod

    if (args.zk is None) == (args.bootstrap is None):
        from planner.errors import BadInput

        raise BadInput("give either --zk HOST:PORT[/chroot] (a ZooKeeper-mode cluster) or --bootstrap-server "
                       "HOST:PORT[,...] (a KRaft cluster), " + ("not both" if args.zk else "one of them"))
    auth = zkmod.auth_from_env(args.zk_auth_env) if args.zk else None
    if args.no_sizes and args.sizes:
        from planner.errors import BadInput

        raise BadInput("give either --sizes FILE or --no-sizes, not both")
    req = api.SnapshotRequest(zk=args.zk, out=Path(args.out), sizes=Path(args.sizes) if args.sizes else None,
                              lenient=args.lenient, timeout=args.timeout, auth=auth, workers=args.workers,
                              read_mode=args.read_mode, force=args.force,
                              sizes_from="none" if args.no_sizes else "brokers", kafka=kafka_from_args(args),
                              partial_sizes=args.partial_sizes, kafka_timeout=args.kafka_timeout,
                              bootstrap=args.bootstrap)
    outcome = api.snapshot(req, progress=_progress)
    from planner.snapshot_io import read_table

    print(summary(outcome, read_table(outcome.path, "brokers")))
    return 0


def kafka_from_args(args: argparse.Namespace):
    """KafkaSecurity from --kafka-config FILE, the --kafka-* options over it, and the password from the
    environment (never from an argument)."""
    import json
    import os

    from planner import api
    from planner.errors import BadInput

    config: dict = {}
    if args.kafka_config:
        try:
            config = json.loads(Path(args.kafka_config).read_text())
        except OSError as e:
            raise BadInput(f"--kafka-config {args.kafka_config}: {e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise BadInput(f"--kafka-config {args.kafka_config} is not JSON: {e}") from None
        if not isinstance(config, dict):
            raise BadInput(f"--kafka-config {args.kafka_config} must hold a JSON object of client keys")
    for key, value in (("security.protocol", args.kafka_security_protocol),
                       ("sasl.mechanism", args.kafka_sasl_mechanism), ("sasl.username", args.kafka_sasl_username)):
        if value:
            config[key] = value
    password = os.environ.get(args.kafka_password_env)
    if password is not None:
        config["sasl.password"] = password
    key_password = os.environ.get(args.kafka_ssl_key_password_env)
    if key_password is not None:
        config["ssl.key.password"] = key_password
    return api.kafka_security(config, args.kafka_listener)


def summary(outcome, brokers) -> str:
    """A readable summary of a snapshot (what an operator checks before planning anything)."""
    m = outcome.manifest
    c = m["counts"]
    b = brokers.to_pydict()
    src = m["source"]
    if src.get("backend") == "kraft":
        feats = src.get("features") or {}
        lines = [f"snapshot of KRaft cluster {src['bootstrap_servers']} -> {outcome.path}",
                 f"  metadata        metadata.version {src.get('metadata_version')}, eligible.leader.replicas.version "
                 f"{feats.get('eligible.leader.replicas.version', 0)}"
                 + (" (ELR on: elr / last_known_elr columns read)" if feats.get("eligible.leader.replicas.version")
                    else " (ELR off)")]
    else:
        lines = [f"snapshot of {src['zk']}{src['chroot'] or ''} -> {outcome.path}"]

    def by_rack(alive: bool) -> str:
        racks: dict[str, list[int]] = {}
        for bid, a, rack in zip(b["broker"], b["alive"], b["rack"], strict=True):
            if a == alive:
                racks.setdefault(rack or "no rack", []).append(bid)
        if sum(len(v) for v in racks.values()) <= 30:
            return "; ".join(f"{r}: {','.join(map(str, ids))}" for r, ids in sorted(racks.items()))
        return "; ".join(f"{r}: {len(ids)}" for r, ids in sorted(racks.items()))

    lines.append(f"  brokers alive   {c['alive_brokers']} ({by_rack(True)})")
    dead = c["brokers"] - c["alive_brokers"]
    if dead:
        lines.append(f"  brokers dead    {dead} ({by_rack(False)}): named in assignments, not registered")
    ctrl = m["controller"]
    if src.get("backend") == "kraft":
        lines.append(f"  controller      node {ctrl['broker']} (active KRaft controller), leader epoch {ctrl['epoch']}")
        fenced = [bid for bid, f in zip(b["broker"], b.get("fenced") or [], strict=False) if f]
        if fenced:
            lines.append(f"  fenced          {','.join(map(str, fenced))} (registered, not alive)")
    else:
        lines.append(f"  controller      broker {ctrl['broker']}, epoch {ctrl['epoch']}")
    maint = m.get("maintenance") or []
    lines.append("  maintenance     " + ("; ".join(
        f"broker {e['broker']} {e['state']} since {e.get('since') or '?'}" + (f" ({e['reason']})" if e.get("reason")
                                                                             else "") for e in maint)
        + ": plans give them nothing" if maint else "none"))
    lines.append(f"  topics          {c['topics']}" + (f" ({len(m['topics_queued_for_deletion'])} queued for "
                                                        "deletion)" if m["topics_queued_for_deletion"] else ""))
    lines.append(f"  partitions      {c['partitions']} ({c['replicas']} replicas)")
    lines.append(f"  offline         {c['offline']}")
    lines.append(f"  under-replicated {c['under_replicated']}")
    lines.append(f"  leaderless-new  {c['leaderless_new']}")
    if c.get("state_unknown"):
        lines.append(f"  state unknown   {c['state_unknown']} (malformed state znodes: plans leave them alone, "
                     "risk does not score them)")
    inflight = m["reassignment_in_flight"]
    if inflight:
        shown = ", ".join(f"{e['topic']}-{e['partition']}->{list(e['replicas'])}" for e in inflight[:5])
        more = f" and {len(inflight) - 5} more" if len(inflight) > 5 else ""
        lines.append(f"  reassigning     {len(inflight)}: {shown}{more}")
    else:
        lines.append("  reassigning     none")
    if m["preferred_election_pending"]:
        lines.append(f"  preferred election pending for {count(len(m['preferred_election_pending']), 'partition')}")
    cons = m["consistency"]
    where = f"zxid {m['zxid']['min']:#x}..{m['zxid']['max']:#x}" if m.get("zxid") else "Admin API re-read"
    lines.append(f"  consistency     {where}, {cons['rereads']} re-reads in {cons['rounds']} rounds"
                 + ("" if cons["consistent"] else " (NOT consistent: see warnings)"))
    lines.append(f"  warnings        {len(m['warnings'])}")
    for w in m["warnings"][:10]:
        lines.append(f"    {w['path']}: {w['problem']}")
    if len(m["warnings"]) > 10:
        lines.append(f"    ... {len(m['warnings']) - 10} more in manifest.json")
    lines.append(_sizes_line(m))
    lines.append(f"  fingerprint     {m['fingerprint']}")
    lines.append(f"  time            {outcome.seconds:.2f} s")
    return "\n".join(lines)


def _sizes_line(m) -> str:
    if m.get("sizes") == "brokers":
        ld = m["log_dirs"]
        gaps = len(ld["unanswered"]) + len(ld["dirs_in_error"])
        return (f"  sizes           from {ld['brokers_answered']} brokers (DescribeLogDirs v"
                f"{'/'.join(map(str, ld['api_versions']))}): {ld['replicas_read']} replicas read"
                + (f", {ld['partitions_filled_from_other_replicas']} partitions sized from another replica"
                   if ld["partitions_filled_from_other_replicas"] else "")
                + (f", {ld['partitions_size_unknown']} unknown" if ld["partitions_size_unknown"] else "")
                + (f"; {gaps} gaps (see warnings)" if gaps else ""))
    if m.get("sizes"):
        return f"  sizes           from the file given ({m['sizes']})"
    return "  sizes           NOT read (--no-sizes): plans count replicas, disk capacity unchecked"
