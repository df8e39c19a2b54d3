"""The plan as apply, verify and the review UI see it: frozen dataclasses, one reader, the id function.

Deliberately light: stdlib and planner.codec only (no numpy, OR-Tools or Spark), so a web page or an
Airflow task can read a plan without loading a solver. The writer stays beside the optimizer
(planner.plan_format); the format is docs/PLAN.md.

`read_plan(path)` accepts a folder only when everything in it agrees: plan.json's content matches its id,
reassignment.json / rollback.json hold exactly the moves' target / original lists, every data move is in
exactly one data batch with its target list, each batch file (batch-NNN.json, when present) holds exactly
its batch, and every file listed in plan.json's `files` section has the recorded sha256. Unknown keys and
files are ignored, so newer writers can add figures without breaking older readers.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from pathlib import Path
from types import MappingProxyType
from typing import Any

from planner.codec import TOPIC_NAME_RE, ReassignEntry, decode_reassignment
from planner.errors import BadInput, CodecError

FORMAT = "kplan-plan/1"
FILES = ("plan.json", "reassignment.json", "rollback.json")
KINDS = ("drain", "rebalance", "return", "restart")   # "return": a drained broker brought back
# (planner/optimizer/returns.py); "restart": a rolling restart (planner/optimizer/restart.py)
BATCH_FILE_RE = re.compile(r"^batch-(\d+)\.json$")
MOVE_KINDS = ("data", "leader")
BATCH_KINDS = ("leadership", "data")
HOT_SPOT_WARNING = "hot spot: "  # how a hot spot's line in `warnings` starts (its figures are in `hot_spots`)


def is_hot_spot_warning(text: str) -> bool:
    """A `warnings` line that repeats a hot spot: readers that show `hot_spots` themselves leave it out."""
    return text.startswith(HOT_SPOT_WARNING)


def replica_spread_text(plan: Plan) -> str:
    """What the replica spread counts, in words: "replicas per broker on the 5 brokers that stay: 141..171 (spread
    30) -> 182..230 (spread 48); drained: broker 1 179 -> 0". The spread is max - min over the brokers that
    may hold replicas (eligible): a drained broker ends at 0 and is not counted, brokers left out (maintenance)
    neither. Plans without per-broker figures: the two numbers alone."""
    b, before, after = plan.brokers, plan.before, plan.after
    rb, ra = list(before.get("replicas") or ()), list(after.get("replicas") or ())
    if not (b.ids and len(rb) == len(ra) == len(b.ids) == len(b.eligible)):
        return f"replica spread {before.get('replica_spread')} -> {after.get('replica_spread')}"
    elig = [i for i, e in enumerate(b.eligible) if e]

    def span(xs: list[int]) -> str:
        vals = [xs[i] for i in elig]
        return f"{min(vals)}..{max(vals)} (spread {max(vals) - min(vals)})" if vals else "-"

    noun = "broker that stays" if plan.kind == "drain" and len(elig) == 1 else \
        "brokers that stay" if plan.kind == "drain" else "broker" if len(elig) == 1 else "eligible brokers"
    out = f"replicas per broker on the {len(elig)} {noun}: {span(rb)} -> {span(ra)}"
    drained = [i for i, d in enumerate(b.drained) if d]
    if drained:
        out += "; drained: " + ", ".join(f"broker {b.ids[i]} {rb[i]} -> {ra[i]}" for i in drained)
    other = [i for i in range(len(b.ids)) if not b.eligible[i] and not b.drained[i]]
    if other:
        out += "; not counted (not eligible): " + ", ".join(f"broker {b.ids[i]} {rb[i]} -> {ra[i]}" for i in other)
    return out


def plan_id(doc: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of the document without its id."""
    body = {k: v for k, v in doc.items() if k != "id"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canon.encode("utf-8")).hexdigest()


