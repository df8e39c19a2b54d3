"""The plan artifact (docs/PLAN.md): `plan.json`, `reassignment.json`, `rollback.json`, plus `solve.json`.

`plan.json` is a contract: apply/verify and the review UI read it. It holds no wall-clock time, so the same
snapshot and parameters give the same three files byte for byte; solver timings go to `solve.json`.
`reassignment.json` / `rollback.json` are exactly what `kafka-reassign-partitions.sh --execute` takes.
The reader and the id function are in planner.plan_model (no solver needed to read a plan).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from planner.codec import ReassignEntry
from planner.optimizer.batches import batch_traffic, changed_sets
from planner.optimizer.hotspots import HOT_PCT, hot_spot_warning, hot_spots
from planner.optimizer.planning import PlanResult, broker_figures, move_figures, topic_leader_max
from planner.plan_model import FORMAT, batch_file_name, file_sha256, plan_id


def _id_lists(pb, m: np.ndarray) -> list[list[int]]:
    """Each row of `m` (broker indices, -1 padded) as the list of its broker ids, -1s left out: one array pass
    per replica count rather than a Python loop over every replica (a 1M-partition plan writes ~1.5M lists)."""
    m = np.asarray(m)
    if not len(m):
        return []
    valid = m >= 0
    ids = pb.broker_ids[np.maximum(m, 0)]
    n = valid.sum(axis=1)
    if not (valid == (np.arange(m.shape[1])[None, :] < n[:, None])).all():   # a gap inside a row
        return [x[v].tolist() for x, v in zip(ids, valid, strict=True)]
    out: list[list[int]] = [[]] * len(m)
    for k in np.unique(n).tolist():
        sel = np.flatnonzero(n == k)
        for i, lst in zip(sel.tolist(), ids[sel, :k].tolist(), strict=True):
            out[i] = lst
    return out


def _names(pb, rows: np.ndarray) -> tuple[list[str], list[int]]:
    """(topic name, partition number) of each row."""
    names = pb.topic_names
    return [names[t] for t in pb.topic_of[rows].tolist()], pb.partition[rows].tolist()


def plan_document(res: PlanResult, snapshot: dict[str, Any], parameters: dict[str, Any],
                  files: dict[str, str] | None = None, lists: _Lists | None = None) -> dict[str, Any]:
    """plan.json as a dict, with its id. `files`: sha256 of the plan's other files (read_plan checks them);
    `lists`: the id lists write_plan has already made for them."""
    pb = res.problem
    lists = lists if lists is not None else _lists(res, texts=False)
    orig, final = pb.replicas, res.final
    changed = res.changed
    sizes_known = pb.sizes_known
    o_c, f_c = orig[changed], final[changed]
    new_c = ((f_c >= 0) & ~(f_c[:, :, None] == o_c[:, None, :]).any(axis=2)).sum(axis=1)
    data_c = changed_sets(o_c, f_c)
    nbytes_c = (pb.sizes[changed].astype(np.int64) * new_c).tolist() if sizes_known else [None] * len(changed)
    moves = [{"topic": t, "partition": n, "from": frm, "to": to, "bytes": nb if d else 0,
              "kind": "data" if d else "leader"}
             for (t, n), frm, to, nb, d in zip(lists.pairs, lists.before, lists.after,
                                             nbytes_c, data_c.tolist(), strict=True)]
    batches = []
    traffic = batch_traffic(pb, res.batches, res.params.batch_seconds)
    for b, tr, pairs, ids in zip(res.batches, traffic, lists.batch_pairs, lists.batch_ids, strict=True):
        batches.append({
            "index": b.index,
            "kind": b.kind,
            "file": batch_file_name(b.index, len(res.batches)),
            **tr,
            "partitions": pairs,
            "replicas": ids,
        })
    T = len(pb.topic_names)
    n_t = np.bincount(pb.topic_of, minlength=T)
    n_e = int(res.eligible.sum())
    before_t = topic_leader_max(pb, orig)
    after_t = topic_leader_max(pb, final)
    ceil_t = -(-n_t // max(1, n_e))
    active_t = ~pb.excluded_topic
    mf = move_figures(res)
    before = broker_figures(pb, orig, res.eligible)
    after = broker_figures(pb, final, res.eligible)
    total_leaders = int(np.asarray(after["preferred_leaders"])[res.eligible].sum())
    ideal = total_leaders / n_e if n_e else 0.0
    lead_after = np.asarray(after["preferred_leaders"])[res.eligible]
    quality = {
        "replica_spread_after": after["replica_spread"],
        "leader_spread_after": after["leader_spread"],
        "leader_spread_reason": res.leader_spread_reason,
        "ideal_leaders_per_broker": round(ideal, 4),
        "leaders_within_one_of_ideal": bool((np.abs(lead_after - ideal) <= 1 + 1e-9).all()) if n_e else True,
        "topics_at_minimum_leader_bound": int(((after_t <= res.topic_bound) & active_t).sum()),
        "topics_over_ceil_partitions_per_broker": int(((after_t > ceil_t) & active_t).sum()),
        "max_topic_leaders_per_broker_after": int(after_t[active_t].max()) if active_t.any() else 0,
    }
    if "bytes_max_deviation_pct" in after:
        quality["bytes_max_deviation_pct_after"] = after["bytes_max_deviation_pct"]
    lr = res.leaders
    quality["left_out_brokers"] = [int(b) for b in pb.broker_ids[res.left_out].tolist()] \
        if res.left_out is not None else []
    quality["leader_scope"] = res.params.scope
    quality["necessary_leadership_changes"] = lr.necessary
    quality["optional_leadership_changes"] = lr.optional
    metric = "bytes" if res.rebalance is not None and res.rebalance.mode == "bytes" else "replicas"
    budget_hit = res.rebalance is not None and bool(res.rebalance.unreached)
    hot = hot_spots(pb, final, res.eligible, res.drained, metric, budget_hit)
    quality["hot_spots"] = len(hot)
    quality["topics_over_ceil_stopped_by_budget"] = len(res.rebalance.leader_topics_stopped) if res.rebalance \
        else 0
    leadership = {
        "scope": res.params.scope,
        "max_changes": res.params.max_leader_changes,
        "leadership_changes": lr.changes,
        "necessary": lr.necessary,
        "optional": lr.optional,
        "leader_spread_after": after["leader_spread"],
        "leaders_within_one_of_ideal": quality["leaders_within_one_of_ideal"],
        "max_topic_leaders_per_broker_after": quality["max_topic_leaders_per_broker_after"],
        "topics_over_ceil_partitions_per_broker": quality["topics_over_ceil_partitions_per_broker"],
        "alternative": dict(res.alternative),
        "bytes_led_swaps": res.leader_bytes_swaps,
    }
    if res.params.kind == "drain":
        placement = {"method": "min-cost flow (all drained brokers jointly)", "status": "OPTIMAL"}
    elif res.params.kind == "return":
        placement = {"method": "the drain's own moves reversed where the cluster still matches them, then replicas "
                               "from the fullest brokers onto the returning ones, up to their share",
                     "status": "FEASIBLE"}
    elif res.rebalance and res.rebalance.exact:
        placement = {"method": "CP-SAT (small cluster: exact levels, then fewest moves)", "status": "OPTIMAL"}
    else:
        placement = {"method": "broker-level min-cost flow realised class by class + replica transportation flow"
                     + (" + best-fit byte levelling" if res.rebalance and res.rebalance.mode == "bytes" else ""),
                     "status": "FEASIBLE"}
    if res.params.max_leader_changes is not None:
        leaders = {"method": "max-flow topic bounds + Lagrangian search over exact min-cost flows (change budget)",
                   "status": "FEASIBLE"}
    elif res.leader_method == "exact":
        leaders = {"method": "max-flow topic bounds + one exact min-cost flow", "status": "OPTIMAL"}
    else:
        leaders = {"method": "max-flow topic bounds + per-topic min-cost flows + broker-level balancing flows",
                   "status": "FEASIBLE"}
    doc: dict[str, Any] = {
        "format": FORMAT,
        "id": "",
        "kind": res.params.kind,
        "snapshot": snapshot,
        "parameters": parameters,
        "summary": {**mf, **quality, "batches": len(res.batches)},
        "leadership": leadership,
        "hot_spots": {"metric": metric, "threshold_pct": HOT_PCT, "brokers": hot},
        "brokers": {
            "ids": [int(b) for b in pb.broker_ids.tolist()],
            "racks": [pb.rack_names[r] if r >= 0 else None for r in pb.rack_of.tolist()],
            "alive": [bool(x) for x in pb.alive.tolist()],
            "drained": [bool(x) for x in res.drained.tolist()],
            "eligible": [bool(x) for x in res.eligible.tolist()],
            **_disk(pb),
            "maintenance": [e.state if (e := pb.maintenance_entries.get(int(b))) else None
                            for b in pb.broker_ids.tolist()],
        },
        "maintenance": maintenance_section(res),
        "before": before,
        "after": after,
        "topics": {
            "names": list(pb.topic_names),
            "partitions": n_t.tolist(),
            "excluded": [bool(x) for x in pb.excluded_topic.tolist()],
            "max_leaders_per_broker_before": before_t.tolist(),
            "max_leaders_per_broker_after": after_t.tolist(),
            "min_achievable": np.where(active_t, res.topic_bound, after_t).astype(int).tolist(),
            "ceil_partitions_per_broker": ceil_t.tolist(),
        },
        "moves": moves,
        "batches": batches,
        "solver": {"placement": placement, "leaders": leaders},
        "warnings": list(res.warnings) + [hot_spot_warning(h) for h in hot],  # a hot spot must not go unseen
    }
    if files is not None:
        doc["files"] = dict(sorted(files.items()))
    doc["id"] = plan_id(doc)
    return doc


def _disk(pb) -> dict[str, Any]:
    """The brokers' disk capacity and the limit the plan kept (docs/PLAN.md "Disk capacity"), when known."""
    from planner.optimizer.capacity import limits

    if not (pb.capacity_bytes >= 0).any():
        return {}
    lim = limits(pb)
    return {"capacity_bytes": [int(x) if x >= 0 else None for x in pb.capacity_bytes.tolist()],
            "disk_limit_bytes": [int(x) if x >= 0 else None for x in lim.tolist()]}
