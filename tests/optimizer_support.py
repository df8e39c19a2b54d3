"""Test support for the optimizer: small clusters written as real snapshots, and an INDEPENDENT checker.

The checker never imports the optimizer: it works on plain dicts of broker-id lists, computes bottlenecks with
its own augmenting-path matching, and gets optima from CP-SAT models (a different solver and a different
formulation from the planner's network flows).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from itertools import count
from pathlib import Path

import numpy as np
from ortools.sat.python import cp_model

from planner.synth import SynthCluster, to_snapshot

_dirs = count()


@dataclass
class Spec:
    """A cluster in plain Python: brokers (id -> rack or None), alive set, topics, assignment, sizes."""
    racks: dict[int, str | None]
    alive: set[int]
    assignment: dict[tuple[str, int], list[int]]
    sizes: dict[tuple[str, int], int] | None = None
    capacity: dict[int, int] | None = None     # broker -> log dirs' TotalBytes (DescribeLogDirs v4)
    disk_used: dict[int, int] | None = None    # broker -> TotalBytes - UsableBytes

    @property
    def broker_ids(self) -> list[int]:
        return sorted(self.racks)

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.assignment})


def write_snapshot(spec: Spec, tmp: Path) -> Path:
    ids = spec.broker_ids
    topics = spec.topics()
    keys = sorted(spec.assignment)
    width = max(len(r) for r in spec.assignment.values())
    reps = np.full((len(keys), width), -1, dtype=np.int32)
    for i, k in enumerate(keys):
        reps[i, : len(spec.assignment[k])] = spec.assignment[k]
    c = SynthCluster(
        broker_ids=np.array(ids, dtype=np.int32),
        racks=[spec.racks[b] for b in ids],
        topic_names=topics,
        topic_of=np.array([topics.index(t) for t, _ in keys], dtype=np.int32),
        partition=np.array([p for _, p in keys], dtype=np.int32),
        replicas=reps,
        leader=reps[:, 0].copy(),
        isr=reps.copy(),
        size_bytes=np.array([spec.sizes[k] for k in keys], dtype=np.int64) if spec.sizes else None,
        topic_min_isr=np.ones(len(topics), dtype=np.int32),
        topic_unclean=np.zeros(len(topics), dtype=bool),
        alive=np.array([b in spec.alive for b in ids]),
        capacity_bytes=np.array([spec.capacity.get(b, -1) for b in ids]) if spec.capacity else None,
        disk_used_bytes=np.array([spec.disk_used.get(b, -1) for b in ids]) if spec.disk_used else None,
    )
    out = tmp / f"snap{next(_dirs)}"
    to_snapshot(c, out)
    return out


# ------------------------------------------------------------------------------------------- reading
def plan_maps(doc: dict, spec: Spec) -> dict[tuple[str, int], list[int]]:
    """Final assignment from plan.json's moves applied to the spec."""
    final = {k: list(v) for k, v in spec.assignment.items()}
    for m in doc["moves"]:
        k = (m["topic"], m["partition"])
        assert final[k] == m["from"], f"{k}: plan says from {m['from']}, snapshot has {final[k]}"
        final[k] = list(m["to"])
    return final


def counts(assign: dict, brokers) -> dict[int, int]:
    c = dict.fromkeys(brokers, 0)
    for reps in assign.values():
        for b in reps:
            if b in c:
                c[b] += 1
    return c


def leader_counts(assign: dict, brokers) -> dict[int, int]:
    c = dict.fromkeys(brokers, 0)
    for reps in assign.values():
        if reps and reps[0] in c:
            c[reps[0]] += 1
    return c


def rack_count(reps: list[int], racks: dict, rack_aware: bool) -> int:
    return len({racks[b] for b in reps if racks[b] is not None}) if rack_aware else 0


