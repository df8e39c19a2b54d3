"""`kplan`: the command line (DESIGN.md "Public interface").

Each command lives in `planner/commands/<name>.py` with `add_parser(subparsers)`; the library is imported
only when a command runs, so `kplan --help` stays fast and Spark/OR-Tools load only where needed.
Exit codes: 0 done, 1 did not converge / refused for safety, 2 bad input (nothing written; an infeasible
plan request is bad input too), 130 interrupted (Ctrl-C; nothing half-written is left).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading

from planner import __version__
from planner.errors import PlannerError

COMMANDS = ["sandbox", "snapshot", "risk", "plan", "apply", "verify", "cancel", "brokers", "maintenance", "roll"]


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
        # kazoo's connection retries and Py4J's complaints while Spark stops are noise next to the one
        # line the command prints
        logging.getLogger("kazoo").setLevel(logging.ERROR)
        logging.getLogger("planner.zk.session").setLevel(logging.ERROR)
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        # Py4J also logs through the root logger (with a traceback) when Ctrl-C interrupts a call
        for handler in logging.getLogger().handlers:
            handler.addFilter(lambda r: f"{os.sep}py4j{os.sep}" not in r.pathname)
    interrupted = False
    previous = None

    def on_interrupt(signum: int, frame: object) -> None:
        nonlocal interrupted
        interrupted = True
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        rc = args.func(args)
    except BaseException as e:   # noqa: BLE001 - every way a command ends gets one line, never a traceback
        if interrupted or isinstance(e, KeyboardInterrupt):
            # Ctrl-C: whatever broke on the way out (Py4J losing its JVM, ...) is part of the interrupt
            print(f"kplan {args.command}: interrupted (nothing was left half-written)", file=sys.stderr)
            return 130
        if isinstance(e, PlannerError):
            print(f"kplan {args.command}: error: {e}", file=sys.stderr)
            return e.exit_code
        if isinstance(e, OSError):
            where = f" ({e.filename})" if e.filename else ""
            print(f"kplan {args.command}: error: {e.strerror or e}{where}", file=sys.stderr)
            return 2
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
