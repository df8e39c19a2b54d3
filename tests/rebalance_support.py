"""Issue 25's test support: a generator of varied clusters, and an INDEPENDENT check of the spread a rebalance
can reach and of the moves it needs.

Nothing here imports the optimizer. The feasibility check is a per-partition flow with lower bounds written
from the plan's rules (docs/PLAN.md "Guarantees"), solved by OR-Tools' max flow directly; the bounds are the
counts above / below the band, the leader-cap deficiency (a b-matching per topic) and the joint bound
(a min-cost flow per topic), each built here from plain lists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ortools.graph.python import max_flow, min_cost_flow

from planner.synth import SynthCluster

BIG = 1 << 40


# ------------------------------------------------------------------------------------------ generator
@dataclass
class Shape:
    brokers: int
    racks: int                  # 0: no racks
    partitions: int
    rf_weights: tuple           # RF 1..4
    new: int                    # new, nearly empty brokers
    hot: int                    # brokers holding up to 3x their share
    rack_aware_placement: bool  # replicas on distinct racks where RF allows (as Kafka places them)
    dead: int                   # brokers no longer registered that still hold replicas
    uneven_racks: bool          # rack sizes differ (one rack gets fewer brokers)
    seed: int


def random_shape(rng: np.random.Generator, per_broker: tuple[int, int] = (150, 400), max_brokers: int = 30
                 ) -> Shape:
    brokers = int(rng.integers(4, max_brokers + 1))
    racks = int(rng.choice([0, 2, 3, 3, 4, 5]))
    racks = min(racks, brokers)
    w = rng.dirichlet(np.ones(4)) * np.array([1.0, 1.0, 2.0, 0.7])
    return Shape(brokers=brokers, racks=racks, partitions=int(brokers * rng.integers(*per_broker)),
                 rf_weights=tuple(float(x) for x in w / w.sum()), new=int(rng.integers(0, max(1, brokers // 4) + 1)),
                 hot=int(rng.integers(0, 4)), rack_aware_placement=bool(rng.random() < 0.8),
                 dead=int(rng.random() < 0.15), uneven_racks=bool(rng.random() < 0.4),
                 seed=int(rng.integers(0, 1 << 30)))


def generate(shape: Shape) -> SynthCluster:
    """A cluster of the shape: Zipf-sized topics, RF per topic, replicas drawn by broker weight (hot brokers
    heavier, new ones nearly empty), on distinct racks where the placement is rack-aware."""
    rng = np.random.default_rng(shape.seed)
    B = shape.brokers
    ids = np.arange(1, B + 1, dtype=np.int32)
    if shape.racks:
        if shape.uneven_racks and shape.racks > 1:
            rack_of = rng.integers(0, shape.racks, B)
            rack_of[: shape.racks] = np.arange(shape.racks)   # every rack has a broker
        else:
            rack_of = np.arange(B) % shape.racks
        racks = [f"r{int(r)}" for r in rack_of]
    else:
        rack_of = np.zeros(B, np.int64)
        racks = [None] * B
    weight = np.ones(B)
    order = rng.permutation(B)
    new = order[: shape.new]
    hot = order[shape.new: shape.new + shape.hot]
    weight[new] = 0.002
    weight[hot] = rng.uniform(1.5, 3.0, len(hot))
    sizes = []
    left = shape.partitions
    while left > 0:
        n = int(min(left, max(1, rng.zipf(1.6)), max(8, shape.partitions // 4)))
        sizes.append(n)
        left -= n
    n_t = np.array(sizes)
    T = len(n_t)
    topic_of = np.repeat(np.arange(T, dtype=np.int32), n_t)
    part = (np.arange(shape.partitions) - np.repeat(np.cumsum(n_t) - n_t, n_t)).astype(np.int32)
    usable = max(1, B - shape.new)
    t_rf = rng.choice(np.arange(1, 5), size=T, p=np.asarray(shape.rf_weights))
    t_rf = np.minimum(t_rf, usable)
    width = int(t_rf.max())
    reps = np.full((shape.partitions, width), -1, np.int32)
    n_racks = max(1, shape.racks)
    for i in range(shape.partitions):
        rf = int(t_rf[topic_of[i]])
        w = weight.copy()
        chosen: list[int] = []
        for _ in range(rf):
            ok = np.ones(B, bool)
            ok[chosen] = False
            if shape.rack_aware_placement and shape.racks and len(chosen) < n_racks:
                used = {int(rack_of[c]) for c in chosen}
                ok &= ~np.isin(rack_of, list(used))
            if not ok.any():
                ok = np.ones(B, bool)
                ok[chosen] = False
            p = np.where(ok, w, 0)
            chosen.append(int(rng.choice(B, p=p / p.sum())))
        reps[i, :rf] = ids[chosen]
    alive = np.ones(B, bool)
    if shape.dead:
        alive[order[-1]] = False   # a broker that left, still named in assignments
    return SynthCluster(ids, racks, [f"t{t:03d}" for t in range(T)], topic_of, part, reps, reps[:, 0].copy(),
                        reps.copy(), None, np.ones(T, np.int32), np.zeros(T, bool), alive)


def as_lists(c: SynthCluster) -> tuple[dict[int, str | None], set[int], dict[tuple[str, int], list[int]]]:
    """(rack per broker id, registered ids, assignment) in plain Python."""
    racks = {int(b): r for b, r in zip(c.broker_ids.tolist(), c.racks, strict=True)}
    alive = {int(b) for b, a in zip(c.broker_ids.tolist(), c.alive.tolist(), strict=True) if a}
    assign = {}
    for i in range(c.num_partitions):
        assign[(c.topic_names[c.topic_of[i]], int(c.partition[i]))] = [int(x) for x in c.replicas[i] if x >= 0]
    return racks, alive, assign


# ------------------------------------------------------------------------------ feasibility of a band
def _bounded_flow_feasible(n: int, arcs: list[tuple[int, int, int, int]], s: int, t: int) -> bool:
    """Is there an s-t flow meeting every arc's [lower, upper]? (a circulation with t->s, checked by a max
    flow from a super source that must carry every lower bound)."""
    mf = max_flow.SimpleMaxFlow()
    excess = [0] * (n + 2)
    for u, v, lo, hi in arcs:
        if hi < lo:
            return False
        if hi > lo:
            mf.add_arc_with_capacity(u, v, hi - lo)
        excess[v] += lo
        excess[u] -= lo
    mf.add_arc_with_capacity(t, s, BIG)
    need = 0
    for v in range(n):
        if excess[v] > 0:
            mf.add_arc_with_capacity(n, v, excess[v])
            need += excess[v]
        elif excess[v] < 0:
            mf.add_arc_with_capacity(v, n + 1, -excess[v])
    if need == 0:
        return True
    assert mf.solve(n, n + 1) == mf.OPTIMAL
    return mf.optimal_flow() == need


class Feasibility:
    """The rebalance's freedom, per partition: its replicas on eligible brokers may go to any eligible
    brokers, distinct, keeping the rack rule (min(RF, racks with eligible brokers, racks it spans now) racks,
    replicas on other brokers staying where they are); excluded topics stay put. `band_feasible(lo, hi)`: can
    every eligible broker end with a count in [lo, hi]?"""

    def __init__(self, racks: dict, eligible: set[int], assign: dict, excluded: set[str], rack_aware: bool):
        self.brokers = sorted(eligible)
        self.racks = racks
        rack_set = sorted({racks[b] for b in self.brokers if racks[b] is not None}) if rack_aware else []
        self.fixed = dict.fromkeys(self.brokers, 0)
        self.parts = []   # (k movable, rule, racks of the staying replicas)
        # a single-replica partition is led where it is: at most its topic's cap, ceil(partitions / brokers),
        # per broker (the leader caps every plan keeps)
        n_t: dict[str, int] = {}
        for (t, _p) in assign:
            n_t[t] = n_t.get(t, 0) + 1
        self.single: dict[str, list] = {}    # topic -> per partition: (its broker, must it stay on a racked one)
        self.relaxed = False
        self.leading = 0     # partitions with an eligible replica: each needs a leader
        self.whole: dict[str, int] = {}   # per topic, partitions with every replica on an eligible broker
        self.cap = {t: math.ceil(n / max(1, len(self.brokers))) for t, n in n_t.items()}
        for (t, _p), reps in assign.items():
            on = [b for b in reps if b in eligible]
            if t in excluded:
                for b in on:
                    self.fixed[b] += 1
                continue
            if not on:
                continue
            self.leading += 1          # (excluded topics' partitions are not counted: the room check is for none)
            if len(on) == len(reps):   # led from an eligible broker, within its topic's cap
                self.whole[t] = self.whole.get(t, 0) + 1
            if len(reps) == 1:
                self.single.setdefault(t, []).append((reps[0], rack_aware and racks[reps[0]] is not None))
                continue
            stay = {racks[b] for b in reps if b not in eligible and racks[b] is not None} if rack_aware else set()
            now = len({racks[b] for b in reps if racks[b] is not None}) if rack_aware else 0
            need = min(len(reps), len(rack_set), now) if rack_aware else 0
            extra = 0
            if need <= len(stay):
                rule = "free"
            elif need >= len(reps):
                rule = "distinct"       # every replica on its own rack
            elif need >= len(rack_set):
                rule = "cover"          # every eligible rack at least once
            else:
                # a partition below the rule that may not lose a rack: `extra` more racks among its replicas;
                # only "no rack holds more than k - extra + 1 of them" is kept (a relaxation: not a flow)
                rule = "some"
                extra = need - len(stay)
                self.relaxed = True
            self.parts.append((len(on), rule, stay, extra, set(on), t))
        self.rack_set = rack_set
        self.mixed = set(self.single) & {p[5] for p in self.parts}
        self.total = sum(p[0] for p in self.parts) + sum(self.fixed.values()) + \
            sum(len(v) for v in self.single.values())

    def floor(self, t: str) -> int:
        """Partitions of topic t that every broker must lead, whatever the others lead: those that must be led
        from an eligible broker within the cap, less what all the other brokers may lead at their caps."""
        if t in self.mixed:      # (its single and other partitions reach the broker by different nodes)
            return 0
        return max(0, min(self.cap[t], self.whole.get(t, 0) - (len(self.brokers) - 1) * self.cap[t]))

    def _arcs(self, lo: int, hi: int, room: bool = False, rack_min: dict | None = None, floors: bool = False
              ) -> tuple[int, list[tuple[int, int, int, int, int]]]:
        """(nodes, arcs (u, v, lower, upper, cost)) of the per-partition flow for the band [lo, hi]: a
        replica that stays on its broker costs 0, one placed anew 1. Node 0 the source, 1 the sink.

        `room`: every broker must also be able to lead floor(partitions / brokers) within the topics' caps
        (ceil(partitions / brokers)): a replica reaches its broker through the node of (topic, broker), which
        passes up to the cap into the broker's room node, the rest around it, and the room node must pass the
        level on. (No leader order of spread <= 1 within the caps exists without that.)

        `rack_min` {rack: m}: the brokers of that rack hold at least m replicas in all.

        `floors` (with `room`): the (topic, broker) node passes at least `floor(topic)` into the room node: the
        broker holds and can lead that many of the topic (a broker no such partition can reach fails it)."""
        brokers = self.brokers
        groups: dict = {}
        for b in brokers:
            groups.setdefault(self.racks[b] if self.racks[b] in self.rack_set else None, []).append(b)
        nxt = 2
        bnode = {}
        rnode = {}
        for b in brokers:
            bnode[b] = nxt
            rnode[b] = nxt + 1 if room else nxt
            nxt += 2 if room else 1
        arcs: list = []
        via: dict = {}       # (topic, broker) -> node, with `room`

        def into(t: str, b: int) -> int:
            if not room:
                return bnode[b]
            if (t, b) not in via:
                via[(t, b)] = len(arcs_nodes)
                arcs_nodes.append(None)
            return -1 - via[(t, b)]      # resolved below, once the node numbers are known

        arcs_nodes: list = []
        for k, rule, stay, extra, on, t in self.parts:
            p = nxt
            nxt += 1
            arcs.append((0, p, k, k, 0))
            outside = [r for r in self.rack_set if r not in stay]
            for r, members in groups.items():
                g = nxt
                nxt += 1
                if rule == "distinct":      # one replica per rack outside the staying ones, none rack-less
                    lo_r, hi_r = 0, (1 if r in outside else 0)
                elif rule == "cover":       # each rack outside the staying ones at least once
                    lo_r = 1 if r in outside else 0
                    hi_r = k - len(outside) + lo_r
                elif rule == "some":
                    lo_r, hi_r = 0, k - extra + (1 if r in outside else 0)
                else:
                    lo_r, hi_r = 0, k
                arcs.append((p, g, lo_r, min(hi_r, len(members)), 0))
                for b in members:
                    arcs.append((g, into(t, b), 0, 1, 0 if b in on else 1))
        tb: dict = {}
        for t, racked in self.single.items():
            for need_rack in (True, False):
                where = [b for b, x in racked if x == need_rack]
                n = len(where)
                if not n:
                    continue
                p = nxt
                nxt += 1
                arcs.append((0, p, n, n, 0))
                for b in brokers:
                    if need_rack and self.racks[b] not in self.rack_set:
                        continue
                    if (t, b) not in tb:
                        tb[(t, b)] = nxt
                        nxt += 1
                        arcs.append((tb[(t, b)], rnode[b], self.floor(t) if floors else 0, self.cap[t], 0))
                    here = sum(1 for w in where if w == b)
                    if here:
                        arcs.append((p, tb[(t, b)], 0, here, 0))
                    arcs.append((p, tb[(t, b)], 0, n, 1))
        for (t, b), i in via.items():
            arcs_nodes[i] = nxt
            arcs.append((nxt, rnode[b], self.floor(t) if floors else 0, self.cap[t], 0))
            arcs.append((nxt, bnode[b], 0, self.total, 0))
            nxt += 1
        if room:
            arcs = [(u, arcs_nodes[-1 - v] if v < 0 else v, a, c, w) for u, v, a, c, w in arcs]
        if floors:      # a broker that no partition of a topic with a floor can reach: nothing can meet it
            for t in self.cap:
                if self.floor(t) and any((t, b) not in via and (t, b) not in tb for b in brokers):
                    arcs.append((nxt, 1, self.floor(t), self.floor(t), 0))
                    nxt += 1
        if room:
            level = self.leading // len(brokers)
            for b in brokers:
                arcs.append((rnode[b], bnode[b], level, self.total, 0))
        rnodes = {}
        for q, m in (rack_min or {}).items():
            rnodes[q] = nxt
            nxt += 1
            arcs.append((rnodes[q], 1, m, self.total, 0))
        for b in brokers:
            to = rnodes.get(self.racks[b], 1)
            arcs.append((bnode[b], to, max(0, lo - self.fixed[b]), hi - self.fixed[b], 0))
        return nxt, arcs

    def band_feasible(self, lo: int, hi: int, rack_min: dict | None = None, room: bool = False,
                      floors: bool = False) -> bool:
        """With `room`, every broker must also keep room to lead its share (`_arcs`), with `floors` and of each
        topic its floor."""
        n, arcs = self._arcs(lo, hi, room=room, rack_min=rack_min, floors=floors)
        return _bounded_flow_feasible(n, [a[:4] for a in arcs], 0, 1)

    def forced_on(self, q: str) -> int:
        """Replicas rack q must hold in any placement (as `_arcs` bounds them): one of each partition that must
        cover every rack outside those its staying replicas cover (rule cover), or that must put its replicas on
        distinct racks and has as many as there are such racks, where q is one of them; and the fixed ones."""
        need = 0
        for k, rule, stay, _x, _on, _t in self.parts:
            outside = [r for r in self.rack_set if r not in stay]
            if q in outside and (rule == "cover" or (rule == "distinct" and k >= len(outside))):
                need += 1
        return need + sum(self.fixed[b] for b in self.brokers if self.racks[b] == q)

    def closed_racks(self, lo: int, hi: int) -> set[str]:
        """Racks that every placement in [lo, hi] fills with their forced replicas only (the flow refuses one
        replica more there): no partition the rules do not send there can have a replica on them."""
        return {q for q in self.rack_set if not self.band_feasible(lo, hi, {q: self.forced_on(q) + 1})}

    def least_new_replicas(self, lo: int, hi: int, room: bool = False) -> int | None:
        """The fewest replicas placed anew (moves) that bring every broker into [lo, hi] under the rules
        (a min-cost flow; lower bounds sent first): a lower bound on any plan's moves for that band (exact but
        for the relaxed rules and the leader caps of partitions with more than one replica)."""
        n, arcs = self._arcs(lo, hi, room)
        m = min_cost_flow.SimpleMinCostFlow()
        supply = [0] * n
        base = 0
        for u, v, lo_, hi_, c in arcs:
            if hi_ < lo_:
                return None
            m.add_arc_with_capacity_and_unit_cost(u, v, hi_ - lo_, c)
            supply[u] -= lo_
            supply[v] += lo_
            base += lo_ * c
        total = sum(a[2] for a in arcs if a[0] == 0)
        supply[0] += total
        supply[1] -= total
        for v in range(n):
            m.set_node_supply(v, supply[v])
        if m.solve() != m.OPTIMAL:
            return None
        return m.optimal_cost() + base

    def best_spread(self) -> tuple[int, int, int]:
        """(spread, lo, hi): the most level band reachable, with its proof. Every placement's smallest count is
        at most L = the largest lo with [lo, inf) feasible, its largest at least U = the least hi with [0, hi]
        feasible (binary searches), so no placement has a spread below U - L; the band [L, U] itself is then
        checked (and widened until feasible: a spread it then finds is reachable, the proof of the lower end
        stays)."""
        E = len(self.brokers)
        big = self.total + 1
        a, b = 0, self.total // E
        while a < b:
            mid = (a + b + 1) // 2
            a, b = (mid, b) if self.band_feasible(mid, big) else (a, mid - 1)
        low = a
        a, b = -(-self.total // E), self.total
        while a < b:
            mid = (a + b) // 2
            a, b = (a, mid) if self.band_feasible(0, mid) else (mid + 1, b)
        high = a
        s = high - low
        while True:
            for lo in range(max(0, high - s), low + 1):
                if self.band_feasible(lo, lo + s):
                    return s, lo, lo + s
            s += 1


# ------------------------------------------------------------------------------------------- bounds
def count_bounds(before: dict[int, int], lo: int, hi: int) -> tuple[int, int]:
    """(replicas above hi, replicas missing below lo)."""
    return (sum(max(0, c - hi) for c in before.values()), sum(max(0, lo - c) for c in before.values()))


def deficiency(assign: dict, eligible: set[int], caps: dict[str, int], excluded: set[str]) -> int:
    """Partitions a maximum assignment of leaders (one of their eligible brokers, at most the topic's cap
    per broker) leaves unserved on today's placement, summed over topics (max flow per topic)."""
    total = 0
    by_topic: dict[str, list[list[int]]] = {}
    for (t, _p), reps in assign.items():
        if t not in excluded:
            by_topic.setdefault(t, []).append([b for b in reps if b in eligible])
    for t, rows in by_topic.items():
        mf = max_flow.SimpleMaxFlow()
        brokers = sorted({b for r in rows for b in r})
        bi = {b: 2 + len(rows) + i for i, b in enumerate(brokers)}
        for i, r in enumerate(rows):
            mf.add_arc_with_capacity(0, 2 + i, 1)
            for b in r:
                mf.add_arc_with_capacity(2 + i, bi[b], 1)
        for b in brokers:
            mf.add_arc_with_capacity(bi[b], 1, caps[t])
        mf.solve(0, 1)
        total += len(rows) - mf.optimal_flow()
    return total