# ------------------------------------------------------------------------------------------ guarantees
def check_guarantees(spec: Spec, final: dict, drained: set[int], excluded: set[str], rack_aware: bool) -> None:
    eligible = spec.alive - drained
    n_racks = len({spec.racks[b] for b in eligible if spec.racks[b] is not None})
    assert set(final) == set(spec.assignment)
    for k, before in spec.assignment.items():
        after = final[k]
        assert len(after) == len(before), f"{k}: RF {len(before)} -> {len(after)}"
        assert len(set(after)) == len(after), f"{k}: duplicate replica {after}"
        assert not set(after) & drained, f"{k}: still on drained broker {after}"
        added = set(after) - set(before)
        assert added <= eligible, f"{k}: added {added} not registered / drained"
        if k[0] in excluded:
            assert after == before, f"excluded {k} changed {before} -> {after}"
        if rack_aware:
            need = min(len(before), n_racks, rack_count(before, spec.racks, True))
            assert rack_count(after, spec.racks, True) >= need, f"{k}: racks {before} -> {after}"


def check_batch_files(doc: dict, spec: Spec, folder: Path, seconds: int) -> None:
    """Each batch is also its own file batch-NNN.json (NNN its index, three digits below 1,000 batches) in
    Kafka's reassignment format, listing exactly the batch in order, and no other batch file exists; each data
    batch's suggested throttle is its busiest broker's bytes (received by a new replica, or sent by the
    partition's leader to each new replica) over `seconds`, rounded up."""
    batches = doc["batches"]
    names = {f"batch-{b['index']:03d}.json" for b in batches}
    assert {f.name for f in folder.glob("batch-*.json")} == names
    leader = {k: next((b for b in r if b in spec.alive), None) for k, r in spec.assignment.items()}
    for b in batches:
        assert b["file"] == f"batch-{b['index']:03d}.json"
        text = (folder / b["file"]).read_text()
        assert text.endswith("\n") and "log_dirs" not in text
        assert json.loads(text) == {"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": r} for (t, p), r in zip(b["partitions"], b["replicas"],
                                                                             strict=True)]}
        if b["kind"] == "leadership":
            assert (b["bytes"], b["suggested_throttle_bytes_per_s"]) == (0, None)
            for (t, p), r in zip(b["partitions"], b["replicas"], strict=True):
                leader[(t, p)] = r[0]
            continue
        if spec.sizes is None:
            assert b["bytes"] is None and b["suggested_throttle_bytes_per_s"] is None
            continue
        into: dict[int, int] = {}
        out: dict[int, int] = {}
        total = 0
        for (t, p), r in zip(b["partitions"], b["replicas"], strict=True):
            new = set(r) - set(spec.assignment[(t, p)])
            size = spec.sizes[(t, p)]
            total += size * len(new)
            for x in new:
                into[x] = into.get(x, 0) + size
            if leader[(t, p)] is not None:
                out[leader[(t, p)]] = out.get(leader[(t, p)], 0) + size * len(new)
        busiest = max([0, *into.values(), *out.values()])
        assert b["bytes"] == total
        # bytes over the target duration, but never under 10 MiB/s (a follower throttled below its produce
        # rate never catches up); nothing to copy: 0
        want = max(math.ceil(busiest / seconds), 10 * 1024 * 1024) if busiest else 0
        assert b["suggested_throttle_bytes_per_s"] == want, (b, busiest)


def check_batches(doc: dict, spec: Spec, drained: set[int], limit: int) -> None:
    final = plan_maps(doc, spec)
    batches = doc["batches"]
    data_moves = {(m["topic"], m["partition"]) for m in doc["moves"] if m["kind"] == "data"}
    seen = []
    for i, b in enumerate(batches):
        assert b["index"] == i
        if b["kind"] == "leadership":
            assert i == 0, "the leadership batch comes first"
            for (t, p), reps in zip(b["partitions"], b["replicas"], strict=True):
                assert sorted(reps) == sorted(spec.assignment[(t, p)]) or reps == final[(t, p)]
                if drained and set(reps) != set(final[(t, p)]):
                    assert reps[0] not in drained
            continue
        load: dict[int, int] = {}
        for (t, p), reps in zip(b["partitions"], b["replicas"], strict=True):
            assert reps == final[(t, p)]
            before = spec.assignment[(t, p)]
            for x in set(reps) ^ set(before):
                load[x] = load.get(x, 0) + 1
            seen.append((t, p))
        assert max(load.values(), default=0) <= limit, f"batch {i}: {load}"
    assert sorted(seen) == sorted(data_moves) and len(seen) == len(set(seen))
    if drained:
        # every partition led from a drained broker that has another registered replica is in batch 0
        led_off = {k for k, r in spec.assignment.items() if r[0] in drained and k in data_moves
                   and any(x in spec.alive - drained for x in r)}
        first = {tuple(p) for p in batches[0]["partitions"]} if batches and batches[0]["kind"] == "leadership" \
            else set()
        assert led_off <= first


