"""spark-submit entry of the drain-risk job, inside the installed package (planner.risk_job does the work)."""

import sys

from planner.risk_job import main

if __name__ == "__main__":
    sys.exit(main())
