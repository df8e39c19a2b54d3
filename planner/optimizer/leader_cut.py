"""Leader level of a count rebalance: exchanges across the leader flow's cut.

Leader room (room.py) is each broker's own condition for a level leader count; the whole condition is the leader
flow: every partition led by one of its eligible replicas, every topic within its cap per broker, every broker
within [floor, ceil] of the mean leaders. A placement can give each broker room and still fail it as a set
(issue 25: 2 of 36 generated clusters, both with partitions a multiple of the brokers, so that every broker
must lead exactly the mean, kept leader spread 2: one broker could lead one partition too few, another was
left one too many, with room enough each).

Where the flow is infeasible its minimum cut names the partitions that cannot be served and the (topic, broker)
places they cannot reach. `mend_leader_cut` exchanges replicas so that such a partition gains a replica on a
broker it could be led from: its replica on broker b goes to a broker a across the cut, and a follower
replica of another partition comes back from a to b, so every broker keeps its count, the racks stay covered
and the replicas distinct; or the replica goes alone where both counts stay within the band (a rack whose
brokers sit at the band's top holds only replicas that must stay there, so nothing can come back). Each exchange costs its change in replica moves (a replica the plan moves already
is sent on or back, which can cost nothing). They are tried in turn, each by a max flow, within `slack` extra
moves in all: first those that the flow's residual graph says will carry one unit more (`_cheapest`), the
cheapest of them first; the first that makes the flow carry more is kept. The leader step after it then finds the level order (an exact flow up to
leaders.choose_leaders' exact limit, which is also where this runs).

Where a level order exists, `undo_moves` sends pairs of opposite moves back (a -> b of one partition, b -> a of
another: every count kept) while a certificate order still holds, so moves that only served the leader caps on
the way come back off the plan.
"""

from __future__ import annotations

import numpy as np
from ortools.graph.python import max_flow, min_cost_flow

from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.problem import Problem, rack_masks
from planner.optimizer.room import room_per_broker
from planner.optimizer.state import State, apply_move, broker_counts, level_band, rack_ok
from planner.optimizer.witness import leader_cap0, witness

LIMIT = 20_000       # partitions: as leaders.choose_leaders' exact leader flow
CANDIDATES = 64      # exchanges tried (each one max flow) per step and side, cheapest first
ROWS = 2_000         # partitions a step looks at per side (the first ones: bounds a step's Python work)
# trials (each one max flow over every partition) a call may make, counted in partitions: ~100 on a 15k-partition
# cluster. Set when the exchanges were tried cheapest first: a 15-broker, 14,715-partition rebalance spent 128 s
# here (82 exchanges, 6,571 flows); ordered by the flow's residual sides (`_cheapest`) it needs 83 flows, and the
# budget only bounds a placement where few exchanges help
TRIAL_WORK = 1_500_000
BIG = 1 << 40