# ------------------------------------------------------------------------------ per-topic bottleneck
def _b_matching(rows: list[list[int]], cap: dict[int, int]) -> int:
    """Size of a maximum b-matching of rows (each needs one of its brokers) with broker capacities."""
    load = dict.fromkeys(cap, 0)
    match: list[int | None] = [None] * len(rows)
    holders: dict[int, list[int]] = {b: [] for b in cap}

    def augment(i: int, seen: set[int]) -> bool:
        for b in rows[i]:
            if b in seen or b not in cap:
                continue
            seen.add(b)
            if load[b] < cap[b]:
                load[b] += 1
                match[i] = b
                holders[b].append(i)
                return True
            for j in list(holders[b]):
                if augment(j, seen):
                    holders[b].remove(j)
                    match[i] = b
                    holders[b].append(i)
                    return True
        return False

    return sum(1 for i in range(len(rows)) if augment(i, set()))


def min_topic_bottleneck(cands: list[list[int]], fixed: dict[int, int]) -> int:
    """The least u such that each row can take a leader among its candidates with at most u per broker
    (fixed leaders included)."""
    brokers = {b for r in cands for b in r} | set(fixed)
    for u in range(max(fixed.values(), default=0), len(cands) + max(fixed.values(), default=0) + 1):
        cap = {b: u - fixed.get(b, 0) for b in brokers}
        if _b_matching(cands, cap) == len(cands):
            return u
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------------------------- CP-SAT
def _solve(model: cp_model.CpModel) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 30
    status = solver.solve(model)
    assert status == cp_model.OPTIMAL, solver.status_name(status)
    return solver


def leader_optimum(final: dict, fixed_keys: set, eligible: set[int], bounds: dict[str, int],
                   original: dict) -> dict[str, int]:
    """CP-SAT over leader choices with per-topic caps `bounds`: the least square sum of per-broker leader
    counts, the least spread, and the fewest changes of replicas[0] among square-sum optima."""
    results = {}
    for stage in ("square", "spread", "changes"):
        m = cp_model.CpModel()
        lead: dict[int, list] = {b: [] for b in eligible}
        per_tb: dict[tuple[str, int], list] = {}
        fixed_b = dict.fromkeys(eligible, 0)
        changes = []
        for k, reps in sorted(final.items()):
            cands = [b for b in reps if b in eligible]
            if k in fixed_keys or not cands:
                if reps and reps[0] in eligible:
                    fixed_b[reps[0]] += 1
                    per_tb.setdefault((k[0], reps[0]), []).append(1)
                continue
            xs = [m.new_bool_var("") for _ in cands]
            m.add_exactly_one(xs)
            for b, x in zip(cands, xs, strict=True):
                lead[b].append(x)
                per_tb.setdefault((k[0], b), []).append(x)
                if b != original[k][0]:
                    changes.append(x)
        for (t, _b), xs in per_tb.items():
            if t in bounds:
                m.add(sum(xs) <= bounds[t])
        n = {b: fixed_b[b] + sum(lead[b]) for b in eligible}
        total = sum(len(v) for v in lead.values()) + sum(fixed_b.values())
        nv = {b: m.new_int_var(0, total, f"n{b}") for b in eligible}
        for b in eligible:
            m.add(nv[b] == n[b])
        sq = []
        for b in eligible:
            s = m.new_int_var(0, total * total, "")
            m.add_multiplication_equality(s, [nv[b], nv[b]])
            sq.append(s)
        hi, lo = m.new_int_var(0, total, "hi"), m.new_int_var(0, total, "lo")
        m.add_max_equality(hi, list(nv.values()))
        m.add_min_equality(lo, list(nv.values()))
        if stage == "square":
            m.minimize(sum(sq))
        elif stage == "spread":
            m.minimize(hi - lo)
        else:
            m.add(sum(sq) == results["square"])
            m.minimize(sum(changes))
        s = _solve(m)
        results[stage] = int(round(s.objective_value))
    return results


