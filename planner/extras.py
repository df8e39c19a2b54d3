"""The optional parts of an install (pyproject.toml's extras) and the check a step makes before it needs one.

The core (`pip install kafka-maintenance-planner`) snapshots, plans, applies, verifies and cancels with kazoo,
pyarrow, pandas, numpy and OR-Tools. Reading sizes from the brokers needs kafka-python (`[kafka]`), the risk
job needs Spark (`[spark]`); the Airflow provider (`[airflow]`) and the rehearsal tools (`[sandbox]`) bring
what they need. A step that needs a missing part says so before it writes or connects anything.
"""

from __future__ import annotations

import importlib.util

from planner.errors import NotInstalled

DISTRIBUTION = "kafka-maintenance-planner"
# extra -> (the module a step imports, the distribution that carries it)
EXTRAS = {"kafka": ("kafka", "kafka-python"), "spark": ("pyspark", "pyspark")}


def installed(extra: str) -> bool:
    return importlib.util.find_spec(EXTRAS[extra][0]) is not None


def require(extra: str, what: str, otherwise: str = "") -> None:
    """NotInstalled (exit 2, nothing written) when `extra` is missing: `what` needs it; `otherwise` says how
    to do without it."""
    if not installed(extra):
        raise NotInstalled(f"{what} needs {EXTRAS[extra][1]}, which this install lacks (the extra "
                           f"{DISTRIBUTION}[{extra}])" + (f"; {otherwise}" if otherwise else ""))
