"""Disk capacity as a hard constraint: no broker above `max_disk_usage` x its capacity after the plan, nor at
any batch boundary (docs/PLAN.md "Disk capacity").

Every plan kind calls the same functions over placements (replica matrices), so drain, rebalance, restart and
return plans share one rule:
- a broker's usage now is the disk's own figure, `Problem.disk_used_bytes` (TotalBytes - UsableBytes of its
  log dirs, from DescribeLogDirs: other files on the volume count too);
- a replica added to a broker costs the partition's size (the largest replica: what the new follower copies
  from its leader, KIP-113's PartitionSize is the log segments' bytes);
- a replica removed frees its own size on that broker (`Problem.replica_sizes`, else the partition's size);
- while a batch runs, its partitions occupy both their old and their new brokers: Kafka deletes a removed
  replica only once the reassignment of its partition has completed (KIP-455: the controller stops and
  deletes the removing replicas after the adding ones joined the ISR, `KafkaController.onPartitionReassignment`),
  so within a batch usage rises by every byte it adds and falls by nothing.

Brokers whose capacity or usage is unknown are not checked (`unchecked` names them: a plan warns). The limit is
floor(max_disk_usage x capacity_bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.optimizer.checks import Infeasible
from planner.optimizer.problem import Problem
from planner.text import size as human_bytes


def limits(pb: Problem) -> np.ndarray:
    """int64 (B,): the most bytes each broker may hold on disk, -1 where its capacity or usage is unknown."""
    cap = pb.capacity_bytes
    known = (cap >= 0) & (pb.disk_used_bytes >= 0)
    return np.where(known, np.floor(cap.astype(np.float64) * pb.max_disk_usage).astype(np.int64), -1)


def checked(pb: Problem) -> np.ndarray:
    """bool (B,): brokers whose disk the constraint can check."""
    return limits(pb) >= 0


def _slot_sizes(pb: Problem, rows: np.ndarray) -> np.ndarray:
    """(len(rows), R) each current replica's own size, the partition's size where it is not known."""
    own = pb.replica_sizes[rows]
    return np.where(own >= 0, own, np.maximum(pb.sizes[rows], 0)[:, None])


def changes(pb: Problem, before: np.ndarray, after: np.ndarray, rows: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray, int]:
    """(bytes added per broker, bytes freed per broker, rows with an unknown size that move) when the rows'
    lists go from `before` to `after` ((n, R) matrices for `rows`, or (P, R) for every partition)."""
    B = pb.num_brokers
    if rows is None:
        rows = np.arange(len(before))
    if len(rows) and before.shape == after.shape:
        # only a row whose list changes adds or frees bytes: the (n, R, R) comparisons below then cover the
        # moves, not all 200k partitions (a restart or a drain changes ~1-2 % of them; broker_figures asks for
        # the placement before the plan too, which changes none)
        moved = (before != after).any(axis=1)
        if not moved.all():
            rows, before, after = rows[moved], before[moved], after[moved]
    if not len(rows) or not before.shape[1]:
        return np.zeros(B, np.int64), np.zeros(B, np.int64), 0
    add = (after >= 0) & ~(after[:, :, None] == before[:, None, :]).any(axis=2)
    rem = (before >= 0) & ~(before[:, :, None] == after[:, None, :]).any(axis=2)
    size = pb.sizes[rows]
    unknown = int(((add.any(axis=1) | rem.any(axis=1)) & (size < 0)).sum())
    w_add = np.broadcast_to(np.maximum(size, 0)[:, None], add.shape)[add]
    added = np.bincount(after[add], weights=w_add, minlength=B).astype(np.int64)
    # a removed replica frees its own size on that broker (the snapshot's figure for the replica there)
    orig = pb.replicas[rows]
    own = _slot_sizes(pb, rows)
    match = (before[:, :, None] == orig[:, None, :]) & (before >= 0)[:, :, None]
    slot = np.argmax(match, axis=2)
    w_rem = np.where(match.any(axis=2), np.take_along_axis(own, slot, axis=1), np.maximum(size, 0)[:, None])
    freed = np.bincount(before[rem], weights=w_rem[rem], minlength=B).astype(np.int64)
    return added, freed, unknown


def usage_after(pb: Problem, final: np.ndarray) -> np.ndarray:
    """int64 (B,): each broker's disk usage once `final` (P, R) is in place (-1 where usage is unknown)."""
    added, freed, _ = changes(pb, pb.replicas, final)
    used = pb.disk_used_bytes
    return np.where(used >= 0, used + added - freed, -1)