class _Flow:
    """The leader flow of a placement with lower bounds, as a max flow from a super source (every partition
    served and every broker at least the floor: `short` = what it cannot carry, 0 when a level order exists)."""

    def __init__(self, pb: Problem, final: np.ndarray, eligible: np.ndarray, cap: np.ndarray) -> None:
        frame = _leader_frame(pb, final, eligible, cap)
        E, pos, on, fr = frame["E"], frame["pos"], frame["on"], frame["free"]
        lo_b, hi_b, room = frame["lo_b"], frame["hi_b"], frame["room"]
        e_idx = np.flatnonzero(eligible)
        T = len(pb.topic_names)
        ii, jj = np.nonzero(on[fr])
        tb = pb.topic_of[fr[ii]].astype(np.int64) * E + pos[final[fr[ii], jj]]
        self.keys, inv = np.unique(tb, return_inverse=True)
        # nodes: 0 super source, 1 super sink, 2 s, 3 t, partitions, (topic, broker), brokers
        p0, k0 = 4, 4 + len(fr)
        b0 = k0 + len(self.keys)
        mf = max_flow.SimpleMaxFlow()
        tails = np.concatenate([p0 + ii, k0 + np.arange(len(self.keys)), b0 + np.arange(E), [3],
                                np.full(len(fr), 0), [0], [2], b0 + np.arange(E)])
        heads = np.concatenate([k0 + inv, b0 + self.keys % E, np.full(E, 3), [2],
                                p0 + np.arange(len(fr)), [3], [1], np.full(E, 1)])
        caps = np.concatenate([np.ones(len(ii), np.int64),
                               room[self.keys],
                               hi_b - lo_b, [BIG], np.ones(len(fr), np.int64), [int(lo_b.sum())],
                               [len(fr)], lo_b]).astype(np.int64)
        arcs = mf.add_arcs_with_capacity(tails.astype(np.int32), heads.astype(np.int32), caps)
        mf.solve(0, 1)
        need = len(fr) + int(lo_b.sum())
        self.short = need - int(mf.optimal_flow())
        self.E, self.e_idx = E, e_idx
        # the broker each partition is led from in this flow (-1: none or fixed)
        self.led = np.full(len(final), -1, np.int64)
        via = mf.flows(arcs[:len(ii)]) > 0
        self.led[fr[ii[via]]] = final[fr[ii[via]], jj[via]]
        if not self.short:
            return
        # the residual graph's two sides: an arc added from a partition the super source still reaches to a
        # (topic, broker) place that still reaches the super sink carries one unit more
        src = np.zeros(b0 + E, bool)
        src[np.asarray(mf.get_source_side_min_cut(), np.int64)] = True
        snk = np.zeros(b0 + E, bool)
        snk[np.asarray(mf.get_sink_side_min_cut(), np.int64)] = True
        self.reached = np.zeros(len(final), bool)
        self.reached[fr] = src[p0:p0 + len(fr)]
        # (topic, broker) places from which one unit more reaches the super sink: a place that exists and does,
        # or a new one with room in the topic's cap on a broker that does
        every = np.arange(T * E)
        self.open_keys = ~np.isin(every, self.keys) & (room > 0) & snk[b0 + every % E]
        self.open_keys[self.keys[snk[k0:b0]]] = True
        # where: the upper side (partitions that must be led from brokers already at the ceiling) and the lower
        # side (brokers that cannot reach the floor), each a plain max flow whose source side names them
        nk = len(self.keys)
        room_k = room[self.keys]
        kb = self.keys % E
        # upper: s(0) -> partition -> (topic, broker) -> broker -> t(1) within the ceiling
        mf = max_flow.SimpleMaxFlow()
        q0, r0 = 2 + len(fr), 2 + len(fr) + nk
        mf.add_arcs_with_capacity(
            np.concatenate([np.zeros(len(fr)), 2 + ii, q0 + np.arange(nk), r0 + np.arange(E)]).astype(np.int32),
            np.concatenate([2 + np.arange(len(fr)), q0 + inv, r0 + kb, np.ones(E)]).astype(np.int32),
            np.concatenate([np.ones(len(fr) + len(ii), np.int64), room_k, hi_b]).astype(np.int64))
        mf.solve(0, 1)
        side = np.zeros(r0 + E, bool)
        side[np.asarray(mf.get_source_side_min_cut(), np.int64)] = True
        self.upper = mf.optimal_flow() < len(fr)
        self.stuck = fr[side[2:2 + len(fr)]]                  # partitions that cannot be led elsewhere
        self.full = self.keys[side[q0:q0 + nk]]                 # and the places they could
        # lower: s(0) -> broker (floor) -> (topic, broker) -> partition -> t(1)
        mf = max_flow.SimpleMaxFlow()
        mf.add_arcs_with_capacity(
            np.concatenate([np.zeros(E), r0 + kb, q0 + inv, 2 + np.arange(len(fr))]).astype(np.int32),
            np.concatenate([r0 + np.arange(E), q0 + np.arange(nk), 2 + ii, np.ones(len(fr))]).astype(np.int32),
            np.concatenate([lo_b, room_k, np.ones(len(ii) + len(fr), np.int64)]).astype(np.int64))
        mf.solve(0, 1)
        side = np.zeros(r0 + E, bool)
        side[np.asarray(mf.get_source_side_min_cut(), np.int64)] = True
        self.lower = mf.optimal_flow() < int(lo_b.sum())
        self.starved = e_idx[side[r0:r0 + E]]                   # brokers that cannot reach the floor
        self.taken = fr[side[2:2 + len(fr)]]                  # partitions they could lead, all needed


