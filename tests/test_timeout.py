"""The per-test timeout (pytest-timeout, configured in pyproject.toml) fires. A pytest run of its own, with this
repository's timeout settings but a 1 s limit, of a test that waits on an Event nobody sets: that test fails with
pytest-timeout's message and the run goes on to the next test (the `signal` method reports and continues). Then
the backstop (tests/timeout_backstop.py): a test that cancels the alarm, as Airflow's own timeouts do, and then
hangs, ends the run at 1.5 s with every thread's stack instead of hanging it. Each inner wait is bounded (20 s): a
timeout that never fired would make the inner test pass and this one fail, never hang."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent
LONGEST = 88   # s: the longest test seen in CI with its module fixture's set-up (pyproject.toml's comment)


def _ours_with_a_1_s_limit(pytester) -> None:
    """This repository's timeout settings in the inner run's pyproject.toml, the limit 1 s."""
    ours = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ours["timeout"] >= 3 * LONGEST
    inner = {**{k: v for k, v in ours.items() if k.startswith("timeout")}, "timeout": 1}
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\n"
                               + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in inner.items()))


def test_a_hanging_test_fails_alone_with_the_timeouts_message(pytester):
    _ours_with_a_1_s_limit(pytester)
    pytester.makepyfile(test_hangs="""
        import threading

        def test_waits_for_an_event_nobody_sets():
            threading.Event().wait(20)

        def test_the_next_test_still_runs():
            pass
        """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*Failed: Timeout (>1.0s) from pytest-timeout.*"])
    assert "FAILED test_hangs.py::test_waits_for_an_event_nobody_sets" in result.stdout.str()


def test_a_hang_after_the_alarm_was_cancelled_ends_the_run_with_the_stacks(pytester):
    _ours_with_a_1_s_limit(pytester)
    pytester.makeconftest(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\npytest_plugins = ['timeout_backstop']\n")
    pytester.makepyfile(test_hangs="""
        import signal
        import threading

        def test_cancels_the_alarm_then_waits():
            signal.setitimer(signal.ITIMER_REAL, 0)   # as Airflow's timeouts leave it
            threading.Event().wait(20)

        def test_never_reached():
            pass
        """)
    t0 = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", timeout=60)
    took = time.monotonic() - t0
    out = result.stdout.str()
    assert result.ret == 1 and took < 15, (took, out)
    assert "Stack of MainThread" in out and "test_cancels_the_alarm_then_waits" in out, out
    assert "test_never_reached" not in out and " passed" not in out, out