@dataclass
class Overfull:
    broker: int          # index
    usage: int           # bytes it would hold
    limit: int           # bytes it may hold
    receives: int        # bytes the plan adds to it (up to that point)


def overfull(pb: Problem, usage: np.ndarray, receives: np.ndarray, mask: np.ndarray | None = None) -> list[Overfull]:
    """Brokers (within `mask`) whose `usage` is above their limit."""
    lim = limits(pb)
    bad = (lim >= 0) & (usage > lim)
    if mask is not None:
        bad &= mask
    return [Overfull(int(b), int(usage[b]), int(lim[b]), int(receives[b])) for b in np.flatnonzero(bad)]


def describe(pb: Problem, items: list[Overfull], limit: int = 8) -> str:
    """'broker 3: 912 GiB of 1.0 TiB (89.1 %), 120 GiB over its 85 % limit; ...'"""
    out = []
    for o in items[:limit]:
        cap = int(pb.capacity_bytes[o.broker])
        pct = 100.0 * o.usage / cap if cap > 0 else float("inf")
        recv = f", receiving {human_bytes(o.receives)}" if o.receives else ""
        out.append(f"broker {int(pb.broker_ids[o.broker])}: {human_bytes(o.usage)} of {human_bytes(cap)} "
                   f"({pct:.1f} %{recv}), {human_bytes(o.usage - o.limit)} over the limit")
    more = f"; and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(out) + more


def _pct(pb: Problem) -> str:
    return f"{100.0 * pb.max_disk_usage:g} %"


def check_now(pb: Problem, mask: np.ndarray) -> None:
    """Refuse a plan when brokers it cannot empty (`mask`: e.g. every broker a drain keeps) are already above
    the limit: no plan that only adds to them can end below it."""
    used = pb.disk_used_bytes
    items = overfull(pb, used, np.zeros(pb.num_brokers, np.int64), mask)
    if items:
        need = max(o.usage / max(1, int(pb.capacity_bytes[o.broker])) for o in items)
        raise Infeasible("disk-capacity",
                         f"disk capacity: {len(items)} broker(s) already use more than {_pct(pb)} of their log "
                         f"dirs' capacity before the plan ({describe(pb, items)}); this plan cannot lower them: "
                         f"free space there, or raise max_disk_usage to at least {np.ceil(need * 100) / 100:.2f}")


def check_final(pb: Problem, final: np.ndarray, what: str, mask: np.ndarray | None = None) -> None:
    """Refuse (Infeasible, naming brokers and bytes) a final placement that leaves a broker in `mask` (default:
    every broker it adds bytes to) above the limit."""
    added, freed, _ = changes(pb, pb.replicas, final)
    used = pb.disk_used_bytes
    usage = np.where(used >= 0, used + added - freed, -1)
    items = overfull(pb, usage, added, mask if mask is not None else added > 0)
    if items:
        raise Infeasible("disk-capacity", f"disk capacity: {what} would leave {len(items)} broker(s) above "
                         f"{_pct(pb)} of their log dirs' capacity: {describe(pb, items)}")


def check_batches(pb: Problem, batches: list, what: str) -> None:
    """Walk the batches in apply order (each `.rows`, `.replicas`): within a batch a broker holds what it held
    before plus every byte the batch adds (its removals happen only once the batch completes). Refuse the
    first batch that takes a broker which receives bytes in it above the limit."""
    lim = limits(pb)
    if not (lim >= 0).any():
        return
    current = pb.replicas.copy()
    used = pb.disk_used_bytes.copy()
    for b in batches:
        if not len(b.rows):
            continue
        before = current[b.rows]
        added, freed, _ = changes(pb, before, b.replicas, b.rows)
        peak = np.where(used >= 0, used + added, -1)
        items = overfull(pb, peak, added, added > 0)
        if items:
            raise Infeasible("disk-capacity", f"disk capacity: {what}, while batch {b.index} runs (its partitions "
                             f"occupy their old and new brokers until it completes), {len(items)} broker(s) would "
                             f"be above {_pct(pb)} of their capacity: {describe(pb, items)}")
        used = np.where(used >= 0, used + added - freed, -1)
        current[b.rows, : b.replicas.shape[1]] = b.replicas


def unchecked(pb: Problem, receivers: np.ndarray) -> list[int]:
    """Ids of brokers in `receivers` whose disk cannot be checked (capacity or usage unknown)."""
    return [int(x) for x in pb.broker_ids[receivers & ~checked(pb)]]
