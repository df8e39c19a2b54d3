"""`kplan snapshot` (placeholder until its issue lands)."""

from __future__ import annotations

import argparse

from planner.errors import PlannerError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("snapshot", help="(not yet implemented)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    raise PlannerError("kplan snapshot is not implemented yet")
