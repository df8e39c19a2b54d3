"""Column-expression building blocks of the risk job, shared by every rule set (ZooKeeper's controller today,
KRaft's later): stages of named columns and the two ways to run them, small literal arrays and frames.

A rule set is a list of stages. A stage reads its inputs and the columns of earlier stages through `g(name)`
and returns new named columns ("_" names are intermediate). `apply_flat` runs the stages as successive
projections of a DataFrame (one row per scenario and partition); `apply_let` runs them inside a higher-order
function (the rolling fold), binding each stage's values once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql import types as T

Stage = Callable[[Callable[[str], Any]], dict[str, Any]]
# What one step of a rule set gives a row besides its new leader and ISR (new_leader, new_isr, new_has_state,
# unclean_taken, live_replica_exists): the columns every rule set's stages produce.
STEP_OUT = ["leader_changes", "shutdown_blocked_by", "clean_return", "order_dependent", "isr_alternatives"]


_SIMPLE = {"int": T.IntegerType(), "long": T.LongType(), "byte": T.ByteType(), "short": T.ShortType(),
           "boolean": T.BooleanType(), "string": T.StringType()}


@cache
def sql_type(ddl: str) -> T.DataType:
    """A Spark type from its DDL name ("int", "array<int>", "array<struct<sid:int, isr:array<int>>>"), parsed here.
    `Column.cast("array<int>")` and a DDL schema string have the JVM parse the name with Spark's SQL parser, and
    nothing else in the risk job uses that parser: its first use (ANTLR loading and initializing the grammar,
    then JIT-compiling it) cost some 0.3 s of the driver's time and about 0.8 s of JIT CPU (issue 22). A type
    object is handed to the JVM as JSON instead."""
    tokens = re.findall(r"[A-Za-z_][A-Za-z0-9_]*|[<>:,]", ddl)
    pos = 0

    def take(expected: str | None = None) -> str:
        nonlocal pos
        if pos >= len(tokens) or (expected is not None and tokens[pos] != expected):
            raise ValueError(f"bad type {ddl!r}")
        pos += 1
        return tokens[pos - 1]

    def parse() -> T.DataType:
        name = take().lower()
        if name == "array":
            take("<")
            inner = parse()
            take(">")
            return T.ArrayType(inner)
        if name == "struct":
            take("<")
            fields = []
            while True:
                field = take()
                take(":")
                fields.append(T.StructField(field, parse()))
                if take() == ">":
                    return T.StructType(fields)
        if name not in _SIMPLE:
            raise ValueError(f"bad type {ddl!r}: {name}")
        return _SIMPLE[name]

    out = parse()
    if pos != len(tokens):
        raise ValueError(f"bad type {ddl!r}")
    return out


def cast(col: Any, ddl: str) -> Any:
    """col cast to the type named in DDL (sql_type)."""
    return col.cast(sql_type(ddl))


def no_ints() -> Any:
    """An empty array<int> (built when used: a Column needs the active SparkContext)."""
    return F.array().cast(sql_type("array<int>"))


def ints(values: list[int] | tuple[int, ...]) -> Any:
    """A literal array<int> column."""
    return cast(F.array(*[F.lit(int(v)) for v in values]), "array<int>")


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

