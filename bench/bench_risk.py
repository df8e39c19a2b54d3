"""Benchmark: the drain-risk sweep (every single broker + every rack, both modes) with the Spark job, and the
numpy reference replay on the same data; optionally side by side with another checkout (an older commit).

    .venv/bin/python bench/bench_risk.py [--sizes 200000,1000000] [--runs 3,1] [--clusters skewed,uniform]
        [--baseline REV|DIR] [--master local[2]] [--keep-snapshots DIR]

Clusters (written once per size as snapshot folders, shared by every run; 100 brokers up to 200k partitions,
200 above, as in issue 22's table):
  skewed   the realistic state (default): bench/skewed_cluster.py (brokers on 4 racks, Zipf-sized topics,
           RF 1-4, hot and new brokers, rack-aware placement as the rebalance benchmark uses) in its live
           state (`live_state`): ISRs shrunk where two slow brokers and a few others lag, leaders moved off
           three restarted brokers and a few others, unclean election on 5 % of the topics;
  uniform  planner.synth, 3 racks, RF 3, replicas rack-aware (one per rack, as Kafka places them), every ISR
           full, preferred leaders.
For each run: `kplan risk --snapshot D --out D2 --all-brokers --all-racks --mode both` as a child process,
timed from launch to exit (JVM start included), with the peak RSS of the JVM (psutil over the java
processes under it) and the peak PSS of the whole process tree (/proc/PID/smaps_rollup: a page that
processes share, as a child forked from the JVM does, counts once), the JVM's CPU time and the driver's (the Python
processes), all from /proc; Spark's event log gives each stage's wall time, task time and CPU time. Then
(first run only, current code) the reference replay (planner.replay) in a child process, and whether its
scenario figures equal Spark's. With --baseline REV (a commit, exported with `git archive`; or a checkout
folder) the same command runs from that tree (its own `planner` package, this venv), the two alternating
run by run. Prints medians and writes bench/out/risk.json. Targets (issue 22): 200k <= 15 s, 1M <= 30 s,
peak memory <= 2 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

GiB = 1024 ** 3


# How often the sampler looks (seconds). It shares the 2 cores with the job it measures: sampling every 50 ms,
# with the process list rescanned and every process's smaps_rollup read each time, cost 3.4-3.6 s of CPU in a
# 14.5 s run at 200k partitions (issue 22, session 11), inflating the walls it reported by 1-2 s.
TICK_S = 0.1          # RSS and CPU of the known processes (/proc/PID/statm, stat: cheap)
TREE_S = 0.5          # the process tree rescanned (psutil walks every pid on the machine)
PSS_S = 0.25          # /proc/PID/smaps_rollup (the kernel walks the process's page tables)
THREADS_S = 1.0       # the JVM's threads (/proc/PID/task/*/stat)


def measure(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict:
    """Run cmd; wall time, peak memory (RSS of the java processes; PSS of the whole process tree, so pages
    shared between processes count once) and the JVMs' CPU, sampled lightly (TICK_S ... THREADS_S)."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = {"java": 0, "tree": 0}
    cpu: dict[int, float] = {}  # last seen user+system CPU seconds of each java process (/proc/PID/stat)
    py: dict[int, float] = {}   # the same for the other processes (the Python driver)
    threads: dict[int, tuple[str, float]] = {}   # JVM thread id -> (name, CPU seconds), every THREADS_S
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        procs: list[psutil.Process] = []
        last = {"tree": -1e9, "pss": -1e9, "threads": -1e9}
        tree = 0
        while not done.is_set():
            now = time.monotonic()
            if now - last["tree"] >= TREE_S:
                last["tree"] = now
                try:
                    procs = [root, *root.children(recursive=True)]
                except psutil.NoSuchProcess:
                    break
            with_pss = now - last["pss"] >= PSS_S
            if with_pss:
                last["pss"] = now
                tree = 0
            java = 0
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    if with_pss:
                        tree += pss(p.pid)
                    t = p.cpu_times()
                    if "java" in p.name():
                        java += rss
                        cpu[p.pid] = t.user + t.system
                    else:
                        py[p.pid] = t.user + t.system
                except psutil.NoSuchProcess:
                    pass
            peak["java"] = max(peak["java"], java)
            peak["tree"] = max(peak["tree"], tree)
            if now - last["threads"] >= THREADS_S:
                last["threads"] = now
                for pid in cpu:
                    threads.update(jvm_threads(pid))
            done.wait(TICK_S)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = proc.communicate()
    wall = time.monotonic() - started
    done.set()
    t.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-4000:]}")
    return {"wall_s": wall, "jvm_peak_rss": peak["java"], "tree_peak_pss": peak["tree"], "jvm_cpu_s": sum(cpu.values()),
            "driver_cpu_s": sum(py.values()), "jvm_threads_cpu_s": thread_groups(threads), "stdout": out}


