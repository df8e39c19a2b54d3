"""The KRaft controller's election rules (Kafka 4.1.1, planner.replay_kraft) as Spark column expressions, the
rule set the job takes for a KRaft snapshot (beside planner.spark.zk_election, with the same names).

Each controller event that touches a partition is one PartitionChangeBuilder.build() (`_build`, the rules of
planner.replay_kraft.build with their Kafka source lines there): the broker leaves the ISR, the ELR is
refilled where the ISR is below the controller's min ISR (in java.util.HashSet order: `_hashset_order`),
the election takes the current leader, else the first valid replica, else the last known leader, else an
unclean one; the last known ELR follows. A scenario's events on a partition are its brokers that hold a
replica, in the order given (controlled: each request, then each fencing; failure: each fencing), folded with
`aggregate`. Inputs beyond zk_election's: elr, lke (the partition's ELR and last known ELR), elr_min (the
controller's min ISR), elr_on; `dead` holds every broker that is not active (unregistered, fenced, in
controlled shutdown). The tests hold this to planner.replay_kraft on every partition of every scenario.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark import SparkContext
from pyspark.sql import functions as F

from planner.spark.columns import STEP_OUT, Stage, apply_let, let, sql_type
from planner.spark.zk_election import demote  # noqa: F401 (the same demotion: replay_kraft.demote)


def _no() -> Any:
    """An empty array<int> (built when used: a Column needs the active SparkContext)."""
    return F.array().cast(sql_type("array<int>"))


def _has(arr: Any, x: Any) -> Any:
    return F.coalesce(F.array_contains(arr, x), F.lit(False))


def _cap(n: Any) -> Any:
    """The smallest power of two >= 16 holding n entries at HashMap's .75 load (n <= 192)."""
    return (F.when(n <= 12, 16).when(n <= 24, 32).when(n <= 48, 64).when(n <= 96, 128).otherwise(256)).cast(sql_type("long"))


def _hashset_order(cand: Any, initial: Any) -> Any:
    """planner.replay_kraft.hashset_order: `cand` (distinct, in insertion order) as new HashSet<>(elr) then the
    ISR added iterates it: by bucket (h ^ h >>> 16) & (capacity - 1), then insertion order. HashSet(Collection)
    starts at max(n / .75 + 1, 16) rounded up to a power of two (n = `initial`), doubled past .75 full."""
    cap0 = (F.when(initial <= 11, 16).when(initial <= 23, 32).when(initial <= 47, 64).when(initial <= 95, 128)
            .otherwise(256)).cast(sql_type("long"))
    cap = F.greatest(cap0, _cap(F.size(cand)))
    keyed = F.transform(cand, lambda x, i: F.struct(
        F.shiftright(x.cast(sql_type("long")), 16).bitwiseXOR(x.cast(sql_type("long"))).bitwiseAND(cap - 1).alias("b"),
        i.alias("i"), x.alias("x")))
    return F.transform(F.array_sort(keyed), lambda e: e["x"])


