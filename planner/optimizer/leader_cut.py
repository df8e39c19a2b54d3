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
is sent on or back, which can cost nothing); the cheapest that makes the flow carry more goes first, within
`slack` extra moves in all. The leader step after it then finds the level order (an exact flow up to
leaders.choose_leaders' exact limit, which is also where this runs).
"""

from __future__ import annotations

import numpy as np
from ortools.graph.python import max_flow

from planner.optimizer.checks import required_racks
from planner.optimizer.problem import Problem
from planner.optimizer.room import room_per_broker
from planner.optimizer.state import State, apply_move, broker_counts, level_band, rack_ok
from planner.optimizer.witness import leader_cap0, witness

LIMIT = 20_000       # partitions: as leaders.choose_leaders' exact leader flow
CANDIDATES = 64      # exchanges tried (each one max flow) per step and side, cheapest first
ROWS = 2_000         # partitions a step looks at per side (the first ones: bounds a step's Python work)
# trials (each one max flow over every partition) a call may make, counted in partitions: ~100 on a 15k-partition
# cluster. Without it a 15-broker, 14,715-partition rebalance spent 128 s here (82 exchanges, 6,571 flows)
TRIAL_WORK = 1_500_000
BIG = 1 << 40


class _Flow:
    """The leader flow of a placement with lower bounds, as a max flow from a super source (every partition
    served and every broker at least the floor: `short` = what it cannot carry, 0 when a level order exists)."""

    def __init__(self, pb: Problem, final: np.ndarray, eligible: np.ndarray, cap: np.ndarray) -> None:
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
        cap_t = np.where(pb.excluded_topic, BIG, cap).astype(np.int64)
        used = np.zeros(T * E, np.int64)
        keep = fx & ~pb.excluded_topic[pb.topic_of[rows]]
        np.add.at(used, pb.topic_of[rows[keep]].astype(np.int64) * E + pos[lead0[keep]], 1)
        free = np.flatnonzero(~fixed)
        fr = rows[free]
        ii, jj = np.nonzero(on[fr])
        tb = pb.topic_of[fr[ii]].astype(np.int64) * E + pos[final[fr[ii], jj]]
        self.keys, inv = np.unique(tb, return_inverse=True)
        # nodes: 0 super source, 1 super sink, 2 s, 3 t, partitions, (topic, broker), brokers
        p0, k0 = 4, 4 + len(free)
        b0 = k0 + len(self.keys)
        lo_b = np.maximum(0, lo - fixed_b)
        hi_b = np.maximum(lo_b, hi - fixed_b)
        mf = max_flow.SimpleMaxFlow()
        tails = np.concatenate([p0 + ii, k0 + np.arange(len(self.keys)), b0 + np.arange(E), [3],
                                np.full(len(free), 0), [0], [2], b0 + np.arange(E)])
        heads = np.concatenate([k0 + inv, b0 + self.keys % E, np.full(E, 3), [2],
                                p0 + np.arange(len(free)), [3], [1], np.full(E, 1)])
        caps = np.concatenate([np.ones(len(ii), np.int64),
                               np.maximum(0, cap_t[self.keys // E] - used[self.keys]),
                               hi_b - lo_b, [BIG], np.ones(len(free), np.int64), [int(lo_b.sum())],
                               [len(free)], lo_b]).astype(np.int64)
        mf.add_arcs_with_capacity(tails.astype(np.int32), heads.astype(np.int32), caps)
        mf.solve(0, 1)
        need = len(free) + int(lo_b.sum())
        self.short = need - int(mf.optimal_flow())
        self.E, self.e_idx = E, e_idx
        if not self.short:
            return
        # where: the upper side (partitions that must be led from brokers already at the ceiling) and the lower
        # side (brokers that cannot reach the floor), each a plain max flow whose source side names them
        nk = len(self.keys)
        room_k = np.maximum(0, cap_t[self.keys // E] - used[self.keys])
        kb = self.keys % E
        # upper: s(0) -> partition -> (topic, broker) -> broker -> t(1) within the ceiling
        mf = max_flow.SimpleMaxFlow()
        q0, r0 = 2 + len(free), 2 + len(free) + nk
        mf.add_arcs_with_capacity(
            np.concatenate([np.zeros(len(free)), 2 + ii, q0 + np.arange(nk), r0 + np.arange(E)]).astype(np.int32),
            np.concatenate([2 + np.arange(len(free)), q0 + inv, r0 + kb, np.ones(E)]).astype(np.int32),
            np.concatenate([np.ones(len(free) + len(ii), np.int64), room_k, hi_b]).astype(np.int64))
        mf.solve(0, 1)
        side = np.zeros(r0 + E, bool)
        side[np.asarray(mf.get_source_side_min_cut(), np.int64)] = True
        self.upper = mf.optimal_flow() < len(free)
        self.stuck = fr[side[2:2 + len(free)]]                  # partitions that cannot be led elsewhere
        self.full = self.keys[side[q0:q0 + nk]]                 # and the places they could
        # lower: s(0) -> broker (floor) -> (topic, broker) -> partition -> t(1)
        mf = max_flow.SimpleMaxFlow()
        mf.add_arcs_with_capacity(
            np.concatenate([np.zeros(E), r0 + kb, q0 + inv, 2 + np.arange(len(free))]).astype(np.int32),
            np.concatenate([r0 + np.arange(E), q0 + np.arange(nk), 2 + ii, np.ones(len(free))]).astype(np.int32),
            np.concatenate([lo_b, room_k, np.ones(len(ii) + len(free), np.int64)]).astype(np.int64))
        mf.solve(0, 1)
        side = np.zeros(r0 + E, bool)
        side[np.asarray(mf.get_source_side_min_cut(), np.int64)] = True
        self.lower = mf.optimal_flow() < int(lo_b.sum())
        self.starved = e_idx[side[r0:r0 + E]]                   # brokers that cannot reach the floor
        self.taken = fr[side[2:2 + len(free)]]                  # partitions they could lead, all needed


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


def _exchange(pb: Problem, st: State, req: np.ndarray, fol: tuple, r: int, s_: int, a: int, b: int,
              spare: np.ndarray | None = None) -> tuple[int, tuple] | None:
    """Replica (r, s_) goes from a to b and the cheapest follower replica on b that may goes back to a (with
    `spare` (T, B), only of a topic b holds more of than its cap: b keeps its leader room): (cost in moves,
    transfers), or None."""
    f, orig = st.final, pb.replicas
    fr, fs, cut = fol
    qr, qs = fr[cut[b]:cut[b + 1]], fs[cut[b]:cut[b + 1]]
    sel = (qr != r) & ~(f[qr] == a).any(axis=1)
    if spare is not None:
        sel &= spare[pb.topic_of[qr], b]
    qr, qs = qr[sel], qs[sel]
    if not len(qr):
        return None
    ok = rack_ok(pb, f[qr], qs, np.full(len(qr), a), req[qr])
    qr, qs = qr[ok], qs[ok]
    if not len(qr):
        return None
    d1 = int(b not in orig[r]) - int(a not in orig[r])
    d2 = (~(orig[qr] == a).any(axis=1)).astype(np.int64) - (~(orig[qr] == b).any(axis=1))
    k = int(np.argmin(d2))
    return d1 + int(d2[k]), ((r, s_, a, b), (int(qr[k]), int(qs[k]), b, a))


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
    up: list[tuple[int, tuple]] = []
    down: list[tuple[int, tuple]] = []
    lo, hi = level_band(st, eligible)
    count = broker_counts(f, pb.num_brokers)

    def single(r: int, s_: int, a: int, b: int) -> tuple[int, tuple] | None:
        """The replica alone, where both counts stay within the band."""
        if count[a] - 1 < lo or count[b] + 1 > hi:
            return None
        return int(b not in pb.replicas[r]) - int(a not in pb.replicas[r]), ((r, s_, a, b),)

    def moves_of(r: int, targets: np.ndarray) -> list[tuple[int, int, int]]:
        """(slot, from, to) for each eligible replica of r and each target that may take it."""
        row = f[r]
        got = []
        targets = targets[~np.isin(targets, row)]
        for s_ in np.flatnonzero((row >= 0) & eligible[np.maximum(row, 0)]).tolist():
            if not len(targets):
                break
            ok = rack_ok(pb, np.repeat(row[None, :], len(targets), axis=0), np.full(len(targets), s_), targets,
                         np.full(len(targets), req[r]))
            got.extend((s_, int(row[s_]), int(b)) for b in targets[ok].tolist())
        return got

    if flow.upper:
        full = np.zeros(T * E, bool)
        full[flow.full] = True
        for r in flow.stuck[~pb.fixed[flow.stuck]][:ROWS].tolist():
            t = int(pb.topic_of[r])
            for s_, a, b in moves_of(r, e_idx[~full[t * E + np.arange(E)]]):
                for x in (_exchange(pb, st, req, fol, r, s_, a, b), single(r, s_, a, b)):
                    if x is not None:
                        up.append(x)
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
        for r in rows[opens][:ROWS].tolist():
            t = int(pb.topic_of[r])
            for s_, a, b in moves_of(r, starved[rtb[t, starved] < cap_t[t, 0]]):
                if a in starved:
                    continue
                for x in (_exchange(pb, st, req, fol, r, s_, a, b, rtb > cap_t), single(r, s_, a, b)):
                    if x is not None:
                        down.append(x)
    up.sort(key=lambda x: (x[0], x[1]))
    down.sort(key=lambda x: (x[0], x[1]))
    return sorted(up[:CANDIDATES] + down[:CANDIDATES], key=lambda x: (x[0], x[1]))


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
            if cost > left or trials <= 0:
                break
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
