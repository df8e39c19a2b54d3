"""Deferrable waits of the restart roll (kafka_broker_restart), run by the triggerer: no worker slot is held
while a broker restarts or while a step waits for the ones before it.

`RollTrigger` polls the roll as the cluster records it (planner.api.roll_status: the roll record and every
roll broker's registration in /brokers/ids, read-only) and fires once broker `broker` has registered again
with a new ZooKeeper session (its registration's czxid differs from `czxid`, the one it had before its
restart): it left and came back. It says when it saw the broker gone, if it did. After `timeout` seconds it
fires "timeout" (the roll then says what to do). (A step waiting for the ones before it is rescheduled, not
deferred: see kplan_airflow.roll_ops.)

The ZooKeeper credentials come from the connection (`zk_conn_id`), resolved in the triggerer: they are never
part of the trigger's serialized arguments.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class RollTrigger(BaseTrigger):
    def __init__(self, *, zk_conn_id: str, plan: str, step: int, broker: int, czxid: int | None = None,
                 timeout: float = 900.0, poll: float = 2.0, started: float | None = None):
        super().__init__()
        self.zk_conn_id, self.plan, self.step = zk_conn_id, plan, int(step)
        self.broker, self.czxid = broker, czxid
        self.timeout, self.poll = float(timeout), float(poll)
        self.started = started if started is not None else time.time()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("kplan_airflow.triggers.RollTrigger",
                {"zk_conn_id": self.zk_conn_id, "plan": self.plan, "step": self.step,
                 "broker": self.broker, "czxid": self.czxid, "timeout": self.timeout, "poll": self.poll,
                 "started": self.started})

    async def _target(self) -> Any:
        from airflow.providers.common.compat.connection import get_async_connection

        from kplan_airflow.hooks import ZkTarget, ZooKeeperHook, connect_string

        conn = await get_async_connection(self.zk_conn_id, ZooKeeperHook)
        auth = (conn.login, conn.password) if conn.login and conn.password else None
        return ZkTarget(connect_string(conn.host, conn.port, conn.schema), auth)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from planner import api

        target = await self._target()
        left_seen: float | None = None
        while True:
            try:
                status = await asyncio.to_thread(api.roll_status, target.connect, Path(self.plan), auth=target.auth)
            except api.PlannerError as e:
                if not e.retryable:
                    yield TriggerEvent({"status": "error", "message": str(e)})
                    return
                self.log.info("roll status not readable now (%s); trying again", e)
                status = None
            if status is not None:
                now = status["registrations"].get(self.broker)
                if now is None and left_seen is None:
                    left_seen = time.time()
                    self.log.info("broker %s left /brokers/ids", self.broker)
                if now is not None and now != self.czxid:
                    yield TriggerEvent({"status": "restarted", "broker": self.broker, "left_seen": left_seen})
                    return
            if time.time() - self.started > self.timeout:
                yield TriggerEvent({"status": "timeout", "broker": self.broker,
                                    "left_seen": left_seen})
                return
            await asyncio.sleep(self.poll)
