"""`kplan maintenance clear --zk … | --bootstrap-server … --brokers 1[,2] [--state drained] [--reason TEXT]`: the
explicit act that takes brokers out of maintenance (planner/maintenance.py; on KRaft one fenced transaction on
`__kplan`). It names what it clears; it refuses a broker with no state, an unknown broker, a state other than
--state, and a state that a running apply holds (exit 2 / 1, nothing written). A drain's `drained` is otherwise only cleared by a verified return (`kplan plan return`).

`kplan maintenance carry --zk … --bootstrap-server …`: during a ZooKeeper-to-KRaft migration, once the brokers run
in KRaft mode (dual-write), copy the maintenance znodes (/kplan/maintenance, read only) into `__kplan`, where a
cluster read through its bootstrap servers keeps them (docs/KRAFT.md "Migration"). One fenced transaction; a
broker whose state differs on the two sides is refused, nothing written."""

from __future__ import annotations

import argparse

from planner.commands._zkargs import add_zk


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("maintenance", help="end brokers' maintenance state (clear), or carry it from ZooKeeper into __kplan (carry)")
    acts = p.add_subparsers(dest="act", required=True, metavar="ACT")
    c = acts.add_parser("clear", help="take brokers out of maintenance, naming the state cleared")
    add_zk(c, kraft=True)
    c.add_argument("--brokers", required=True, help="broker ids, comma separated")
    c.add_argument("--state", choices=["draining", "drained", "restarting", "returning", "unknown"],
                   help="the state you mean to clear: refused when a broker is in another one")
    c.add_argument("--reason", default="", help="why (logged)")
    c.set_defaults(func=_clear)
    k = acts.add_parser("carry", help="copy a migrating cluster's maintenance znodes into __kplan")
    add_zk(k, kraft=True)
    k.set_defaults(func=_carry)


def _clear(args: argparse.Namespace) -> int:
    from planner import api
    from planner.commands._zkargs import broker_list, cluster

    req = api.ClearRequest(brokers=tuple(broker_list(args.brokers)), state=args.state, reason=args.reason,
                           **cluster(args))
    print(api.clear_maintenance(req).message)
    return 0


def _carry(args: argparse.Namespace) -> int:
    from planner import api
    from planner import zk as zkmod
    from planner.commands.snapshot import kafka_from_args
    from planner.errors import BadInput

    if args.zk is None or args.bootstrap is None:
        raise BadInput("maintenance carry reads ZooKeeper and writes the KRaft brokers: give both --zk "
                       "HOST:PORT[/chroot] and --bootstrap-server HOST:PORT[,...]")
    req = api.CarryRequest(zk=args.zk, bootstrap=args.bootstrap, auth=zkmod.auth_from_env(args.zk_auth_env),
                           timeout=args.connect_timeout, kafka=kafka_from_args(args),
                           kafka_timeout=args.kafka_timeout, lease=args.lease)
    print(api.carry_maintenance(req).message)
    return 0
