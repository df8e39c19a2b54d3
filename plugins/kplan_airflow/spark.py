"""What spark-submit needs to run the planner's risk job for a planner.api.RiskRequest.

`planner.api.risk_submit` validates the request with the planner's own checks (the same ones `api.risk`
runs, so bad input fails here with the planner's message, before any JVM starts) and names the job's
spark-submit entry inside the installed package, its arguments and Spark settings. This adds what the
spark-submit process needs from this worker's environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from planner import api


def submit_env() -> dict[str, str]:
    """spark-submit is found on this PATH (the Spark provider runs it by name) and runs this interpreter."""
    bindir = str(Path(sys.executable).parent)
    return {
        "PATH": os.pathsep.join([bindir, os.environ.get("PATH", "")]),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
    }


def risk_submit(req: api.RiskRequest) -> api.RiskSubmit:
    return api.risk_submit(req)
