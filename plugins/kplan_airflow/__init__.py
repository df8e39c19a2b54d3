"""The Airflow side of the Kafka Maintenance Planner: a `zookeeper` connection type, the operators the DAGs
wire together, and the "Kafka plans" review app.

It lives in `plugins/kplan_airflow` and is installed as the package `kplan_airflow` (pyproject's package-dir
mapping), so a normal install has it and its `apache_airflow_provider` entry point registers the connection
type. `plugins/kafka_plans.py` is the Airflow plugin module; `plugins/.airflowignore` keeps the plugin loader
from importing this package's files as stand-alone modules.

Every operator is parameters plus an `execute` that calls `planner.api`; nothing here re-implements a step.
The planner never imports this package (nor airflow).
"""
