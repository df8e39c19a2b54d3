"""The baseline of a side-by-side benchmark: an older kplan, run alternately with this checkout in one run.

`baseline_tree(rev, work)`: a checkout folder as given, else the commit `rev` exported with `git archive` into
`work/baseline-<rev>` (a plain tree, no worktree left behind). A child process runs it with `cwd` and
`PYTHONPATH` set to the tree, so `python -m planner.cli` is that commit's CLI with this venv's packages.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def baseline_tree(rev: str, work: Path) -> Path:
    if Path(rev).is_dir():
        return Path(rev).resolve()
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.strip()
    tree = Path(work) / f"baseline-{sha}"
    if not (tree / "planner" / "cli.py").is_file():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", "--format=tar", sha], cwd=REPO, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def env_for(tree: Path) -> dict[str, str]:
    """The environment of a child that runs the kplan in `tree`."""
    return {**os.environ, "PYTHONPATH": str(tree)}
