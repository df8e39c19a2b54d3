"""spark-submit entry of the drain-risk job (the work is planner.spark, part of the installed package):

    spark-submit spark/drain_risk.py --snapshot D --out D2 [--drain 1,2] [--all-brokers] [--all-racks]
        [--mode controlled|failure|both] [--plan D3] [--kafka-version 3.7] [--force]

From an installed package the same entry is `planner/jobs/drain_risk.py` (what `kplan risk --spark-submit`
submits). Exit 2 on bad input, with nothing written.
"""

import sys
from pathlib import Path

try:
    from planner.spark.submit import main
except ImportError:  # a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from planner.spark.submit import main

if __name__ == "__main__":
    sys.exit(main())