TICK = os.sysconf("SC_CLK_TCK")


def pss(pid: int) -> int:
    """A process's proportional set size (bytes, /proc/PID/smaps_rollup): its private pages plus its share of
    the pages it shares. Summed over a process tree, a page two processes share counts once, where RSS counts
    it in each (a child forked from the JVM at its exit shows the JVM's whole RSS until it execs)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def jvm_threads(pid: int) -> dict[int, tuple[str, float]]:
    """CPU seconds of each thread of a JVM, from /proc/PID/task/TID/stat (name, utime + stime)."""
    out = {}
    for d in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        f = stat[stat.rindex(")") + 2:].split()
        out[int(d.name)] = (name, (int(f[11]) + int(f[12])) / TICK)
    return out


def thread_groups(threads: dict[int, tuple[str, float]]) -> dict[str, float]:
    """JVM CPU by what the threads do: Spark's task threads, the JIT compilers, GC, the rest (driver side:
    py4j calls, query planning and code generation, the scheduler, the JVM's start)."""
    groups = {"tasks": 0.0, "jit": 0.0, "gc": 0.0, "other": 0.0}
    for name, sec in threads.values():
        g = ("tasks" if name.startswith("Executor task") else "jit" if "Compiler" in name
             else "gc" if name.startswith(("GC ", "VM Thread", "ParGC")) else "other")
        groups[g] += sec
    return groups


REFERENCE = """
import json, sys, time
from pathlib import Path
from planner import api, replay, risk, snapshot_io
t = time.monotonic()
req = api.RiskRequest(snapshot=Path(sys.argv[1]), out=Path(sys.argv[2]), all_brokers=True, all_racks=True)
prepared = risk.prepare(req)
state = replay.ClusterState.from_snapshot(snapshot_io.read_snapshot(sys.argv[1]))
res = replay.replay(state, prepared.scenarios, prepared.kafka_version)
res.scenarios.to_pandas().to_json(sys.argv[2] + "/reference_scenarios.json", orient="records")
print(json.dumps({"evaluated": res.rows.num_rows, "replay_s": time.monotonic() - t}))
"""


def brokers_for(n: int) -> int:
    return 100 if n <= 200_000 else 200


def make_snapshot(kind: str, n: int, folder: Path) -> Path:
    from planner import synth

    if (folder / "manifest.json").exists():
        return folder
    if kind == "uniform":
        c = synth.synth_cluster(brokers=brokers_for(n), partitions=n, rf=3, racks=3, seed=42,
                                partitions_per_topic=100, rack_aware=True)
    elif kind == "skewed":
        from skewed_cluster import live_state, skewed_cluster

        c = live_state(skewed_cluster(brokers=brokers_for(n), partitions=n, seed=11))
    else:
        raise SystemExit(f"unknown cluster kind {kind!r} (skewed, uniform)")
    synth.to_snapshot(c, folder)
    return folder


