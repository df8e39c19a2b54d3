"""`kplan risk` (placeholder until its issue lands)."""

from __future__ import annotations

import argparse

from planner.errors import PlannerError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("risk", help="(not yet implemented)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    raise PlannerError("kplan risk is not implemented yet")
