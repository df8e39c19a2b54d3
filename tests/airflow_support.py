"""Test harness for the Airflow side: an AIRFLOW_HOME per test module (SQLite migrated in process), dag.test()
with an approval answered through the REST API from a thread (with a watchdog), a real Spark standalone
master and worker started with pyspark's own sbin/spark-daemon.sh on loopback, and reads of the cluster
straight from ZooKeeper with kazoo (not through the planner) to check what a run did."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kplan_airflow import local
from waiting import poll

PASSWORD = "kplan-test-pw"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """poll() at a pace a web server or a browser does not mind."""
    return poll(cond, timeout, what, every)


@contextmanager
def airflow_env(home: Path, **kwargs: Any) -> Iterator[dict[str, str]]:
    """Activate an embedded Airflow in `home` (migrated DB, apply pool); restore os.environ afterwards."""
    saved = dict(os.environ)
    env = local.environment(home, password=PASSWORD, **kwargs)
    try:
        local.activate(env)
        local.init_db()
        yield env
    finally:
        os.environ.clear()
        os.environ.update(saved)


def load_dag(dag_id: str):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(local.DAGS), safe_mode=False)
    assert not bag.import_errors, bag.import_errors
    return bag.dags[dag_id]


def sync_dags() -> None:
    """Parse the DAG files again and store them as the dag-processor does (what the UI's forms show), as
    dag.test() does before each run: e.g. once a snapshot has recorded the brokers the forms offer."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.utils.session import create_session

    manager = DagBundlesManager()
    with create_session() as session:
        manager.sync_bundles_to_db(session=session)
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        sync_bag_to_db(bag, bundle.name, bundle.version)


DAG_TEST_PAUSE = 0.1


@contextmanager
def brisk_dag_test(pause: float = DAG_TEST_PAUSE) -> Iterator[None]:
    """While dag.test() has nothing to run it sleeps 1 s before it reads its run's task states again: while a
    task awaits a person's answer or a reschedule, and once per task of a chain that a failure or a skip
    marks upstream_failed / skipped one level at a time (7 s for a rejected drain's apply..report chain).
    Here those sleeps of dag.test()'s own loop (only its frame: every other sleep in the process is untouched)
    last `pause` s: the same loop, the same reads of the same states, more often."""
    from airflow.sdk.definitions.dag import DAG

    loop = DAG.test.__code__
    assert "sleep" in loop.co_names, "dag.test() no longer sleeps by name: see brisk_dag_test"
    real = time.sleep

    def sleep(seconds: float) -> None:
        real(min(seconds, pause) if sys._getframe(1).f_code is loop else seconds)

    time.sleep = sleep
    try:
        yield
    finally:
        time.sleep = real


def dag_test(dag, **kwargs: Any):
    """dag.test(**kwargs) under brisk_dag_test()."""
    with brisk_dag_test():
        return dag.test(**kwargs)


def run_dag(dag_id: str, conf: dict[str, Any], *, decide: Callable[[dict], str] = lambda d: "Reject",
            mark_success: str | None = None, deadline: float = 1200.0, api: local.ApiClient | None = None):
    """dag.test() in this (main) thread while a thread answers any approval through the REST API with
    `decide` (a watchdog answers Reject after `deadline` s, so a run never hangs). Returns (run, approver)."""
    dag = load_dag(dag_id)
    approver = local.Approver(api or local.ApiClient(PASSWORD), dag_id, decide, deadline=deadline, poll=0.2).start()
    try:
        dr = dag_test(dag, run_conf=conf, mark_success_pattern=mark_success)
    finally:
        approver.stop()
    if approver.error:
        raise approver.error
    assert not approver.watchdog_fired, "the watchdog had to answer the approval"
    return dr, approver


WAITING: list[dict[str, Any]] = []


def record_waiting(message: dict[str, Any]) -> None:
    """An `[kplan] approval_notify_callback` for tests: keeps what the approval's notifier said."""
    WAITING.append(message)


def states(dr) -> dict[str, str]:
    return {ti.task_id: str(ti.state.value if hasattr(ti.state, "value") else ti.state)
            for ti in dr.get_task_instances()}


# --------------------------------------------------------------------------------- the cluster, raw
def assignment(zk_connect: str) -> dict[tuple[str, int], list[int]]:
    """{(topic, partition): replicas} read from /brokers/topics with kazoo (Kafka's znode format)."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zk_connect, read_only=True)
    zk.start(timeout=15)
    try:
        out = {}
        for topic in zk.get_children("/brokers/topics"):
            data = json.loads(zk.get(f"/brokers/topics/{topic}")[0])
            for p, replicas in data["partitions"].items():
                out[(topic, int(p))] = list(replicas)
        return out
    finally:
        zk.stop()
        zk.close()


@dataclass(frozen=True)
class ClusterState:
    """What ZooKeeper says, raw: assignments, (leader, isr) per partition, every replication-throttle key set
    on a topic or a broker, and whether a reassignment is in flight."""

    assignment: dict[tuple[str, int], list[int]]
    leader_isr: dict[tuple[str, int], tuple[int, list[int]]]
    throttles: dict[str, list[str]]
    reassigning: bool


THROTTLE_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
                 "leader.replication.throttled.rate", "follower.replication.throttled.rate",
                 "replica.alter.log.dirs.io.max.bytes.per.second")


def cluster_state(zk_connect: str) -> ClusterState:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zk_connect, read_only=True)
    zk.start(timeout=15)
    try:
        assign, lead = {}, {}
        for topic in zk.get_children("/brokers/topics"):
            data = json.loads(zk.get(f"/brokers/topics/{topic}")[0])
            for p, replicas in data["partitions"].items():
                assign[(topic, int(p))] = list(replicas)
                st = json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])
                lead[(topic, int(p))] = (int(st["leader"]), list(st["isr"]))
        throttles = {}
        for kind in ("topics", "brokers"):
            for name in zk.get_children(f"/config/{kind}") if zk.exists(f"/config/{kind}") else []:
                cfg = json.loads(zk.get(f"/config/{kind}/{name}")[0] or b"{}").get("config", {})
                keys = sorted(k for k in cfg if k in THROTTLE_KEYS)
                if keys:
                    throttles[f"{kind}/{name}"] = keys
        return ClusterState(assign, lead, throttles, zk.exists("/admin/reassign_partitions") is not None)
    finally:
        zk.stop()
        zk.close()


def znode_exists(zk_connect: str, path: str) -> bool:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zk_connect, read_only=True)
    zk.start(timeout=15)
    try:
        return zk.exists(path) is not None
    finally:
        zk.stop()
        zk.close()


def znode_json(zk_connect: str, path: str) -> Any | None:
    """A znode's JSON, read raw (None when it does not exist)."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    zk = KazooClient(hosts=zk_connect, read_only=True)
    zk.start(timeout=15)
    try:
        return json.loads(zk.get(path)[0])
    except NoNodeError:
        return None
    finally:
        zk.stop()
        zk.close()


# ------------------------------------------------------------------------------- Spark standalone
@dataclass(frozen=True)
class SparkCluster:
    url: str        # spark://127.0.0.1:PORT
    ui: int         # the master's web UI port (its /json/ status)

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
            return json.loads(r.read())

    def applications(self) -> list[dict[str, Any]]:
        s = self.status()
        return list(s.get("activeapps", [])) + list(s.get("completedapps", []))


@contextmanager
def spark_standalone(workdir: Path, cores: int = 2, memory: str = "2g") -> Iterator[SparkCluster]:
    """A Spark master and one worker on 127.0.0.1, started by pyspark's own sbin/spark-daemon.sh; yields the
    cluster once the worker has registered; stops both (by their pid files) afterwards."""
    import pyspark

    home = Path(pyspark.__file__).parent
    daemon = home / "sbin" / "spark-daemon.sh"
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOG_DIR=str(workdir / "logs"),
               SPARK_PID_DIR=str(workdir / "pids"), SPARK_WORKER_DIR=str(workdir / "work"),
               SPARK_LOCAL_IP="127.0.0.1", SPARK_IDENT_STRING=f"kplan{os.getpid()}",
               SPARK_DAEMON_MEMORY="512m", PYSPARK_PYTHON=sys.executable,
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    master_cls, worker_cls = "org.apache.spark.deploy.master.Master", "org.apache.spark.deploy.worker.Worker"
    url = f"spark://127.0.0.1:{port}"

    def daemon_cmd(action: str, cls: str, *args: str) -> None:
        subprocess.run(["bash", str(daemon), action, cls, "1", *args], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=120)

    def workers() -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                return int(json.loads(r.read()).get("aliveworkers", 0))
        except OSError:
            return 0

    try:
        daemon_cmd("start", master_cls, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui))
        daemon_cmd("start", worker_cls, "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                   "--webui-port", str(worker_ui), url)
        wait_for(workers, 90, "the Spark worker to register with the master")
        yield SparkCluster(url, ui)
    finally:
        for cls in (worker_cls, master_cls):
            subprocess.run(["bash", str(daemon), "stop", cls, "1"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.STDOUT, timeout=120)


# ------------------------------------------------------------------------------ headless Chromium
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage")


@contextmanager
def chromium(profile: Path, width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """Debian's chromium driven by selenium through Debian's chromedriver (same version), fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def trigger_dialog_conf(browser: Any, conf: str, expect: str, timeout: float = 60) -> str:
    """In Airflow's open trigger dialog: type `conf` into Advanced Options -> Configuration JSON (a Monaco
    editor, typed key by key as a person would), press Trigger and wait until the dialog shows `expect`;
    returns the dialog's text."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    dialog = browser.find_element(By.CSS_SELECTOR, ".chakra-dialog__content")
    def shown_label() -> list[Any]:   # the section's content stays in the page while it is closed: visible?
        return [x for x in dialog.find_elements(By.XPATH, ".//*[text()='Configuration JSON']") if x.is_displayed()]

    label = shown_label()
    if not label:
        advanced = next(b for b in dialog.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Advanced Options")
        browser.execute_script("arguments[0].scrollIntoView()", advanced)
        advanced.click()
        label = wait_for(shown_label, 30, "the JSON conf")
    from selenium.common.exceptions import ElementClickInterceptedException, ElementNotInteractableException

    editor = dialog.find_element(By.CSS_SELECTOR, ".monaco-editor")

    def focused() -> bool:   # the section may still be opening (an animation): try until it takes the click
        try:
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", editor)
            editor.click()
        except (ElementNotInteractableException, ElementClickInterceptedException):
            return False
        return True

    wait_for(focused, 30, "the JSON conf editor to take a click", every=0.5)
    typing = editor.find_element(By.CSS_SELECTOR, ".native-edit-context")
    typing.send_keys(Keys.CONTROL, "a")
    typing.send_keys(Keys.DELETE)
    typing.send_keys(conf)
    label[0].click()   # the dialog takes the conf when the editor loses focus
    submit = dialog.find_element(By.CSS_SELECTOR, "[data-testid='trigger-dag-submit']")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", submit)
    try:
        submit.click()
    except ElementClickInterceptedException:   # the dialog's scroll shadow can lie over the button's edge
        browser.execute_script("arguments[0].click()", submit)
    return wait_for(lambda: expect in dialog.text and dialog.text, timeout, f"the dialog to show {expect!r}")


@contextmanager
def api_server(env: dict[str, str], logs: Path) -> Iterator[str]:
    """`airflow api-server` on a free loopback port with this environment; yields its base URL."""
    from kplan_airflow import stack

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**env, "AIRFLOW__API__BASE_URL": base, "AIRFLOW__API__WORKERS": "1"}
    proc = stack.start_component("api-server", env, logs, port)
    try:
        stack.wait_http(f"{base}/api/v2/monitor/health", 240, proc)
        yield base
    finally:
        stack.stop([proc])


def token(base: str) -> str:
    req = urllib.request.Request(f"{base}/auth/token", method="POST",
                                 data=json.dumps({"username": local.USER, "password": PASSWORD}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["access_token"]
