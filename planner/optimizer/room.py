"""Leader room of a count rebalance: every broker able to lead its share.

A broker's leader room is the partitions it could lead within the topics' caps: the sum over topics of
min(its replicas of the topic, cap). No leader order gives a broker more leaders than its room, so a level
leader count (spread <= 1) needs every broker's room at least at floor(partitions / brokers). A placement that
levels the replica counts can miss it (a broker holding many replicas of few topics): 3 of 36 generated
clusters kept leader spread 3, 4 and 6 so, each short broker leading exactly its room.

`mend_room_count` raises short brokers' room by cycles of replica transfers that keep every broker's count,
the racks covered and the planned leaders in place (the leadership witness keeps its caps):
- an exchange between the short broker b and another a: a replica of a topic b holds more of than the cap
  goes to a, one of a topic b holds fewer of comes to b;
- a detour through a move the plan makes, z from s to c: z stays on s, b sends c a replica of a topic it
  holds more of than the cap, and s sends b one of a topic b holds fewer of (one more move than before).
Each cycle costs its change in replica moves (a replica the plan already moves is sent on or back, which can
cost nothing); the cheapest goes first, within `slack` extra moves in all.

`leader_room_reason` names the brokers whose room keeps leader spread above 1 on a final placement.
"""

from __future__ import annotations

import numpy as np

from planner.optimizer.checks import required_racks
from planner.optimizer.problem import Problem
from planner.optimizer.state import State, apply_move, movable, rack_ok


