"""Sandbox benchmark: 50 brokers / 100,000 partitions (targets: `up` settled <= 60 s; a broker kill fully
reflected in ZooKeeper <= 10 s; the emulator's peak RSS <= 2 GiB, ZooKeeper's JVM aside).

A kill is measured from the moment the kill command is sent to the last partition-state write it caused, as
ZooKeeper recorded it (the state znodes' mtime), once every partition of the killed broker shows it: no
partition led by it, and it out of every ISR it does not hold alone. Medians over repeated runs; results also
go to bench/out/sandbox.json.

    python bench/bench_sandbox.py [--brokers 50] [--partitions 100000] [--ups 3] [--kills 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from planner import codec
from planner import zk as zkmod
from planner.sandbox import Sandbox
from planner.sandbox.zkio import multi_read

HERE = Path(__file__).resolve().parent


def rss_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure_kill(sb: Sandbox, client, broker: int, paths: list[str]) -> dict:
    before = {p: r[1].mzxid for p, r in zip(paths, multi_read(client, paths), strict=True)}
    t0 = time.time()
    sb.kill([broker])
    returned = time.time() - t0
    deadline = time.monotonic() + 60
    while True:
        results = multi_read(client, paths)
        states = [json.loads(r[0]) for r in results]
        if all(s["leader"] != broker and (broker not in s["isr"] or s["isr"] == [broker]) for s in states):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"kill of broker {broker} not reflected within 60 s")
        time.sleep(0.05)
    changed = [r[1].mtime for p, r in zip(paths, results, strict=True) if r[1].mzxid != before[p]]
    last_write = max(changed) / 1000 if changed else t0
    return {"broker": broker, "reflected_s": round(last_write - t0, 3), "command_returned_s": round(returned, 3),
            "partitions_written": len(changed), "partitions_of_broker": len(paths)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--racks", type=int, default=5)
    ap.add_argument("--ups", type=int, default=3)
    ap.add_argument("--kills", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    ups: list[float] = []
    kills: list[dict] = []
    returns: list[float] = []
    peak_rss = zk_rss = float("nan")
    try:
        for run in range(args.ups):
            started = time.monotonic()
            sb = Sandbox.up(work / "sb", brokers=args.brokers, racks=args.racks, partitions=args.partitions,
                            catch_up_delay=1.0, timeout=600)
            ups.append(time.monotonic() - started)
            print(f"up #{run + 1}: {ups[-1]:.1f}s (settled)", flush=True)
            if run == args.ups - 1:
                client = zkmod.connect(sb.connect_string)
                topics = {}
                for t in client.get_children(codec.TOPICS):
                    topics[t] = codec.decode_topic(t, client.get(codec.topic_path(t))[0])
                controller = codec.decode_controller(client.get(codec.CONTROLLER)[0]).broker_id
                victims = [b for b in range(1, args.brokers + 1) if b != controller][: args.kills]
                for b in victims:
                    paths = [codec.state_path(t, p) for t, ta in topics.items()
                             for p, reps in ta.partitions.items() if b in reps]
                    sb.wait_settled(120)
                    k = measure_kill(sb, client, b, paths)
                    kills.append(k)
                    print(f"kill broker {b}: reflected in ZooKeeper after {k['reflected_s']:.2f}s "
                          f"({k['partitions_written']} of its {k['partitions_of_broker']} partitions written; "
                          f"command returned after {k['command_returned_s']:.2f}s)", flush=True)
                    t = time.monotonic()
                    sb.start([b])
                    sb.wait_settled(300)
                    returns.append(time.monotonic() - t)
                    print(f"start broker {b}: back in every ISR after {returns[-1]:.2f}s", flush=True)
                peak_rss = rss_mb(sb.daemon_pid, "VmHWM")
                zk_rss = rss_mb(sb.zookeeper_pid, "VmRSS")
                client.stop()
                client.close()
            sb.down()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    kill_s = [k["reflected_s"] for k in kills]
    out = {
        "brokers": args.brokers, "partitions": args.partitions, "racks": args.racks,
        "up_seconds": [round(x, 2) for x in ups], "up_median_s": round(statistics.median(ups), 2),
        "kill_reflected_seconds": kill_s, "kill_median_s": round(statistics.median(kill_s), 3) if kill_s else None,
        "kills": kills,
        "return_to_isr_seconds": [round(x, 2) for x in returns],
        "daemon_peak_rss_mb": round(peak_rss, 1), "zookeeper_rss_mb": round(zk_rss, 1),
        "targets": {"up_s": 60, "kill_s": 10, "daemon_rss_mb": 2048},
    }
    print(f"\nmedian up {out['up_median_s']}s (target 60), median kill {out['kill_median_s']}s (target 10), "
          f"daemon peak RSS {out['daemon_peak_rss_mb']} MB (target 2048; ZooKeeper JVM {out['zookeeper_rss_mb']} MB)")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "sandbox.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