def _build(acc: Any, tisr: Any, ok: Callable[[Any], Any], elr_on: Any, unclean: Any, replicas: Any,
           elr_min: Any, unclean_shutdown: Any = None) -> Any:
    """One PartitionChangeBuilder.build() on the state `acc` (leader, isr, elr, lke) with target ISR `tisr` and
    acceptable leaders `ok`: the new (leader, isr, elr, lke, changed, unclean)."""
    cand = F.array_distinct(F.concat(acc["elr"], acc["isr"]))
    ordered = _hashset_order(cand, F.size(acc["elr"]))
    drop = (lambda x: ~_has(tisr, x)) if unclean_shutdown is None else (
        lambda x: ~_has(tisr, x) & (x != unclean_shutdown))
    refill = F.when(F.size(tisr) >= elr_min, _no()).otherwise(F.filter(ordered, drop))
    telr = F.when(elr_on, refill).otherwise(acc["elr"])

    def elect(telr: Any) -> Any:
        empty = F.size(tisr) == 0

        def valid(r: Any) -> Any:
            return ok(r) & (_has(tisr, r) | (empty & _has(telr, r)))

        lead = acc["leader"]
        cur_ok = (lead >= 0) & valid(lead)
        first = F.get(F.filter(replicas, valid), 0)
        lkl = F.get(acc["lke"], 0)
        lkl_ok = elr_on & empty & (F.size(telr) == 0) & (F.size(acc["lke"]) == 1) & F.coalesce(ok(lkl), F.lit(False))
        pick = F.get(F.filter(replicas, ok), 0)
        unclean_ok = unclean & pick.isNotNull()
        node = (F.when(cur_ok, lead).when(first.isNotNull(), first).when(lkl_ok, lkl).when(unclean_ok, pick)
                .otherwise(F.lit(-1))).cast(sql_type("int"))
        was_unclean = ~cur_ok & first.isNull() & (lkl_ok | unclean_ok)

        def result(node: Any) -> Any:
            changed = node != lead
            from_elr = changed & _has(telr, node)
            isr2 = F.when(from_elr, F.array(node)).otherwise(tisr)
            elr2 = F.when(from_elr, F.array_remove(telr, node)).otherwise(telr)
            unc = was_unclean & changed
            elr3 = F.when(~elr_on | unc, _no()).otherwise(elr2)
            isr3 = (F.when(unc, F.array(node)).when((F.size(isr2) > 0) | elr_on, isr2).otherwise(acc["isr"]))
            lke = (F.when(elr_on & changed & (node < 0) & (F.size(acc["lke"]) == 0), F.array(lead))
                   .when(elr_on & changed & (node >= 0) & (F.size(acc["lke"]) > 0), _no()).otherwise(acc["lke"]))
            return F.struct(node.alias("leader"), isr3.alias("isr"), elr3.alias("elr"), lke.alias("lke"),
                            changed.alias("changed"), unc.alias("unclean"))

        return let(node, result)

    return let(telr, elect)


def _events(g: Callable[[str], Any]) -> Any:
    """The scenario's brokers that hold a replica and are active, in the order given; controlled: twice (each
    request, then each fencing)."""
    mine = F.filter(g("s"), lambda x: _has(g("replicas"), x) & ~_has(g("dead"), x))
    return mine, F.when(g("controlled"), F.concat(mine, mine)).otherwise(mine)


def _remove_all(g: Callable[[str], Any], evs: Any, start: Any) -> Any:
    """Fold the removals (generateLeaderAndIsrUpdates with brokerToRemove) over `evs`: an event touches the
    partition only where its ISR holds the broker; the broker is no longer acceptable from then on."""

    def step(acc: Any, k: Any) -> Any:
        removed = F.array_union(acc["removed"], F.array(k))

        def ok(r: Any) -> Any:
            return ~_has(g("dead"), r) & ~_has(removed, r)

        tisr = F.array_remove(acc["isr"], k)
        b = _build(acc, tisr, ok, g("elr_on"), g("unclean"), g("replicas"), g("elr_min"))
        touched = _has(acc["isr"], k)
        return F.struct(
            F.when(touched, b["leader"]).otherwise(acc["leader"]).alias("leader"),
            F.when(touched, b["isr"]).otherwise(acc["isr"]).alias("isr"),
            F.when(touched, b["elr"]).otherwise(acc["elr"]).alias("elr"),
            F.when(touched, b["lke"]).otherwise(acc["lke"]).alias("lke"),
            removed.alias("removed"),
            (acc["moves"] + F.when(touched & b["changed"] & (b["leader"] >= 0), 1).otherwise(0)).alias("moves"),
            (acc["unclean"] | (touched & b["unclean"])).alias("unclean"))

    return F.aggregate(evs, start, step)


def _start(g: Callable[[str], Any]) -> Any:
    return F.struct(g("leader").alias("leader"), g("isr").alias("isr"), g("elr").alias("elr"),
                    g("lke").alias("lke"), _no().alias("removed"), F.lit(0).alias("moves"),
                    F.lit(False).alias("unclean"))