def joint_extra(assign: dict, eligible: set[int], caps: dict[str, int], excluded: set[str], hi: int) -> int:
    """The least moves a plan must add, beyond the replicas above hi (or, with hi = lo + 1, missing below lo),
    to serve the leader caps: per topic a min-cost flow where a partition is led from a broker holding it (0)
    or from one it moves a replica to, costing 1 if every eligible broker holding it has fewer than hi
    replicas today, +1 if the receiver has hi or more (see planner/optimizer/bounds.py's module text for why;
    written again here from that rule)."""
    counts = dict.fromkeys(eligible, 0)
    for reps in assign.values():
        for b in reps:
            if b in counts:
                counts[b] += 1
    brokers = sorted(eligible)
    total = 0
    by_topic: dict[str, list[list[int]]] = {}
    for (t, _p), reps in assign.items():
        if t not in excluded:
            on = [b for b in reps if b in eligible]
            if on:
                by_topic.setdefault(t, []).append(on)
    for t, rows in by_topic.items():
        m = min_cost_flow.SimpleMinCostFlow()
        n = len(rows)
        mover = n
        bn = {b: n + 1 + i for i, b in enumerate(brokers)}
        sink = n + 1 + len(brokers)
        for i, r in enumerate(rows):
            for b in r:
                m.add_arc_with_capacity_and_unit_cost(i, bn[b], 1, 0)
            m.add_arc_with_capacity_and_unit_cost(i, mover, 1, int(all(counts[b] < hi for b in r)))
        for b in brokers:
            m.add_arc_with_capacity_and_unit_cost(mover, bn[b], n, int(counts[b] >= hi))
            m.add_arc_with_capacity_and_unit_cost(bn[b], sink, caps[t], 0)
        for i in range(n):
            m.set_node_supply(i, 1)
        m.set_node_supply(sink, -n)
        assert m.solve() == m.OPTIMAL
        total += m.optimal_cost()
    return total


