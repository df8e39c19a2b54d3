"""`kplan`: the command line (docs/DESIGN.md "Public interface").

Each command lives in `planner/commands/<name>.py` with `add_parser(subparsers)`; the library is imported
only when a command runs, so `kplan --help` stays fast and Spark/OR-Tools load only where needed.
Exit codes: 0 done, 1 did not converge / refused for safety, 2 bad input (nothing written; an infeasible
plan request is bad input too), 130 / 143 interrupted by Ctrl-C / SIGTERM (both handled alike: nothing
half-written is left; apply first finishes the batch in flight), 141 the reader of stdout went away.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import signal
import sys
import threading

from planner import __version__
from planner.commands._signals import SIGNALS
from planner.commands._zkargs import said
from planner.errors import NoThrottle, PlannerError, WrongPlanKind


# What gets past an error, in the command line's words (the library's message states the fact).
def remedy(e: PlannerError, args: argparse.Namespace) -> str:
    """What gets past an error of this type, in command-line terms (errors.py: the type says what would)."""
    if isinstance(e, NoThrottle):
        return ": give a throttle (--throttle RATE, e.g. 50MB), or say --no-throttle to copy at full speed on purpose"
    if isinstance(e, WrongPlanKind):
        if e.kind == "restart":
            return (f": run it with `kplan roll --zk … --plan {e.path}` (it adds the temporary replicas, restarts each "
                    f"broker with its gates and undoes them); `kplan {args.command}` does not")
        return ": `kplan roll` runs restart plans (kplan plan restart); apply this one with `kplan apply`"
    return ""
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
    previous: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, SIGNALS.handle)
    SIGNALS.reset()
    try:
        rc = args.func(args)
        sys.stdout.flush()   # a closed pipe shows here, not in the interpreter's exit
    except BaseException as e:   # noqa: BLE001 - every way a command ends gets one line, never a traceback
        if isinstance(e, BrokenPipeError) or (isinstance(e, OSError) and e.errno == errno.EPIPE):
            return _broken_pipe()
        if SIGNALS.signum is not None or isinstance(e, KeyboardInterrupt):
            # Ctrl-C / SIGTERM: whatever broke on the way out (Py4J losing its JVM, ...) is part of the interrupt
            detail = getattr(e, "detail", None)
            print(f"kplan {args.command}: interrupted{SIGNALS.by()}: "
                  + (said(detail, getattr(e, "next_steps", ()), args) if detail else "nothing was left half-written"),
                  file=sys.stderr)
            return SIGNALS.exit_code()
        if isinstance(e, PlannerError):
            print(f"kplan {args.command}: error: {said(str(e), e.next_steps, args)}"
                  + remedy(e, args), file=sys.stderr)
            return e.exit_code
        if isinstance(e, OSError):
            where = f" ({e.filename})" if e.filename else ""
            print(f"kplan {args.command}: error: {e.strerror or e}{where}", file=sys.stderr)
            return 2
        raise
    finally:
        SIGNALS.graceful = None
        for signum, handler in previous.items():
            signal.signal(signum, handler)   # type: ignore[arg-type]
    return int(rc or 0)


def _broken_pipe() -> int:
    """The reader went away (`kplan ... | head -1`): no message, the exit status a SIGPIPE would give, and
    stdout pointed at /dev/null so the interpreter's last flush does not complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 128 + signal.SIGPIPE




if __name__ == "__main__":
    sys.exit(main())
