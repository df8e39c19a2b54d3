"""The "Kafka plans" review app (FastAPI), mounted on the Airflow API server by plugins/kafka_plans.py."""
