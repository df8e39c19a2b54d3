"""The spark-submit command line of the risk job: `planner/jobs/drain_risk.py` (installed package) and
`spark/drain_risk.py` (checkout) call `main`. Arguments as `kplan risk` takes them (planner.risk_args); exit 0,
or 2 on bad input with nothing written. Errors are logged as "ERROR planner.spark.submit: <message>", the
line `kplan risk --spark-submit` (planner.risk_run) reports."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from planner import risk as risk_lib
from planner import risk_kraft
from planner.errors import PlannerError
from planner.requests import RiskRequest
from planner.risk import Prepared
from planner.risk_args import add_arguments, request_from_args
from planner.runfolder import step_output
from planner.spark.job import assess
from planner.spark.session import session

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    """The spark-submit entry: arguments as `kplan risk` takes them; exit 0, or 2 on bad input."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    p = argparse.ArgumentParser(prog="drain_risk.py", description="Drain risk as a Spark job (planner.spark.job).")
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        req = request_from_args(args)
        prepared = risk_lib.prepare(req, kraft_ok=True)
    except PlannerError as e:
        log.error("%s", e)
        return e.exit_code
    spark = session(req.master, req.driver_memory)
    try:
        if prepared.kraft is None:
            assess(spark, req)
        else:
            _assess_kraft(spark, req, prepared)
    except PlannerError as e:
        log.error("%s", e)
        return e.exit_code
    finally:
        spark.stop()
    return 0


def _assess_kraft(spark: Any, req: RiskRequest, prepared: Prepared) -> dict[str, Any]:
    """A KRaft snapshot (its manifest's source): the same job with the KRaft controller's rule set
    (planner.risk_kraft, planner.spark.kraft_election), writing `req.out` completely or not at all."""
    inputs = tuple(Path(p) for p in (req.snapshot, req.plan) if isinstance(p, str | Path))
    with step_output(req.out, req.force, inputs) as tmp:
        return risk_kraft.run(prepared, tmp, spark=spark)