def file_sha256(data: bytes) -> str:
    """How plan.json and the snapshot manifest record a file's checksum."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def batch_file_name(index: int, count: int = 0) -> str:
    """The file a batch is written to on its own (`batch-007.json` for index 7): zero-padded to three digits,
    or to the digits of the last index of a plan with `count` > 1,000 batches, so that the files sort in apply
    order."""
    return f"batch-{index:0{max(3, len(str(max(0, count - 1))))}d}.json"


def frozen(value: Any) -> Any:
    """A read-only deep copy of JSON data: dicts become mappings that refuse writes, lists tuples."""
    if isinstance(value, dict):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    return value


@dataclass(frozen=True)
class Move:
    topic: str
    partition: int
    from_replicas: tuple[int, ...]
    to_replicas: tuple[int, ...]
    bytes: int | None              # size x replicas added; 0 for a leader-only move; None when size unknown
    kind: str                      # "data" (the replica set changes) | "leader" (only the order does)


@dataclass(frozen=True)
class Batch:
    index: int
    kind: str                                      # "leadership" | "data"
    partitions: tuple[tuple[str, int], ...]
    replicas: tuple[tuple[int, ...], ...]          # replicas[i] is the list this batch writes for partitions[i]
    # written since issue 11 (None in older plans): its own file in Kafka's format, the bytes it copies and
    # the per-broker throttle that copies them in the plan's batch_seconds (None: leadership batch or
    # unknown sizes; apply uses it as the batch's default throttle)
    file: str | None = None
    bytes: int | None = None
    suggested_throttle_bytes_per_s: int | None = None
    max_broker_bytes: int | None = None            # the most one broker receives or sends in it (None: unknown)

    def entries(self) -> tuple[ReassignEntry, ...]:
        """The batch as reassignment entries (what is written to /admin/reassign_partitions)."""
        return tuple(ReassignEntry(t, p, r) for (t, p), r in zip(self.partitions, self.replicas, strict=True))


@dataclass(frozen=True)
class Brokers:
    """Parallel tuples over every broker of the snapshot, in id order."""

    ids: tuple[int, ...]
    racks: tuple[str | None, ...]
    alive: tuple[bool, ...]
    drained: tuple[bool, ...]
    eligible: tuple[bool, ...]
    maintenance: tuple[str | None, ...] = ()   # each broker's maintenance state when the snapshot was taken

    @property
    def in_maintenance(self) -> dict[int, str]:
        """Broker id -> maintenance state, for the brokers that were in maintenance (planner/maintenance.py)."""
        return {b: m for b, m in zip(self.ids, self.maintenance, strict=False) if m}

    @property
    def drained_ids(self) -> tuple[int, ...]:
        return tuple(b for b, d in zip(self.ids, self.drained, strict=True) if d)


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Mapping[str, Any]:
    return _EMPTY


@dataclass(frozen=True, eq=False)
class Plan:
    id: str
    kind: str                                      # one of KINDS
    snapshot_fingerprint: str
    parameters: Mapping[str, Any]
    brokers: Brokers
    snapshot: Mapping[str, Any] = field(default_factory=_empty)    # fingerprint, taken_at
    summary: Mapping[str, Any] = field(default_factory=_empty)
    before: Mapping[str, Any] = field(default_factory=_empty)
    after: Mapping[str, Any] = field(default_factory=_empty)
    topics: Mapping[str, Any] = field(default_factory=_empty)
    solver: Mapping[str, Any] = field(default_factory=_empty)
    leadership: Mapping[str, Any] = field(default_factory=_empty)   # scope, necessary/optional, alternative
    hot_spots: Mapping[str, Any] = field(default_factory=_empty)    # metric, threshold_pct, brokers
    warnings: tuple[str, ...] = ()
    doc: Mapping[str, Any] = field(default_factory=_empty, repr=False)   # plan.json as read (do not modify)
    path: Path | None = None

    # moves and batches are parsed from `doc` when first used (read_plan checks them before returning); a
    # caller that only shows the summary of a large plan never pays for them.
    @cached_property
    def moves(self) -> tuple[Move, ...]:
        return _moves(dict(self.doc), self._where)

    @cached_property
    def batches(self) -> tuple[Batch, ...]:
        return _batches(dict(self.doc), self._where)

    @property
    def _where(self) -> Path:
        return (self.path or Path(".")) / "plan.json"

    @cached_property
    def reassignment(self) -> tuple[ReassignEntry, ...]:
        """reassignment.json: the target list of every move (what the plan writes)."""
        return tuple(_entries(self.moves, "to_replicas"))

    @cached_property
    def rollback(self) -> tuple[ReassignEntry, ...]:
        """rollback.json: the lists the snapshot had, for the same partitions."""
        return tuple(_entries(self.moves, "from_replicas"))

    @property
    def drained_brokers(self) -> tuple[int, ...]:
        return self.brokers.drained_ids

    @property
    def returning_brokers(self) -> tuple[int, ...]:
        """A return plan's brokers (those it moves replicas onto); () for other kinds."""
        return tuple(int(b) for b in self.parameters.get("brokers") or ()) if self.kind == "return" else ()

    @property
    def maintenance(self) -> Mapping[str, Any]:
        """plan.json's `maintenance` section: brokers the plan left out (and a return's brokers), {} in plans
        written before it existed."""
        return self.section("maintenance")

    def section(self, name: str) -> Mapping[str, Any]:
        """Any figure section of plan.json by name (new sections need no model change)."""
        value = self.doc.get(name, _EMPTY)
        return value if isinstance(value, Mapping) else _EMPTY