def stages(event_dir: Path, launched: float | None = None) -> dict:
    """From Spark's event log: the application's span, each stage's wall time, task time and CPU time
    (grouped by what the stage does), the time before the first job (session start), from the launch of the
    process (epoch `launched`) to the application's start (Python, spark-submit, the JVM's start), and when
    the query that writes partitions.parquet started (after building and optimizing its plan) and how long it
    took from there to its first job (physical planning, code generation)."""
    logs = sorted(event_dir.iterdir(), key=lambda p: p.stat().st_mtime)
    if not logs:
        return {}
    # Spark 4 writes a folder (eventlog_v2_*) of numbered parts events_<n>_*
    files = (sorted((f for f in logs[-1].iterdir() if f.name.startswith("events_")),
                    key=lambda f: int(f.name.split("_")[1])) if logs[-1].is_dir() else [logs[-1]])
    events = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    start = next(e["Timestamp"] for e in events if e["Event"] == "SparkListenerApplicationStart")
    end = next((e["Timestamp"] for e in events if e["Event"] == "SparkListenerApplicationEnd"), None)
    jobs = [e["Submission Time"] for e in events if e["Event"] == "SparkListenerJobStart"]
    out = []
    for e in events:
        if e["Event"] != "SparkListenerStageCompleted":
            continue
        s = e["Stage Info"]
        acc = {a["Name"]: a.get("Value") for a in s.get("Accumulables", [])}
        out.append({"id": s["Stage ID"], "name": s["Stage Name"].split(" at ")[0],
                    "start_s": (s["Submission Time"] - start) / 1000,
                    "wall_s": (s["Completion Time"] - s["Submission Time"]) / 1000, "tasks": s["Number of Tasks"],
                    "task_s": int(acc.get("internal.metrics.executorRunTime", 0) or 0) / 1000,
                    "cpu_s": int(acc.get("internal.metrics.executorCpuTime", 0) or 0) / 1e9,
                    "gc_s": int(acc.get("internal.metrics.jvmGCTime", 0) or 0) / 1000})
    queries: dict[int, dict] = {}
    for e in events:
        if e["Event"].endswith("SparkListenerSQLExecutionStart"):
            queries[e["executionId"]] = {"start": e["time"], "jobs": []}
        elif e["Event"] == "SparkListenerJobStart":
            q = (e.get("Properties") or {}).get("spark.sql.execution.id")
            if q is not None and int(q) in queries:
                queries[int(q)]["jobs"].append(e["Submission Time"])
    write = next((q for _, q in sorted(queries.items()) if q["jobs"]), None)
    return {"app_s": ((end or start) - start) / 1000, "first_job_s": (min(jobs) - start) / 1000 if jobs else None,
            "launch_to_app_s": start / 1000 - launched if launched else None,
            "write_query_s": (write["start"] - start) / 1000 if write else None,
            "write_plan_to_job_s": (min(write["jobs"]) - write["start"]) / 1000 if write else None,
            "stages": sorted(out, key=lambda x: x["start_s"])}


def spark_run(checkout: Path, snap: Path, out: Path, env: dict[str, str], work: Path) -> dict:
    ev = work / f"events-{time.monotonic_ns()}"
    ev.mkdir()
    env = {**env, "PYSPARK_SUBMIT_ARGS": f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file:{ev} "
           "--conf spark.eventLog.compress=false "
           "pyspark-shell"}
    launched = time.time()
    r = measure([sys.executable, "-m", "planner.cli", "risk", "--snapshot", str(snap), "--out", str(out),
                 "--all-brokers", "--all-racks", "--mode", "both", "--json"], checkout, env)
    summary = json.loads(r.pop("stdout"))
    r.update(evaluated=summary["evaluated"], scenarios=len(summary["scenarios"]), job_s=summary["elapsed_s"],
             spark=stages(ev, launched))
    shutil.rmtree(ev, ignore_errors=True)
    return r


def _agree(out: Path) -> bool:
    """The Spark job's scenarios.parquet and the reference's scenario table hold the same counts."""
    import pyarrow.parquet as pq

    from planner import risk_model as rm

    got = pq.read_table(out / "scenarios.parquet").to_pylist()
    want = json.loads((out / "reference_scenarios.json").read_text())
    keys = ["scenario_id", "evaluated", *rm.COUNTED, "survivors", "leaders_total", "leader_max", "level"]
    return len(got) == len(want) and all(g[k] == w[k] for g, w in zip(got, want, strict=True) for k in keys)