def final_placement(spec: Spec, final: dict) -> dict:
    """The placement under a plan's final lists: partitions whose replica set is unchanged in their original
    order (what any leader order starts from), the others as planned."""
    return {k: (list(spec.assignment[k]) if set(v) == set(spec.assignment[k]) else list(v)) for k, v in final.items()}


def scope_keys(spec: Spec, final: dict, excluded: set[str], scope: str) -> set:
    """Partitions whose preferred leader a plan with this leader scope may change: every non-excluded one
    ("all"), or those whose replica set the plan changes ("touched")."""
    return {k for k in final if k[0] not in excluded
            and (scope == "all" or set(final[k]) != set(spec.assignment[k]))}


def necessary_keys(spec: Spec, final: dict, movable: set, eligible: set[int]) -> set:
    """Partitions that must get a new preferred leader: the old one holds no replica any more, or (when the
    plan may reorder the partition) it is not an eligible broker while another replica's broker is."""
    out = set()
    for k, before in spec.assignment.items():
        if not before:
            continue
        gone = before[0] not in final[k]
        dead = k in movable and before[0] not in eligible and any(b in eligible for b in final[k])
        if gone or dead:
            out.add(k)
    return out


def expected_leaders(spec: Spec, final: dict, excluded: set[str], eligible: set[int], scope: str
                     ) -> tuple[dict[str, int], dict[str, int], set]:
    """(per-topic least bottleneck given the fixed leaders, CP-SAT optimum of leader_optimum, movable keys)
    for leader scope `scope` on placement `final`."""
    movable = scope_keys(spec, final, excluded, scope) | necessary_keys(spec, final, set(), eligible)
    movable = {k for k in movable if k[0] not in excluded}
    bounds = {}
    for t in spec.topics():
        if t in excluded:
            continue
        keys = [k for k in final if k[0] == t]
        cands = [c for c in ([b for b in final[k] if b in eligible] for k in keys if k in movable) if c]
        if not cands:
            continue
        fixed: dict[int, int] = {}
        for k in keys:
            if k not in movable and final[k] and final[k][0] in eligible:
                fixed[final[k][0]] = fixed.get(final[k][0], 0) + 1
        bounds[t] = min_topic_bottleneck(cands, fixed)
    fixed_keys = set(final) - movable
    return bounds, leader_optimum(final, fixed_keys, eligible, bounds, spec.assignment), movable


def leaders_over_bounds(final: dict, eligible: set[int], bounds: dict[str, int]) -> int:
    """Sum over (topic, broker) of the preferred leaders above the topic's bound."""
    per: dict[tuple[str, int], int] = {}
    for k, reps in final.items():
        if reps and reps[0] in eligible:
            per[(k[0], reps[0])] = per.get((k[0], reps[0]), 0) + 1
    return sum(max(0, n - bounds[t]) for (t, _b), n in per.items() if t in bounds)


