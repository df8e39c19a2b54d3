# Two commands from a fresh clone: `make demo` (the main job on the embedded sandbox) and `make test`.
# Both create .venv, install the pinned dependencies, Java 17 and Maven (apt) when `java` / `mvn` are missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= demo-run

.PHONY: demo test lint bench setup java clean

setup: java $(STAMP)

java:
	@bash .ci/ensure-java
	@bash .ci/ensure-maven

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

demo: setup
	$(BIN)/python -m planner.demo --dir $(DEMO_DIR)

test: setup
	$(BIN)/ruff check planner spark dags plugins tests bench
	$(BIN)/python -m pytest -q tests

lint: setup
	$(BIN)/ruff check planner spark dags plugins tests bench

bench: setup
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache .hypothesis