def _entries(moves: tuple[Move, ...], which: str) -> list[ReassignEntry]:
    return [ReassignEntry(m.topic, m.partition, getattr(m, which)) for m in moves]


# ------------------------------------------------------------------------------------------------ reader
def _bad(where: Path, problem: str) -> BadInput:
    return BadInput(f"{where}: {problem}")


def _load_json(f: Path) -> Any:
    try:
        return json.loads(f.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _bad(f, f"not valid JSON ({e})") from None
    except OSError as e:
        raise _bad(f, f"cannot be read ({e.strerror or e})") from None


def _all_ids(lists: list, where: Path, what: str) -> None:
    """Every element of every list is a broker id (checked in bulk: a plan can hold a million of them)."""
    if set(map(type, lists)) - {list}:
        raise _bad(where, f"{what} must be lists of broker ids")
    flat = list(chain.from_iterable(lists))
    if flat and (set(map(type, flat)) != {int} or min(flat) < 0):
        bad = next(x for x in flat if type(x) is not int or x < 0)
        raise _bad(where, f"{what} must hold broker ids, found {json.dumps(bad)}")


def _moves(doc: dict[str, Any], where: Path) -> tuple[Move, ...]:
    moves = doc["moves"]
    if not isinstance(moves, list) or set(map(type, moves)) - {dict}:
        raise _bad(where, "'moves' must be a list of objects")
    try:
        topic = [m["topic"] for m in moves]
        part = [m["partition"] for m in moves]
        frm = [m["from"] for m in moves]
        to = [m["to"] for m in moves]
        kind = [m["kind"] for m in moves]
    except KeyError as e:
        raise _bad(where, f"a move lacks {e.args[0]!r}") from None
    nbytes = [m.get("bytes") for m in moves]
    if set(map(type, topic)) - {str} or set(map(type, part)) - {int} or set(kind) - set(MOVE_KINDS) \
            or (part and min(part) < 0) or not all(map(TOPIC_NAME_RE.match, set(topic))):
        raise _bad(where, "malformed move: topic must be a string, partition a non-negative integer, kind "
                          f"one of {', '.join(MOVE_KINDS)}")
    if set(map(type, nbytes)) - {int, type(None)} or min((x for x in nbytes if x is not None), default=0) < 0:
        raise _bad(where, "a move's bytes must be a non-negative integer or null")
    _all_ids(frm, where, "moves' from lists")
    _all_ids(to, where, "moves' to lists")
    return tuple(map(Move, topic, part, map(tuple, frm), map(tuple, to), nbytes, kind))


def _batches(doc: dict[str, Any], where: Path) -> tuple[Batch, ...]:
    batches = doc["batches"]
    if not isinstance(batches, list):
        raise _bad(where, "'batches' must be a list")
    out = []
    for b in batches:
        if not isinstance(b, dict) or type(b.get("index")) is not int or b.get("kind") not in BATCH_KINDS:
            raise _bad(where, f"malformed batch {json.dumps(b)[:200]}")
        parts, reps = b.get("partitions"), b.get("replicas")
        if not isinstance(parts, list) or not isinstance(reps, list):
            raise _bad(where, f"batch {b['index']} lacks its partitions or replica lists")
        if len(parts) != len(reps):
            raise _bad(where, f"batch {b['index']} lists {len(parts)} partitions but {len(reps)} replica lists")
        if set(map(type, parts)) - {list} or set(map(len, parts)) - {2} \
                or set(type(p[0]) for p in parts) - {str} or set(type(p[1]) for p in parts) - {int}:
            raise _bad(where, f"batch {b['index']}: partitions must be [topic, partition] pairs")
        _all_ids(reps, where, f"batch {b['index']} replicas")
        for key in ("bytes", "suggested_throttle_bytes_per_s", "max_broker_bytes_in", "max_broker_bytes_out"):
            v = b.get(key)
            if v is not None and (type(v) is not int or v < 0):
                raise _bad(where, f"batch {b['index']}: {key} must be a non-negative integer or null, not {v!r}")
        if b.get("file") is not None and not isinstance(b["file"], str):
            raise _bad(where, f"batch {b['index']}: file must be a string")
        busiest = None if b.get("max_broker_bytes_in") is None or b.get("max_broker_bytes_out") is None \
            else max(b["max_broker_bytes_in"], b["max_broker_bytes_out"])
        out.append(Batch(b["index"], b["kind"], tuple(map(tuple, parts)), tuple(map(tuple, reps)), b.get("file"),
                         b.get("bytes"), b.get("suggested_throttle_bytes_per_s"), busiest))
    if [b.index for b in out] != list(range(len(out))):
        raise _bad(where, f"batch indexes must be 0..{len(out) - 1} in order, got {[b.index for b in out]}")
    return tuple(out)


def _brokers(doc: dict[str, Any], where: Path) -> Brokers:
    b = doc.get("brokers") or {}
    if not isinstance(b, dict):
        raise _bad(where, "'brokers' must be an object")
    ids = tuple(b.get("ids", ()))
    n = len(ids)

    def col(name: str, default: Any) -> tuple:
        v = b.get(name)
        if v is None:
            return (default,) * n
        if not isinstance(v, list) or len(v) != n:
            raise _bad(where, f"brokers.{name} must be a list parallel to brokers.ids")
        return tuple(v)

    return Brokers(ids, col("racks", None), col("alive", True), col("drained", False), col("eligible", True),
                   col("maintenance", None))


def _reassign_file(f: Path) -> tuple[ReassignEntry, ...]:
    try:
        return tuple(decode_reassignment(f.read_bytes(), str(f)))
    except CodecError as e:
        raise BadInput(str(e)) from None
    except OSError as e:
        raise _bad(f, f"cannot be read ({e.strerror or e})") from None


def _check_reassign_file(f: Path, moves: tuple[Move, ...], which: str, plan: str) -> None:
    """`f` holds exactly the moves' `which` lists, in the strict znode format. Checked column by column (a plan can list a
    million partitions); on any difference the strict znode decoder says what is wrong."""
    try:
        data = f.read_bytes()
    except OSError as e:
        raise _bad(f, f"cannot be read ({e.strerror or e})") from None
    try:
        obj = json.loads(data)
        entries = obj["partitions"] if isinstance(obj, dict) and obj.keys() == {"version", "partitions"} \
            and obj["version"] == 1 else None
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError):
        entries = None
    ok = isinstance(entries, list) and len(entries) == len(moves) and not set(map(type, entries)) - {dict} \
        and set(map(frozenset, entries)) <= {_ENTRY_KEYS}
    if ok:
        parts = [e["partition"] for e in entries]
        reps = [e["replicas"] for e in entries]
        ok = ([e["topic"] for e in entries] == [m.topic for m in moves]
              and set(map(type, parts)) <= {int} and parts == [m.partition for m in moves]
              and not set(map(type, reps)) - {list}
              and set(map(type, chain.from_iterable(reps))) <= {int}
              and list(map(tuple, reps)) == [getattr(m, which) for m in moves])
    if ok:
        return
    got = _reassign_file(f)   # names the problem when the file is malformed
    if list(got) != _entries(moves, which):
        raise _bad(f, f"does not match the moves of plan {plan}")