def leader_optimum_within(final: dict, movable: set, eligible: set[int], bounds: dict[str, int],
                          original: dict, max_changes: int) -> tuple[int, int]:
    """CP-SAT: the least (leaders over the topic bounds, then sum of squares of per-broker leader counts) over
    leader choices of the `movable` partitions that change replicas[0] of at most `max_changes` partitions."""
    res = []
    for stage in ("over", "square"):
        m = cp_model.CpModel()
        lead: dict[int, list] = {b: [] for b in eligible}
        per_tb: dict[tuple[str, int], list] = {}
        changes = []
        const_changes = 0
        for k, reps in sorted(final.items()):
            cands = [b for b in reps if b in eligible]
            if k not in movable or not cands:
                if reps and reps[0] in eligible:
                    lead[reps[0]].append(1)
                    per_tb.setdefault((k[0], reps[0]), []).append(1)
                const_changes += int(reps[:1] != original[k][:1])
                continue
            xs = [m.new_bool_var("") for _ in cands]
            m.add_exactly_one(xs)
            for b, x in zip(cands, xs, strict=True):
                lead[b].append(x)
                per_tb.setdefault((k[0], b), []).append(x)
                if b != original[k][0]:
                    changes.append(x)
        m.add(sum(changes) + const_changes <= max_changes)
        over = []
        for (t, _b), xs in per_tb.items():
            if t in bounds:
                o = m.new_int_var(0, len(xs), "")
                m.add(o >= sum(xs) - bounds[t])
                over.append(o)
        total = sum(len(v) for v in lead.values())
        sq = []
        for b in eligible:
            nv = _as_var(m, sum(lead[b]))
            s2 = m.new_int_var(0, total * total, "")
            m.add_multiplication_equality(s2, [nv, nv])
            sq.append(s2)
        if stage == "over":
            m.minimize(sum(over))
        else:
            m.add(sum(over) == res[0])
            m.minimize(sum(sq))
        res.append(int(round(_solve(m).objective_value)))
    return res[0], res[1]


def drain_count_optimum(spec: Spec, drained: set[int], rack_aware: bool) -> tuple[int, int]:
    """(least possible max, greatest possible min) replica count over eligible brokers after a drain that
    moves only the drained replicas (CP-SAT, two solves)."""
    eligible = spec.alive - drained
    n_racks = len({spec.racks[b] for b in eligible if spec.racks[b] is not None})
    out = []
    for sense in ("max", "min"):
        m = cp_model.CpModel()
        load = {b: [] for b in eligible}
        base = counts({k: [b for b in r if b not in drained] for k, r in spec.assignment.items()}, eligible)
        for _k, reps in sorted(spec.assignment.items()):
            moving = [b for b in reps if b in drained]
            if not moving:
                continue
            kept = [b for b in reps if b not in drained]
            opts = [b for b in sorted(eligible) if b not in kept]
            xs = {b: m.new_bool_var("") for b in opts}
            m.add(sum(xs.values()) == len(moving))
            for b, x in xs.items():
                load[b].append(x)
            if rack_aware:
                need = min(len(reps), n_racks, rack_count(reps, spec.racks, True))
                racks = sorted({spec.racks[b] for b in eligible | set(kept) if spec.racks[b] is not None})
                cov = []
                for r in racks:
                    y = m.new_bool_var("")
                    have = any(spec.racks[b] == r for b in kept)
                    if not have:
                        m.add(y <= sum(x for b, x in xs.items() if spec.racks[b] == r))
                    cov.append(y if not have else 1)
                m.add(sum(cov) >= need)
        tot = {b: base[b] + sum(load[b]) for b in eligible}
        v = m.new_int_var(0, 10**6, "")
        if sense == "max":
            m.add_max_equality(v, [_as_var(m, tot[b]) for b in eligible])
            m.minimize(v)
        else:
            m.add_min_equality(v, [_as_var(m, tot[b]) for b in eligible])
            m.maximize(v)
        out.append(int(round(_solve(m).objective_value)))
    return out[0], out[1]


def _as_var(m: cp_model.CpModel, expr) -> cp_model.IntVar:
    v = m.new_int_var(0, 10**6, "")
    m.add(v == expr)
    return v


