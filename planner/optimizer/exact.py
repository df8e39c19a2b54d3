"""Exact rebalance of small clusters with CP-SAT: where a constraint needs it.

The flow decomposition (rebalance.py) relaxes two things a flow cannot express: that one partition's
replicas must land on distinct brokers and together keep its racks, and that each topic must keep a leader
assignment within its cap. On large clusters the relaxation is tight (there are many interchangeable
replicas); on small ones a tie broken the wrong way shows. So below `LIMIT` (partition x broker pairs) the
rebalance is solved exactly: first the most level replica counts (least sum of squares, which is also the
least spread), then the fewest replica moves reaching them, with every hard guarantee and every topic's
leader cap as constraints. Deterministic: one worker and a deterministic time limit; if that limit is hit the
caller keeps the flow plan.
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.problem import Problem, rack_masks

LIMIT = 300


def _model(pb: Problem, eligible: np.ndarray, caps: np.ndarray, topics: list[int] | None = None):
    """Variables x[p][b] (partition p on eligible broker b) and leaders l[p][b], with the hard constraints.
    `topics` restricts the model to those topics' partitions (fixed partitions count as constants)."""
    B = pb.num_brokers
    e_idx = np.flatnonzero(eligible).tolist()
    bits = pb.rack_bits()
    req = required_racks(pb, eligible)
    m = cp_model.CpModel()
    fixed = pb.fixed
    x: dict[int, dict[int, cp_model.IntVar]] = {}
    lead: dict[int, dict[int, cp_model.IntVar]] = {}
    const = np.zeros(B, np.int64)
    rows = range(pb.num_partitions) if topics is None else np.flatnonzero(np.isin(pb.topic_of, topics)).tolist()
    for r in rows:
        reps = pb.replicas[r][pb.replicas[r] >= 0]
        if fixed[r]:
            for b in reps.tolist():
                const[b] += 1
            continue
        stay = [b for b in reps.tolist() if not eligible[b]]
        slots = len(reps) - len(stay)
        if slots == 0:
            continue
        xs = {b: m.new_bool_var(f"x{r}_{b}") for b in e_idx}
        x[r] = xs
        m.add(sum(xs.values()) == slots)
        if pb.rack_aware and req[r]:
            stay_mask = int(np.bitwise_or.reduce(bits[stay])) if stay else 0
            cover = []
            for q in range(len(pb.rack_names)):
                bit = 1 << q
                if stay_mask & bit:
                    cover.append(1)
                    continue
                in_q = [xs[b] for b in e_idx if int(bits[b]) & bit]
                if in_q:
                    y = m.new_bool_var("")
                    m.add(y <= sum(in_q))
                    cover.append(y)
            m.add(sum(cover) >= int(req[r]))
        ls = {b: m.new_bool_var(f"l{r}_{b}") for b in e_idx}
        lead[r] = ls
        m.add_exactly_one(ls.values())
        for b in e_idx:
            m.add_implication(ls[b], xs[b])
    # per-topic leader caps (fixed partitions' leaders count)
    per_tb: dict[tuple[int, int], list] = {}
    for r, ls in lead.items():
        for b, v in ls.items():
            per_tb.setdefault((int(pb.topic_of[r]), b), []).append(v)
    for r in rows:
        if fixed[r] and pb.replicas[r][0] >= 0 and eligible[pb.replicas[r][0]]:
            per_tb.setdefault((int(pb.topic_of[r]), int(pb.replicas[r][0])), []).append(1)
    for (t, _b), vs in per_tb.items():
        if not pb.excluded_topic[t]:
            m.add(sum(vs) <= int(caps[t]))
    return m, x, lead, const


def _solve(m: cp_model.CpModel, det_time: float) -> cp_model.CpSolver | None:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_deterministic_time = det_time
    solver.parameters.random_seed = 0
    status = solver.solve(m)
    return solver if status == cp_model.OPTIMAL else None