def maintenance_section(res: PlanResult) -> dict[str, Any]:
    """Brokers in maintenance as the snapshot recorded them: those this plan leaves out (no replica, no preferred
    leadership: `left_out`) and, for a return, those it brings back and how (`returning`)."""
    pb = res.problem
    left = res.left_out if res.left_out is not None else np.zeros(pb.num_brokers, bool)

    def entry(b: int) -> dict[str, Any]:
        e = pb.maintenance_entries.get(b)
        doc = {k: v for k, v in e.as_dict().items() if k != "format"} if e else {"broker": b, "state": None}
        return doc

    out: dict[str, Any] = {"left_out": [entry(int(b)) for b in pb.broker_ids[left].tolist()]}
    if res.params.kind == "return" and res.returned is not None:
        r = res.returned
        out["returning"] = [{**entry(int(b)), "share": list(r.goal.get(int(b), ()))} for b in res.params.brokers]
        out["undo"] = {"drain_plan": res.params.undo_plan, "drain_moves": r.drain_moves, "reversed": r.reversed,
                       "no_longer_matching": r.stale, "held_back": r.held_back, "balanced_moves": r.balanced}
    return out


def reassignment_entries(res: PlanResult, original: bool = False) -> list[ReassignEntry]:
    pb = res.problem
    m = pb.replicas if original else res.final
    rows = res.changed
    return [ReassignEntry(t, n, tuple(ids))
            for t, n, ids in zip(*_names(pb, rows), _id_lists(pb, m[rows]), strict=True)]


