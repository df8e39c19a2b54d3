"""A drain's intent read from the cluster itself (planner.intent holds the rule and the words): every
partition, assignments from the topic znodes and leaders from the state znodes, both in bulk (planner.zkbulk
multiReads through planner.execution.clusterview), or the statuses a caller has just read (verify reads them
all anyway for its cluster-wide figures)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.execution.clusterview import ClusterView, Key, PartStatus
from planner.execution.planview import RunPlan
from planner.intent import DrainFacts, evaluate


def facts(plan: RunPlan) -> DrainFacts:
    return DrainFacts(tuple(plan.drained), frozenset(plan.moves), plan.topics, plan.snapshot_taken_at)


def drain_intent(view: ClusterView, plan: RunPlan, statuses: Mapping[Key, PartStatus] | None = None
                 ) -> dict[str, Any] | None:
    """The intent section of a drain (None for other plans). `statuses`: every partition of the cluster,
    already read (else read here, in bulk)."""
    if plan.kind != "drain" or not plan.drained:
        return None
    if statuses is None:
        statuses = view.partitions(view.all_partition_keys())
    rows = ((k[0], k[1], s.replicas, s.leader if s.has_state else None)
            for k, s in statuses.items() if s.replicas is not None)
    return evaluate(facts(plan), rows)