def warm_class_archive(work: Path) -> str:
    """The current code's driver JVM maps a class-data sharing archive made by an earlier run (once per JVM,
    Spark installation and options: planner.spark.settings.class_archive); make it before the timed runs, with
    one untimed run on a small cluster, so every timed run is a steady-state one. The first run ever pays for
    the dump once (reported in README)."""
    from planner.spark.settings import class_archive

    archive = class_archive()
    if archive is None or archive.is_file():
        return f"class-data sharing archive {archive} (there before this run)"
    snap = make_snapshot("uniform", 3000, work / "warm-snapshot")
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "planner.cli", "risk", "--snapshot", str(snap), "--out", str(work / "warm"),
                    "--all-racks", "--mode", "failure", "--json"], cwd=REPO, check=True, capture_output=True)
    return f"class-data sharing archive {archive} made by an untimed run ({time.monotonic() - started:.1f}s)"


def baseline_tree(rev: str, work: Path) -> Path:
    """A tree of the baseline: a checkout folder as given, else the commit exported with `git archive`."""
    if Path(rev).is_dir():
        return Path(rev).resolve()
    tree = work / "baseline"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def one_case(kind: str, n: int, runs: int, master: str, work: Path, checkouts: dict[str, Path],
             keep: Path | None) -> dict:
    snap = make_snapshot(kind, n, (keep or work) / f"{kind}-{n}")
    env = {**os.environ, "SPARK_MASTER": master}
    result: dict = {"cluster": kind, "partitions": n, "master": master}
    for label in checkouts:
        result[label] = {"spark": [], "reference": []}
    for i in range(runs):
        for label, checkout in checkouts.items():   # alternating, run by run
            out = work / f"risk-{kind}-{n}-{label}-{i}"
            load = os.getloadavg()[0]
            r = spark_run(checkout, snap, out, env, work)
            r["load_before"] = load
            result[label]["spark"].append(r)
            sp = r["spark"]
            print(f"  {kind} {n:>9,} {label:>8} run {i + 1}: {r['wall_s']:.1f}s (job {r['job_s']:.1f}s, "
                  f"Spark app start to first job {sp.get('first_job_s') or 0:.1f}s), JVM CPU {r['jvm_cpu_s']:.1f}s, "
                  f"driver CPU {r['driver_cpu_s']:.1f}s, JVM CPU by threads "
                  f"{', '.join(f'{k} {v:.1f}s' for k, v in r['jvm_threads_cpu_s'].items())}, JVM peak RSS {r['jvm_peak_rss'] / GiB:.2f} GiB, tree PSS "
                  f"{r['tree_peak_pss'] / GiB:.2f} GiB, load {load:.1f}", flush=True)
            if i == 0 and label == "now":
                q = measure([sys.executable, "-c", REFERENCE, str(snap), str(out)], checkout)
                q.update(json.loads(q.pop("stdout")))
                result[label]["reference"].append(q)
                agree = _agree(out)
                result[label]["agree"] = agree
                print(f"  {kind} {n:>9,} {label:>8} reference: {q['wall_s']:.1f}s, peak PSS "
                      f"{q['tree_peak_pss'] / GiB:.2f} GiB, Spark and reference agree: {agree}", flush=True)
            shutil.rmtree(out, ignore_errors=True)
    for label in checkouts:
        sp = result[label]["spark"]
        result[label].update(
            wall_median_s=statistics.median(r["wall_s"] for r in sp),
            jvm_cpu_median_s=statistics.median(r["jvm_cpu_s"] for r in sp),
            driver_cpu_median_s=statistics.median(r["driver_cpu_s"] for r in sp),
            jvm_peak_rss_gib=max(r["jvm_peak_rss"] for r in sp) / GiB,
            tree_peak_pss_gib=max(r["tree_peak_pss"] for r in sp) / GiB,
            evaluated=sp[0]["evaluated"], scenarios=sp[0]["scenarios"],
            reference_wall_s=result[label]["reference"][0]["wall_s"] if result[label]["reference"] else None)
    if not keep:
        shutil.rmtree(snap, ignore_errors=True)
    return result