def room_per_broker(pb: Problem, final: np.ndarray, cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """((T, B) replicas per topic and broker, (B,) leader room): the partitions a broker could lead within the
    topics' caps `cap`, the sum over topics of min(replicas of the topic it holds, cap). A level leader count
    needs every broker's room at least at the level."""
    B = pb.num_brokers
    T = len(pb.topic_names)
    valid = final >= 0
    rtb = np.bincount((np.broadcast_to(pb.topic_of[:, None].astype(np.int64), final.shape)[valid] * B
                       + final[valid]), minlength=T * B).reshape(T, B)
    cap_t = np.where(pb.excluded_topic, 0, cap)
    return rtb, np.minimum(rtb, cap_t[:, None]).sum(axis=0)


def leader_level(pb: Problem, final: np.ndarray, eligible: np.ndarray) -> int:
    """floor(partitions with an eligible replica / eligible brokers): the fewest leaders a broker may have in a
    leader order of spread <= 1."""
    n = int(((final >= 0) & eligible[np.maximum(final, 0)]).any(axis=1).sum())
    return n // max(1, int(eligible.sum()))


def leader_room_reason(pb: Problem, final: np.ndarray, eligible: np.ndarray, cap: np.ndarray) -> str | None:
    """Why no leader order of spread <= 1 exists on `final`, when the leader room says so: the brokers whose
    room is below the level; None when every broker has room for it."""
    _, room = room_per_broker(pb, final, cap)
    level = leader_level(pb, final, eligible)
    short = [int(b) for b in np.flatnonzero(eligible & (room < level)).tolist()]
    if not short:
        return None
    shown = ", ".join(f"{int(pb.broker_ids[b])} ({int(room[b])})" for b in short[:10])
    more = f" (+{len(short) - 10} more)" if len(short) > 10 else ""
    return (f"on this placement brokers {shown}{more} can lead at most the partitions in brackets within the "
            f"topics' leader caps (of each topic the partitions they hold, up to the cap), below the {level} each "
            f"must lead for leader spread <= 1, so no leader order reaches it here; the plan found no replica "
            f"moves within its move bound that give them more (its limit, not a proof that none exist)")


class _Mender:
    """The state `mend_room_count` keeps up to date: replicas per topic and broker, room, each broker's replica
    positions (row * R + slot)."""

    def __init__(self, pb: Problem, st: State, eligible: np.ndarray) -> None:
        self.pb, self.st, self.eligible = pb, st, eligible
        B = pb.num_brokers
        f = st.final
        self.R = f.shape[1]
        self.cap = np.where(pb.excluded_topic, 0, st.cap).astype(np.int64)
        self.rtb, self.room = room_per_broker(pb, f, st.cap)
        self.req = required_racks(pb, eligible)
        self.topic = pb.topic_of.astype(np.int64)
        flat = np.flatnonzero(movable(pb, st, eligible).ravel())
        on = f.ravel()[flat]
        order = np.argsort(on, kind="stable")
        cut = np.searchsorted(on[order], np.arange(B + 1))
        self.pos_of = [flat[order[cut[k]:cut[k + 1]]] for k in range(B)]

    def candidates(self, src: int, dst: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Replicas on `src` that may go to `dst` (not a planned leader there, `dst` not holding the partition,
        racks kept): (rows, slots, topics, change in moves of sending each there)."""
        pb, st, R = self.pb, self.st, self.R
        f = st.final
        p = self.pos_of[src]
        p = p[f.ravel()[p] == src]
        r, s = p // R, p % R
        keep = (st.lead[r] != src) & ~(f[r] == dst).any(axis=1)
        r, s = r[keep], s[keep]
        ok = rack_ok(pb, f[r], s, np.full(len(r), dst), self.req[r])
        r, s = r[ok], s[ok]
        orig = pb.replicas[r]
        delta = (~(orig == dst).any(axis=1)).astype(np.int64) - (~(orig == src).any(axis=1)).astype(np.int64)
        return r, s, self.topic[r], delta

    def gain(self, t: np.ndarray, b: int) -> np.ndarray:
        """Room b gains by taking a replica of each topic in `t`."""
        return (self.rtb[t, b] < self.cap[t]).astype(np.int64)

    def loss(self, t: np.ndarray, b: int) -> np.ndarray:
        """Room b loses by giving a replica of each topic in `t`."""
        return (self.rtb[t, b] <= self.cap[t]).astype(np.int64)

    def transfer(self, r: int, s: int, frm: int, to: int) -> None:
        apply_move(self.pb, self.st, r, s, to)
        t = int(self.topic[r])
        self.room[frm] -= int(self.rtb[t, frm] <= self.cap[t])
        self.room[to] += int(self.rtb[t, to] < self.cap[t])
        self.rtb[t, frm] -= 1
        self.rtb[t, to] += 1
        self.pos_of[to] = np.append(self.pos_of[to], r * self.R + s)


def _cheapest(cost_x: np.ndarray, ok_x: np.ndarray, cost_y: np.ndarray, ok_y: np.ndarray) -> tuple[int, int, int]:
    """(i, j, cost) of the pair with the least cost_x[i] + cost_y[j] among ok ones; cost -1 when none."""
    ix, iy = np.flatnonzero(ok_x), np.flatnonzero(ok_y)
    if not len(ix) or not len(iy):
        return -1, -1, -1
    i = int(ix[np.argmin(cost_x[ix])])
    j = int(iy[np.argmin(cost_y[iy])])
    return i, j, int(cost_x[i] + cost_y[j])


def mend_room_count(pb: Problem, st: State, eligible: np.ndarray, budget_b: int, slack: int,
                    max_cycles: int = 10_000) -> int:
    """Cycles (module docstring) until every eligible broker's room reaches the level, no cycle within the
    remaining `slack` extra moves helps, or `max_cycles` pass. Returns the cycles made."""
    e_idx = np.flatnonzero(eligible)
    if len(e_idx) < 2:
        return 0
    goal = leader_level(pb, st.final, eligible)
    if (room_per_broker(pb, st.final, st.cap)[1][e_idx] >= goal).all():
        return 0
    m = _Mender(pb, st, eligible)
    start_moves = st.moves
    cycles = 0
    for b in e_idx[np.argsort(m.room[e_idx], kind="stable")].tolist():
        while m.room[b] < goal and cycles < max_cycles:
            left = slack - (st.moves - start_moves)
            best = None
            for a in e_idx.tolist():
                if a == b:
                    continue
                xr, xs, tx, dx = m.candidates(b, a)        # b gives a topic it holds more of than the cap
                sel = m.rtb[tx, b] > m.cap[tx]
                xr, xs, tx, dx = xr[sel], xs[sel], tx[sel], dx[sel]
                yr, ys, ty, dy = m.candidates(a, b)        # and takes one it holds fewer of
                sel = m.rtb[ty, b] < m.cap[ty]
                yr, ys, ty, dy = yr[sel], ys[sel], ty[sel], dy[sel]
                if not len(xr) or not len(yr):
                    continue
                ga, la = m.gain(tx, a), m.loss(ty, a)
                for gx in (1, 0):                         # a's room must not fall below the level
                    for ly in (0, 1):
                        if m.room[a] + gx - ly < goal:
                            continue
                        i, j, c = _cheapest(dx, ga == gx, dy, la == ly)
                        if i >= 0 and c <= left and (best is None or c < best[0]):
                            best = (c, ((xr[i], xs[i], b, a), (yr[j], ys[j], a, b)))
            if best is None or best[0] > 0:
                detour = _detour(m, b, goal, left if best is None else best[0] - 1)
                if detour is not None:
                    best = detour
            if best is None:
                break
            bytes_before = st.bytes
            done = []
            for r, s_, frm, to in best[1]:
                m.transfer(int(r), int(s_), frm, to)
                done.append((int(r), int(s_), frm, to))
            if st.bytes > budget_b and st.bytes > bytes_before:      # the byte budget: put it back
                for r, s_, frm, to in reversed(done):
                    m.transfer(r, s_, to, frm)
                break
            cycles += 1
    return cycles


def _detour(m: _Mender, b: int, goal: int, left: int) -> tuple[int, tuple] | None:
    """The cheapest detour for short broker b within `left` extra moves: a replica z the plan moves from s to
    c goes back to s, b gives c a replica of a topic it holds more of than the cap, s gives b one of a topic
    it holds fewer of. (cost, transfers) or None."""
    pb, st = m.pb, m.st
    f = st.final
    moved_r, moved_s = np.nonzero((f >= 0) & (f != pb.replicas))
    src = pb.replicas[moved_r, moved_s]
    dst = f[moved_r, moved_s]
    keep = (src >= 0) & (dst != b) & (src != b) & (st.lead[moved_r] != dst) & ~pb.fixed[moved_r]
    keep &= m.eligible[np.maximum(src, 0)]
    moved_r, moved_s, src, dst = moved_r[keep], moved_s[keep], src[keep], dst[keep]
    best = None
    for c, s in sorted(set(zip(dst.tolist(), src.tolist(), strict=True))):
        zi = np.flatnonzero((dst == c) & (src == s))
        zr, zs = moved_r[zi], moved_s[zi]
        back = ~(f[zr] == s).any(axis=1) & rack_ok(pb, f[zr], zs, np.full(len(zr), s), m.req[zr])
        zr, zs = zr[back], zs[back]
        if not len(zr):
            continue
        xr, xs, tx, dx = m.candidates(b, c)
        sel = m.rtb[tx, b] > m.cap[tx]
        xr, xs, tx, dx = xr[sel], xs[sel], tx[sel], dx[sel]
        yr, ys, ty, dy = m.candidates(s, b)
        sel = m.rtb[ty, b] < m.cap[ty]
        yr, ys, ty, dy = yr[sel], ys[sel], ty[sel], dy[sel]
        if not len(xr) or not len(yr):
            continue
        tz = m.topic[zr]
        # c: gives z, takes x; s: takes z back, gives y; neither may fall below the level
        lz_c, gz_s = m.loss(tz, c), m.gain(tz, s)
        k = int(np.argmin(lz_c - gz_s))                # the z that costs c and s the least room
        rz, sz_ = int(zr[k]), int(zs[k])
        dz = -1                                         # back to where it was: one move less
        gx_c = m.gain(tx, c)
        ly_s = m.loss(ty, s)
        ok_x = m.room[c] - int(lz_c[k]) + gx_c >= goal
        ok_y = m.room[s] + int(gz_s[k]) - ly_s >= goal
        ok_y &= yr != rz
        ok_x &= xr != rz
        i, j, cst = _cheapest(dx, ok_x, dy, ok_y)
        if i < 0 or xr[i] == yr[j]:
            continue
        cst += dz
        if cst <= left and (best is None or cst < best[0]):
            best = (cst, ((rz, sz_, c, s), (xr[i], xs[i], b, c), (yr[j], ys[j], s, b)))
    return best
