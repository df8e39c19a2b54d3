"""The real ZooKeeper started from pyspark's jars: it answers, runs side by side, and leaves no JVM behind."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from planner import zk as zkmod
from planner.zkserver import ZkServerError, ZooKeeperServer, four_letter, pid_alive, stop_pid


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _gone(pid: int) -> bool:
    """No such process (or only a zombie waiting to be reaped)."""
    stat = Path(f"/proc/{pid}/stat")
    if not stat.exists():
        return True
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_session_server_answers(zk_server):
    assert four_letter(zk_server.host, zk_server.port, "ruok") == "imok"
    assert "Zookeeper version: 3.9" in four_letter(zk_server.host, zk_server.port, "srvr")
    client = zkmod.connect(zk_server.connect_string)
    try:
        client.create("/zkserver_test_node", b"hello", makepath=True)
        assert client.get("/zkserver_test_node")[0] == b"hello"
        client.delete("/zkserver_test_node")
    finally:
        client.stop()
        client.close()


def test_second_instance_and_stop_leaves_nothing(zk_server, tmp_path):
    other = ZooKeeperServer(tmp_path / "zk2", heap_mb=256)
    other.start()
    pid, port = other.pid, other.port
    try:
        assert port != zk_server.port
        assert (tmp_path / "zk2" / "zookeeper.pid").read_text() == str(pid)
        client = zkmod.connect(other.connect_string)
        try:
            client.create("/only-here", b"x")
        finally:
            client.stop()
            client.close()
        # Separate data: the session server does not have it.
        main = zkmod.connect(zk_server.connect_string)
        try:
            assert main.exists("/only-here") is None
        finally:
            main.stop()
            main.close()
    finally:
        other.stop()
    assert _gone(pid)
    assert not _port_open(port)
    assert four_letter("127.0.0.1", port, "ruok") == ""
    assert not (tmp_path / "zk2" / "zookeeper.pid").exists()
    # The session server is unaffected.
    assert four_letter(zk_server.host, zk_server.port, "ruok") == "imok"


def test_stop_pid_stops_zookeeper_by_pid(tmp_path):
    server = ZooKeeperServer(tmp_path / "zk3", heap_mb=256).start()
    pid, port = server.pid, server.port
    try:
        assert stop_pid(int((tmp_path / "zk3" / "zookeeper.pid").read_text())) is True
        assert not pid_alive(pid)
        assert not _port_open(port)
        assert stop_pid(pid) is False  # already gone
    finally:
        server.stop()  # reaps the child; a no-op kill
    assert _gone(pid)


def test_stop_pid_refuses_a_pid_that_is_not_zookeeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert stop_pid(proc.pid) is False
        assert proc.poll() is None  # still running: it was not signalled
    finally:
        proc.kill()
        proc.wait()


def test_start_failure_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("KPLAN_ZK_JARS", str(tmp_path / "no-jars-here"))
    server = ZooKeeperServer(tmp_path / "zk4", heap_mb=64)
    with pytest.raises(ZkServerError, match="exited"):
        server.start(timeout=30)
    assert server.process is None or server.process.poll() is not None