def _stage_events(g: Callable[[str], Any]) -> dict[str, Any]:
    mine, evs = _events(g)
    return {"_mine": mine, "_out": _remove_all(g, evs, _start(g))}


def _stage_result(g: Callable[[str], Any]) -> dict[str, Any]:
    o = g("_out")
    leaderless = o["leader"] < 0
    hit = F.filter(g("isr"), lambda x: _has(g("_mine"), x))
    kept = F.when(g("elr_on"), o["elr"]).otherwise(o["isr"])
    others = F.filter(hit, lambda x: ~_has(kept, x))
    below = F.when(g("elr_on"), F.size(o["isr"]) < g("elr_min")).otherwise(leaderless)
    order_dependent = ~g("controlled") & below & (F.size(hit) >= 2) & (F.size(others) > 0)
    alternatives = F.when(order_dependent, others).otherwise(_no())
    return {
        "new_leader": o["leader"].cast(sql_type("int")),
        "new_isr": o["isr"],
        "new_elr": o["elr"],
        "new_last_known_elr": o["lke"],
        "new_has_state": g("has_state"),
        "unclean_taken": o["unclean"],
        "live_replica_exists": F.exists(g("replicas"), lambda r: ~_has(g("dead"), r) & ~_has(g("s"), r)),
        "leader_changes": o["moves"].cast(sql_type("int")),
        "shutdown_blocked_by": F.lit(-1),
        "clean_return": F.when(leaderless, F.array_distinct(F.concat(o["isr"], o["elr"], alternatives)))
        .otherwise(_no()),
        "order_dependent": order_dependent,
        "isr_alternatives": alternatives,
    }


STEP_STAGES: list[Stage] = [_stage_events, _stage_result]
KRAFT_OUT = ["new_elr", "new_last_known_elr"]


def visit_order(keys: Any) -> Any:
    """KRaft has no per-event HashMap: the brokers are handled in the order given."""
    return keys


def _returns(g: Callable[[str], Any], state: Any, back: Any, isr_start: Any) -> Any:
    """planner.replay_kraft.return_events for the brokers `back` of a rolling step (all of them down until they
    return, one by one): after a kill with ELR on, the re-registration removes the broker from the ISR and
    ELR (brokerWithUncleanShutdown); then it is unfenced (leaderless partitions elected with it acceptable);
    then its leader adds it back to the ISR it was in."""

    def step(acc: Any, b: Any) -> Any:
        down = F.array_except(acc["down"], F.array(b))

        def ok_without(r: Any) -> Any:      # b is not acceptable yet (still fenced)
            return ~_has(g("dead"), r) & ~_has(acc["down"], r) & (r != b)

        def ok_with(r: Any) -> Any:
            return ~_has(g("dead"), r) & ~_has(down, r)

        # unclean return (ELR on, failure mode): where its ISR or ELR holds b
        ur = _build(acc, F.array_remove(acc["isr"], b), ok_without, g("elr_on"), g("unclean"), g("replicas"),
                    g("elr_min"), unclean_shutdown=b)
        do_ur = g("elr_on") & ~g("controlled") & (_has(acc["isr"], b) | _has(acc["elr"], b))
        s1 = F.struct(*[F.when(do_ur, ur[f]).otherwise(acc[f]).alias(f) for f in ("leader", "isr", "elr", "lke")])

        def after_ur(s1: Any) -> Any:
            uf = _build(s1, s1["isr"], ok_with, g("elr_on"), g("unclean"), g("replicas"), g("elr_min"))
            do_uf = s1["leader"] < 0
            s2 = F.struct(*[F.when(do_uf, uf[f]).otherwise(s1[f]).alias(f) for f in ("leader", "isr", "elr", "lke")])

            def after_uf(s2: Any) -> Any:
                do_j = ((s2["leader"] >= 0) & _has(isr_start, b) & ~_has(s2["isr"], b) & _has(g("replicas"), b))
                j = _build(s2, F.concat(s2["isr"], F.array(b)), ok_with, g("elr_on"), g("unclean"), g("replicas"),
                           g("elr_min"))
                return F.struct(*[F.when(do_j, j[f]).otherwise(s2[f]).alias(f) for f in ("leader", "isr", "elr", "lke")],
                                down.alias("down"))

            return let(s2, after_uf)

        return let(s1, after_ur)

    start = F.struct(state["leader"].alias("leader"), state["isr"].alias("isr"), state["elr"].alias("elr"),
                     state["lke"].alias("lke"), back.alias("down"))
    return F.aggregate(back, start, step)


