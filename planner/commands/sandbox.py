"""`kplan sandbox`: a real ZooKeeper with a ZooKeeper-mode Kafka cluster, emulated (default) or real Apache Kafka
broker JVMs (`--engine kafka`), to rehearse drains.

    kplan sandbox up --dir D [--engine emulated|kafka] [--cluster FILE.json | --brokers N --racks R | --preset demo]
                     [timing options] [--kafka-version 3.9.2 --broker-heap-mb 256 --data-bytes N --data-scale X]
    kplan sandbox kill|stop|start --dir D BROKER...
    kplan sandbox status --dir D [--json]
    kplan sandbox wait --dir D [--timeout S]
    kplan sandbox down --dir D
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from planner.errors import BadInput
from planner.text import count

TIMING_OPTIONS = [
    ("--catch-up-delay", "catch_up_delay", float, "seconds a returning replica needs to rejoin the ISR (2)"),
    ("--shutdown-retries", "shutdown_retries", int, "controlled shutdown attempts before stopping anyway (3)"),
    ("--shutdown-retry-interval", "shutdown_retry_interval", float, "seconds between those attempts (5)"),
    ("--rebalance-interval", "rebalance_interval", float, "seconds between auto leader rebalance checks (300)"),
    ("--imbalance-pct", "imbalance_pct", float, "leader.imbalance.per.broker.percentage (10)"),
    ("--link-rate", "link_rate", float, "bytes/s of each broker's network link (1.25e9)"),
    ("--tick", "tick", float, "seconds between replication progress steps (0.1)"),
    ("--session-timeout", "session_timeout", float, "ZooKeeper session timeout of the brokers (10)"),
]


def _add_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", required=True, help="sandbox directory (holds sandbox.json, logs, ZooKeeper data)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sandbox", help="emulated Kafka cluster on a real ZooKeeper (up, down, kill, stop, start, "
                                       "status)", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    up = actions.add_parser("up", help="start ZooKeeper and the emulated cluster, return once settled")
    _add_dir(up)
    src = up.add_mutually_exclusive_group()
    src.add_argument("--cluster", help="cluster description file (DESIGN.md format)")
    src.add_argument("--preset", help="ready-made cluster: demo (default) or generated (with --brokers)")
    up.add_argument("--brokers", type=int, help="generate a cluster of N brokers")
    up.add_argument("--racks", type=int, help="racks of the generated cluster (default min(3, N))")
    up.add_argument("--partitions", type=int, help="partitions of the generated cluster (default 100 per broker)")
    up.add_argument("--rf", type=int, help="replication factor of the generated cluster (default min(3, N))")
    up.add_argument("--seed", type=int, default=0, help="seed of the generated cluster")
    up.add_argument("--zk", help="use this ZooKeeper (HOST:PORT/chroot) instead of starting one")
    up.add_argument("--chroot", help="write the cluster under this chroot (e.g. /kafka)")
    up.add_argument("--timeout", type=float, default=600, help="seconds to wait for the cluster to settle")
    up.add_argument("--engine", choices=["emulated", "kafka"], default="emulated",
                    help="emulated brokers (default; fast, 100k+ partitions) or real Apache Kafka broker JVMs")
    up.add_argument("--kafka-version", default=None, help="kafka engine: Apache Kafka version (default 3.9.2)")
    up.add_argument("--broker-heap-mb", type=int, default=256, help="kafka engine: heap of each broker JVM (256)")
    up.add_argument("--data-bytes", type=int, default=None,
                    help="kafka engine: cap on the bytes produced into the partitions (default 64 MiB)")
    up.add_argument("--data-scale", type=float, default=None,
                    help="kafka engine: produce described sizes x this (instead of scaling under --data-bytes)")
    for flag, dest, typ, text in TIMING_OPTIONS:
        up.add_argument(flag, dest=dest, type=typ, help=text)
    up.add_argument("--no-auto-rebalance", dest="auto_rebalance", action="store_false", default=None,
                    help="disable auto.leader.rebalance.enable (on by default, as in Kafka)")
    up.add_argument("--unclean-default", dest="unclean_default", action="store_true", default=None,
                    help="broker default unclean.leader.election.enable=true")
    up.set_defaults(func=_up)

    down = actions.add_parser("down", help="stop everything the sandbox started")
    _add_dir(down)
    down.set_defaults(func=_down)

    for name, text in (("kill", "hard failure: close the brokers' ZooKeeper sessions"),
                       ("stop", "controlled shutdown (leaders moved first, then the brokers stop)"),
                       ("start", "restart brokers (new sessions, new broker epochs)")):
        a = actions.add_parser(name, help=text)
        _add_dir(a)
        a.add_argument("broker", nargs="+", help="broker ids (space or comma separated)")
        a.add_argument("--timeout", type=float, help="seconds to wait for the controller to act")
        a.set_defaults(func=_broker_action, action_name=name)

    status = actions.add_parser("status", help="brokers, controller, offline and under-replicated partitions")
    _add_dir(status)
    status.add_argument("--json", action="store_true", help="print the full status as JSON")
    status.set_defaults(func=_status)

    wait = actions.add_parser("wait", help="wait until nothing is left to happen (elections, catch-ups)")
    _add_dir(wait)
    wait.add_argument("--timeout", type=float, default=300)
    wait.set_defaults(func=_wait)


def _broker_ids(values: list[str]) -> list[int]:
    ids = []
    for v in values:
        for item in v.split(","):
            item = item.strip()
            if not item:
                continue
            if not item.isdigit():
                raise BadInput(f"broker ids must be non-negative integers, got {item!r}")
            ids.append(int(item))
    if not ids:
        raise BadInput("give at least one broker id")
    return ids


def _up(args: argparse.Namespace) -> int:
    from planner.sandbox import Sandbox

    timing = {dest: getattr(args, dest) for _, dest, _, _ in TIMING_OPTIONS}
    timing["auto_rebalance"] = args.auto_rebalance
    timing["unclean_default"] = args.unclean_default
    if args.cluster is None and args.preset is None and args.brokers is None:
        preset = "demo"
    else:
        preset = args.preset
    if args.cluster is not None and args.brokers is not None:
        raise BadInput("give either --cluster or --brokers, not both")
    kafka: dict[str, Any] = {}
    if args.engine == "kafka":
        from planner.kafka import DEFAULT_VERSION

        kafka = dict(kafka_version=args.kafka_version or DEFAULT_VERSION, broker_heap_mb=args.broker_heap_mb,
                     data_bytes=args.data_bytes, data_scale=args.data_scale)
    elif args.kafka_version or args.data_bytes is not None or args.data_scale is not None:
        raise BadInput("--kafka-version, --data-bytes and --data-scale need --engine kafka")
    sb = Sandbox.up(args.dir, cluster=args.cluster, brokers=args.brokers, racks=args.racks,
                    partitions=args.partitions, rf=args.rf, preset=preset, seed=args.seed, zk=args.zk,
                    chroot=args.chroot, timeout=args.timeout, engine=args.engine, **kafka, **timing)
    st = sb.status(limit=0)
    ctrl = st.get("controller") or {}
    what = f"Kafka {sb.kafka_version} broker JVMs" if sb.engine == "kafka" else "emulated brokers"
    print(f"sandbox up in {sb.dir}: ZooKeeper {sb.connect_string}, {len(st['brokers'])} {what}, "
          f"controller {ctrl.get('broker')} (epoch {ctrl.get('epoch')}), {st.get('partitions')} partitions, "
          f"{st.get('offline_count')} offline, {st.get('under_replicated_count')} under-replicated")
    if sb.engine == "kafka":
        pids = sb.broker_pids
        print(f"  bootstrap servers {sb.bootstrap_servers}; broker pids "
              + ", ".join(f"{b}:{p}" for b, p in sorted(pids.items())))
        up = sb.info["kafka"].get("up", {})
        print(f"  up in {up.get('up_s')}s (brokers registered after {up.get('registered_s')}s); "
              f"{up.get('bytes', 0)} bytes produced (scale {sb.info['kafka']['data']['scale']:.3g})")
    print(f"  {sb.dir / 'sandbox.json'} (connect string, pids), {sb.dir / 'logdirs.json'} (partition sizes)")
    return 0


def _down(args: argparse.Namespace) -> int:
    from planner.sandbox import Sandbox
    from planner.sandbox.api import SANDBOX_FILE

    d = Path(args.dir)
    if d.is_dir() and not (d / SANDBOX_FILE).exists():
        print(f"no sandbox is running in {d.resolve()}: nothing to stop")   # down twice is not an error
        return 0
    sb = Sandbox(args.dir)
    report = sb.down()
    if sb.engine == "kafka":
        print(f"sandbox in {sb.dir} is down (broker JVMs killed: {len(report.get('brokers_killed', []))}, "
              f"ZooKeeper stopped: {report['zookeeper_stopped']})")
        return 0
    print(f"sandbox in {sb.dir} is down (daemon stopped: {report['daemon_stopped']}, "
          f"ZooKeeper stopped: {report['zookeeper_stopped']})")
    return 0


def _broker_action(args: argparse.Namespace) -> int:
    from planner.sandbox import Sandbox

    sb = Sandbox(args.dir)
    ids = _broker_ids(args.broker)
    fn = getattr(sb, args.action_name)
    result = fn(ids, timeout=args.timeout) if args.timeout else fn(ids)
    if args.action_name == "stop":
        for b, r in sorted(result.get("brokers", {}).items(), key=lambda kv: int(kv[0])):
            how = "after moving its leaders" if r.get("succeeded") else \
                f"after {r.get('attempts')} attempts, still leading {', '.join(r.get('still_leading', [])) or '-'}"
            print(f"broker {b} stopped {how}")
    elif args.action_name == "kill":
        after = f" ({result['controller_reacted_s']}s after the kill)" if "controller_reacted_s" in result else ""
        print(f"killed brokers {', '.join(map(str, ids))}; the controller has reacted{after}")
    else:
        epochs = result.get("epochs") or {}
        shown = ", ".join(f"broker {b}: {e}" for b, e in sorted(epochs.items(), key=lambda kv: int(kv[0])))
        print(f"started {count(len(ids), 'broker')} {', '.join(map(str, ids))}"
              + (f" (new broker epochs: {shown})" if shown else ""))
    return 0


def _fmt_parts(items: list[dict[str, Any]], n: int) -> str:
    names = [f"{x['topic']}-{x['partition']}" for x in items[:n]]
    more = len(items) - n
    return ", ".join(names) + (f" (+{more} more)" if more > 0 else "")


def _status(args: argparse.Namespace) -> int:
    from planner.sandbox import Sandbox

    sb = Sandbox(args.dir)
    st = sb.status()
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    ctrl = st.get("controller")
    print(f"sandbox {sb.dir}  ZooKeeper {sb.connect_string}  settled: {'yes' if st.get('settled') else 'no'}")
    print(f"controller: broker {ctrl['broker']} (epoch {ctrl['epoch']})" if ctrl else "controller: none")
    print("brokers:")
    for b in st["brokers"]:
        state = "shutting down" if b["shutting_down"] else "running" if b["running"] else b.get("state", "down")
        pid = f"  pid {b['pid']} port {b['port']}" if b.get("pid") else ""
        print(f"  {b['id']:>5}  rack {b['rack'] or '-':<8} {state}{pid}")
    if ctrl:
        print(f"partitions: {st['partitions']} in {st['topics']} topics")
        print(f"offline: {st['offline_count']}" + (f"  {_fmt_parts(st['offline'], 20)}" if st['offline_count'] else ""))
        print(f"under-replicated: {st['under_replicated_count']}" +
              (f"  {_fmt_parts(st['under_replicated'], 20)}" if st['under_replicated_count'] else ""))
        print(f"under min ISR: {st['under_min_isr_count']}")
        stuck = [r for r in st["reassigning"] if r["stuck_on_dead_brokers"]]
        print(f"reassigning: {st['reassigning_count']}" + (f" ({len(stuck)} waiting for dead brokers)" if stuck else ""))
    rep = st.get("replication", {})
    print(f"replicas catching up: {rep.get('catching_up', 0)}")
    return 0


def _wait(args: argparse.Namespace) -> int:
    from planner.sandbox import Sandbox

    st = Sandbox(args.dir).wait_settled(args.timeout)
    print(f"settled: {st.get('offline_count')} offline, {st.get('under_replicated_count')} under-replicated")
    return 0
