"""Column-expression building blocks of the risk job, shared by every rule set (ZooKeeper's controller today,
KRaft's later): stages of named columns and the two ways to run them, small literal arrays and frames.

A rule set is a list of stages. A stage reads its inputs and the columns of earlier stages through `g(name)`
and returns new named columns ("_" names are intermediate). `apply_flat` runs the stages as successive
projections of a DataFrame (one row per scenario and partition); `apply_let` runs them inside a higher-order
function (the rolling fold), binding each stage's values once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import functions as F

Stage = Callable[[Callable[[str], Any]], dict[str, Any]]
# What one step of a rule set gives a row besides its new leader and ISR (new_leader, new_isr, new_has_state,
# unclean_taken, live_replica_exists): the columns every rule set's stages produce.
STEP_OUT = ["leader_changes", "shutdown_blocked_by", "clean_return", "order_dependent", "isr_alternatives"]


def ints(values: list[int] | tuple[int, ...]) -> Any:
    """A literal array<int> column."""
    return F.array(*[F.lit(int(v)) for v in values]).cast("array<int>")


def frame(spark: Any, columns: dict[str, tuple[pa.DataType, list]]) -> Any:
    """A small DataFrame from driver data via Arrow (a local table scan: no Python worker is started)."""
    return spark.createDataFrame(pa.table({k: pa.array(v, t) for k, (t, v) in columns.items()}))


def minus(arr: Any, gone: Any, only: Any = None) -> Any:
    """arr without the brokers in `gone`, order kept: array_remove when one broker goes, or when `only` (a
    column) names the one broker of `gone` that can be in arr (a `solo` row), else array_except (a hash set)."""
    one = F.when(F.size(gone) == 1, F.array_remove(arr, F.get(gone, 0)))
    if only is not None:
        one = one.when(only.isNotNull(), F.array_remove(arr, only))
    return one.otherwise(F.array_except(arr, gone))


def merged(*stages: Stage) -> Stage:
    """Several stages as one: a later one reads the earlier ones' columns as their expressions, so they are one
    projection (Spark evaluates an expression used twice in a projection once)."""

    def stage(g: Callable[[str], Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for st in stages:
            out.update(st(lambda n: out[n] if n in out else g(n)))
        return out

    return stage


def apply_flat(df: Any, stages: list[Stage], drop: bool = True, consts: dict[str, Any] | None = None) -> Any:
    """Run the stages as successive projections (codegen'd; each intermediate computed once). `consts`: inputs
    given as expressions instead of the row's columns (the same for every row)."""
    consts = consts or {}

    def g(name: str) -> Any:
        return consts[name] if name in consts else F.col(name)

    for stage in stages:
        df = df.withColumns(stage(g))
    return df.drop(*[c for c in df.columns if c.startswith("_")]) if drop else df


def let(value: Any, body: Callable[[Any], Any]) -> Any:
    """Bind a value once inside a lambda expression: transform(array(v), x -> body(x))[0]."""
    return F.get(F.transform(F.array(value), body), 0)


def apply_let(stages: list[Stage], env: dict[str, Any], final: Callable[[dict[str, Any]], Any]) -> Any:
    """Run the stages inside a higher-order function, binding each stage's values once."""
    if not stages:
        return final(env)
    vals = stages[0](lambda n: env[n])
    packed = F.struct(*[v.alias(k) for k, v in vals.items()])
    return let(packed, lambda r: apply_let(stages[1:], {**env, **{k: r[k] for k in vals}}, final))