def print_stages(res: dict, label: str) -> None:
    """Per stage: median wall / task / CPU time over the runs (stages matched by position)."""
    runs = [r["spark"] for r in res[label]["spark"] if r["spark"]]
    if not runs:
        return
    k = min(len(r["stages"]) for r in runs)
    def med(key: str) -> float:
        return statistics.median(r.get(key) or 0 for r in runs)

    print(f"    {label}: launch to app start {med('launch_to_app_s'):.1f}s, app {med('app_s'):.1f}s, first job at "
          f"{med('first_job_s'):.1f}s, the write query at {med('write_query_s'):.1f}s (its plan built and "
          f"optimized), its first job {med('write_plan_to_job_s'):.1f}s later")
    for i in range(k):
        st = [r["stages"][i] for r in runs]
        med = {f: statistics.median(s[f] for s in st) for f in ("start_s", "wall_s", "task_s", "cpu_s", "gc_s")}
        print(f"      stage {i:>2} +{med['start_s']:5.1f}s wall {med['wall_s']:5.1f}s tasks {st[0]['tasks']:>3} "
              f"task {med['task_s']:5.1f}s cpu {med['cpu_s']:5.1f}s gc {med['gc_s']:4.1f}s  {st[0]['name']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200000,1000000")
    ap.add_argument("--runs", default="3,1", help="runs per size (medians are reported)")
    ap.add_argument("--clusters", default="skewed")
    ap.add_argument("--baseline", help="a commit (or a checkout folder) to compare with, run alternately")
    ap.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[2]"))
    ap.add_argument("--keep-snapshots", type=Path, help="write (and reuse) the snapshots here")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    runs = [int(x) for x in args.runs.split(",")]
    runs += [runs[-1]] * (len(sizes) - len(runs))
    work = Path(tempfile.mkdtemp(prefix="kplan-bench-risk-"))
    checkouts = {"now": REPO}
    if args.baseline:
        checkouts = {"baseline": baseline_tree(args.baseline, work), "now": REPO}
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()
    print(f"bench_risk: sizes {sizes}, runs {runs}, clusters {args.clusters}, master {args.master}, now = {head} "
          f"(+ working tree changes if any), baseline = {args.baseline}, load average {load}", flush=True)
    print(warm_class_archive(work), flush=True)
    if args.keep_snapshots:
        args.keep_snapshots.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for kind in args.clusters.split(","):
            for n, r in zip(sizes, runs, strict=True):
                results.append(one_case(kind, n, r, args.master, work, checkouts, args.keep_snapshots))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    end_load = os.getloadavg()
    print()
    print(f"{'cluster':>8} {'partitions':>10} {'checkout':>8} {'scen':>5} {'part-scen':>10} {'spark s':>8} "
          f"{'JVM CPU':>8} {'drv CPU':>8} {'JVM RSS':>8} {'tree PSS':>8} {'ref s':>7} {'agree':>6}")
    for res in results:
        for label in checkouts:
            r = res[label]
            ref = f"{r['reference_wall_s']:>7.1f}" if r["reference_wall_s"] is not None else f"{'-':>7}"
            print(f"{res['cluster']:>8} {res['partitions']:>10,} {label:>8} {r['scenarios']:>5} {r['evaluated']:>10,} "
                  f"{r['wall_median_s']:>8.1f} {r['jvm_cpu_median_s']:>8.1f} {r['driver_cpu_median_s']:>8.1f} "
                  f"{r['jvm_peak_rss_gib']:>8.2f} {r['tree_peak_pss_gib']:>8.2f} {ref} {str(r.get('agree', '-')):>6}")
        if "baseline" in checkouts:
            b, c = res["baseline"], res["now"]
            res["ratio_now_over_baseline"] = c["wall_median_s"] / b["wall_median_s"]
            print(f"{'':>8} {'':>10} {'now/base':>8} wall x{res['ratio_now_over_baseline']:.2f}, JVM CPU "
                  f"x{c['jvm_cpu_median_s'] / b['jvm_cpu_median_s']:.2f}")
        print(f"  where the time goes ({res['cluster']} {res['partitions']:,}; medians):")
        for label in checkouts:
            print_stages(res, label)
    print(f"load average: {load[0]:.1f} at the start, {end_load[0]:.1f} at the end")
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "risk.json").write_text(json.dumps({"load_average_at_start": load, "load_average_at_end": end_load,
                                               "results": results, "cores": os.cpu_count(),
                                               "checkouts": {k: str(v) for k, v in checkouts.items()}},
                                              indent=2) + "\n")
    print(f"wrote {out / 'risk.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
