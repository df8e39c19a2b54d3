"""The client choice for DescribeLogDirs (issue 18), tried on real Kafka 3.9.2 brokers and on the emulated engine:

- Kafka's own Java Admin (`kafka-log-dirs.sh --describe`, i.e. org.apache.kafka.tools.LogDirsCommand, from the
  jars the project already fetches): a JVM per call;
- kafka-python 3.0.12 (planner.kafka_admin.describe_log_dirs: every broker at once at its registered endpoint);
- confluent-kafka (librdkafka): checked for the API at all.

Alternating the two that can, on the same sandbox. Prints wall times and what each returned.

    .venv/bin/python bench/bench_logdirs_clients.py [--reps 3] [--partitions 300]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.kafka.tools import run_tool  # noqa: E402
from planner.kafka_admin import KafkaSecurity, describe_log_dirs  # noqa: E402
from planner.sandbox import Sandbox  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=300)
    args = ap.parse_args()
    out: dict = {"load_before": os.getloadavg()}
    try:
        import confluent_kafka.admin as ck

        out["confluent_kafka"] = {"version": __import__("confluent_kafka").version()[0],
                                  "has_describe_log_dirs": hasattr(ck.AdminClient, "describe_log_dirs"),
                                  "has_alter_partition_reassignments":
                                      hasattr(ck.AdminClient, "alter_partition_reassignments")}
    except ImportError:
        out["confluent_kafka"] = "not installed"
    work = Path(tempfile.mkdtemp(prefix="bench-logdirs-"))
    sb = None
    try:
        desc = {"brokers": [{"id": b, "rack": f"r{b}"} for b in (1, 2, 3)],
                "topics": [{"name": f"t{i}", "partitions": [{"replicas": [1 + (i + j) % 3, 1 + (i + j + 1) % 3],
                                                              "size_bytes": 1000 * (j + 1)} for j in range(10)]}
                           for i in range(args.partitions // 10)]}
        sb = Sandbox.up(work / "sb", cluster=desc, engine="kafka", session_timeout=6, data_scale=1.0)
        jars = sb.kafka_jars()
        eps = sb.kafka_endpoints()
        java, py = [], []
        for _ in range(args.reps):
            t = time.perf_counter()
            res = run_tool(jars, "org.apache.kafka.tools.LogDirsCommand",
                           ["--bootstrap-server", sb.bootstrap_servers, "--describe"])
            java.append(time.perf_counter() - t)
            doc = json.loads(next(x for x in res.stdout.splitlines() if x.startswith("{")))
            n_java = sum(len(d["partitions"]) for b in doc["brokers"] for d in b["logDirs"])
            t = time.perf_counter()
            rep = describe_log_dirs(eps, KafkaSecurity())
            py.append(time.perf_counter() - t)
            n_py = sum(len(r.sizes) for r in rep.values())
            keys_java = set(doc["brokers"][0]["logDirs"][0])
        out["real_kafka"] = {
            "replicas": {"java_admin": n_java, "kafka_python": n_py},
            "java_admin_s": [round(x, 2) for x in java], "kafka_python_s": [round(x, 3) for x in py],
            "median_java_admin_s": round(statistics.median(java), 2),
            "median_kafka_python_s": round(statistics.median(py), 3),
            "java_log_dir_fields": sorted(keys_java),
            "kafka_python_api_versions": sorted({r.api_version for r in rep.values()}),
            "kafka_python_total_usable": [(r.dirs[0]["total_bytes"], r.dirs[0]["usable_bytes"])
                                          for r in rep.values()][:1],
        }
    finally:
        if sb is not None:
            sb.down()
        shutil.rmtree(work, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "out" / "logdirs_clients.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