_ENTRY_KEYS = frozenset({"topic", "partition", "replicas"})


def _check_checksums(path: Path, doc: dict[str, Any]) -> None:
    """plan.json's `files` section: {name: "sha256:<hex>"} of the plan's other files."""
    files = doc.get("files")
    if files is None:
        return
    if not isinstance(files, dict):
        raise _bad(path / "plan.json", "'files' must map file names to sha256 checksums")
    for name, want in sorted(files.items()):
        f = path / name
        if "/" in name or name.startswith(".") or name == "plan.json":
            raise _bad(path / "plan.json", f"'files' lists {name!r}, which is not a file of the plan folder")
        if not f.is_file():
            raise _bad(path, f"{name} is missing (plan.json records its checksum)")
        if file_sha256(f.read_bytes()) != want:
            raise _bad(f, "checksum does not match the one plan.json records (edited or corrupt; re-plan)")


def from_document(doc: dict[str, Any], path: Path | None = None) -> Plan:
    """The model of a plan document whose top level has been checked (read_plan) or that was just written
    (planner.plan_step): moves and batches are parsed on first use."""
    snap = doc["snapshot"]
    where = (path or Path(".")) / "plan.json"
    return Plan(
        id=doc["id"], kind=doc["kind"], snapshot_fingerprint=snap["fingerprint"],
        parameters=frozen(doc["parameters"]), brokers=_brokers(doc, where), snapshot=frozen(snap),
        summary=frozen(doc.get("summary") or {}), before=frozen(doc.get("before") or {}),
        after=frozen(doc.get("after") or {}), topics=frozen(doc.get("topics") or {}),
        solver=frozen(doc.get("solver") or {}), leadership=frozen(doc.get("leadership") or {}),
        hot_spots=frozen(doc.get("hot_spots") or {}), warnings=tuple(str(w) for w in doc.get("warnings") or ()),
        doc=MappingProxyType(doc), path=path)


