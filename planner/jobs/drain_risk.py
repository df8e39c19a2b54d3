"""spark-submit entry of the drain-risk job, inside the installed package (planner.spark.submit's `main`)."""

import sys

from planner.spark.submit import main

if __name__ == "__main__":
    sys.exit(main())
