"""`kplan brokers --zk … | --bootstrap-server … | --snapshot S [--json]`: every broker that is registered or in maintenance, with its
rack and maintenance state (since when, who, why, the plan and run that set it). Read-only."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from planner.commands._zkargs import add_kafka


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("brokers", help="list the brokers and their maintenance state (draining, drained, "
                                       "restarting, returning)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--zk", metavar="HOST:PORT[/chroot]", help="read the cluster now")
    where.add_argument("--bootstrap-server", dest="bootstrap", metavar="HOST:PORT[,HOST:PORT...]",
                       help="read a KRaft cluster now (its brokers, and the __kplan topic read_committed)")
    where.add_argument("--snapshot", type=Path, metavar="S", help="as a snapshot folder recorded it")
    p.add_argument("--zk-auth-env", metavar="VAR",
                   help="environment variable holding digest credentials user:password (default: KPLAN_ZK_AUTH "
                        "when set)")
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for ZooKeeper to answer the connection (default 10)")
    add_kafka(p, lease=False)
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from planner import api
    from planner import zk as zkmod
    from planner.commands.snapshot import kafka_from_args

    auth = zkmod.auth_from_env(args.zk_auth_env) if args.zk else None
    kafka = kafka_from_args(args) if args.bootstrap else None
    rows = api.brokers(api.BrokersRequest(zk=args.zk, snapshot=args.snapshot, auth=auth,
                                          timeout=args.connect_timeout, bootstrap=args.bootstrap, kafka=kafka,
                                          kafka_timeout=args.kafka_timeout))
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
        return 0
    print(table(rows))
    return 0


def table(rows) -> str:  # noqa: ANN001 - api.BrokerRow rows
    head = ("broker", "rack", "registered", "state", "since", "by", "plan", "reason")
    cells = [head] + [(str(r.broker), r.rack or "-", "yes" if r.registered else "NO", r.state, r.since or "-",
                       r.by or "-", (r.plan_id or "-")[:19], r.reason or "-") for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head) - 1)]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(head) - 1)) + "  " + c[-1] for c in cells]
    in_maint = [r for r in rows if r.state != "in service"]
    lines.append(f"{len(rows)} brokers, {len(in_maint)} in maintenance"
                 + (": no plan gives them a replica or preferred leadership" if in_maint else ""))
    return "\n".join(lines)
