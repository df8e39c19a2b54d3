"""The host-disk check before real-broker tests (tests/disk_check.py): it fails on the figures of the session-9
CI run that went red (18 plans refused), passes on the figures of the run that went green, and reads this
host's filesystem the way Kafka's DescribeLogDirs does (statvfs f_blocks and f_bavail)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import disk_check

GIB = 1024 ** 3
TESTS = Path(__file__).resolve().parent


def test_the_red_ci_runs_disk_stops_the_session_with_its_reason():
    # run A: 38 GiB usable of 252 GiB -> 84.9 % by Kafka's measure (the brokers reported 214.5 GiB used)
    line = disk_check.verdict(252 * GIB, 38 * GIB, "the filesystem / (/dev/vda) holding /tmp/pytest-of-x")
    assert line is not None and "\n" not in line
    assert "the filesystem / (/dev/vda) holding /tmp/pytest-of-x is 84.9% used" in line
    assert "(214.0 of 252.0 GiB, 38.0 GiB usable)" in line and "85 % disk-capacity check" in line
    assert "free at least 12.4 GiB" in line   # 214 - 0.80 * 252 = 12.4


def test_the_green_ci_runs_disk_passes_and_the_limit_is_inclusive():
    assert disk_check.verdict(252 * GIB, 65 * GIB, "/") is None          # run B: 74.2 %
    assert disk_check.verdict(100, 20, "/") is None                       # exactly 80 %: room
    assert disk_check.verdict(100, 19, "/") is not None                   # 81 %: stop


def test_this_hosts_filesystem_is_measured_as_kafka_measures_it(tmp_path):
    st = os.statvfs(tmp_path)
    mount, device = disk_check.mount_of(tmp_path)
    assert os.path.ismount(mount) and str(tmp_path).startswith(mount) and device != "?"
    used = 1 - st.f_bavail / st.f_blocks
    # a limit just under this filesystem's use stops, one just over it passes
    line = disk_check.check(tmp_path, limit=used - 0.01)
    assert line is not None and f"the filesystem {mount} ({device}) holding {tmp_path}" in line
    assert f"{used:.1%} used" in line
    assert disk_check.check(tmp_path, limit=min(used + 0.01, 1.0)) is None


class Item:
    def __init__(self, *markers: str):
        self.markers = markers

    def get_closest_marker(self, name: str):
        return name if name in self.markers else None


def test_only_a_session_with_real_broker_tests_is_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(disk_check, "LIMIT", 0.0)   # any used disk is over it
    assert disk_check.session_problem([Item("spark"), Item()], tmp_path) is None
    line = disk_check.session_problem([Item("spark"), Item("kafka")], tmp_path)
    assert line is not None and line.startswith("host disk too full for the real-broker tests: the filesystem ")


def test_a_session_with_real_broker_tests_stops_before_its_first_test(tmp_path):
    """The conftest fixture end to end, in a pytest run of its own (tests/conftest.py copied beside a
    `kafka`-marked test; a plugin sets disk_check.LIMIT to 0, so any used disk is over it): the test never
    runs, the run fails, and the one line says why."""
    (tmp_path / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (tmp_path / "lowlimit.py").write_text("import disk_check\n\ndisk_check.LIMIT = 0.0\n")
    (tmp_path / "test_real.py").write_text("import pytest\n\n\n@pytest.mark.kafka\ndef test_x():\n"
                                           "    open('ran', 'w').close()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(TESTS), str(TESTS.parent)]),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}   # none of the venv's pytest plugins is needed here
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "lowlimit",
                           "--rootdir", str(tmp_path), "-W", "ignore::pytest.PytestUnknownMarkWarning",
                           "test_real.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "host disk too full for the real-broker tests: the filesystem " in done.stdout, done.stdout
    assert not (tmp_path / "ran").exists()
