"""The `kplan` entry point: every public command is registered and errors map to docs/DESIGN.md's exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from planner import cli


def test_help_lists_every_public_command(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("sandbox", "snapshot", "risk", "plan"):
        assert command in out


def test_console_script_runs_and_unknown_command_is_usage_error():
    done = subprocess.run([sys.executable, "-m", "planner.cli", "no-such-command"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


def test_bad_connect_string_is_bad_input(tmp_path, capsys):
    rc = cli.main(["snapshot", "--zk", "not a host", "--out", str(tmp_path / "s")])
    assert rc == 2
    assert "connect string" in capsys.readouterr().err
    assert not (tmp_path / "s" / "manifest.json").exists()