def _followers(pb: Problem, st: State, eligible: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Follower replicas (not a planned leader's) of partitions that may change, grouped by broker: (rows,
    slots, start of each broker's group)."""
    f = st.final
    fr, fs = np.nonzero((f >= 0) & eligible[np.maximum(f, 0)] & ~pb.fixed[:, None])
    fb = f[fr, fs]
    keep = st.lead[fr] != fb
    fr, fs, fb = fr[keep], fs[keep], fb[keep]
    order = np.argsort(fb, kind="stable")
    return fr[order], fs[order], np.searchsorted(fb[order], np.arange(pb.num_brokers + 1))


def _back(pb: Problem, st: State, req: np.ndarray, fol: tuple, froms: np.ndarray, b: int,
          spare: np.ndarray | None, led: np.ndarray) -> list[tuple[int, int, int] | None]:
    """For each broker a of `froms`: the cheapest follower replica on b that may go to a in exchange for a
    replica that comes from a (with `spare` (T, B), only of a topic b holds more of than its cap: b keeps its
    leader room), among the cheapest one the leader flow does not lead from b (`led`): (its row, slot, cost in
    moves), or None. It does not depend on which replica comes, so `_cheapest` asks once per (a, b), and for
    all a of one b in one array pass."""
    f, orig = st.final, pb.replicas
    fr, fs, cut = fol
    qr, qs = fr[cut[b]:cut[b + 1]], fs[cut[b]:cut[b + 1]]
    if spare is not None:
        keep = spare[pb.topic_of[qr], b]
        qr, qs = qr[keep], qs[keep]
    if not len(qr):
        return [None] * len(froms)
    rows = f[qr]
    ok = ~(rows[:, :, None] == froms[None, None, :]).any(axis=1)                  # (followers, froms)
    if pb.rack_aware:
        others = rows.copy()
        others[np.arange(len(qr)), qs] = -1
        bits = pb.rack_bits()
        ok &= popcount(rack_masks(others, bits)[:, None] | bits[froms][None, :]) >= req[qr][:, None]
    d2 = (~(orig[qr][:, :, None] == froms[None, None, :]).any(axis=1)).astype(np.int64) \
        - (~(orig[qr] == b).any(axis=1))[:, None]
    key = np.where(ok, 2 * d2 + (led[qr] == b)[:, None], 1 << 20)
    k = np.argmin(key, axis=0)
    cols = np.arange(len(froms))
    return [(int(qr[k[j]]), int(qs[k[j]]), int(d2[k[j], j])) if ok[k[j], j] else None for j in cols.tolist()]


def _moves(pb: Problem, f: np.ndarray, eligible: np.ndarray, req: np.ndarray, rows: np.ndarray,
           allowed: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every (row, slot, from, to) that moves an eligible replica of one of `rows` to one of `targets` that is
    `allowed` for its row ((rows, targets)) and that the row does not hold, keeping its racks: one array pass
    for all of them (a loop per row was, with one follower search per move, most of a step's time)."""
    fr = f[rows]
    allowed = allowed & ~(fr[:, :, None] == targets[None, None, :]).any(axis=1)
    slot_ok = (fr >= 0) & eligible[np.maximum(fr, 0)]
    i, s_, j = np.nonzero(slot_ok[:, :, None] & allowed[:, None, :])
    b = targets[j]
    ok = rack_ok(pb, fr[i], s_, b, req[rows[i]])
    i, s_, b = i[ok], s_[ok], b[ok]
    return rows[i], s_, fr[i, s_].astype(np.int64), b.astype(np.int64)


def _cheapest(pb: Problem, st: State, req: np.ndarray, fol: tuple, mv: tuple, spare: np.ndarray | None,
              lo: int, hi: int, count: np.ndarray, flow: _Flow) -> list[tuple[int, int, tuple]]:
    """The first CANDIDATES options (likelihood, cost, transfers) of the moves `mv`: each as an exchange with
    the cheapest follower that may come back (`_back`), and alone where both counts stay within [lo, hi]. Those
    the flow's residual sides say will carry one unit more come first (0: r still reached from the super source,
    its new place reaching the super sink, and the follower sent back not one the flow leads from b; 1: the
    same, but r is led from a, so that unit must find another way; 2: the rest), then the cheapest, then by
    transfers (a move alone before its exchange). Ordered by cost alone, the 15-broker cluster of
    test_larger_clusters_reach_level_leaders_through_the_cut re-tried the same ~100 failing exchanges at every
    step (one max flow each: 6,571 flows for 82 units); in this order one trial served each unit."""
    r, s_, a, b = mv
    if not len(r):
        return []
    orig = pb.replicas
    d1 = (~(orig[r] == b[:, None]).any(axis=1)).astype(np.int64) - (~(orig[r] == a[:, None]).any(axis=1))
    pairs, inv = np.unique(a * pb.num_brokers + b, return_inverse=True)
    back: list[tuple[int, int, int] | None] = []
    for to in np.unique(pairs % pb.num_brokers).tolist():
        froms = pairs[pairs % pb.num_brokers == to] // pb.num_brokers
        back.extend(_back(pb, st, req, fol, froms, to, spare, flow.led))
    order = np.lexsort((pairs // pb.num_brokers, pairs % pb.num_brokers))
    back = [back[i] for i in np.argsort(order).tolist()]
    has = np.array([x is not None for x in back])[inv]
    d2 = np.array([x[2] if x is not None else 0 for x in back], np.int64)[inv]
    alone = (count[a] - 1 >= lo) & (count[b] + 1 <= hi)
    pos = np.full(pb.num_brokers, -1, np.int64)
    pos[flow.e_idx] = np.arange(flow.E)
    likely = flow.reached[r] & flow.open_keys[pb.topic_of[r].astype(np.int64) * flow.E + pos[b]]
    q_led = np.array([x is not None and flow.led[x[0]] == k % pb.num_brokers
                      for x, k in zip(back, pairs.tolist(), strict=True)])[inv]
    kind = np.concatenate([np.zeros(len(r), np.int64), np.ones(len(r), np.int64)])
    keep = np.concatenate([alone, has])
    cost = np.concatenate([d1, d1 + d2])[keep]
    likely = np.concatenate([likely, likely & ~q_led])[keep]
    unlikely = np.where(likely, np.tile(flow.led[r] == a, 2)[keep].astype(np.int64), 2)
    idx = np.concatenate([np.arange(len(r)), np.arange(len(r))])[keep]
    kind = kind[keep]
    order = np.lexsort((kind, b[idx], a[idx], s_[idx], r[idx], cost, unlikely))[:CANDIDATES]
    out = []
    for o in order.tolist():
        i = int(idx[o])
        move = (int(r[i]), int(s_[i]), int(a[i]), int(b[i]))
        if kind[o]:
            q, qs, _ = back[int(inv[i])]
            out.append((int(unlikely[o]), int(cost[o]), (move, (q, qs, move[3], move[2]))))
        else:
            out.append((int(unlikely[o]), int(cost[o]), (move,)))
    return out


def _options(pb: Problem, st: State, eligible: np.ndarray, req: np.ndarray, flow: _Flow, cap: np.ndarray
             ) -> list[tuple[int, tuple]]:
    """Exchanges (cost, transfers), the cheapest CANDIDATES of each side: on the upper side a partition that can only be led
    from brokers at the ceiling gains a replica on a broker whose place for its topic is open (its replica
    there leaves one of them); on the lower side a broker that cannot reach the floor gains a replica of a
    partition the flow does not need where it is, from any of its brokers. A follower comes back each time."""
    f = st.final
    E, e_idx = flow.E, flow.e_idx
    T = len(pb.topic_names)
    fol = _followers(pb, st, eligible)
    lo, hi = level_band(st, eligible)
    count = broker_counts(f, pb.num_brokers)
    up: list[tuple[int, int, tuple]] = []
    down: list[tuple[int, int, tuple]] = []
    if flow.upper:
        full = np.zeros(T * E, bool)
        full[flow.full] = True
        rows = flow.stuck[~pb.fixed[flow.stuck]][:ROWS]
        allowed = ~full.reshape(T, E)[pb.topic_of[rows]]
        up = _cheapest(pb, st, req, fol, _moves(pb, f, eligible, req, rows, allowed, e_idx), None, lo, hi, count, flow)
    if flow.lower:
        # a starved broker b gains room: a replica of a topic it holds fewer of than the cap, of a partition
        # the flow does not need where it is, for a follower of a topic it holds more of than the cap
        rtb, _ = room_per_broker(pb, f, cap)
        cap_t = np.where(pb.excluded_topic, 0, cap)[:, None]
        needed = np.zeros(pb.num_partitions, bool)
        needed[flow.taken] = True
        starved = flow.starved
        rows = np.flatnonzero(~needed & ~pb.fixed & ((f >= 0) & eligible[np.maximum(f, 0)]).any(axis=1))
        opens = (rtb[pb.topic_of[rows]][:, starved] < cap_t[pb.topic_of[rows]]).any(axis=1)
        rows = rows[opens][:ROWS]
        allowed = rtb[pb.topic_of[rows]][:, starved] < cap_t[pb.topic_of[rows]]
        r, s_, a, b = _moves(pb, f, eligible, req, rows, allowed, starved)
        keep = ~np.isin(a, starved)
        down = _cheapest(pb, st, req, fol, (r[keep], s_[keep], a[keep], b[keep]), rtb > cap_t, lo, hi, count, flow)
    return [(cost, transfers) for _, cost, transfers in sorted(up + down)]


def mend_leader_cut(pb: Problem, st: State, eligible: np.ndarray, slack: int, max_steps: int = 200) -> int:
    """Exchanges (module docstring) until the leader flow is feasible, no exchange within the remaining
    `slack` extra moves makes it carry more, `max_steps` pass, or TRIAL_WORK's trials are spent (a plan is the
    same for the same input: the budget counts trials, not seconds). Returns the exchanges made. The caps are the
    topics' own, ceil(partitions / brokers), also where the rebalance raised one on its way (a placement
    within them is the goal: a 712-partition generated plan kept a topic one above its cap, which one
    exchange within the 1 % served)."""
    if pb.num_partitions > LIMIT or int(eligible.sum()) < 2:
        return 0
    cap = leader_cap0(pb, eligible)
    flow = _Flow(pb, st.final, eligible, cap)
    if not flow.short:
        return 0
    req = required_racks(pb, eligible)
    start = st.moves
    made = 0
    trials = max(1, TRIAL_WORK // max(1, pb.num_partitions))
    for _ in range(max_steps):
        if not flow.short:
            break
        left = slack - (st.moves - start)
        better = None
        for cost, transfers in _options(pb, st, eligible, req, flow, cap):
            if trials <= 0:
                break
            if cost > left:
                continue
            trials -= 1
            for r, s_, _frm, to in transfers:
                apply_move(pb, st, r, s_, to)
            trial = _Flow(pb, st.final, eligible, cap)
            if trial.short < flow.short:
                better = trial
                break
            for r, s_, frm, _to in reversed(transfers):
                apply_move(pb, st, r, s_, frm)
        if better is None:
            break
        flow = better
        made += 1
    if made:
        witness(pb, st, eligible)     # planned leaders within the caps on the new placement
    return made


def _leader_frame(pb: Problem, final: np.ndarray, eligible: np.ndarray, cap: np.ndarray) -> dict:
    """What a level leader order within the caps must meet on `final` (as `_Flow`): per eligible broker the band
    [lo_b, hi_b] of leaders among the partitions that may change, per (topic, broker) the room left by the
    leaders of those that stay, and the position of each broker."""
    B = pb.num_brokers
    e_idx = np.flatnonzero(eligible)
    E = len(e_idx)
    pos = np.full(B, -1, np.int64)
    pos[e_idx] = np.arange(E)
    on = (final >= 0) & eligible[np.maximum(final, 0)]
    rows = np.flatnonzero(on.any(axis=1))
    n = len(rows)
    lo, hi = n // max(1, E), -(-n // max(1, E))
    fixed = pb.fixed[rows]
    lead0 = final[rows, 0]
    fx = fixed & (lead0 >= 0) & eligible[np.maximum(lead0, 0)]
    fixed_b = np.bincount(pos[lead0[fx]], minlength=E)
    T = len(pb.topic_names)
    used = np.zeros(T * E, np.int64)
    keep = fx & ~pb.excluded_topic[pb.topic_of[rows]]
    np.add.at(used, pb.topic_of[rows[keep]].astype(np.int64) * E + pos[lead0[keep]], 1)
    room = np.maximum(0, np.repeat(np.where(pb.excluded_topic, BIG, cap).astype(np.int64), E) - used)
    lo_b = np.maximum(0, lo - fixed_b)
    return {"E": E, "pos": pos, "on": on, "free": rows[~fixed], "room": room, "lo_b": lo_b,
            "hi_b": np.maximum(lo_b, hi - fixed_b)}


def _led_from_old(pb: Problem, final: np.ndarray, eligible: np.ndarray, fr: dict) -> np.ndarray | None:
    """A level leader order within the caps on `final` that leads as few partitions as it can from replicas the
    plan moved there (a min-cost version of `_Flow`'s flow: such an arc costs 1): (P,) the broker each partition
    that may change is led from, -1 for the others; None where no such order exists."""
    E, pos, on, free = fr["E"], fr["pos"], fr["on"], fr["free"]
    ii, jj = np.nonzero(on[free])
    b_of = final[free[ii], jj]
    moved = ~(pb.replicas[free[ii]] == b_of[:, None]).any(axis=1)
    keys, inv = np.unique(pb.topic_of[free[ii]].astype(np.int64) * E + pos[b_of], return_inverse=True)
    lo_b, hi_b = fr["lo_b"], fr["hi_b"]
    nf, nk = len(free), len(keys)
    if nf < int(lo_b.sum()):
        return None
    k0, b0, sink = nf, nf + nk, nf + nk + E
    mcf = min_cost_flow.SimpleMinCostFlow()
    mcf.add_arcs_with_capacity_and_unit_cost(
        np.concatenate([ii, k0 + np.arange(nk), b0 + np.arange(E)]).astype(np.int32),
        np.concatenate([k0 + inv, b0 + keys % E, np.full(E, sink)]).astype(np.int32),
        np.concatenate([np.ones(len(ii), np.int64), fr["room"][keys], hi_b - lo_b]),
        np.concatenate([moved.astype(np.int64), np.zeros(nk + E, np.int64)]))
    supply = np.concatenate([np.ones(nf, np.int64), np.zeros(nk, np.int64), -lo_b, [-(nf - int(lo_b.sum()))]])
    mcf.set_nodes_supplies(np.arange(sink + 1, dtype=np.int32), supply)
    if mcf.solve() != mcf.OPTIMAL:
        return None
    via = np.asarray(mcf.flows(np.arange(len(ii), dtype=np.int32))) > 0
    led = np.full(len(final), -1, np.int64)
    led[free[ii[via]]] = b_of[via]
    return led


def undo_moves(pb: Problem, st: State, eligible: np.ndarray) -> int:
    """Send replicas back where they were while a level leader order within the caps still exists: pairs of
    moves a -> b and b -> a (of two partitions) both reverted keep every count. The order is kept as a
    certificate: a min-cost leader flow that leads as few partitions as it can from moved replicas, then each
    revert re-leads the two partitions among their brokers (a partition led from the replica that goes back
    is led from another, the other partition may take its place) where every broker's leaders stay within
    the level and every topic within its cap; no revert goes without such an order, racks kept and replicas
    distinct. The planned leaders are then found again. Returns the moves saved.

    Why: the repair moves and count rounds that serve the topics' leader caps after the per-partition flow also
    make moves that others then undo in count (issue 25: a generated 13-broker cluster, 1,896 moves for a
    bound of 1,870, had 64 such opposite pairs; the paired exchanges of `mend_leader_cut` only ever add)."""
    if pb.num_partitions > LIMIT:
        return 0
    f, orig = st.final, pb.replicas
    fr = _leader_frame(pb, f, eligible, leader_cap0(pb, eligible))
    led = _led_from_old(pb, f, eligible, fr)
    if led is None:
        return 0
    E, pos = fr["E"], fr["pos"]
    before = (f.copy(), st.lead.copy(), dict(st.lcount), st.moves, st.bytes)
    room = fr["room"].copy()
    lead_b = np.zeros(E, np.int64)
    ok = led >= 0
    np.add.at(lead_b, pos[led[ok]], 1)
    np.subtract.at(room, pb.topic_of[ok].astype(np.int64) * E + pos[led[ok]], 1)
    lo_b, hi_b = fr["lo_b"], fr["hi_b"]
    new = (f >= 0) & ~(f[:, :, None] == orig[:, None, :]).any(axis=2) & ~pb.fixed[:, None]
    gone = (orig >= 0) & ~(orig[:, :, None] == f[:, None, :]).any(axis=2)
    req = required_racks(pb, eligible)
    by: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for r, s_ in zip(*np.nonzero(new), strict=True):
        r, s_ = int(r), int(s_)
        for a in orig[r][gone[r]].tolist():
            if eligible[a]:
                by.setdefault((a, int(f[r, s_])), []).append((r, s_))

    def movable_back(r: int, s_: int, frm: int, to: int) -> bool:
        row = f[r]
        return bool(row[s_] == frm and to not in row.tolist()
                    and rack_ok(pb, row[None, :], np.array([s_]), np.array([to]), req[r:r + 1])[0])

    def relead(r1: int, r2: int, rows_after: tuple) -> tuple[int, int] | None:
        """Leaders for r1 and r2 on their rows after the revert, within every broker's band and every cap,
        keeping a partition's leader where it still holds a replica when it can: (broker of r1, of r2)."""
        t1, t2 = int(pb.topic_of[r1]), int(pb.topic_of[r2])
        old = (int(led[r1]), int(led[r2]))
        c1 = [b for b in [old[0], *rows_after[0]] if b >= 0 and eligible[b] and b in rows_after[0]]
        c2 = [b for b in [old[1], *rows_after[1]] if b >= 0 and eligible[b] and b in rows_after[1]]
        for x in dict.fromkeys(c1):
            for y in dict.fromkeys(c2):
                d_b = np.zeros(E, np.int64)
                d_k: dict[int, int] = {}
                for b, t, sign in ((old[0], t1, -1), (old[1], t2, -1), (x, t1, 1), (y, t2, 1)):
                    d_b[pos[b]] += sign
                    k = t * E + int(pos[b])
                    d_k[k] = d_k.get(k, 0) + sign
                nb = lead_b + d_b
                if (nb < lo_b).any() or (nb > hi_b).any() or any(room[k] - d < 0 for k, d in d_k.items()):
                    continue
                return x, y
        return None

    saved = 0
    for (a, b), there in sorted(by.items()):
        for r1, s1 in there:
            if not movable_back(r1, s1, b, a):
                continue
            for r2, s2 in by.get((b, a), []):
                if r2 == r1 or not movable_back(r2, s2, a, b):
                    continue
                row1 = [a if k == s1 else int(x) for k, x in enumerate(f[r1].tolist())]
                row2 = [b if k == s2 else int(x) for k, x in enumerate(f[r2].tolist())]
                got = relead(r1, r2, (row1, row2))
                if got is None:
                    continue
                for r, x in ((r1, got[0]), (r2, got[1])):
                    t = int(pb.topic_of[r])
                    lead_b[pos[led[r]]] -= 1
                    room[t * E + int(pos[led[r]])] += 1
                    lead_b[pos[x]] += 1
                    room[t * E + int(pos[x])] -= 1
                    led[r] = x
                apply_move(pb, st, r1, s1, a)
                apply_move(pb, st, r2, s2, b)
                saved += 2
                break
    if saved and _Flow(pb, f, eligible, leader_cap0(pb, eligible)).short:
        # (the certificate says it cannot happen; the flow is the judge, and the plan stays as it was)
        f[:], st.lead[:], st.lcount, st.moves, st.bytes = before
        return 0
    if saved:
        witness(pb, st, eligible)
    return saved
