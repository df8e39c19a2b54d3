"""Apply + verify benchmark on the emulated sandbox (issue 12's targets):

1. Overhead of apply + verify for a ~10,000-move plan with copy time near zero (links and throttle so fast
   that the largest synthetic partition copies within one emulator tick, catch-up immediate): target <= 30 s.
   The plan is a drain of 5 of 50 brokers (~33,000 partitions, RF 3), planned by the real planner; batches
   of up to --max-concurrent moves per broker (default 5, the plan's default: ~426 batches, each submitted
   when the previous one has completed). Throttles are set and removed as for any throttled run, so their
   writes are counted. Each repetition runs on a fresh sandbox; the median is quoted, with the CPU seconds
   the kplan process itself used (the emulated brokers and ZooKeeper run in other processes), and where the
   wall time went, from a watch on /admin/reassign_partitions: `controller_s` (each batch's znode created
   -> deleted: the emulated controller and brokers at work) and `between_s` (deleted -> next one created:
   kplan checking the batch, swapping throttles and submitting the next one).
2. How soon verify notices convergence after the last ISR join: a throttled single-batch move is applied
   while verify (poll 1 s, no election) waits; the last ISR join is the newest mtime of the plan's partition
   state znodes as ZooKeeper recorded it, compared with the moment verify declared convergence. Target: within
   one poll interval.

    python bench/bench_apply.py [--brokers 50] [--partitions 33000] [--drain 5] [--max-concurrent 5]
                                [--reps 3] [--trials 5] [--engines N] [--out FILE]
Results also go to bench/out/apply.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from planner import api
from planner.sandbox import Sandbox

HERE = Path(__file__).resolve().parent
FAST = dict(catch_up_delay=0.0, tick=0.02, link_rate=1e16, auto_rebalance=False)
THROTTLE = 10**15  # 1 PB/s: the largest synthetic partition (tens of GB) copies within one 20 ms tick


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def overhead_run(work: Path, args: argparse.Namespace, rep: int) -> dict:
    run = api.RunFolder(work / f"run{rep}")
    t = time.monotonic()
    sb = Sandbox.up(work / f"sb{rep}", brokers=args.brokers, partitions=args.partitions, rf=3, racks=0, seed=rep,
                    timeout=600, **FAST)
    up_s = time.monotonic() - t
    try:
        api.snapshot(api.SnapshotRequest(zk=sb.connect_string, out=run.snapshot))
        drained = tuple(range(1, args.drain + 1))
        plan = api.plan_drain(api.DrainRequest(snapshot=run.snapshot, out=run.plan, brokers=drained,
                                               max_concurrent_per_broker=args.max_concurrent))
        moves = plan.plan.summary["replica_moves"]
        batches = len(plan.plan.batches)
        load_before = load()
        with ZnodeClock(sb.connect_string) as clock:
            c0 = time.process_time()
            t0 = time.monotonic()
            applied = api.apply(api.ApplyRequest(zk=sb.connect_string, plan=run.plan, throttle=THROTTLE, poll=1.0))
            t1 = time.monotonic()
            verified = api.verify(api.VerifyRequest(zk=sb.connect_string, plan=run.plan, wait=120, poll=1.0))
            t2 = time.monotonic()
            cpu = time.process_time() - c0
        assert applied.state == "completed" and verified.converged
        assert verified.report["throttles_remaining"] == [] and verified.report["cluster"]["offline"] == 0
        return {"moves": moves, "partitions_moved": plan.plan.summary["partitions_moved"], "batches": batches,
                "apply_s": round(t1 - t0, 2), "verify_s": round(t2 - t1, 2), "total_s": round(t2 - t0, 2),
                **clock.split(), "config_notifications": clock.notifications,
                "kplan_cpu_s": round(cpu, 2), "sandbox_up_s": round(up_s, 1), "load_before": load_before, "load_after": load()}
    finally:
        sb.down()


class ZnodeClock:
    """Times when /admin/reassign_partitions is created and deleted (a watch, from its own session), to split
    the wall time between the controller's work and kplan's between batches."""

    def __init__(self, connect: str):
        from kazoo.client import KazooClient

        self.zk = KazooClient(hosts=connect)
        self.events: list[tuple[float, bool]] = []
        self.notifications = 0

    def __enter__(self) -> ZnodeClock:
        self.zk.start(timeout=30)
        self._base = len(self.zk.get_children("/config/changes")) if self.zk.exists("/config/changes") else 0
        self._watch()
        return self

    def _watch(self, event: object = None) -> None:
        exists = self.zk.exists("/admin/reassign_partitions", watch=self._watch) is not None
        self.events.append((time.monotonic(), exists))

    def __exit__(self, *exc: object) -> None:
        self.notifications = len(self.zk.get_children("/config/changes")) - self._base
        self.zk.stop()
        self.zk.close()

    def split(self) -> dict[str, float | int]:
        controller: list[float] = []
        between: list[float] = []
        created = deleted = None
        for t, exists in self.events:
            if exists and created is None:
                created = t
                if deleted is not None:
                    between.append(t - deleted)
            elif not exists and created is not None:
                controller.append(t - created)
                created, deleted = None, t
        # A deletion followed by a creation before the watch is set again is seen as one longer batch.

        def med(xs: list[float]) -> float | None:
            return round(1000 * statistics.median(xs), 1) if xs else None

        return {"controller_s": round(sum(controller), 2), "between_s": round(sum(between), 2),
                "batches_seen": len(controller), "controller_ms_per_batch": med(controller),
                "between_ms_per_batch": med(between)}


def detection_trial(work: Path, i: int) -> dict:
    """One throttled single-batch move applied while verify waits; returns verify's lag behind the last ISR join."""
    from planner import zk as zkmod
    from planner.plan_model import plan_id

    desc = {"brokers": [{"id": b} for b in range(1, 5)],
            "topics": [{"name": "t", "partitions": [{"replicas": [1, 2], "size_bytes": 3_000_000 + 500_000 * p}
                                                    for p in range(4)]}]}
    sb = Sandbox.up(work / f"det{i}", cluster=desc, timeout=120, catch_up_delay=0.0, tick=0.02,
                    auto_rebalance=False)
    try:
        plan_dir = work / f"det{i}-run" / "plan"
        plan_dir.mkdir(parents=True)
        moves = [{"topic": "t", "partition": p, "from": [1, 2], "to": [3, 4], "bytes": 2 * (3_000_000 + 500_000 * p),
                  "kind": "data"} for p in range(4)]
        doc = {"format": "kplan-plan/1", "id": "", "kind": "rebalance",
               "snapshot": {"fingerprint": "sha256:" + "0" * 64}, "parameters": {"max_concurrent_per_broker": 5},
               "moves": moves, "batches": [{"index": 0, "kind": "data", "partitions": [["t", p] for p in range(4)],
                                            "replicas": [[3, 4]] * 4}]}
        doc["id"] = plan_id(doc)
        (plan_dir / "plan.json").write_text(json.dumps(doc))
        for name, key in (("reassignment.json", "to"), ("rollback.json", "from")):
            (plan_dir / name).write_text(json.dumps({"version": 1, "partitions": [
                {"topic": "t", "partition": m["partition"], "replicas": m[key]} for m in moves]}))
        result: dict = {}
        polling = threading.Event()

        def run_verify() -> None:
            result["v"] = api.verify(api.VerifyRequest(zk=sb.connect_string, plan=plan_dir, wait=60, poll=1.0,
                                                       elect=False), progress=lambda p: polling.set())

        th = threading.Thread(target=run_verify)
        th.start()
        if not polling.wait(30):  # verify has read the cluster once (nothing converged) before anything moves
            raise RuntimeError("verify did not start polling within 30 s")
        api.apply(api.ApplyRequest(zk=sb.connect_string, plan=plan_dir, throttle=4_000_000, poll=1.0))
        th.join(60)
        report = result["v"].report
        with zkmod.session(sb.connect_string) as zk:
            joins = [zk.get(f"/brokers/topics/t/partitions/{p}/state")[1].mtime for p in range(4)]
        last_join = max(joins) / 1000
        return {"lag_s": round(report["converged_at"] - last_join, 3), "copy_s": round(last_join - min(joins) / 1000, 2)}
    finally:
        sb.down()


