"""Airflow plugin "Kafka plans": the plan review app on the API server, its entry in the UI's Browse menu, and
the listener that writes a failed run's reason into its note.

The app itself is kplan_airflow.review.app (installed with the project); it is built only when the API
server asks for it, so importing this module (workers and the scheduler import plugins too) stays cheap.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin
from kplan_airflow import listener

URL_PREFIX = "/kafka-plans"


class KafkaPlansPlugin(AirflowPlugin):
    name = "kafka_plans"
    listeners = [listener]   # a failed run's note: which task failed and the planner's message
    external_views = [{
        "name": "Kafka plans",
        "href": f"{URL_PREFIX}/",
        "url_route": "kafka-plans",
        "destination": "nav",
        "category": "browse",
    }]

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from kplan_airflow.review.app import app

        return [{"app": app, "url_prefix": URL_PREFIX, "name": "Kafka plans"}]
