"""Airflow plugin "Kafka plans": the plan review app on the API server and its entry in the UI's Browse menu.

The app itself is kplan_airflow.review.app (installed with the project); it is built only when the API
server asks for it, so importing this module (workers and the scheduler import plugins too) stays cheap.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/kafka-plans"


class KafkaPlansPlugin(AirflowPlugin):
    name = "kafka_plans"
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