def read_plan(path: Path | str) -> Plan:
    """Read a plan folder and check that its files agree with each other and with the plan's id."""
    path = Path(path)
    if not path.is_dir():
        raise BadInput(f"plan folder {path} does not exist" if not path.exists() else
                       f"{path} is not a plan folder (plan.json, reassignment.json, rollback.json)")
    for name in FILES:
        if not (path / name).is_file():
            raise BadInput(f"{path} lacks {name}: not a plan folder (or an unfinished one)")
    where = path / "plan.json"
    doc = _load_json(where)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(where, f"not a {FORMAT} plan")
    for key in ("id", "kind", "snapshot", "parameters", "moves", "batches"):
        if key not in doc:
            raise _bad(where, f"lacks {key!r}")
    if plan_id(doc) != doc["id"]:
        raise _bad(where, f"content does not match its id {doc['id']} (edited after planning?)")
    if doc["kind"] not in KINDS:
        raise _bad(where, f"unknown plan kind {doc['kind']!r}")
    snap = doc["snapshot"]
    if not isinstance(snap, dict) or not isinstance(snap.get("fingerprint"), str):
        raise _bad(where, "'snapshot' must hold the fingerprint of the snapshot the plan was made from")
    if not isinstance(doc["parameters"], dict):
        raise _bad(where, "'parameters' must be an object")
    _check_checksums(path, doc)
    plan = from_document(doc, path)
    moves, batches = plan.moves, plan.batches
    _check_reassign_file(path / "reassignment.json", moves, "to_replicas", doc["id"])
    _check_reassign_file(path / "rollback.json", moves, "from_replicas", doc["id"])
    moved = {(m.topic, m.partition) for m in moves if m.kind == "data"}
    in_data = [p for b in batches if b.kind == "data" for p in b.partitions]
    if len(in_data) != len(set(in_data)) or set(in_data) != moved:
        raise _bad(where, "data batches do not cover each data move exactly once")
    final = {(m.topic, m.partition): m.to_replicas for m in moves}
    for b in batches:
        if b.kind == "data":
            for key, reps in zip(b.partitions, b.replicas, strict=True):
                if final.get(key) != reps:
                    raise _bad(where, f"batch {b.index} writes {key[0]}-{key[1]} as {list(reps)}, not the plan's "
                                      f"target {list(final.get(key) or ())}")
    listed = {b.index: b.file for b in batches if b.file is not None}
    _check_batch_files(path, batches, listed)
    return plan


