"""`kplan apply --zk … --plan P`: apply exactly the reviewed plan through ZooKeeper, batch by batch
(docs/APPLY.md). Resumes a run that was interrupted; `--dry-run` prints every write it would make and
makes none. Exit 0 applied (or already applied), 1 refused for safety / timed out / cancelled / a drain whose
brokers still host partitions, 2 bad input, 130 / 143 stopped by Ctrl-C / SIGTERM (after the batch in flight,
throttles removed, run recorded; a second signal leaves at once, naming what is left)."""

from __future__ import annotations

import argparse
import sys
import threading

from planner.commands._zkargs import ProgressLine, add_zk, cluster, rate, said


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("apply", help="apply a reviewed plan through ZooKeeper (lock, preflight, throttles, batches)",
                       description="Apply the plan folder P to the cluster: one batch at a time through "
                       "/admin/reassign_partitions, each submitted when the previous one completed, with "
                       "replication throttles set as Kafka's own tool sets them and removed afterwards. Holds "
                       "a ZooKeeper lock for the whole apply and refuses a plan that no longer matches the "
                       "cluster. An interrupted apply run again resumes where it stopped.")
    add_zk(p, kraft=True)
    p.add_argument("--plan", required=True, metavar="P", help="plan folder (kplan plan ... --out P)")
    t = p.add_mutually_exclusive_group()
    t.add_argument("--throttle", type=rate, metavar="RATE",
                   help="replication throttle in bytes/s for the data batches (e.g. 50MB); default: the "
                   "plan's suggestion per batch. A data batch with neither is refused unless --no-throttle")
    t.add_argument("--no-throttle", action="store_true",
                   help="copy batches that have no rate (no --throttle, no suggestion: a plan without sizes) at "
                   "full speed, on purpose")
    p.add_argument("--max-concurrent-per-broker", type=int, metavar="N",
                   help="split the plan's batches so that no broker takes part in more than N moves at once "
                   "(at most the plan's own limit)")
    p.add_argument("--poll", type=float, default=1.0, metavar="S", help="seconds between checks (default 1)")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="give up (exit 1, run recorded, resumable) after S seconds; default: wait")
    p.add_argument("--lock-wait", type=float, default=0.0, metavar="S",
                   help="wait up to S seconds for another apply's lock (e.g. a killed apply whose ZooKeeper "
                   "session has not expired yet); default: refuse at once")
    p.add_argument("--dry-run", action="store_true", help="print every write it would make, make none")
    p.add_argument("--out", metavar="DIR", help="where progress.json and outcome.json go: empty, or holding only "
                   "this plan's records (default: apply/ in the plan's records folder: <run>/apply for <run>/plan, "
                   "else <plan>-run/apply)")
    p.add_argument("--reason", help="why (a drain or return records it with its brokers' maintenance state, shown "
                                    "by `kplan brokers`)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from planner import api
    from planner.execution.runstate import LOCK_PATH

    stop = threading.Event()
    req = api.ApplyRequest(plan=Path(args.plan), out=Path(args.out) if args.out else None, **cluster(args),
                           throttle=args.throttle, no_throttle=args.no_throttle, dry_run=args.dry_run,
                           max_concurrent_per_broker=args.max_concurrent_per_broker, poll=args.poll,
                           wait=args.timeout, lock_wait=args.lock_wait, reason=args.reason, stop=stop)
    if not args.dry_run:
        from planner.text import schedule_line

        plan = api.read_plan(req.plan)
        api.refuse_kraft_write(plan, "apply", req.bootstrap)      # before saying what it is about to do
        sched = api.apply_schedule(plan, req.throttle, req.no_throttle)
        if sched.refusal is None:       # what it is about to do, before the progress line starts
            print(f"apply: {schedule_line(sched)}", flush=True)
    line = ProgressLine()

    def graceful(signame: str) -> bool:
        """Ctrl-C / SIGTERM: answered at once; the apply stops after the batch in flight (docs/APPLY.md)."""
        from planner.execution.progress import ZK_DOWN

        stop.set()
        line.end()
        if line.state == ZK_DOWN:
            print(f"kplan apply: {signame}: ZooKeeper is unreachable, so nothing can be waited for or removed: "
                  "leaving now, naming what is left", file=sys.stderr, flush=True)
            return True
        print(f"kplan apply: {signame}: stopping after the batch in flight (it cannot be stopped through "
              "ZooKeeper); then this run's throttles are removed and the run recorded as stopped. Interrupt again "
              "to leave at once (what is left is then named, with the command that removes it)",
              file=sys.stderr, flush=True)
        return True

    from planner.commands._signals import SIGNALS

    SIGNALS.graceful = None if args.dry_run else graceful
    try:
        outcome = api.apply(req, progress=None if args.dry_run else line)
    finally:
        SIGNALS.graceful = None
        line.end()
    if args.dry_run:
        # the writes the apply makes between taking its lock (an ephemeral znode of kazoo's lock recipe) and
        # releasing it
        if req.bootstrap is None:
            print(f"create {LOCK_PATH}/<uuid>__lock__<seq> (ephemeral: the apply lock, held for the whole apply)")
        else:
            print("initTransactions kplan-<cluster id> (the fence on __kplan: any earlier holder is fenced)")
        for text in outcome.writes:
            print(text)
        if req.bootstrap is None:
            print(f"delete {LOCK_PATH}/<uuid>__lock__<seq> (the lock released)")
        else:
            print("commit lock released (__kplan)")
        print(f"dry run: {len(outcome.writes)} writes would be made; none was made", file=sys.stderr)
    for w in outcome.warnings:
        print(f"kplan apply: WARNING: {w}", file=sys.stderr)
    print(said(outcome.message, outcome.next_steps, args))
    if outcome.state == "interrupted":
        return SIGNALS.exit_code()
    if outcome.intent is not None and not outcome.intent["holds"]:
        return 1   # the plan is applied, but the broker is not empty: nobody may stop it on this exit code
    return 1 if outcome.state in ("cancelled", "reverted") else 0
