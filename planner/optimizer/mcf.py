"""Thin numpy wrappers over OR-Tools' min-cost flow and max flow, plus convex "level" arcs.

Every formulation in the optimizer is a network built from whole numpy arrays (no per-arc Python calls):
`FlowGraph` hands out node ranges and collects arc arrays, then adds them to OR-Tools in one vectorized call.
Balance objectives are separable convex costs on a broker's final count, written as one unit-capacity arc
per level (`level_arcs`): min-cost flow then yields the most balanced count vector the constraints allow.
"""

from __future__ import annotations

import numpy as np
from ortools.graph.python import max_flow, min_cost_flow

from planner.errors import PlannerError

BIG_CAP = 1 << 40


class SolverFailure(PlannerError):
    """OR-Tools returned something other than an optimum for a problem that must have one (a bug)."""


class FlowGraph:
    """Arcs and supplies accumulated as numpy arrays; `solve_min_cost` / `solve_max_flow` run OR-Tools."""

    def __init__(self) -> None:
        self.n_nodes = 0
        self._tails: list[np.ndarray] = []
        self._heads: list[np.ndarray] = []
        self._caps: list[np.ndarray] = []
        self._costs: list[np.ndarray] = []
        self.n_arcs = 0
        self.supply: list[tuple[np.ndarray, np.ndarray]] = []

    def nodes(self, n: int) -> np.ndarray:
        first = self.n_nodes
        self.n_nodes += int(n)
        return np.arange(first, first + int(n), dtype=np.int32)

    def node(self) -> int:
        return int(self.nodes(1)[0])

    def arcs(self, tails, heads, caps, costs=0) -> np.ndarray:
        """Add arcs (broadcasting scalars); returns their arc indices."""
        tails = np.asarray(tails, dtype=np.int32)
        heads = np.asarray(heads, dtype=np.int32)
        sized = [a.size for a in (tails, heads, np.asarray(caps), np.asarray(costs)) if a.ndim]
        n = max(sized) if sized else 1
        tails = np.broadcast_to(tails, (n,))
        heads = np.broadcast_to(heads, (n,))
        caps = np.broadcast_to(np.asarray(caps, dtype=np.int64), (n,))
        costs = np.broadcast_to(np.asarray(costs, dtype=np.int64), (n,))
        self._tails.append(np.ascontiguousarray(tails))
        self._heads.append(np.ascontiguousarray(heads))
        self._caps.append(np.ascontiguousarray(caps))
        self._costs.append(np.ascontiguousarray(costs))
        first = self.n_arcs
        self.n_arcs += n
        return np.arange(first, first + n, dtype=np.int32)

    def set_supply(self, nodes, amounts) -> None:
        nodes = np.asarray(nodes, dtype=np.int32)
        self.supply.append((np.atleast_1d(nodes), np.broadcast_to(np.asarray(amounts, dtype=np.int64),
                                                                    np.atleast_1d(nodes).shape)))

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if not self._tails:
            e32, e64 = np.zeros(0, np.int32), np.zeros(0, np.int64)
            return e32, e32, e64, e64
        return (np.concatenate(self._tails), np.concatenate(self._heads), np.concatenate(self._caps),
                np.concatenate(self._costs))

    def solve_min_cost(self, what: str) -> tuple[np.ndarray, int]:
        """Flows per arc and the optimal cost. Raises SolverFailure when infeasible (callers pre-check
        feasibility so that they can name the constraint; reaching this is a bug)."""
        tails, heads, caps, costs = self._arrays()
        f = min_cost_flow.SimpleMinCostFlow()
        if len(tails):
            f.add_arcs_with_capacity_and_unit_cost(tails, heads, caps, costs)
        sup = np.zeros(self.n_nodes, dtype=np.int64)
        for nodes, amounts in self.supply:
            np.add.at(sup, nodes, amounts)
        if self.n_nodes:
            # OR-Tools only knows nodes that appear on arcs; a node with supply but no arc is infeasible.
            if f.num_nodes() < self.n_nodes:
                f.add_arc_with_capacity_and_unit_cost(self.n_nodes - 1, self.n_nodes - 1, 0, 0)
            f.set_nodes_supplies(np.arange(self.n_nodes, dtype=np.int32), sup)
        status = f.solve()
        if status != f.OPTIMAL:
            raise SolverFailure(f"min-cost flow for {what}: {status.name}")
        flows = f.flows(np.arange(self.n_arcs, dtype=np.int32)) if self.n_arcs else np.zeros(0, np.int64)
        return np.asarray(flows, dtype=np.int64), int(f.optimal_cost())

    def solve_max_flow(self, source: int, sink: int) -> np.ndarray:
        tails, heads, caps, _ = self._arrays()
        f = max_flow.SimpleMaxFlow()
        if len(tails):
            f.add_arcs_with_capacity(tails, heads, caps)
        status = f.solve(source, sink)
        if status != f.OPTIMAL:
            raise SolverFailure(f"max flow: {status.name}")
        return np.asarray(f.flows(np.arange(self.n_arcs, dtype=np.int32)), dtype=np.int64)