def _placement_vars(m: cp_model.CpModel, reps: list[int], eligible: set[int], spec: Spec, n_racks: int,
                    rack_aware: bool) -> tuple[dict, dict | None]:
    """Free final replica set of one partition (replicas on unregistered brokers stay) and a leader among
    its registered replicas (None when it has none)."""
    dead = [b for b in reps if b not in eligible]
    slots = len(reps) - len(dead)
    xs = {b: m.new_bool_var("") for b in sorted(eligible)}
    m.add(sum(xs.values()) == slots)
    if rack_aware:
        need = min(len(reps), n_racks, rack_count(reps, spec.racks, True))
        cov = []
        for r in sorted({spec.racks[b] for b in eligible | set(dead) if spec.racks[b] is not None}):
            if any(spec.racks[b] == r for b in dead):
                cov.append(1)
                continue
            y = m.new_bool_var("")
            m.add(y <= sum(x for b, x in xs.items() if spec.racks[b] == r))
            cov.append(y)
        m.add(sum(cov) >= need)
    if not slots:
        return xs, None
    ls = {b: m.new_bool_var("") for b in sorted(eligible)}
    m.add_exactly_one(ls.values())
    for b, y in ls.items():
        m.add_implication(y, xs[b])
    return xs, ls


def topic_leader_floor(spec: Spec, topic: str, rack_aware: bool) -> int:
    """The least 'most partitions of `topic` one broker leads' over every placement a rebalance may pick."""
    eligible = spec.alive
    n_racks = len({spec.racks[b] for b in eligible if spec.racks[b] is not None})
    m = cp_model.CpModel()
    per_b: dict[int, list] = {b: [] for b in eligible}
    for k, reps in sorted(spec.assignment.items()):
        if k[0] != topic:
            continue
        _, ls = _placement_vars(m, reps, eligible, spec, n_racks, rack_aware)
        if ls:
            for b, y in ls.items():
                per_b[b].append(y)
    u = m.new_int_var(0, len(spec.assignment), "")
    for ys in per_b.values():
        m.add(sum(ys) <= u)
    m.minimize(u)
    return int(round(_solve(m).objective_value))


def rebalance_optimum(spec: Spec, excluded: set[str], rack_aware: bool) -> tuple[int, int, dict[str, int]]:
    """CP-SAT: (least square sum of replica counts over registered brokers reachable, fewest replica moves
    reaching it) while each topic keeps a leader assignment within max(ceil(partitions / brokers), the least
    any placement allows); and those per-topic caps."""
    eligible = spec.alive
    n_racks = len({spec.racks[b] for b in eligible if spec.racks[b] is not None})
    topics = [t for t in spec.topics() if t not in excluded]
    n_t = {t: sum(1 for k in spec.assignment if k[0] == t) for t in topics}
    caps = {t: max(math.ceil(n_t[t] / len(eligible)), topic_leader_floor(spec, t, rack_aware)) for t in topics}
    res = []
    for stage in ("square", "moves"):
        m = cp_model.CpModel()
        load = {b: [] for b in eligible}
        fixed = dict.fromkeys(eligible, 0)
        moves = []
        lead_tb: dict[tuple[str, int], list] = {}
        for k, reps in sorted(spec.assignment.items()):
            if k[0] in excluded:
                for b in reps:
                    if b in eligible:
                        fixed[b] += 1
                continue
            xs, ls = _placement_vars(m, reps, eligible, spec, n_racks, rack_aware)
            for b, x in xs.items():
                load[b].append(x)
                if b not in reps:
                    moves.append(x)
            for b, y in (ls or {}).items():
                lead_tb.setdefault((k[0], b), []).append(y)
        for (t, _b), ys in lead_tb.items():
            m.add(sum(ys) <= caps[t])
        tot = [_as_var(m, fixed[b] + sum(load[b])) for b in sorted(eligible)]
        sq = []
        for v in tot:
            s2 = m.new_int_var(0, 10**6, "")
            m.add_multiplication_equality(s2, [v, v])
            sq.append(s2)
        if stage == "square":
            m.minimize(sum(sq))
        else:
            m.add(sum(sq) == res[0])
            m.minimize(sum(moves))
        res.append(int(round(_solve(m).objective_value)))
    return res[0], res[1], caps