def leader_band_feasible(final: dict, eligible: set[int]) -> bool:
    """Can preferred leaders be chosen on placement `final` (one of each partition's eligible brokers) with
    every topic at most ceil(partitions / brokers) per broker and the per-broker counts within one of each
    other (floor and ceil of their mean)? A max flow with lower bounds."""
    brokers = sorted(eligible)
    n_t: dict[str, int] = {}
    for t, _p in final:
        n_t[t] = n_t.get(t, 0) + 1
    caps = {t: math.ceil(n / len(brokers)) for t, n in n_t.items()}
    rows = [(t, [b for b in reps if b in eligible]) for (t, _p), reps in final.items()]
    rows = [(t, r) for t, r in rows if r]
    lo, hi = len(rows) // len(brokers), -(-len(rows) // len(brokers))
    bn = {b: 2 + i for i, b in enumerate(brokers)}
    nxt = 2 + len(brokers)
    tb: dict = {}
    arcs = []
    for t, r in rows:
        p = nxt
        nxt += 1
        arcs.append((0, p, 1, 1))
        for b in r:
            if (t, b) not in tb:
                tb[(t, b)] = nxt
                nxt += 1
                arcs.append((tb[(t, b)], bn[b], 0, caps[t]))
            arcs.append((p, tb[(t, b)], 0, 1))
    for b in brokers:
        arcs.append((bn[b], 1, lo, hi))
    return _bounded_flow_feasible(nxt, arcs, 0, 1)
