"""`kplan maintenance clear --zk … | --bootstrap-server … --brokers 1[,2] [--state drained] [--reason TEXT]`: the
explicit act that takes brokers out of maintenance (planner/maintenance.py; on KRaft one fenced transaction on
`__kplan`). It names what it clears; it refuses a broker with no state, an unknown broker, a state other than
--state, and a state that a running apply holds (exit 2 / 1, nothing written). A drain's `drained` is otherwise only cleared by a verified return (`kplan plan return`)."""

from __future__ import annotations

import argparse

from planner.commands._zkargs import add_zk


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("maintenance", help="end brokers' maintenance state (clear)")
    acts = p.add_subparsers(dest="act", required=True, metavar="ACT")
    c = acts.add_parser("clear", help="take brokers out of maintenance, naming the state cleared")
    add_zk(c, kraft=True)
    c.add_argument("--brokers", required=True, help="broker ids, comma separated")
    c.add_argument("--state", choices=["draining", "drained", "restarting", "returning", "unknown"],
                   help="the state you mean to clear: refused when a broker is in another one")
    c.add_argument("--reason", default="", help="why (logged)")
    c.set_defaults(func=_clear)


def _clear(args: argparse.Namespace) -> int:
    from planner import api
    from planner.commands._zkargs import broker_list, cluster

    req = api.ClearRequest(brokers=tuple(broker_list(args.brokers)), state=args.state, reason=args.reason,
                           **cluster(args))
    print(api.clear_maintenance(req).message)
    return 0
