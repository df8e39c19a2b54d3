"""The ZooKeeper controller's election rules (Kafka 3.x, KafkaController / PartitionStateMachine /
ReplicaStateMachine, docs/KAFKA_ZK.md §2) as Spark column expressions: planner.replay's rules, stage by stage.
The differential test holds the two to the same result on every partition of every scenario.

What the job (planner.spark.job) takes from a rule set: STEP_STAGES (one scenario step on a partition row;
FLAT_STAGES, where a rule set has them, the same as fewer projections for the one-shot rows),
STEP_OUT (the step outputs a row keeps besides leader and ISR), `demote` (a restart step's demotion),
`rolling_fold` (a rolling sequence's steps folded per partition) and `visit_order` (the order in which the
controller handles the brokers of one event). A KRaft rule set (issue 24) is a module beside this one with
the same names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark import SparkContext
from pyspark.sql import functions as F

from planner.spark.columns import STEP_OUT, Stage, apply_let, let, merged, minus, sql_type

# The rules of planner.replay as stages of named columns; a stage reads inputs and earlier stages through
# `g(name)`. Inputs: replicas, isr, leader, has_state, unclean, rf (the partition), s (brokers going away, in
# the order their controlled shutdowns are requested), down (s plus brokers already dead), dead, ev (the
# brokers of s that die in the event, in the order Kafka visits them: `visit_order`), controlled (bool).
# Outputs: new_leader, new_isr, new_has_state, unclean_taken, live_replica_exists, leader_changes,
# shutdown_blocked_by, clean_return, order_dependent, isr_alternatives. Names starting with "_" are intermediate. Most rows
# only lose a follower, so the election candidates are computed lazily, for the rows that need an election.


def _stage_requests(g: Callable[[str], Any]) -> dict[str, Any]:
    """planner.replay.controlled_shutdown's requests, one broker at a time in the order of `s` (only the
    brokers holding a replica of the partition can change it, so it runs over at most RF of them): the
    broker joins the asked set; a partition it leads (RF > 1, with a state) moves to the first replica that
    is not dead, in the ISR and not asked yet, with ISR minus the asked set, or else blocks that broker's
    shutdown; a partition it only follows drops it from the ISR unless it is the only member.
    Outputs the state the brokers then stop from and what happened on the way (`_req`). One request (single
    brokers, and racks holding one replica of the partition: nearly every row) is plain array expressions;
    only several requests on one partition fold with `aggregate` (higher-order functions run interpreted)."""
    acting = g("has_state") & (g("rf") > 1)
    start = F.struct(g("leader").alias("leader"), g("isr").alias("isr"), F.array().cast(sql_type("array<int>")).alias("asked"),
                     F.lit(0).alias("moves"), F.lit(-1).alias("blocked"))
    # in the order of s; a dead broker sends no request. `solo` rows (nearly all) hold one broker of s: the
    # joined `broker`
    no_one = F.array().cast(sql_type("array<int>"))
    mine = F.when(g("solo"), F.when(F.array_contains(g("dead"), g("broker")), no_one).otherwise(F.array(g("broker")))
                  ).otherwise(F.array_except(F.array_intersect(g("s"), g("replicas")), g("dead")))

    # one request, from k
    k = F.get(mine, 0)
    led = acting & (g("leader") == k)
    cand = F.get(F.array_intersect(g("replicas"), F.array_except(g("isr"), F.array_union(g("dead"), F.array(k)))), 0)
    moved = led & cand.isNotNull()
    followed = acting & (g("leader") != k) & F.array_contains(g("isr"), k) & (F.size(g("isr")) > 1)
    one = F.struct(F.when(moved, cand).otherwise(g("leader")).alias("leader"),
                   F.when(moved | followed, F.array_remove(g("isr"), k)).otherwise(g("isr")).alias("isr"),
                   F.array(k).alias("asked"), F.when(moved, 1).otherwise(0).alias("moves"),
                   F.when(led & ~moved, k).otherwise(-1).alias("blocked"))

    def request(acc: Any, k: Any) -> Any:
        asked = F.concat(acc["asked"], F.array(k))
        led = acting & (acc["leader"] == k)
        cand = F.get(F.filter(g("replicas"), lambda r: F.array_contains(acc["isr"], r) & ~F.array_contains(asked, r)
                              & ~F.array_contains(g("dead"), r)), 0)
        moved = led & cand.isNotNull()
        followed = acting & (acc["leader"] != k) & F.array_contains(acc["isr"], k) & (F.size(acc["isr"]) > 1)
        isr = (F.when(moved, F.filter(acc["isr"], lambda x: ~F.array_contains(asked, x)))
               .when(followed, F.array_remove(acc["isr"], k)).otherwise(acc["isr"]))
        return F.struct(F.when(moved, cand).otherwise(acc["leader"]).alias("leader"), isr.alias("isr"),
                        asked.alias("asked"), (acc["moves"] + F.when(moved, 1).otherwise(0)).alias("moves"),
                        F.when(led & ~moved, k).otherwise(acc["blocked"]).alias("blocked"))

    done = (F.when(~g("controlled") | (F.size(mine) == 0), start).when(F.size(mine) == 1, one)
            .otherwise(F.aggregate(mine, start, request)))
    return {"_req": done}


def _stage_who(g: Callable[[str], Any]) -> dict[str, Any]:
    leader, isr = g("_req")["leader"], g("_req")["isr"]
    # a `solo` row's only broker in s is `broker` (its leader included): s is not read there (the job nulls it)
    led_gone = F.when(g("solo"), leader == g("broker")).otherwise(F.array_contains(g("s"), leader))
    elect = g("has_state") & (led_gone | (leader < 0))  # hard failure re-elects these (offline rule)
    # the ISR's members dying in the event, in the order Kafka visits them (a `solo` row: at most `broker`)
    no_one = F.array().cast(sql_type("array<int>"))
    mine = g("in_ev") & F.array_contains(isr, g("broker"))   # in_ev: broker in ev (the scenario table's)
    evm = F.when(g("solo"), F.when(mine, F.array(g("broker"))).otherwise(no_one)).otherwise(F.array_intersect(g("ev"), isr))
    kept = F.when(F.size(evm) == 0, isr).when(g("solo"), F.array_remove(isr, g("broker"))).otherwise(F.array_except(isr, evm))
    return {"_cleader": leader, "_cisr": isr, "_elect": elect, "_needs": elect | ~g("has_state"), "_evm": evm,
            "_kept": kept}


def _stage_candidates(g: Callable[[str], Any]) -> dict[str, Any]:
    # down = s and the dead brokers: in a `solo` row without dead brokers only `broker` can be in these lists
    only = F.when(g("solo") & (F.size(g("dead")) == 0), g("broker"))
    live_isr = minus(g("_cisr"), g("down"), only)           # ISR restricted to live brokers, order kept
    cand = F.struct(
        live_isr.alias("live_isr"),
        # offline (clean) election: first replica in assignment order that is live and in the ISR
        F.get(F.array_intersect(g("replicas"), live_isr), 0).alias("clean"),
        # offline (unclean) election / new partition: the first live replica (and all live replicas)
        minus(g("replicas"), g("down"), only).alias("live_reps"))
    return {"_cand": F.when(g("_needs"), cand)}


def _stage_choice(g: Callable[[str], Any]) -> dict[str, Any]:
    clean = g("_cand")["clean"]
    first_live = F.get(g("_cand")["live_reps"], 0)
    by_clean = g("_elect") & clean.isNotNull()
    return {
        "_by_clean": by_clean,
        "_by_unclean": g("_elect") & ~by_clean & g("unclean") & first_live.isNotNull(),
        "_first_live": first_live,
    }


def _stage_result(g: Callable[[str], Any]) -> dict[str, Any]:
    clean, live_isr, live_reps = g("_cand")["clean"], g("_cand")["live_isr"], g("_cand")["live_reps"]
    new = ~g("has_state")
    kept, cisr, cleader = g("_kept"), g("_cisr"), g("_cleader")
    # planner.replay.remove_visited: the event's brokers leave one at a time in Kafka's order, an ISR never
    # empties: where all its members die, the one visited last stays
    emptied = (F.size(kept) == 0) & (F.size(cisr) > 0)
    last = F.element_at(g("_evm"), -1)
    removed = F.when(emptied, F.array(last)).otherwise(kept)
    new_leader = (F.when(new, F.coalesce(g("_first_live"), F.lit(-1)))
                  .when(g("_by_clean"), clean).when(g("_by_unclean"), g("_first_live"))
                  .when(g("_elect"), F.lit(-1)).otherwise(cleader)).cast(sql_type("int"))
    has_state = g("has_state") | g("_first_live").isNotNull()
    leaderless = has_state & (new_leader < 0)
    # several of the event's brokers were the ISR's last members: had their deaths been noticed in separate
    # events, the one noticed last would stay instead
    order_dependent = leaderless & emptied & (F.size(g("_evm")) >= 2)
    no_one = F.array().cast(sql_type("array<int>"))
    alternatives = F.when(order_dependent, F.array_remove(F.array_intersect(cisr, g("_evm")), last)).otherwise(no_one)
    new_isr = (F.when(new, live_reps).when(g("_by_clean"), live_isr)
               .when(g("_by_unclean"), F.array(g("_first_live"))).otherwise(removed))
    return {
        "new_leader": new_leader,
        "new_isr": new_isr,
        "new_has_state": has_state,
        "unclean_taken": g("_by_unclean"),
        # only read for offline partitions (would-need-unclean), which always went through `_needs`
        "live_replica_exists": F.when(g("_needs"), g("_first_live").isNotNull()).otherwise(F.lit(True)),
        "leader_changes": (g("_req")["moves"] + F.when(g("has_state") & (new_leader >= 0) & (new_leader != cleader), 1)
                           .otherwise(0)).cast(sql_type("int")),
        "shutdown_blocked_by": g("_req")["blocked"].cast(sql_type("int")),
        # leaderless: the ISR's (dead) members, then the others it may keep instead
        "clean_return": F.when(leaderless, F.concat(new_isr, alternatives)).otherwise(no_one),
        "order_dependent": order_dependent,
        "isr_alternatives": alternatives,
    }


# The stages never read s or ev on a `solo` row (they use `broker` and `in_ev`), so the job nulls both there: a
# rack's scenario rows carry the rack's brokers twice (25-50 ids each), copied into every row at each projection.
SOLO_DROPS_S = True

STEP_STAGES: list[Stage] = [_stage_requests, _stage_who, _stage_candidates, _stage_choice, _stage_result]
# The same stages as three projections for the one-shot rows (planner.spark.job): each projection of its own
# copies every row with its arrays, and Spark evaluates an expression used twice in a projection once. The
# requests stay apart (a higher-order function is evaluated outside the generated code, and inlined it made the
# plan too large). The rolling fold keeps STEP_STAGES: inside a higher-order function each stage is bound once.
FLAT_STAGES: list[Stage] = [_stage_requests, merged(_stage_who, _stage_candidates), merged(_stage_choice, _stage_result)]


_HASH_MASK = 0xFFFFFFFF


def _improve(k: Any) -> Any:
    """scala.collection.Hashing.improve of an Int key (a bigint column holding it; 32-bit arithmetic kept
    in the low bits of a bigint, so ANSI mode sees no overflow)."""
    m = F.lit(_HASH_MASK).cast(sql_type("long"))
    h = (k + F.bitwise_not(F.shiftleft(k, 9)).bitwiseAND(m)).bitwiseAND(m)
    h = h.bitwiseXOR(F.shiftright(h, 14))
    h = (h + F.shiftleft(h, 4).bitwiseAND(m)).bitwiseAND(m)
    return h.bitwiseXOR(F.shiftright(h, 10))


def visit_order(keys: Any) -> Any:
    """The broker ids of the array column `keys` in the order Scala 2.13's immutable.HashMap (a CHAMP trie)
    iterates them: what ZkReplicaStateMachine.handleStateChanges' `groupBy(_.replica).forKeyValue` visits
    (planner.scala_hashmap explains the order). Per key, over the 5-bit chunks of its improved hash, lowest
    first: its level is the deepest one at which another key still shares all lower chunks; its sort key
    holds, for each level down to its own, (0 at its own level else 1, the chunk) in 6 bits. Evaluated on the
    scenario rows (a few hundred), never per partition."""
    hashed = F.transform(keys, lambda k: F.struct(k.alias("k"), _improve(k.cast(sql_type("long"))).alias("h")))

    def shared(x: Any) -> Any:   # how many of the lowest 5-bit chunks of two hashes are equal (x = h1 ^ h2)
        return sum(F.when(x.bitwiseAND(F.lit((1 << (5 * (lv + 1))) - 1).cast(sql_type("long"))) == 0, 1).otherwise(0)
                   for lv in range(6))

    def keyed(x: Any) -> Any:
        depth = F.aggregate(hashed, F.lit(0), lambda acc, y: F.greatest(
            acc, F.when(y["k"] == x["k"], 0).otherwise(shared(x["h"].bitwiseXOR(y["h"])))))

        def key(d: Any) -> Any:
            parts = [F.when(F.lit(lv) <= d, F.shiftleft(F.when(d == lv, 0).otherwise(32).cast(sql_type("long"))
                                                        + F.shiftright(x["h"], 5 * lv).bitwiseAND(31), 6 * (6 - lv)))
                     .otherwise(0) for lv in range(7)]
            return F.struct(sum(parts).alias("key"), x["k"].alias("k"))

        return let(depth, key)

    return F.transform(F.array_sort(F.transform(hashed, keyed)), lambda e: e["k"])


def demote(j: Any) -> Any:
    """planner.replay.demote as column expressions, on the rows of a restart step (`demote`, broker s[0]):
    a partition the broker leads or is the preferred leader of gets its list reordered (the first other
    registered in-sync replica first, the broker last); the partitions it leads move to that replica. Other
    rows pass unchanged; `demoted_from` is the leader before, where it moved (else null)."""
    b = F.get(F.col("s"), 0)
    first = F.get(F.col("replicas"), 0)
    cand = F.get(F.filter("replicas", lambda x: F.array_contains(F.col("isr"), x) & (x != b)
                          & ~F.array_contains(F.col("dead"), x)), 0)
    led = F.col("demote") & F.col("has_state") & (F.col("leader") == b)
    moved = led & cand.isNotNull()
    reorder = F.col("demote") & (led | (first == b)) & cand.isNotNull() & (first != cand)
    ordered = F.concat(F.array(cand), F.filter("replicas", lambda x: (x != cand) & (x != b)), F.array(b))
    return j.withColumns({"replicas": F.when(reorder, ordered).otherwise(F.col("replicas")),
                          "leader": F.when(moved, cand).otherwise(F.col("leader")),
                          "demoted_from": F.when(moved, F.col("leader")).cast(sql_type("int"))})



_OUT_TYPE = ("array<struct<sid:int, leader:int, isr:array<int>, new_leader:int, new_isr:array<int>, "
             "unclean_taken:boolean, live_replica_exists:boolean, returned_leader:int, leader_gone:boolean, "
             "leader_changes:int, shutdown_blocked_by:int, clean_return:array<int>, order_dependent:boolean, "
             "isr_alternatives:array<int>>>")


_FOLD_CACHE: dict[int, Any] = {}


def rolling_fold() -> Any:
    """The fold of a partition through its sequence's steps, as one `aggregate` expression over the
    `steps` column (built once per Spark session: it is a large expression, and it reads everything it
    needs from columns, so it does not depend on the request)."""
    key = id(SparkContext._active_spark_context)
    if key in _FOLD_CACHE:
        return _FOLD_CACHE[key]
    const = {n: F.col(n) for n in ("replicas", "unclean", "rf")}
    no_one = F.array().cast(sql_type("array<int>"))

    def merge(acc: Any, st: Any) -> Any:
        env = {**const, "isr": acc["isr"], "leader": acc["leader"], "has_state": acc["has_state"],
               "s": st["s"], "down": st["down"], "dead": F.col("dead"), "ev": st["ev"],
               "controlled": F.col("controlled"), "solo": F.lit(False), "broker": F.lit(None).cast(sql_type("int")),
               "in_ev": F.lit(False)}

        def after_step(e: dict[str, Any]) -> Any:
            back = {**const, "isr": e["new_isr"], "leader": e["new_leader"], "has_state": e["new_has_state"],
                    "s": no_one, "down": F.col("dead"), "dead": F.col("dead"), "ev": no_one,
                    "controlled": F.lit(False), "solo": F.lit(False), "broker": F.lit(None).cast(sql_type("int")),
                    "in_ev": F.lit(False)}

            def after_return(r: dict[str, Any]) -> Any:
                # planner.replay.return_brokers: elect offline/new partitions, then the returning ISR
                # members rejoin (appended in the order of the ISR the step started from)
                isr = F.when(r["new_leader"] >= 0,
                             F.array_union(r["new_isr"], F.array_intersect(acc["isr"], st["s"]))
                             ).otherwise(r["new_isr"])
                rec = F.struct(st["sid"].alias("sid"), acc["leader"].alias("leader"), acc["isr"].alias("isr"),
                               e["new_leader"].alias("new_leader"), e["new_isr"].alias("new_isr"),
                               e["unclean_taken"].alias("unclean_taken"),
                               e["live_replica_exists"].alias("live_replica_exists"),
                               r["new_leader"].alias("returned_leader"),
                               F.array_contains(st["s"], acc["leader"]).alias("leader_gone"),
                               *[e[k].alias(k) for k in STEP_OUT])
                return F.struct(r["new_leader"].alias("leader"), isr.alias("isr"),
                                r["new_has_state"].alias("has_state"),
                                F.concat(acc["out"], F.array(rec)).alias("out"))

            return apply_let(STEP_STAGES, back, after_return)

        stepped = apply_let(STEP_STAGES, env, after_step)
        return F.when(F.arrays_overlap(F.col("replicas"), st["s"]), stepped).otherwise(acc)

    start = F.struct(F.col("leader").alias("leader"), F.col("isr").alias("isr"), F.col("has_state").alias("has_state"),
                     F.array().cast(sql_type(_OUT_TYPE)).alias("out"))
    _FOLD_CACHE.clear()
    _FOLD_CACHE[key] = F.aggregate("steps", start, merge)["out"]
    return _FOLD_CACHE[key]