def _check_batch_files(path: Path, batches: tuple[Batch, ...], listed: Mapping[int, Any]) -> None:
    """batch-NNN.json files, when a writer adds them: each in reassignment format, holding exactly batch NNN;
    a file a batch lists in plan.json (its `file`) must be there."""
    for index, name in sorted(listed.items()):
        m = BATCH_FILE_RE.match(name) if isinstance(name, str) else None
        if not m or int(m.group(1)) != index:
            raise _bad(path / "plan.json", f"batch {index} names file {name!r}, not a batch-NNN.json of its own")
        if not (path / name).is_file():
            raise _bad(path, f"{name} is missing (batch {index} of plan.json)")
    by_index = {b.index: b for b in batches}
    for f in sorted(path.iterdir()):
        m = BATCH_FILE_RE.match(f.name)
        if not m:
            continue
        b = by_index.get(int(m.group(1)))
        if b is None:
            raise _bad(f, f"names batch {int(m.group(1))}, but the plan has batches 0..{len(batches) - 1}")
        got = [(e.topic, e.partition, e.replicas) for e in _reassign_file(f)]
        want = [(t, p, r) for (t, p), r in zip(b.partitions, b.replicas, strict=True)]
        if sorted(got) != sorted(want):
            raise _bad(f, f"does not hold exactly batch {b.index} of plan.json")


# ---------------------------------------------------------------------------------------- apply schedule
@dataclass(frozen=True)
class BatchRate:
    """A batch as apply will run it: the replication rate in force and how long its copy takes at it."""

    index: int
    kind: str
    bytes: int | None
    rate: int | None            # bytes/s per broker (Kafka's throttle is a broker rate); None: unthrottled
    source: str                 # "throttle" (given) | "plan" (its suggestion) | "none" (full speed) | "no data"
    seconds: float | None       # the busiest broker's bytes over the rate; None: unknown or unthrottled


@dataclass(frozen=True)
class ApplySchedule:
    batches: tuple[BatchRate, ...]
    seconds: float | None       # the copy time of the whole apply (None when a data batch has no rate or bytes)
    unthrottled: tuple[int, ...]  # data batches that would copy with no rate
    refusal: str | None         # why apply refuses (no rate and no explicit no_throttle), else None: the fact; the
    #                             remedy (a throttle, or no_throttle on purpose) is the caller's to word (NoThrottle)


def apply_schedule(plan: Plan, throttle: int | None = None, no_throttle: bool = False) -> ApplySchedule:
    """The rate each batch will copy at (`throttle`, else the plan's suggestion) and the estimated duration
    of the whole apply (docs/APPLY.md "Throttles"). A data batch with no rate copies at full speed: apply
    refuses that unless `no_throttle` says it is meant (an unthrottled copy of terabytes is how maintenance
    takes clusters down)."""
    rows, total, unthrottled = [], 0.0, []
    for b in plan.batches:
        if b.kind != "data" or b.bytes == 0:
            rows.append(BatchRate(b.index, b.kind, b.bytes if b.kind == "data" else 0, None, "no data", 0.0))
            continue
        rate, source = (throttle, "throttle") if throttle is not None else (b.suggested_throttle_bytes_per_s, "plan")
        if not rate:
            rate, source = None, "none"
            unthrottled.append(b.index)
        busiest = b.max_broker_bytes if b.max_broker_bytes is not None else b.bytes
        secs = busiest / rate if rate and busiest is not None else None
        total = None if secs is None or total is None else total + secs
        rows.append(BatchRate(b.index, b.kind, b.bytes, rate, source, secs))
    refusal = None
    if unthrottled and not no_throttle:
        why = "the plan was made without partition sizes, so it suggests no rate" \
            if plan.summary.get("bytes_moved") is None else "no rate was given or suggested"
        refusal = (f"{len(unthrottled)} data batches of plan {plan.id[:19]}... would copy with no replication "
                   f"throttle ({why})")
    return ApplySchedule(tuple(rows), total, tuple(unthrottled), refusal)
