"""`kplan roll --zk … --plan P` (or `--bootstrap-server …` on KRaft): carry out a restart plan, one broker at a time (docs/APPLY.md "Restart
rolls"). Locked like apply and resumable: run it again after a pause, a failed gate or an interruption and it
continues where it stopped. Exit 0 done (or paused, or already done), 1 a gate failed or refused for safety
(it says what to do next), 2 bad input, 130 / 143 stopped by Ctrl-C / SIGTERM (once the broker in flight is
done, the roll recorded as stopped; a second signal leaves at once)."""

from __future__ import annotations

import argparse
import sys
import threading

from planner.commands._zkargs import add_zk, cluster, rate


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("roll", help="restart brokers one at a time as a restart plan says (temporary replicas, "
                                    "demotion, gates, undo)",
                       description="Carry out the restart plan P: add its temporary replicas (throttled batches), "
                       "then for each broker in the plan's order move its leadership off, wait for it to restart "
                       "(the restart command, or whoever restarts it), wait until it is registered again and back in "
                       "every ISR with nothing offline or under min ISR, restore its leadership; after the last one "
                       "remove the temporary replicas and restore the preferred leaders.")
    add_zk(p, kraft=True)
    p.add_argument("--plan", required=True, metavar="P", help="restart plan folder (kplan plan restart --out P)")
    p.add_argument("--restart-command", metavar="TEMPLATE",
                   help="command that restarts one broker, e.g. 'ssh kafka-{broker} sudo systemctl restart kafka' "
                   "({broker}, {host}, {port}); default: the roll waits for someone else to restart it")
    p.add_argument("--command-timeout", type=float, default=600.0, metavar="S",
                   help="how long the restart command may run (default 600)")
    p.add_argument("--restart-timeout", type=float, default=900.0, metavar="S",
                   help="how long a broker may take to leave and register again (default 900)")
    p.add_argument("--gate-timeout", type=float, default=900.0, metavar="S",
                   help="how long a restarted broker's partitions may take to rejoin their ISRs (default 900)")
    p.add_argument("--pause", action="store_true",
                   help="stop after each broker once its gates passed; run the roll again to continue")
    p.add_argument("--keep-temporary", action="store_true",
                   help="after the last broker keep the temporary replicas (default: remove them)")
    p.add_argument("--throttle", type=rate, metavar="RATE",
                   help="replication throttle of the temporary replicas' copies (e.g. 50MB); default: the plan's "
                   "suggestion")
    p.add_argument("--no-throttle", action="store_true",
                   help="copy temporary replicas that get no rate (a plan without sizes, no --throttle) at full "
                   "speed on purpose; without it such a roll is refused")
    p.add_argument("--reason", default="", help="why the brokers restart (an OS patch, a ticket): recorded in their "
                   "maintenance state")
    p.add_argument("--poll", type=float, default=1.0, metavar="S", help="seconds between checks (default 1)")
    p.add_argument("--lock-wait", type=float, default=0.0, metavar="S",
                   help="wait up to S seconds for another kplan's lock; default: refuse at once")
    p.add_argument("--out", metavar="DIR", help="where progress.json and outcome.json go (default <run>/roll)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from planner import api

    def progress(p: api.Progress) -> None:
        print(f"kplan roll: {p.message}", file=sys.stderr, flush=True)

    stop = threading.Event()

    def graceful(signame: str) -> bool:
        """Ctrl-C / SIGTERM: answered at once; the roll stops once the broker in flight is done (as apply does
        after its batch in flight)."""
        stop.set()
        print(f"kplan roll: {signame}: stopping once the broker in flight is back, in its ISRs and leading again "
              "(a broker half way through its restart is not left so); the roll is then recorded as stopped and "
              "`kplan roll` again continues it. Interrupt again to leave at once", file=sys.stderr, flush=True)
        return True

    req = api.RollRequest(plan=Path(args.plan), out=Path(args.out) if args.out else None, **cluster(args),
                          throttle=args.throttle, restart_command=args.restart_command,
                          command_timeout=args.command_timeout, restart_timeout=args.restart_timeout,
                          gate_timeout=args.gate_timeout, pause=args.pause, keep_temporary=args.keep_temporary,
                          poll=args.poll, lock_wait=args.lock_wait, no_throttle=args.no_throttle,
                          reason=args.reason, stop=stop)
    from planner.commands._signals import SIGNALS

    SIGNALS.graceful = graceful
    try:
        outcome = api.roll(req, progress=progress)
    finally:
        SIGNALS.graceful = None
    for w in outcome.warnings:
        print(f"kplan roll: WARNING: {w}", file=sys.stderr)
    print(outcome.message)
    return SIGNALS.exit_code() if outcome.state == "interrupted" else 0
