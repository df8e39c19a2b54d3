"""The hard guarantees of a plan, in one place.

`Infeasible` is how the optimizer refuses a request (exit 2: nothing is written); its message names the
constraint and the partitions. `verify_plan` re-checks a finished placement against every guarantee and is
the last thing the planner runs, so a bug can never produce a plan that breaks one silently.
"""

from __future__ import annotations

import numpy as np

from planner.errors import BadInput, NextStep
from planner.optimizer.problem import Problem, rack_masks


class Infeasible(BadInput):
    """The request cannot be met without breaking a hard guarantee (a bad request: exit 2, nothing written)."""

    def __init__(self, constraint: str, message: str, next_steps: tuple[NextStep, ...] = ()):
        super().__init__(message, next_steps=next_steps)
        self.constraint = constraint


def group_by_topic(pb: Problem, rows: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """[(topic name, rows of that topic)] in topic order."""
    rows = np.asarray(rows)
    topics = pb.topic_of[rows]
    out = []
    for t in sorted(set(topics.tolist())):
        out.append((pb.topic_names[t], rows[topics == t]))
    return out


def popcount(x: np.ndarray) -> np.ndarray:
    return np.bitwise_count(np.asarray(x, dtype=np.uint64)).astype(np.int32)


def required_racks(pb: Problem, eligible: np.ndarray) -> np.ndarray:
    """Per partition: the racks it must span afterwards, min(RF, racks with eligible brokers), but never more
    than it spans now (a partition that already was below the target may stay where it is)."""
    if not pb.rack_aware:
        return np.zeros(pb.num_partitions, dtype=np.int32)
    bits = pb.rack_bits()
    n_racks = int(popcount(np.bitwise_or.reduce(bits[eligible]) if eligible.any() else np.uint64(0)))
    now = popcount(rack_masks(pb.replicas, bits))
    return np.minimum(np.minimum(pb.rf, n_racks), now).astype(np.int32)


def verify_plan(pb: Problem, final: np.ndarray, drained: np.ndarray) -> None:
    """Raise Infeasible (naming the guarantee and partitions) if `final` breaks any hard guarantee."""
    orig = pb.replicas
    valid_o = orig >= 0
    valid_f = final >= 0
    errors = []

    def fail(name: str, rows: np.ndarray, text: str) -> None:
        rows = np.flatnonzero(rows) if rows.dtype == bool else rows
        if len(rows):
            errors.append(Infeasible(name, f"{text}: {pb.names(rows)}"))

    fail("replication-factor", valid_o.sum(1) != valid_f.sum(1), "replication factor changed")
    s = np.sort(np.where(valid_f, final, -1 - np.arange(final.shape[1])[None, :]), axis=1)
    fail("distinct-replicas", (s[:, 1:] == s[:, :-1]).any(axis=1) if final.shape[1] > 1 else
         np.zeros(len(final), bool), "a broker holds two replicas of one partition")
    fixed = pb.fixed
    fail("excluded-untouched", fixed & (orig != final).any(axis=1), "excluded or in-flight partitions changed")
    if drained.any():
        fail("drained-empty", (valid_f & drained[np.maximum(final, 0)]).any(axis=1),
             "replicas left on drained brokers")
    added = valid_f & ~_member(final, orig)
    eligible = pb.receivers(drained)
    fail("eligible-receivers", (added & ~eligible[np.maximum(final, 0)]).any(axis=1),
         "replicas added on a broker that is not registered, is being drained or is in maintenance")
    if final.shape[1]:
        lead = final[:, 0]
        fail("maintenance-leaders", (lead >= 0) & (lead != orig[:, 0]) & pb.in_maintenance[np.maximum(lead, 0)],
             "preferred leadership given to a broker in maintenance")
    if pb.rack_aware:
        bits = pb.rack_bits()
        need = required_racks(pb, eligible)
        fail("rack-coverage", popcount(rack_masks(final, bits)) < need,
             "partitions would span fewer racks than min(RF, racks)")
    if errors:
        raise errors[0]


def _member(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(P, Ra) bool: a[i, j] is among b[i, :] (row-wise membership, -1 never matches)."""
    if b.shape[1] == 0:
        return np.zeros(a.shape, bool)
    return (a[:, :, None] == b[:, None, :]).any(axis=2) & (a >= 0)
