"""The brokers of a trigger, checked on the API server before Airflow creates the run, with the reason in words.

Airflow 3.3's trigger form checks nothing beyond a field's type: the broker picker (kplan_airflow.form) offers
only the brokers of the latest snapshot, but the form's "Advanced Options" JSON conf and the REST API take any
value, and a JSON-schema refusal reaches the dialog as "Bad Request" and a dump of the schema. This ASGI
middleware (registered by plugins/kafka_plans.py as a `fastapi_root_middlewares` entry) reads the body of
`POST /api/v2/dags/<a kplan DAG with brokers>/dagRuns` from an authenticated caller and answers 400 with one
readable line (`detail`, which the trigger dialog shows) when the brokers are not ids of the cluster:
not a list, empty, not a whole number, negative, several ids in one entry ("1,2"), named twice, or not among
the brokers of the latest snapshot (`<runs_root>/known-brokers.json`); and, for every kplan DAG, when the
conf (over the form's defaults) does not name exactly one cluster: both a ZooKeeper connection and a Kafka
connection, or neither (kplan_airflow.form.cluster_problem). Nothing is created then.

An unauthenticated or refused caller is passed through untouched: Airflow answers 401/403 as before, and no
broker id is told to it. Runs started otherwise (dag.test(), the scheduler) are still checked by the Param
schema and by the planner's first step.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

log = logging.getLogger(__name__)

# the DAGs whose conf names brokers, with the form's label of the field
FIELDS = {"kafka_broker_drain": "Brokers to drain", "kafka_broker_return": "Brokers to bring back",
          "kafka_broker_restart": "Brokers to restart"}
# every kplan DAG names its cluster by exactly one of two connections (params zk_conn_id, kafka_conn_id)
CLUSTER_DAGS = frozenset({*FIELDS, "kafka_nightly_rebalance"})
_TRIGGER = re.compile(r"^/api/v2/dags/(?P<dag>[A-Za-z0-9_.-]+)/dagRuns/?$")
_DIGITS = re.compile(r"^[0-9]+$")
MAX_BODY = 1 << 20

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


def _one(value: Any) -> tuple[int | None, str | None]:
    """(broker id, None) or (None, why `value` is not one)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None, f"{json.dumps(value)} is not a broker id: a broker id is a whole number such as 3"
    if isinstance(value, int):
        return (value, None) if value >= 0 else (None, f"{value} is not a broker id: broker ids are 0 or more")
    text = value.strip()
    if "," in text or " " in text:
        return None, (f'"{value}" names several brokers in one entry: choose each broker on its own '
                      '(in JSON: ["1", "2"] or [1, 2])')
    if text.startswith("-") and _DIGITS.match(text[1:]):
        return None, f"{text} is not a broker id: broker ids are 0 or more"
    if not _DIGITS.match(text):
        return None, f'"{value}" is not a broker id: a broker id is a whole number such as 3'
    return int(text), None


def brokers_problem(value: Any, known: dict[str, Any] | None) -> str | None:
    """Why `value` (a trigger's `brokers`) names no valid set of the cluster's brokers, or None when it does.

    `known` is kplan_airflow.form.known_brokers(): the latest snapshot's brokers, or {} (no snapshot yet: only
    the form of the ids is checked; the planner's first step checks them against the cluster)."""
    if not isinstance(value, list):
        return "choose the brokers from the list (in JSON: a list of broker ids, e.g. [1, 2])"
    if not value:
        return "choose at least one broker"
    ids: list[int] = []
    for item in value:
        broker, why = _one(item)
        if why:
            return why
        if broker in ids:
            return f"broker {broker} is named twice"
        ids.append(broker)
    rows = (known or {}).get("brokers") or []
    have = sorted(int(b["id"]) for b in rows)
    unknown = [b for b in ids if b not in have]
    if have and unknown:
        taken = (known or {}).get("taken_at") or "time unknown"
        return (f"{'broker' if len(unknown) == 1 else 'brokers'} {', '.join(map(str, unknown))} "
                f"{'is' if len(unknown) == 1 else 'are'} not in the cluster: the latest snapshot ({taken}) has "
                f"brokers {', '.join(map(str, have))}")
    return None


def trigger_problem(dag_id: str, body: bytes, known: dict[str, Any] | None,
                    defaults: dict[str, Any] | None = None) -> str | None:
    """The one-line reason a trigger of `dag_id` with this request body is refused, or None (let Airflow
    decide: other DAGs, a body Airflow itself refuses). `defaults`: the form's cluster connections
    (kplan_airflow.form.cluster_defaults()), which a conf without them gets."""
    from kplan_airflow.form import cluster_defaults, cluster_problem

    if dag_id not in CLUSTER_DAGS:
        return None
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    conf = doc.get("conf")
    if conf is None:
        conf = {}
    if not isinstance(conf, dict):
        return None
    label = FIELDS.get(dag_id)
    if label is not None and "brokers" in conf:
        why = brokers_problem(conf["brokers"], known)
        if why:
            return f"{label}: {why}. Nothing was triggered."
    given = {**(cluster_defaults() if defaults is None else defaults), **conf}
    why = cluster_problem(given.get("zk_conn_id"), given.get("kafka_conn_id"))
    return f"Cluster: {why}. Nothing was triggered." if why else None


async def _authenticated(scope: Scope) -> bool:
    """Whether the request carries a token Airflow's auth manager accepts (header or the UI's cookie)."""
    from airflow.api_fastapi.core_api.security import resolve_user_from_token
    from starlette.requests import Request

    request = Request(scope)
    header = request.headers.get("authorization", "")
    token = header[7:] if header.lower().startswith("bearer ") else request.cookies.get("_token")
    try:
        await resolve_user_from_token(token)
    except Exception:  # noqa: BLE001 (no token, expired, refused: Airflow answers it)
        return False
    return True


class TriggerCheck:
    """ASGI middleware: see the module's docstring."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        match = _TRIGGER.match(scope.get("path", "")) if scope.get("type") == "http" else None
        if not match or scope.get("method") != "POST" or match["dag"] not in CLUSTER_DAGS:
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size, more = 0, True
        while more and size <= MAX_BODY:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        replay = _replay(messages, receive)
        if more or messages[-1]["type"] != "http.request":   # too big, or the client left: Airflow answers it
            await self.app(scope, replay, send)
            return
        body = b"".join(m.get("body", b"") for m in messages)
        why = None
        try:
            if await _authenticated(scope):
                from kplan_airflow import form

                why = trigger_problem(match["dag"], body, form.known_brokers())
        except Exception:  # noqa: BLE001 (a check that breaks must not stop a trigger: the schema still checks)
            log.warning("kplan: the trigger's brokers could not be checked", exc_info=True)
        if why is None:
            await self.app(scope, replay, send)
            return
        log.info("kplan: trigger of %s refused: %s", match["dag"], why)
        from starlette.responses import JSONResponse

        await JSONResponse({"detail": why}, status_code=400)(scope, replay, send)


def _replay(messages: list[Message], then: Callable[[], Awaitable[Message]] | None = None):
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive
