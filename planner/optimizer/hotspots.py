"""Hot spots: brokers a plan leaves far above the mean, and why.

The plan levels what it balances (a drain and a count rebalance: replica counts; a bytes rebalance: bytes).
A broker more than `HOT_PCT` above the mean of the eligible brokers (and, for counts, at least two replicas
above the rounded-up mean) is a hot spot. Its reason is the first of these that explains it:
- "rack": its rack must hold at least `floor` replicas (or bytes), spread over the rack's eligible brokers,
  because partitions need a replica on every rack and (in a drain) the replicas that stay are pinned; when
  that floor per broker is itself above the threshold, no placement does better (the 6-broker case: the only
  other broker of a drained broker's rack takes all its replicas);
- "kept" (drain): the broker already holds more than that, and a drain moves only the drained replicas;
- "budget" (rebalance with --max-moves / --max-bytes): the budget ran out first;
- "constraints": otherwise (excluded or in-flight partitions, partitions with nowhere else to go).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.problem import Problem, rack_masks
from planner.plan_model import HOT_SPOT_WARNING
from planner.text import size

HOT_PCT = 10.0


def hot_spots(pb: Problem, final: np.ndarray, eligible: np.ndarray, drained: np.ndarray, metric: str,
              budget_hit: bool = False) -> list[dict[str, Any]]:
    """[{broker, rack, metric, value, mean, excess_pct, reason, detail}] in broker-id order."""
    e_idx = np.flatnonzero(eligible)
    if len(e_idx) < 2:
        return []
    B = pb.num_brokers
    w = np.maximum(pb.sizes, 0).astype(np.float64) if metric == "bytes" else np.ones(pb.num_partitions)
    value = _per_broker(final, w, B)
    mean = float(value[e_idx].mean())
    if mean <= 0:
        return []
    hot = value > mean * (1 + HOT_PCT / 100)
    if metric == "replicas":
        hot &= value >= np.ceil(mean) + 2
    hot &= eligible
    if not hot.any():
        return []
    unit = "bytes" if metric == "bytes" else "replicas"
    floor_b = _rack_floor(pb, eligible, drained, w)
    kept = _per_broker(np.where(drained[np.maximum(pb.replicas, 0)], -1, pb.replicas), w, B) \
        if drained.any() else np.zeros(B)
    out = []
    for b in np.flatnonzero(hot).tolist():
        r = int(pb.rack_of[b])
        rack = pb.rack_names[r] if r >= 0 else None
        excess = 100.0 * (value[b] - mean) / mean
        floor = floor_b[b]
        if pb.rack_aware and r >= 0 and floor > mean * (1 + HOT_PCT / 100):
            n_r = int((eligible & (pb.rack_of == r)).sum())
            reason = "rack"
            who = "its only eligible broker" if n_r == 1 else f"its {n_r} eligible brokers"
            detail = (f"rack {rack} must hold at least {_fmt(floor * n_r, unit)} on {who} "
                      f"({_fmt(floor, unit)} per broker, {100.0 * (floor - mean) / mean:+.1f}% vs the mean), because "
                      "every partition that must span all racks needs a replica on it"
                      + (", and a drain moves only the drained brokers' replicas: those already on the rack stay"
                         if drained.any() else ""))
        elif drained.any() and kept[b] > mean * (1 + HOT_PCT / 100):
            reason = "kept"
            detail = (f"it keeps {_fmt(kept[b], unit)} that a drain does not move "
                      f"({100.0 * (kept[b] - mean) / mean:+.1f}% vs the mean)")
        elif budget_hit:
            reason = "budget"
            detail = "the move budget (max_moves / max_bytes) ran out before it was levelled"
        else:
            reason = "constraints"
            detail = ("its replicas have nowhere else to go (rack coverage, distinct brokers, excluded or "
                      "in-flight partitions)")
        out.append({"broker": int(pb.broker_ids[b]), "rack": rack, "metric": metric, "value": int(value[b]),
                    "mean": round(mean, 1), "excess_pct": round(excess, 1), "reason": reason, "detail": detail})
    return out


def hot_spot_warning(h: dict[str, Any]) -> str:
    """A hot spot as one line of the plan's `warnings`, so every reader of warnings sees it (the CLI and the
    review page show the structured `hot_spots` and leave these lines out, see planner.plan_model.is_hot_spot_warning)."""
    rack = f" (rack {h['rack']})" if h.get("rack") else ""
    if h["metric"] == "bytes":
        amounts = f"{_fmt(h['value'], 'bytes')} vs a mean of {_fmt(h['mean'], 'bytes')}"
    else:
        amounts = f"{h['value']:,} replicas vs a mean of {h['mean']:,.1f}"
    return (f"{HOT_SPOT_WARNING}broker {h['broker']}{rack} ends {h['excess_pct']:+.1f}% above the mean of the "
            f"eligible brokers ({amounts}); {h['reason']}: {h['detail']}")


def _per_broker(matrix: np.ndarray, w: np.ndarray, B: int) -> np.ndarray:
    valid = matrix >= 0
    return np.bincount(matrix[valid], weights=np.broadcast_to(w[:, None], matrix.shape)[valid], minlength=B)


def _rack_floor(pb: Problem, eligible: np.ndarray, drained: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(B,) per eligible broker: the least average load its rack's eligible brokers can have, from what must
    be on the rack: replicas that do not move (a drain's kept replicas; a rebalance pins nothing but excluded
    and in-flight partitions) and, for each partition that must span every rack it does not span yet, one
    replica on each such rack."""
    B = pb.num_brokers
    out = np.zeros(B)
    if not pb.rack_aware:
        return out
    bits = pb.rack_bits()
    n_racks = int(popcount(np.bitwise_or.reduce(bits[eligible])))
    req = required_racks(pb, eligible)
    reps = pb.replicas
    valid = reps >= 0
    if drained.any():
        pinned_slot = valid & ~drained[np.maximum(reps, 0)]
    else:  # a rebalance moves replicas of eligible brokers only
        pinned_slot = valid & (pb.fixed[:, None] | ~eligible[np.maximum(reps, 0)])
    pinned = np.where(pinned_slot, reps, -1)
    pinned_mask = rack_masks(pinned, bits)
    loose = valid.sum(axis=1) - pinned_slot.sum(axis=1)
    # a partition with `loose` replicas to place and `req - racks it already spans` racks still to cover:
    # when those equal the number of racks it does not span, every such rack is forced
    missing = req - popcount(pinned_mask)
    open_racks = n_racks - popcount(pinned_mask & np.bitwise_or.reduce(bits[eligible]))
    all_forced = (loose > 0) & (missing > 0) & (missing == open_racks)
    for r in range(len(pb.rack_names)):
        members = eligible & (pb.rack_of == r)
        if not members.any():
            continue
        bit = np.uint64(1) << np.uint64(r)
        load = _per_broker(pinned, w, B)[members].sum()
        load += w[all_forced & ((pinned_mask & bit) == 0)].sum()
        out[members] = load / members.sum()
    return out


def _fmt(x: float, unit: str) -> str:
    return size(x) if unit == "bytes" else f"{x:,.0f} replicas"
