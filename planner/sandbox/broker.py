"""An emulated Kafka broker: its own ZooKeeper session, an ephemeral /brokers/ids/<id> registration (v5 with
rack and endpoints), and the race for /controller.

A kill closes the session, so ZooKeeper deletes the registration (and /controller when this broker held
it) exactly as when a Kafka broker dies; a restart opens a new session, whose new czxid is the new broker
epoch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import Callback, KazooState
from kazoo.retry import KazooRetry

from planner import codec

log = logging.getLogger("planner.sandbox.broker")


class Broker:
    def __init__(self, broker_id: int, rack: str | None, host: str | None, port: int, connect: str,
                 session_timeout: float, post: Callable[..., None]):
        self.id = broker_id
        self.rack = rack
        self.host = host
        self.port = port
        self.connect = connect
        self.session_timeout = session_timeout
        self.post = post
        self.client: KazooClient | None = None
        self.epoch = -1  # czxid of the registration
        self.shutting_down = False
        self.starts = 0
        self._controller_watch = lambda ev: self.post(self._controller_event)
        self.on_controller_event: Callable[[Broker], None] | None = None
        self.on_session_lost: Callable[[Broker], None] | None = None

    @property
    def running(self) -> bool:
        return self.client is not None

    def new_client(self) -> KazooClient:
        return KazooClient(hosts=self.connect, timeout=self.session_timeout,
                           connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
                           command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0))

    def register(self, client: KazooClient) -> None:
        """Take this started session as the broker's and register in /brokers/ids (ephemeral)."""
        self.client = client
        self.shutting_down = False
        self.starts += 1
        reg = codec.broker_for(self.id, self.rack, self.host, self.port, str(int(time.time() * 1000)))
        for _ in range(50):
            try:
                _, stat = client.create(codec.broker_path(self.id), codec.encode_broker(reg), ephemeral=True,
                                        include_data=True)
                self.epoch = stat.czxid
                break
            except NodeExistsError:
                # A previous session of this broker may not be gone yet (Kafka retries the same way).
                time.sleep(0.1)
        else:
            raise RuntimeError(f"broker {self.id}: /brokers/ids/{self.id} is held by another session")
        client.add_listener(self._state_listener)

    def _state_listener(self, state: str) -> None:
        if state == KazooState.LOST:
            self.post(self._lost)

    def _lost(self) -> None:
        if self.client is not None and self.on_session_lost is not None:
            self.on_session_lost(self)

    def close(self) -> None:
        """Close the session: ZooKeeper removes the ephemeral znodes at once."""
        client, self.client = self.client, None
        self.shutting_down = False
        if client is None:
            return
        try:
            client.remove_listener(self._state_listener)
            client.stop()
        finally:
            client.close()

    # ------------------------------------------------------------------------------- controller race
    def watch_controller(self) -> int:
        """Arm the /controller watch; returns the current controller id or -1."""
        assert self.client is not None
        try:
            if self.client.exists(codec.CONTROLLER, watch=self._controller_watch) is None:
                return -1
            data, _ = self.client.get(codec.CONTROLLER)
            return codec.decode_controller(data).broker_id
        except NoNodeError:
            return -1

    def _controller_event(self) -> None:
        if self.client is not None and self.on_controller_event is not None:
            self.on_controller_event(self)

    def try_become_controller(self) -> tuple[int, int] | None:
        """`registerControllerAndIncrementControllerEpoch`: create /controller (ephemeral) and bump
        /controller_epoch in one transaction. Returns (epoch, epoch zk version) when this broker won."""
        client = self.client
        assert client is not None
        try:
            data, stat = client.get(codec.CONTROLLER_EPOCH)
            current, version = codec.decode_controller_epoch(data), stat.version
        except NoNodeError:
            try:
                client.create(codec.CONTROLLER_EPOCH, codec.encode_controller_epoch(0))
            except NodeExistsError:
                pass
            data, stat = client.get(codec.CONTROLLER_EPOCH)
            current, version = codec.decode_controller_epoch(data), stat.version
        new = current + 1
        txn = client.transaction()
        txn.create(codec.CONTROLLER, codec.encode_controller(codec.Controller(self.id, str(int(time.time() * 1000)))),
                   ephemeral=True)
        txn.set_data(codec.CONTROLLER_EPOCH, codec.encode_controller_epoch(new), version=version)
        results = txn.commit()
        if not any(isinstance(r, Exception) for r in results):
            return new, results[1].version
        if any(isinstance(r, (NodeExistsError, BadVersionError)) for r in results):
            return None
        raise RuntimeError(f"broker {self.id}: controller election failed: {results!r}")

    def sync_barrier(self, marker: Callable[[], Any]) -> bool:
        """Round trip to ZooKeeper, then queue `marker` behind every watch callback already received."""
        client = self.client
        if client is None:
            return False
        try:
            client.sync("/")
        except Exception:  # a broker without a connection has nothing in flight
            return False
        client.handler.dispatch_callback(Callback("watch", marker, ()))
        return True