def _reassignment_file(pb, rows: np.ndarray, lists: np.ndarray) -> bytes:
    """`encode_reassignment` of the entries (rows, their lists in `lists`), built without an entry object per
    partition: the same bytes."""
    return _file_text(_entry_texts(pb, rows, _id_lists(pb, lists)))


def _file_text(entries: list[str]) -> bytes:
    """A reassignment file from its entries' JSON texts: the bytes codec.encode_reassignment writes (compact
    JSON, `version` then `partitions`), plus the trailing newline."""
    return ('{"version":1,"partitions":[' + ",".join(entries) + "]}\n").encode("utf-8")


def _entry_texts(pb, rows: np.ndarray, ids: list[list[int]], topic_json: list[str] | None = None) -> list[str]:
    """Each row's reassignment entry as compact JSON text, `{"topic":…,"partition":…,"replicas":[…]}` (its
    replica ids in `ids`; `topic_json`: each topic's name as a JSON string): formatted directly, one string per
    row, rather than through a dict per row and json.dumps (a 1M-partition plan writes ~0.9M of them)."""
    if topic_json is None:
        topic_json = [json.dumps(n, ensure_ascii=False) for n in pb.topic_names]
    return [f'{{"topic":{topic_json[t]},"partition":{n},"replicas":{str(r).replace(" ", "")}}}'
            for t, n, r in zip(pb.topic_of[rows].tolist(), pb.partition[rows].tolist(), ids, strict=True)]


@dataclass
class _Lists:
    """The id lists and entry texts a plan's files share, computed once per plan: the changed rows' lists
    before and after (moves, reassignment.json, rollback.json) and every batch's (batch files, plan.json's
    batches), where a batch's list that is the row's final list is taken from the final ones."""
    pairs: list[list[Any]]                  # [topic, partition] of each changed row
    before: list[list[int]]
    after: list[list[int]]
    batch_pairs: list[list[list[Any]]] = field(default_factory=list)
    batch_ids: list[list[list[int]]] = field(default_factory=list)
    after_texts: list[str] = field(default_factory=list)
    before_texts: list[str] = field(default_factory=list)
    batch_texts: list[list[str]] = field(default_factory=list)


