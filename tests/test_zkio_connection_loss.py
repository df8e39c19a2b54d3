"""The emulated controller's ZooKeeper requests survive a connection lost while they are in flight, as Kafka's
controller's do (KafkaZkClient.retryRequestsUntilConnected). Seen in test_apply_zk_dead: ZooKeeper killed while
the controller wrote a submitted reassignment; the write failed with ConnectionLoss, the event that made it was
dropped, and once ZooKeeper was back the reassignment was never carried out (cancel then timed out).

Made deterministic with a ZooKeeper of the test's own: SIGSTOP, so the request is sent and stays unanswered
(kazoo's pending queue holds it); SIGKILL, so the connection drops with the request in flight (kazoo fails it
with ConnectionLoss); then the same server again, same port and data, within the session's timeout."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from waiting import poll

from planner import codec
from planner.sandbox.zkio import Op, UntilConnected, commit_fenced
from planner.zkserver import ZooKeeperServer


def _all_threads_stopped(pid: int) -> bool:
    """SIGSTOP is delivered to each thread as it next runs: until every one shows state T, a request could still
    be answered (seen under load: the request never stayed unanswered)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            continue
    return bool(states) and all(x == "T" for x in states)


class Frozen:
    """A ZooKeeper of the test's own and a client; whatever happens, both are gone afterwards (a failed run
    once left a SIGSTOPped ZooKeeper JVM behind: the servers were stopped only on the way that passed)."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.servers = [ZooKeeperServer(tmp_path / "zk", heap_mb=128).start()]
        self.client = KazooClient(hosts=self.servers[0].connect_string, timeout=30)   # outlives the restart
        try:
            self.client.start(15)
        except Exception:
            self.servers[0].stop()
            raise

    def lost_in_flight(self, request: Callable[[KazooClient], Any]) -> dict[str, Any]:
        """Run request(client) while ZooKeeper is frozen, kill ZooKeeper with it in flight, start it again."""
        server, client = self.servers[0], self.client
        client.create(codec.CONTROLLER_EPOCH, b"1")
        client.create("/t", b"before")
        os.kill(server.pid, signal.SIGSTOP)
        poll(lambda: _all_threads_stopped(server.pid), timeout=20, what="every thread of ZooKeeper's JVM stopped")
        ended: dict[str, Any] = {}

        def run() -> None:
            try:
                ended["result"] = request(client)
            except Exception as e:   # noqa: BLE001 - what the request ended with is the test's subject
                ended["error"] = e

        t = threading.Thread(target=run, daemon=True)
        t.start()
        poll(lambda: len(client._pending) == 1, timeout=20, what="the request sent and unanswered")
        os.kill(server.pid, signal.SIGKILL)
        server.process.wait(10)
        poll(lambda: not client.connected, timeout=10, what="the connection dropped")
        self.servers.append(ZooKeeperServer(self.tmp / "zk", port=server.port, heap_mb=128).start())
        t.join(60)
        assert not t.is_alive(), "the request never ended"
        return ended

    def close(self) -> None:
        for s in self.servers:
            if s.process is not None and s.process.poll() is None:
                s.process.kill()   # SIGKILL reaches a stopped JVM too
                s.process.wait(10)
        self.client.stop()
        self.client.close()


@pytest.fixture
def frozen(tmp_path) -> Iterator[Frozen]:
    f = Frozen(tmp_path)
    try:
        yield f
    finally:
        f.close()
        assert not [s.pid for s in f.servers if s.process.poll() is None]


def test_a_fenced_write_in_flight_when_zookeeper_dies_is_sent_again_once_it_is_back(frozen):
    # /controller_epoch was just created: its version is 0
    ended = frozen.lost_in_flight(lambda c: commit_fenced(c, [Op("set", "/t", b"after")], 0))
    assert "error" not in ended, repr(ended.get("error"))
    assert len(ended["result"]) == 1 and ended["result"][0].version == 1
    assert frozen.client.get("/t")[0] == b"after"


def test_a_read_in_flight_when_zookeeper_dies_is_sent_again_once_it_is_back(frozen):
    ended = frozen.lost_in_flight(lambda c: UntilConnected(c).get("/t")[0])
    assert ended == {"result": b"before"}, repr(ended)
