"""`kplan`: the command line (DESIGN.md "Public interface").

Each command lives in `planner/commands/<name>.py` with `add_parser(subparsers)`; the library is imported
only when a command runs, so `kplan --help` stays fast and Spark/OR-Tools load only where needed.
Exit codes: 0 done, 1 did not converge / refused for safety, 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from planner import __version__
from planner.errors import PlannerError

COMMANDS = ["sandbox", "snapshot", "risk", "plan"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kplan",
        description="Kafka Maintenance Planner: snapshot, drain risk, plan, apply and verify "
        "for ZooKeeper-mode Kafka (2.4 - 3.9).",
    )
    parser.add_argument("--version", action="version", version=f"kplan {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"planner.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        # kazoo's connection retries are noise next to the one-line error the command prints
        logging.getLogger("kazoo").setLevel(logging.ERROR)
        logging.getLogger("planner.zk.session").setLevel(logging.ERROR)
    try:
        rc = args.func(args)
    except PlannerError as e:
        print(f"kplan {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"kplan {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
