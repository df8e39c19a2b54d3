"""Shared fixtures: one real ZooKeeper per test session (never a mock), one chroot per test."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from planner import zk as zkmod
from planner.zkserver import ZooKeeperServer

_counter = itertools.count()


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
