"""Working state shared by the rebalance steps: the placement being built and its leadership witness.

Moves are applied through `apply_move` only, so the move and byte counts always mean "replicas a partition
did not have before the plan" (a replica moved twice counts once, one moved back counts zero) and the
witness follows a planned leader's replica.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.optimizer.checks import popcount
from planner.optimizer.problem import Problem, rack_masks


@dataclass
class State:
    final: np.ndarray     # (P, R) current placement
    lead: np.ndarray      # (P,) planned leader broker (-1 none)
    lcount: dict          # t*B+b -> planned leaders
    cap: np.ndarray       # (T,) per-topic planned-leader cap
    moves: int = 0
    bytes: int = 0
    band: tuple[int, int] | None = None   # the counts a rebalance levels to (None: floor / ceil of the mean)


def level_band(st: State, eligible: np.ndarray) -> tuple[int, int]:
    """The band of replica counts the levelling aims at: `st.band` when set (the best the racks allow, when
    that is wider than the mean's floor and ceil), else floor and ceil of the mean over the eligible brokers."""
    if st.band is not None:
        return st.band
    n = int(eligible.sum())
    total = int(broker_counts(st.final, len(eligible))[eligible].sum())
    return (total // n, -(-total // n)) if n else (0, 0)


def member_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a[:, :, None] == b[:, None, :]).any(axis=2)


def broker_counts(final: np.ndarray, B: int) -> np.ndarray:
    return np.bincount(final[final >= 0], minlength=B).astype(np.int64)


def bytes_per_broker(final: np.ndarray, sizes: np.ndarray, B: int) -> np.ndarray:
    valid = final >= 0
    w = np.broadcast_to(np.maximum(sizes, 0)[:, None], final.shape)[valid]
    return np.bincount(final[valid], weights=w, minlength=B).astype(np.float64)


def movable(pb: Problem, st: State, eligible: np.ndarray) -> np.ndarray:
    f = st.final
    return (f >= 0) & eligible[np.maximum(f, 0)] & ~pb.fixed[:, None]


def is_new(pb: Problem, r, s, broker) -> np.ndarray:
    """Broker `broker` in slot (r, s) would be a replica the partition did not have before the plan."""
    return ~(pb.replicas[r] == np.asarray(broker)[..., None]).any(axis=-1)


def new_here(pb: Problem, r: int, b: int) -> bool:
    """`is_new` for one partition and one broker, without array overhead (it runs once per move and more)."""
    return int(b) not in pb.replicas[r].tolist()


def apply_move(pb: Problem, st: State, r: int, s: int, b: int) -> None:
    """Put broker b in slot (r, s). Moves and bytes count replicas the partition did not have before, so a
    replica moved twice counts once and one moved back counts zero."""
    x = int(st.final[r, s])
    row = pb.replicas[r].tolist()
    delta = int(int(b) not in row) - int(x not in row)
    st.final[r, s] = b
    st.moves += delta
    st.bytes += delta * max(0, int(pb.sizes[r]))
    if st.lead[r] == x:
        t = int(pb.topic_of[r])
        B = pb.num_brokers
        st.lcount[t * B + x] -= 1
        st.lcount[t * B + b] = st.lcount.get(t * B + b, 0) + 1
        st.lead[r] = b


def rack_ok(pb: Problem, final_rows: np.ndarray, slot: np.ndarray, target: np.ndarray,
             req: np.ndarray) -> np.ndarray:
    """Moving replica `slot` of each row to `target` keeps the row on at least `req` racks."""
    if not pb.rack_aware:
        return np.ones(len(target), dtype=bool)
    bits = pb.rack_bits()
    others = final_rows.copy()
    others[np.arange(len(others)), slot] = -1
    return popcount(rack_masks(others, bits) | bits[target]) >= req