def topic_floor(pb: Problem, eligible: np.ndarray, t: int, det_time: float = 5.0) -> int | None:
    """The least 'most partitions of topic t one broker leads' any placement allows."""
    caps = np.full(len(pb.topic_names), 1 << 30, np.int64)
    m, x, lead, _ = _model(pb, eligible, caps, [t])
    u = m.new_int_var(0, pb.num_partitions, "u")
    per_b: dict[int, list] = {}
    for ls in lead.values():
        for b, v in ls.items():
            per_b.setdefault(b, []).append(v)
    for r in np.flatnonzero((pb.topic_of == t) & pb.fixed).tolist():
        b0 = pb.replicas[r][0]
        if b0 >= 0 and eligible[b0]:
            per_b.setdefault(int(b0), []).append(1)
    for vs in per_b.values():
        m.add(sum(vs) <= u)
    m.minimize(u)
    s = _solve(m, det_time)
    return None if s is None else int(round(s.objective_value))


def rebalance_exact(pb: Problem, eligible: np.ndarray, max_moves: int | None, max_bytes: int | None,
                    det_time: float = 20.0) -> tuple[np.ndarray, np.ndarray] | None:
    """(final replica matrix, per-topic leader caps) or None when the problem is too large or not solved to
    optimality within the deterministic time."""
    n_e = int(eligible.sum())
    active = int((~pb.fixed).sum())
    if active * n_e > LIMIT or n_e == 0:
        return None
    T = len(pb.topic_names)
    n_t = np.bincount(pb.topic_of, minlength=T)
    caps = -(-n_t // n_e)
    for t in np.unique(pb.topic_of[~pb.fixed]).tolist():
        if pb.excluded_topic[t]:
            continue
        floor = topic_floor(pb, eligible, t)
        if floor is None:
            return None
        caps[t] = max(int(caps[t]), floor)
    e_idx = np.flatnonzero(eligible).tolist()
    sizes = np.maximum(pb.sizes, 0)
    result = None
    square = None
    for stage in ("level", "moves"):
        m, x, _, const = _model(pb, eligible, caps)
        moves = []
        moved_bytes = []
        for r, xs in x.items():
            orig = set(pb.replicas[r][pb.replicas[r] >= 0].tolist())
            for b, v in xs.items():
                if b not in orig:
                    moves.append(v)
                    moved_bytes.append(int(sizes[r]) * v)
        if max_moves is not None:
            m.add(sum(moves) <= max_moves)
        if max_bytes is not None and pb.sizes_known:
            m.add(sum(moved_bytes) <= max_bytes)
        total = int(const[eligible].sum()) + sum(int((pb.replicas[r] >= 0).sum()) -
                                                 int((~eligible[pb.replicas[r][pb.replicas[r] >= 0]]).sum())
                                                 for r in x)
        # sum of squares, linear: n_b = const_b + sum_k z[b,k] with z[b,k] = [n_b >= const_b + k] ordered,
        # and n^2 = const^2 + sum_k (2 (const + k) - 1) z[b,k]
        sq = []
        for b in e_idx:
            c = int(const[b])
            free = [xs[b] for xs in x.values()]
            z = [m.new_bool_var("") for _ in free]
            for k in range(1, len(z)):
                m.add_implication(z[k], z[k - 1])
            m.add(sum(z) == sum(free))
            sq.extend((2 * (c + k + 1) - 1) * zk for k, zk in enumerate(z))
        del total
        if stage == "level":
            m.minimize(sum(sq))
        else:
            m.add(sum(sq) == square)
            m.minimize(sum(moves))
        s = _solve(m, det_time)
        if s is None:
            return None
        if stage == "level":
            square = int(round(s.objective_value))
        else:
            result = s, x
    s, x = result
    final = pb.replicas.copy()
    for r, xs in x.items():
        chosen = {b for b, v in xs.items() if s.value(v)}
        row = final[r]
        keep = [b in chosen or (b >= 0 and not eligible[b]) for b in row.tolist()]
        new = sorted(chosen - set(row.tolist()))
        for j in range(len(row)):
            if row[j] >= 0 and not keep[j]:
                row[j] = new.pop(0)
        final[r] = row
    # sanity: rack coverage and distinctness (the model enforces them)
    assert (popcount(rack_masks(final, pb.rack_bits())) >= required_racks(pb, eligible)).all() or \
        not pb.rack_aware
    return final, caps
