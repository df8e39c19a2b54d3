"""`make demo`: the drain DAG end to end on the embedded sandbox, through Airflow.

Sandbox (real ZooKeeper + emulated 6-broker cluster) -> Airflow on SQLite in <dir>/airflow -> dag.test() of
kafka_broker_drain for broker 1: snapshot, risk (spark-submit through the Spark provider, local[2]), plan,
risk after the plan, publish, approval (answered through Airflow's REST API: demo mode only), apply, verify,
report. Prints the risk before/after, the plan summary, the verification report and where the time went.

    python -m kplan_airflow.demo --dir demo-run [--brokers 1] [--keep]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kplan_airflow.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="demo-run", help="run folder (recreated)")
    ap.add_argument("--brokers", default="1", help="brokers to drain, comma-separated")
    ap.add_argument("--keep", action="store_true", help="leave the sandbox running afterwards")
    ap.add_argument("--throttle", type=int, default=200_000_000,
                    help="replication throttle in bytes/s for the demo's apply (default 200 MB/s; the plan's "
                    "own suggestion, at least 10 MiB/s per batch, would copy the demo's 1.9 GiB in about 3 minutes)")
    args = ap.parse_args(argv)
    brokers = [int(b) for b in args.brokers.split(",") if b.strip()]
    root = Path(args.dir).absolute()
    marks: list[tuple[str, float]] = []
    t0 = time.monotonic()

    def mark(what: str) -> None:
        marks.append((what, time.monotonic()))

    from kplan_airflow import local

    sandbox = local.SandboxCluster(root / "sandbox")
    sandbox.down()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    print(f"=== sandbox: real ZooKeeper + 6 emulated brokers on 3 racks ({sandbox.dir})", flush=True)
    sandbox.up("demo")
    mark("sandbox up")
    try:
        from kplan_airflow import runs
        from kplan_airflow import summary as sm

        env = local.environment(root / "airflow", zk_connect=sandbox.connect_string, runs_root=root / "runs")
        local.activate(env)
        print(f"=== Airflow on SQLite in {root / 'airflow'}: migrating the metadata DB", flush=True)
        local.init_db()
        from airflow.dag_processing.dagbag import DagBag

        dag = DagBag(dag_folder=str(local.DAGS), safe_mode=False).dags["kafka_broker_drain"]
        api = local.ApiClient(json.loads((root / "airflow" / "passwords.json").read_text())[local.USER])
        mark("Airflow ready (DB, DAGs, API client)")

        def approve(detail: dict) -> str:
            print("\n=== approval requested (Required Actions); demo mode answers Approve through the REST API\n"
                  f"subject: {detail.get('subject')}\n{detail.get('body')}\n", flush=True)
            return "Approve"

        approver = local.Approver(api, dag.dag_id, approve, deadline=900, poll=1.0).start()
        print(f"=== dag.test(): kafka_broker_drain with brokers={brokers}, throttle {args.throttle:,} B/s",
              flush=True)
        try:
            dr = dag.test(run_conf={"brokers": brokers, "sizes": str(sandbox.sizes), "throttle": args.throttle})
        finally:
            approver.stop()
        mark("DAG run")
        tis = sorted(dr.get_task_instances(), key=lambda t: t.start_date or t.end_date or dr.start_date)
        folder = runs.run_folder(dr.dag_id, dr.run_id)
        from planner.api import read_plan

        plan = read_plan(folder.plan) if (folder.plan / "plan.json").exists() else None
        before = runs.read_json(folder.risk / "summary.json")
        after = runs.read_json(folder.risk_after / "summary.json")
        if plan:
            print("\n=== plan summary and risk before / after\n" + sm.text_report(plan, sm.scenario_pairs(after, before)))
        report = runs.read_json(folder.report)
        from planner.api import verify_report_text

        print("\n=== verification report (" + str(folder.report) + ")\n"
              + (verify_report_text(report) if report else "(none: apply / verify did not run)"))
        after = runs.read_json(folder.apply / "outcome.json")
        if after:
            print(f"  apply: {after.get('state')}, {after.get('units_done')}/{after.get('units_total')} batches, "
                  f"{after.get('partitions_done')}/{after.get('partitions_total')} partitions in "
                  f"{after.get('seconds', 0):.1f} s")
        print("\n=== where the time went")
        for ti in tis:
            secs = (ti.end_date - ti.start_date).total_seconds() if ti.start_date and ti.end_date else 0.0
            state = ti.state.value if hasattr(ti.state, "value") else ti.state
            print(f"  task {ti.task_id:<11} {state:<16} {secs:6.1f} s")
        prev = t0
        for what, t in marks:
            print(f"  {what:<38} {t - prev:6.1f} s")
            prev = t
        print(f"  total {time.monotonic() - t0:.1f} s; run folder {folder.root}")
        ok = str(dr.state).endswith("success") and not approver.watchdog_fired and approver.error is None
        print(f"\nDAG run {dr.run_id}: {dr.state}")
        return 0 if ok else 1
    finally:
        if not args.keep:
            sandbox.down()


if __name__ == "__main__":
    sys.exit(main())
