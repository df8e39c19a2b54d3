"""The spark-submit command line of the risk job: `planner/jobs/drain_risk.py` (installed package) and
`spark/drain_risk.py` (checkout) call `main`. Arguments as `kplan risk` takes them (planner.risk_args); exit 0,
or 2 on bad input with nothing written. Errors are logged as "ERROR planner.spark.submit: <message>", the
line `kplan risk --spark-submit` (planner.risk_run) reports."""

from __future__ import annotations

import argparse
import logging
import sys

from planner import risk as risk_lib
from planner.errors import PlannerError
from planner.risk_args import add_arguments, request_from_args
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
        risk_lib.prepare(req)
    except PlannerError as e:
        log.error("%s", e)
        return e.exit_code
    spark = session(req.master, req.driver_memory)
    try:
        assess(spark, req)
    except PlannerError as e:
        log.error("%s", e)
        return e.exit_code
    finally:
        spark.stop()
    return 0