def penalty(level: np.ndarray, lo: int, hi: int, square: bool = False) -> np.ndarray:
    """Marginal cost of a broker's `level`-th unit: negative up to `lo`, zero up to `hi`, then rising by one per
    level. Non-decreasing, so summed over levels it is a convex function minimised on [lo, hi]. `square`:
    2 (level - lo) - 1, the increments of level^2 shifted by a constant per unit, so that with a fixed total
    the summed cost is the sum of squares of the counts up to a constant."""
    level = np.asarray(level, dtype=np.int64)
    if square:
        return 2 * (level - lo) - 1
    return np.where(level > hi, level - hi, np.where(level <= lo, level - lo - 1, 0))


def _ragged(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, value) for the concatenation of ranges starts[i] .. starts[i]+lengths[i]-1."""
    lengths = np.maximum(lengths, 0)
    owner = np.repeat(np.arange(len(starts)), lengths)
    offs = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return owner, np.repeat(starts, lengths) + offs


def level_arcs(g: FlowGraph, nodes: np.ndarray, hub: int, count: np.ndarray, floor: np.ndarray,
               lo: int, hi: int, weight: int, span: int, gain: bool = True, lose: bool = True,
               square: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Convex arcs between each node (a broker with `count` units now, never fewer than `floor`) and `hub`.

    Gain arcs node->hub: the unit that takes the count from k-1 to k costs weight*penalty(k). Lose arcs
    hub->node: the unit that takes it from k to k-1 costs -weight*penalty(k). Levels within `span` of the
    target band get one arc each; the rest share one "tail" arc per side whose cost is exact for its first unit
    only. Returns (gain arcs, gain owner, tail arcs, lose arcs): if a tail arc carries flow the caller re-solves
    with a wider span.
    """
    count = np.asarray(count, dtype=np.int64)
    floor = np.asarray(floor, dtype=np.int64)
    gain_arcs = np.zeros(0, np.int32)
    gain_owner = np.zeros(0, np.int64)
    lose_arcs = np.zeros(0, np.int32)
    tails = []
    if gain:
        top = np.maximum(count, hi) + span
        owner, level = _ragged(count + 1, top - count)
        gain_arcs = g.arcs(nodes[owner], hub, 1, weight * penalty(level, lo, hi, square))
        gain_owner = owner
        tails.append(g.arcs(nodes, hub, BIG_CAP, weight * penalty(top + 1, lo, hi, square)))
    if lose:
        bottom = np.maximum(floor, np.minimum(count, lo) - span)  # lowest count reachable through unit arcs
        owner, level = _ragged(bottom + 1, count - bottom)
        lose_arcs = g.arcs(hub, nodes[owner], 1, -weight * penalty(level, lo, hi, square))
        rest = bottom - floor
        has = rest > 0
        tails.append(g.arcs(hub, nodes[has], rest[has], -weight * penalty(bottom[has], lo, hi, square)))
    tail_arcs = np.concatenate(tails) if tails else np.zeros(0, np.int32)
    return gain_arcs, gain_owner, tail_arcs, lose_arcs


def band(total: int, n: int) -> tuple[int, int]:
    """(floor, ceil) of total/n: the counts of a perfectly balanced vector."""
    if n <= 0:
        return 0, 0
    return total // n, -(-total // n)


def unique(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values. (numpy 2.4's plain np.unique takes a hash path that is ~25x slower than a sort
    on millions of int64 keys.)"""
    s = np.sort(np.asarray(a).ravel())
    if not len(s):
        return s
    return s[np.concatenate([[True], s[1:] != s[:-1]])]


def unique_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, index of each element's value): np.unique(a, return_inverse=True) by a sort."""
    a = np.asarray(a).ravel()
    order = np.argsort(a, kind="stable")
    s = a[order]
    head = np.concatenate([[True], s[1:] != s[:-1]]) if len(s) else np.zeros(0, dtype=bool)
    inv = np.empty(len(a), dtype=np.int64)
    inv[order] = np.cumsum(head) - 1
    return s[head], inv