def _lists(res: PlanResult, texts: bool) -> _Lists:
    pb, rows = res.problem, res.changed
    before, after = _id_lists(pb, pb.replicas[rows]), _id_lists(pb, res.final[rows])
    out = _Lists([[t, n] for t, n in zip(*_names(pb, rows), strict=True)], before, after)
    topic_json = [json.dumps(n, ensure_ascii=False) for n in pb.topic_names] if texts else []
    if texts:
        out.after_texts = _entry_texts(pb, rows, after, topic_json)
        out.before_texts = _entry_texts(pb, rows, before, topic_json)
    for b in res.batches:
        pos = np.minimum(np.searchsorted(rows, b.rows), max(0, len(rows) - 1))
        w = min(b.replicas.shape[1], res.final.shape[1])
        found = (rows[pos] == b.rows) if len(rows) else np.zeros(len(b.rows), bool)
        out.batch_pairs.append([out.pairs[k] for k in pos.tolist()] if found.all() else
                               [[t, n] for t, n in zip(*_names(pb, b.rows), strict=True)])
        same = found & (b.replicas[:, :w] == res.final[b.rows, :w]).all(axis=1)
        same &= (b.replicas[:, w:] < 0).all(axis=1) & (res.final[b.rows, w:] < 0).all(axis=1)
        if same.all():
            ids = [after[k] for k in pos.tolist()]
            if texts:
                out.batch_texts.append([out.after_texts[k] for k in pos.tolist()])
        else:
            ids = _id_lists(pb, b.replicas)
            if texts:
                out.batch_texts.append(_entry_texts(pb, b.rows, ids, topic_json))
        out.batch_ids.append(ids)
    return out


def batch_entries(res: PlanResult, batch) -> list[ReassignEntry]:
    """One batch in Kafka's reassignment format: the lists it writes, in its apply order."""
    pb = res.problem
    return [ReassignEntry(t, n, tuple(ids))
            for t, n, ids in zip(*_names(pb, batch.rows), _id_lists(pb, batch.replicas), strict=True)]


def _compact_encoder() -> Callable[[Any], str]:
    """json.dumps(v, separators=(",", ":"), ensure_ascii=False), built once: json.dumps makes a new encoder on
    every call, which is most of the cost of writing a 1M-partition plan's ~300k moves one per line. Uses the
    C encoder of the standard library's json when present (the same one json.dumps uses), else json.dumps."""
    from json import encoder as enc

    def plain(v: Any) -> str:
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)

    try:
        make = enc.c_make_encoder(None, json.JSONEncoder().default, enc.encode_basestring, None, ":", ",", False,
                                  False, True)
        probe = {"t": ["é", 1, None, True, 0.5]}
        if "".join(make(probe, 0)) != plain(probe):
            return plain
    except TypeError:      # no C encoder (None), or another signature
        return plain
    return lambda v: "".join(make(v, 0))


_compact = _compact_encoder()


def _dumps(obj: Any, level: int = 0) -> str:
    """Readable and diff-friendly: objects open up to two levels, each move / batch on its own line."""
    pad = "  " * (level + 1)
    if isinstance(obj, dict) and level < 2:
        items = [f"{pad}{json.dumps(k)}: {_dumps(v, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}" if items else "{}"
    if isinstance(obj, list) and obj and isinstance(obj[0], dict | list) and level < 2:
        items = [pad + _compact(v) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + "  " * level + "]"
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def write_plan(out: Path | str, res: PlanResult, snapshot: dict[str, Any], parameters: dict[str, Any],
               solve: dict[str, Any] | Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Write reassignment.json, rollback.json, one batch-NNN.json per batch and plan.json (with their
    checksums), plan.json last, and solve.json (timings; a callable is called after the plan's files are
    written, so it can time the writing). `out` is a folder being assembled (runfolder.step_output's temporary
    folder, renamed into place only once complete): the files are written there directly; a temporary name
    and a rename per file cost ~1.5 s more for a 1M-partition plan's ~5,300 batch files, for nothing."""
    out = Path(out)
    lists = _lists(res, texts=True)
    texts = {
        "reassignment.json": _file_text(lists.after_texts),
        "rollback.json": _file_text(lists.before_texts),
    }
    for b, entries in zip(res.batches, lists.batch_texts, strict=True):
        texts[batch_file_name(b.index, len(res.batches))] = _file_text(entries)
    doc = plan_document(res, snapshot, parameters, {name: file_sha256(data) for name, data in texts.items()},
                        lists)
    texts["plan.json"] = (_dumps(doc) + "\n").encode("utf-8")
    out.mkdir(parents=True, exist_ok=True)
    for name, data in texts.items():
        (out / name).write_bytes(data)
    info = solve() if callable(solve) else solve
    (out / "solve.json").write_text(json.dumps({"plan_id": doc["id"], **info}, indent=2) + "\n")
    return doc
