"""`kplan snapshot --zk HOST:PORT[/chroot] --out DIR`: read a ZooKeeper-mode Kafka cluster into a snapshot
folder (docs/SNAPSHOT.md) and print a readable summary. Progress goes to stderr, the summary to stdout."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from planner.text import count


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "snapshot",
        help="read the cluster's state from ZooKeeper into a snapshot folder (never writes to ZooKeeper)",
        description="Read brokers, controller, topics, partition states, configs and pending admin "
        "operations of a ZooKeeper-mode Kafka cluster into DIR (manifest.json + Parquet). "
        "Nothing is ever written to ZooKeeper.",
    )
    p.add_argument("--zk", required=True, metavar="HOST:PORT[/chroot]",
                   help="ZooKeeper connect string, with Kafka's chroot if it has one (e.g. zk1:2181/kafka)")
    p.add_argument("--out", required=True, metavar="DIR", help="snapshot folder to write")
    p.add_argument("--sizes", metavar="FILE",
                   help="output of `kafka-log-dirs.sh --describe` (partition sizes; ZooKeeper has none)")
    p.add_argument("--lenient", action="store_true",
                   help="skip malformed topics/partitions (listed in the manifest's warnings) instead of failing")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for ZooKeeper to answer the connection (default 10)")
    p.add_argument("--zk-auth-env", metavar="VAR",
                   help="environment variable holding digest credentials user:password "
                   "(default: KPLAN_ZK_AUTH when set)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="worker processes (each with its own ZooKeeper session) reading partition states; "
                   "default 1, the fastest measured on 2 cores next to a local ZooKeeper")
    p.add_argument("--force", action="store_true", help="replace --out if it is not empty")
    p.add_argument("--read-mode", choices=["auto", "multiread", "plain"], default="auto", help=argparse.SUPPRESS)
    p.set_defaults(func=_run)


def _progress(p) -> None:
    print(f"kplan snapshot: {p.message}", file=sys.stderr, flush=True)


def _run(args: argparse.Namespace) -> int:
    from planner import api
    from planner import zk as zkmod

    auth = zkmod.auth_from_env(args.zk_auth_env)
    req = api.SnapshotRequest(zk=args.zk, out=Path(args.out), sizes=Path(args.sizes) if args.sizes else None,
                              lenient=args.lenient, timeout=args.timeout, auth=auth, workers=args.workers,
                              read_mode=args.read_mode, force=args.force)
    outcome = api.snapshot(req, progress=_progress)
    from planner.snapshot_io import read_table

    print(summary(outcome, read_table(outcome.path, "brokers")))
    return 0


def summary(outcome, brokers) -> str:
    """A readable summary of a snapshot (what an operator checks before planning anything)."""
    m = outcome.manifest
    c = m["counts"]
    b = brokers.to_pydict()
    lines = [f"snapshot of {m['source']['zk']}{m['source']['chroot'] or ''} -> {outcome.path}"]

    def by_rack(alive: bool) -> str:
        racks: dict[str, list[int]] = {}
        for bid, a, rack in zip(b["broker"], b["alive"], b["rack"], strict=True):
            if a == alive:
                racks.setdefault(rack or "no rack", []).append(bid)
        if sum(len(v) for v in racks.values()) <= 30:
            return "; ".join(f"{r}: {','.join(map(str, ids))}" for r, ids in sorted(racks.items()))
        return "; ".join(f"{r}: {len(ids)}" for r, ids in sorted(racks.items()))

    lines.append(f"  brokers alive   {c['alive_brokers']} ({by_rack(True)})")
    dead = c["brokers"] - c["alive_brokers"]
    if dead:
        lines.append(f"  brokers dead    {dead} ({by_rack(False)}): named in assignments, not registered")
    ctrl = m["controller"]
    lines.append(f"  controller      broker {ctrl['broker']}, epoch {ctrl['epoch']}")
    maint = m.get("maintenance") or []
    lines.append("  maintenance     " + ("; ".join(
        f"broker {e['broker']} {e['state']} since {e.get('since') or '?'}" + (f" ({e['reason']})" if e.get("reason")
                                                                             else "") for e in maint)
        + ": plans give them nothing" if maint else "none"))
    lines.append(f"  topics          {c['topics']}" + (f" ({len(m['topics_queued_for_deletion'])} queued for "
                                                        "deletion)" if m["topics_queued_for_deletion"] else ""))
    lines.append(f"  partitions      {c['partitions']} ({c['replicas']} replicas)")
    lines.append(f"  offline         {c['offline']}")
    lines.append(f"  under-replicated {c['under_replicated']}")
    lines.append(f"  leaderless-new  {c['leaderless_new']}")
    if c.get("state_unknown"):
        lines.append(f"  state unknown   {c['state_unknown']} (malformed state znodes: plans leave them alone, "
                     "risk does not score them)")
    inflight = m["reassignment_in_flight"]
    if inflight:
        shown = ", ".join(f"{e['topic']}-{e['partition']}->{list(e['replicas'])}" for e in inflight[:5])
        more = f" and {len(inflight) - 5} more" if len(inflight) > 5 else ""
        lines.append(f"  reassigning     {len(inflight)}: {shown}{more}")
    else:
        lines.append("  reassigning     none")
    if m["preferred_election_pending"]:
        lines.append(f"  preferred election pending for {count(len(m['preferred_election_pending']), 'partition')}")
    cons = m["consistency"]
    lines.append(f"  consistency     zxid {m['zxid']['min']:#x}..{m['zxid']['max']:#x}, {cons['rereads']} re-reads "
                 f"in {cons['rounds']} rounds" + ("" if cons["consistent"] else " (NOT consistent: see warnings)"))
    lines.append(f"  warnings        {len(m['warnings'])}")
    for w in m["warnings"][:10]:
        lines.append(f"    {w['path']}: {w['problem']}")
    if len(m["warnings"]) > 10:
        lines.append(f"    ... {len(m['warnings']) - 10} more in manifest.json")
    lines.append(f"  fingerprint     {m['fingerprint']}")
    lines.append(f"  time            {outcome.seconds:.2f} s")
    return "\n".join(lines)
