"""Shared fixtures: one real ZooKeeper per test session (never a mock), one chroot per test."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest
from disk_check import session_problem

from planner import zk as zkmod
from planner.zkserver import ZooKeeperServer

# every test's timeout (pyproject.toml) gets a backstop for when the code under test cancels its SIGALRM
pytest_plugins = ["timeout_backstop"]

_counter = itertools.count()


@pytest.fixture(scope="session", autouse=True)
def host_disk_has_room_for_real_brokers(request, tmp_path_factory) -> None:
    """Before the first test: when the session runs real brokers (the `kafka` marker), their log dirs' filesystem
    (the session's temporary folder) must be at most disk_check.LIMIT used, or the session stops at once with
    the reason in one line instead of 18 plan refusals that look like product bugs (tests/disk_check.py)."""
    problem = session_problem(request.session.items, tmp_path_factory.getbasetemp())
    if problem:
        pytest.exit(problem, returncode=1)


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), heap_mb=512)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_chroot(zk_server, request) -> str:
    """A fresh chroot path for this test (nothing is created; loaders create it)."""
    name = request.node.name.replace("[", "_").replace("]", "").replace("/", "_")[:60]
    return f"/t{os.getpid()}_{next(_counter)}_{''.join(c if c.isalnum() or c in '_-' else '_' for c in name)}"


@pytest.fixture
def zk_connect(zk_server, zk_chroot) -> str:
    """Connect string with this test's chroot, e.g. 127.0.0.1:PORT/t123_4_test_x."""
    return zk_server.connect_string + zk_chroot


@pytest.fixture
def zk_client(zk_connect) -> Iterator:
    """A kazoo client inside this test's chroot (the chroot is created first)."""
    root = zkmod.connect(zk_connect.split("/", 1)[0])
    root.ensure_path("/" + zk_connect.split("/", 1)[1])
    root.stop()
    root.close()
    client = zkmod.connect(zk_connect)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="session")
def kafka_jars():
    """Apache Kafka's jars (fetched once from Maven Central into the cache; offline afterwards). A failed
    fetch fails the tests that need them, with Maven's own error: never a skip."""
    from planner.kafka.jars import ensure_jars

    return ensure_jars()