_OUT_TYPE = ("array<struct<sid:int, leader:int, isr:array<int>, elr:array<int>, last_known_elr:array<int>, "
             "new_leader:int, new_isr:array<int>, new_elr:array<int>, new_last_known_elr:array<int>, "
             "unclean_taken:boolean, live_replica_exists:boolean, returned_leader:int, leader_gone:boolean, "
             "leader_changes:int, shutdown_blocked_by:int, clean_return:array<int>, order_dependent:boolean, "
             "isr_alternatives:array<int>>>")
_FOLD_CACHE: dict[int, Any] = {}


def rolling_fold() -> Any:
    """A rolling sequence's steps folded per partition (zk_election.rolling_fold's shape): each step removes
    its broker from the state the previous step left once its broker returned (`_returns`)."""
    key = id(SparkContext._active_spark_context)
    if key in _FOLD_CACHE:
        return _FOLD_CACHE[key]
    const = {n: F.col(n) for n in ("replicas", "unclean", "rf", "elr_min", "elr_on", "dead", "controlled")}

    def merge(acc: Any, st: Any) -> Any:
        env = {**const, "isr": acc["isr"], "leader": acc["leader"], "elr": acc["elr"], "lke": acc["lke"],
               "has_state": F.lit(True), "s": st["s"]}

        def after_step(e: dict[str, Any]) -> Any:
            back = _returns(lambda n: env[n], F.struct(e["new_leader"].alias("leader"), e["new_isr"].alias("isr"),
                                                        e["new_elr"].alias("elr"),
                                                        e["new_last_known_elr"].alias("lke")),
                            F.filter(st["s"], lambda x: ~_has(F.col("dead"), x)), acc["isr"])
            rec = F.struct(st["sid"].alias("sid"), acc["leader"].alias("leader"), acc["isr"].alias("isr"),
                           acc["elr"].alias("elr"), acc["lke"].alias("last_known_elr"),
                           e["new_leader"].alias("new_leader"), e["new_isr"].alias("new_isr"),
                           e["new_elr"].alias("new_elr"), e["new_last_known_elr"].alias("new_last_known_elr"),
                           e["unclean_taken"].alias("unclean_taken"),
                           e["live_replica_exists"].alias("live_replica_exists"),
                           back["leader"].alias("returned_leader"),
                           _has(st["s"], acc["leader"]).alias("leader_gone"),
                           *[e[k].alias(k) for k in STEP_OUT])
            return F.struct(back["leader"].alias("leader"), back["isr"].alias("isr"), back["elr"].alias("elr"),
                            back["lke"].alias("lke"), F.concat(acc["out"], F.array(rec)).alias("out"))

        stepped = apply_let(STEP_STAGES, env, after_step)
        return F.when(F.arrays_overlap(F.col("replicas"), st["s"]), stepped).otherwise(acc)

    start = F.struct(F.col("leader").alias("leader"), F.col("isr").alias("isr"), F.col("elr").alias("elr"),
                     F.col("lke").alias("lke"), F.array().cast(sql_type(_OUT_TYPE)).alias("out"))
    _FOLD_CACHE.clear()
    _FOLD_CACHE[key] = F.aggregate("steps", start, merge)["out"]
    return _FOLD_CACHE[key]
