"""A backstop for pytest-timeout's `signal` method (pyproject.toml), registered by tests/conftest.py.

Code under test that uses SIGALRM itself takes the alarm over and cancels it on its way out: Airflow does, in the
test process, around each DAG file it imports (dag_processing/importers/python_importer.py) and each task with an
execution timeout (airflow.sdk.execution_time.timeout), and the DAG tests run both in process
(tests/airflow_support.py). A test that hangs after that has no timeout at all; session 10's CI hang was one
(test_airflow_dags' drain fixture, waiting in dag.test()). So each test also gets a timer thread at BACKSTOP x its
timeout. Should the test still be running then, the timer does what pytest-timeout's `thread` method does: it
prints every thread's stack and ends the run (os._exit(1)). No later test runs and no teardown either, but CI
stops at once and shows where it hung, where before it waited until killed by hand.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

BACKSTOP = 1.5   # x the test's timeout: past it, the signal timer has been cancelled or cannot interrupt
_TIMER = pytest.StashKey[threading.Timer]()


@pytest.hookimpl(optionalhook=True)   # optional: a run with plugin autoload off has no pytest-timeout hooks
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    import pytest_timeout  # here, not at import: a venv made before pytest-timeout was pinned still collects

    if settings.method == "signal" and settings.timeout:
        timer = threading.Timer(BACKSTOP * settings.timeout, pytest_timeout.timeout_timer, (item, settings))
        timer.daemon = True
        timer.name = f"timeout backstop {item.nodeid}"
        item.stash[_TIMER] = timer
        timer.start()
    # None: the hook is firstresult, and pytest-timeout's own implementation (trylast) arms the signal timer next


@pytest.hookimpl(optionalhook=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    timer = item.stash.get(_TIMER, None)
    if timer is not None:
        timer.cancel()
