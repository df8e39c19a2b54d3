"""`make demo` to its end (issue 19 item 7): what the terminal shows is the demo's own account, not Airflow's
logs. Before, ~480 lines of Airflow and Spark logging buried the summary, and the summary came twice. The real
demo (python -m kplan_airflow.demo: sandbox, Airflow on SQLite, dag.test() of the drain) runs in a subprocess,
with --skip-risk (the Spark risk tasks marked successful: the risk table's layout is tested on its own in
test_demo_report.py). 112 s measured with the other heavy slot busy."""

from __future__ import annotations

import re
import subprocess
import sys

LOG_LINE = re.compile(r"\[(debug|info|warning|error)\s*\]| (DEBUG|INFO|WARNING|ERROR) |\[DAG TEST\]|Traceback")


def test_make_demo_shows_its_summary_once_and_leaves_airflows_logs_in_the_log_file(tmp_path):
    root = tmp_path / "demo"
    # the apply at the tests' pace (what the terminal shows is the same): --throttle 1 GB/s, not the demo's
    # 200 MB/s, copies its 2 GB in ~2 s, not ~10 s; --catch-up-delay 0.1 (one tick of the emulated brokers),
    # not the demo preset's 0.5, spares each of the 37 batches 0.4 s
    done = subprocess.run([sys.executable, "-m", "kplan_airflow.demo", "--dir", str(root), "--skip-risk",
                           "--throttle", "1000000000", "--catch-up-delay", "0.1"],
                          capture_output=True, text=True, timeout=600)
    term = done.stdout + done.stderr
    (tmp_path / "terminal.txt").write_text(term)   # what a person would have read, kept for a failure
    assert done.returncode == 0, term[-4000:]
    lines = term.splitlines()
    assert len(lines) <= 80, f"{len(lines)} lines:\n{term}"
    assert not [x for x in lines if LOG_LINE.search(x)], term
    assert term.count("=== plan summary and risk before / after") == 1, term
    assert term.count("Drain of broker(s) 1: plan sha256:") == 1, term
    assert term.count("=== verification report") == 1, term
    flat = " ".join(term.split())   # long lines wrap under their text
    assert "replicas per broker on the 5 brokers that stay: " in flat and "drained: broker 1 " in flat, term
    assert re.search(r"DAG run \S+: .*success", lines[-1]), lines[-1]
    # what the terminal was spared went to Airflow's log, which the demo names
    log = root / "airflow" / "dag-run.log"
    assert str(log) in term
    assert len(log.read_text(errors="replace").splitlines()) > 100
    # the sandbox is down: nothing of the demo is left running
    assert not (root / "sandbox" / "sandbox.json").exists()
    left = subprocess.run(["pgrep", "-f", str(root)], capture_output=True, text=True).stdout.split()
    assert left == [], left
