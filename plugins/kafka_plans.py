"""Airflow plugin "Kafka plans": the plan review app on the API server, its entry in the UI's Browse menu, the
listener that writes a run's outcome into its note, and the check of a trigger's brokers.

The app itself is kplan_airflow.review.app (installed with the project); it is built only when the API
server asks for it, so importing this module (workers and the scheduler import plugins too) stays cheap.

The UI shows an external view at `/plugin/<url_route>` followed by the path of the page inside its iframe
(Airflow 3.3 keeps the two in step), so the route is not the app's own name: `/plugin/kplan/kafka-plans/...`,
not `/plugin/kafka-plans/kafka-plans/...`. Links to the old route are redirected (OLD_ROUTE).
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin
from kplan_airflow import listener
from kplan_airflow.trigger_check import TriggerCheck

URL_PREFIX = "/kafka-plans"
URL_ROUTE = "kplan"
OLD_ROUTE = "/plugin/kafka-plans"   # the route before: /plugin/kafka-plans/kafka-plans/... -> /plugin/kplan/...


class KafkaPlansPlugin(AirflowPlugin):
    name = "kafka_plans"
    listeners = [listener]   # a run's note: who approved or rejected, which task failed and the planner's message
    external_views = [{
        "name": "Kafka plans",
        "href": f"{URL_PREFIX}/",
        "url_route": URL_ROUTE,
        "destination": "nav",
        "category": "browse",
    }]
    # a trigger naming brokers the cluster does not have is refused with the reason, before a run exists
    fastapi_root_middlewares = [{"middleware": TriggerCheck, "name": "kplan trigger check"}]

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from kplan_airflow.review.app import app, old_route_app

        return [{"app": app, "url_prefix": URL_PREFIX, "name": "Kafka plans"},
                {"app": old_route_app(f"/plugin/{URL_ROUTE}"), "url_prefix": OLD_ROUTE,
                 "name": "Kafka plans (old route)"}]