def engines_run(work: Path, engine: str, partitions: int) -> dict:
    """The same small drain on real Kafka 3.9 brokers and on the emulated engine: 4 brokers, one topic of
    `partitions` RF-2 partitions of 100 kB, broker 1 drained one move at a time (as many batches as broker 1
    holds partitions). What a batch costs the controller there is the floor under any apply's overhead."""
    desc = {"brokers": [{"id": b} for b in range(1, 5)],
            "topics": [{"name": "t", "partitions": [{"replicas": [p % 4 + 1, (p + 1) % 4 + 1], "size_bytes": 100_000}
                                                    for p in range(partitions)]}]}
    timing = dict(FAST) if engine == "emulated" else dict(session_timeout=6, auto_rebalance=False)
    run = api.RunFolder(work / f"{engine}-run")
    t = time.monotonic()
    sb = Sandbox.up(work / f"{engine}-sb", cluster=desc, engine=engine, timeout=300, **timing)
    up_s = time.monotonic() - t
    try:
        api.snapshot(api.SnapshotRequest(zk=sb.connect_string, out=run.snapshot))
        plan = api.plan_drain(api.DrainRequest(snapshot=run.snapshot, out=run.plan, brokers=(1,),
                                               max_concurrent_per_broker=1))
        with ZnodeClock(sb.connect_string) as clock:
            t0 = time.monotonic()
            applied = api.apply(api.ApplyRequest(zk=sb.connect_string, plan=run.plan, throttle=THROTTLE, poll=1.0))
            t1 = time.monotonic()
            verified = api.verify(api.VerifyRequest(zk=sb.connect_string, plan=run.plan, wait=120, poll=1.0))
            t2 = time.monotonic()
        assert applied.state == "completed" and verified.converged
        return {"engine": engine, "moves": plan.plan.summary["replica_moves"], "batches": len(plan.plan.batches),
                "apply_s": round(t1 - t0, 2), "verify_s": round(t2 - t1, 2), **clock.split(),
                "sandbox_up_s": round(up_s, 1), "load": load()}
    finally:
        sb.down()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=33_000)
    ap.add_argument("--drain", type=int, default=5)
    ap.add_argument("--max-concurrent", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "apply.json")
    ap.add_argument("--engines", type=int, default=0, metavar="N",
                    help="also run a drain of N small partitions on real Kafka and on the emulated engine")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-apply-"))
    out: dict = {"cpus": os.cpu_count(), "args": vars(args)}
    try:
        runs = []
        for rep in range(args.reps):
            r = overhead_run(work, args, rep)
            runs.append(r)
            print(f"apply+verify: {r}", flush=True)
        med = statistics.median(r["total_s"] for r in runs) if runs else None
        if runs:
            out["overhead"] = {"runs": runs, "median_total_s": med, "target_s": 30} | {
                f"median_{k}": statistics.median(r[k] for r in runs)
                for k in ("apply_s", "verify_s", "kplan_cpu_s", "controller_s", "between_s")}
            print(f"apply+verify of ~{runs[0]['moves']} moves in {runs[0]['batches']} batches: median {med:.1f} s "
                  f"(target 30 s)", flush=True)
        trials = [detection_trial(work, i) for i in range(args.trials)]
        lags = [t["lag_s"] for t in trials]
        if lags:
            out["detection"] = {"trials": trials, "median_lag_s": statistics.median(lags), "max_lag_s": max(lags),
                                "poll_s": 1.0}
            print(f"verify noticed convergence {statistics.median(lags):.3f} s (median; max {max(lags):.3f} s) "
                  "after the last ISR join (poll 1 s)", flush=True)
        if args.engines:
            out["engines"] = []
            for engine in ("kafka", "emulated"):
                r = engines_run(work, engine, args.engines)
                out["engines"].append(r)
                print(f"{engine}: {r}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        (args.out).write_text(json.dumps(out, indent=2, default=str) + "\n")
        ok = (med is None or med <= 30) and (not lags or max(lags) <= 1.0)
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
