"""The optimizer: pure planning code (numpy + OR-Tools, no file or ZooKeeper I/O).

`problem.from_snapshot` turns a snapshot into arrays; `planning.make_plan` places replicas (`drain`,
`rebalance`), orders preferred leaders (`leaders`), re-checks every hard guarantee (`checks`) and cuts the
moves into batches (`batches`). `planner.plan_format` writes the result.
"""

from planner.optimizer.checks import Infeasible
from planner.optimizer.planning import Params, PlanResult, make_plan
from planner.optimizer.problem import Problem, from_snapshot

__all__ = ["Infeasible", "Params", "PlanResult", "Problem", "from_snapshot", "make_plan"]
