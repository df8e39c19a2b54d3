"""Deferrable waits, run by the triggerer: no worker slot is held while verify waits for the cluster to converge
(VerifyTrigger) or while a broker of a restart roll restarts (RollTrigger).

`VerifyTrigger` polls verify's own convergence test (planner.api.verify_probe: one read-only pass, no lock,
no write) every `poll` seconds and fires "converged", "failed" (the planner's message: nothing a retry mends)
or, at `deadline` (epoch seconds, so a restarted triggerer keeps the same one), "timeout". ZooKeeper
unreachable meanwhile is logged and tried again. The task's `execute_complete` then runs verify itself, which
elects, removes the throttles and writes the report (kplan_airflow.operators.VerifyOperator).

`RollTrigger` polls the roll as the cluster records it (planner.api.roll_status: the roll record and every
roll broker's registration in /brokers/ids, read-only) and fires once broker `broker` has registered again
with a new ZooKeeper session (its registration's czxid differs from `czxid`, the one it had before its
restart): it left and came back. It says when it saw the broker gone, if it did. After `timeout` seconds it
fires "timeout" (the roll then says what to do). (A step waiting for the ones before it is rescheduled, not
deferred: see kplan_airflow.roll_ops.)

On a KRaft cluster `VerifyTrigger` gets `kafka_conn_id` (a connection of the Apache Kafka provider's type) instead
of `zk_conn_id`, and its polls read the cluster through the Admin API (the same verify_probe).

The ZooKeeper credentials and the Kafka connection's SASL / SSL secrets come from the connection (`zk_conn_id`,
`kafka_conn_id`), resolved in the triggerer: they are never part of the trigger's serialized arguments.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


async def zk_target(zk_conn_id: str) -> Any:
    """The ZooKeeper connect string and credentials of connection `zk_conn_id`, read in the triggerer."""
    from airflow.providers.common.compat.connection import get_async_connection

    from kplan_airflow.hooks import ZkTarget, ZooKeeperHook, connect_string

    conn = await get_async_connection(zk_conn_id, ZooKeeperHook)
    auth = (conn.login, conn.password) if conn.login and conn.password else None
    return ZkTarget(connect_string(conn.host, conn.port, conn.schema), auth)


async def kafka_target(kafka_conn_id: str) -> Any:
    """The bootstrap servers and security (a KafkaTarget) of Kafka connection `kafka_conn_id`, read in the
    triggerer through the hook (the provider's parsing), in a worker thread as the provider's compat helper
    does for a synchronous get_connection."""
    from asgiref.sync import sync_to_async

    from kplan_airflow.kafka_conn import KafkaClusterHook

    return await sync_to_async(KafkaClusterHook(kafka_config_id=kafka_conn_id).target)()


class VerifyTrigger(BaseTrigger):
    def __init__(self, *, plan: str, started: float, deadline: float, poll: float = 10.0,
                 zk_conn_id: str | None = None, kafka_conn_id: str | None = None):
        super().__init__()
        if (zk_conn_id is None) == (kafka_conn_id is None):
            raise ValueError("VerifyTrigger needs exactly one of zk_conn_id and kafka_conn_id")
        self.zk_conn_id, self.kafka_conn_id, self.plan = zk_conn_id, kafka_conn_id, plan
        self.started, self.deadline, self.poll = float(started), float(deadline), float(poll)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("kplan_airflow.triggers.VerifyTrigger",
                {"zk_conn_id": self.zk_conn_id, "kafka_conn_id": self.kafka_conn_id, "plan": self.plan,
                 "started": self.started, "deadline": self.deadline, "poll": self.poll})

    def _event(self, status: dict[str, Any]) -> TriggerEvent:
        return TriggerEvent({**status, "started": self.started, "deadline": self.deadline})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from planner import api

        if self.kafka_conn_id is not None:
            target = await kafka_target(self.kafka_conn_id)
            req = api.VerifyRequest(zk=None, bootstrap=target.bootstrap, kafka=target.security, plan=Path(self.plan))
        else:
            target = await zk_target(self.zk_conn_id)
            req = api.VerifyRequest(zk=target.connect, plan=Path(self.plan), auth=target.auth)
        last: dict[str, Any] = {"status": "waiting"}
        said = None
        while True:
            try:
                status = await asyncio.to_thread(api.verify_probe, req)
            except api.PlannerError as e:   # verify_probe raises only what a retry can mend
                self.log.warning("verify of %s: convergence not readable now (%s); trying again", self.plan, e)
                status = None
            if status is not None:
                if status["status"] in ("converged", "failed"):
                    yield self._event(status)
                    return
                last = status
                counts = (status["converged"], status["total"])
                if counts != said:
                    self.log.info("verify of %s: %s/%s partitions converged; waiting (pending: %s)", self.plan,
                                  *counts, ", ".join(status["pending"]))
                    said = counts
            left = self.deadline - time.time()
            if left <= 0:
                yield self._event({**last, "status": "timeout"})
                return
            await asyncio.sleep(min(self.poll, left))


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
        return await zk_target(self.zk_conn_id)

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
