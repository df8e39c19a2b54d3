# Two commands from a fresh clone: `make demo` (the main job on the embedded sandbox) and `make test`.
# Both create .venv, install the pinned dependencies, Java 17, Maven and Chromium (apt) when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= demo-run

.PHONY: demo demo-cli airflow test lint bench setup java chromium clean

setup: java chromium $(STAMP)

chromium:
	@bash .ci/ensure-chromium

java:
	@bash .ci/ensure-java
	@bash .ci/ensure-maven

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[all,dev]"
	touch $(STAMP)

# the drain DAG end to end through Airflow (dag.test on SQLite) on the embedded sandbox
demo: setup
	$(BIN)/python -m kplan_airflow.demo --dir $(DEMO_DIR)

# the same steps through the kplan CLI, without Airflow
demo-cli: setup
	$(BIN)/python -m planner.demo --dir $(DEMO_DIR)-cli

# API server, scheduler and dag-processor on SQLite with a sandbox cluster: trigger a drain in the UI
airflow: setup
	$(BIN)/python -m kplan_airflow.stack --dir airflow-run

test: setup
	$(BIN)/ruff check planner spark dags plugins tests bench
	$(BIN)/python -m pytest -q --durations=25 tests

lint: setup
	$(BIN)/ruff check planner spark dags plugins tests bench

bench: setup
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) $(DEMO_DIR) $(DEMO_DIR)-cli airflow-run .pytest_cache .hypothesis
