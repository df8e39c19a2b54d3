"""`kplan sandbox`: a real ZooKeeper with a ZooKeeper-mode Kafka cluster, emulated (default) or real Apache Kafka
broker JVMs (`--engine kafka`), or a real KRaft cluster without ZooKeeper (`--engine kraft`), to rehearse drains.

    kplan sandbox up --dir D [--engine emulated|kafka|kraft] [--cluster FILE.json | --brokers N --racks R | --preset demo]
                     [timing options] [--kafka-version 3.9.2 --broker-heap-mb 256 --data-bytes N --data-scale X
                     --sasl --ssl]
    kplan sandbox kill|stop|start --dir D BROKER...
    kplan sandbox status --dir D [--json]
    kplan sandbox wait --dir D [--timeout S]
    kplan sandbox down --dir D
    kplan sandbox workload --dir D [--topics T1,T2] [--rate 100] [--size 200] [--duration S] [--report FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path
from typing import Any

from planner.errors import BadInput
from planner.text import count

TIMING_OPTIONS = [
    ("--catch-up-delay", "catch_up_delay", float, "seconds a returning replica needs to rejoin the ISR (2; 0.5 with the demo preset)"),
    ("--shutdown-retries", "shutdown_retries", int, "controlled shutdown attempts before stopping anyway (3)"),
    ("--shutdown-retry-interval", "shutdown_retry_interval", float, "seconds between those attempts (5)"),
    ("--rebalance-interval", "rebalance_interval", float, "seconds between auto leader rebalance checks (300)"),
    ("--imbalance-pct", "imbalance_pct", float, "leader.imbalance.per.broker.percentage (10)"),
    ("--link-rate", "link_rate", float, "bytes/s of each broker's network link (1.25e9)"),
    ("--tick", "tick", float, "seconds between replication progress steps (0.1)"),
    ("--session-timeout", "session_timeout", float, "ZooKeeper session timeout of the brokers (10)"),
]


def _number(text: str, positive: bool, what: str) -> float:
    """A finite number (argparse's `type`, as the demo's flags), above zero or zero or more, else one line and exit 2
    before the sandbox is touched."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def _seconds(text: str) -> float:
    """A timeout or interval: seconds above zero. nan slipped past the old checks into a socket's timeout (a
    traceback), inf overflowed it, a negative one stopped a broker and then failed, and 0 (`kill --timeout 0`)
    quietly meant the default."""
    return _number(text, True, "a positive number of seconds")


def _scale(text: str) -> float:
    """--data-scale: a finite factor, zero or more (nan and inf failed only after ZooKeeper had started)."""
    return _number(text, False, "a number, zero or more")


def _byte_count(text: str) -> int:
    """--data-bytes: a whole number of bytes, zero or more (a negative cap was taken as a negative scale)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number of bytes, zero or more, got {text!r}")
    return value


def _add_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", required=True, help="sandbox directory (holds sandbox.json, logs, ZooKeeper data)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sandbox", help="emulated Kafka cluster on a real ZooKeeper (up, down, kill, stop, start, "
                                       "status)", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    up = actions.add_parser("up", help="start ZooKeeper and the emulated cluster, return once settled")
    _add_dir(up)
    src = up.add_mutually_exclusive_group()
    src.add_argument("--cluster", help="cluster description file (docs/DESIGN.md format)")
    src.add_argument("--preset", help="ready-made cluster: demo (default) or generated (with --brokers)")
    up.add_argument("--brokers", type=int, help="generate a cluster of N brokers")
    up.add_argument("--racks", type=int, help="racks of the generated cluster (default min(3, N))")
    up.add_argument("--partitions", type=int, help="partitions of the generated cluster (default 100 per broker)")
    up.add_argument("--rf", type=int, help="replication factor of the generated cluster (default min(3, N))")
    up.add_argument("--seed", type=int, default=0, help="seed of the generated cluster")
    up.add_argument("--zk", help="use this ZooKeeper (HOST:PORT/chroot) instead of starting one")
    up.add_argument("--chroot", help="write the cluster under this chroot (e.g. /kafka)")
    up.add_argument("--timeout", type=float, default=600, help="seconds to wait for the cluster to settle")
    up.add_argument("--engine", choices=["emulated", "kafka", "kraft"], default="emulated",
                    help="emulated brokers (default; fast, 100k+ partitions), real Apache Kafka broker JVMs on "
                    "ZooKeeper (kafka), or real KRaft nodes: one controller plus the brokers, no ZooKeeper (kraft)")
    up.add_argument("--layout", choices=["separate", "combined"], default=None,
                    help="kraft engine: a controller node beside the brokers (separate, default) or every broker node "
                    "a voter too (combined: process.roles=broker,controller)")
    up.add_argument("--kafka-version", default=None,
                    help="kafka / kraft engine: Apache Kafka version (default 3.9.2 / 4.1.1)")
    up.add_argument("--broker-heap-mb", type=int, default=256, help="kafka engine: heap of each broker JVM (256)")
    up.add_argument("--data-bytes", type=_byte_count, default=None, metavar="N",
                    help="kafka engine: cap on the bytes produced into the partitions (default 64 MiB)")
    up.add_argument("--data-scale", type=_scale, default=None, metavar="X",
                    help="kafka engine: produce described sizes x this (instead of scaling under --data-bytes)")
    up.add_argument("--sasl", action="store_true",
                    help="kafka engine: also a SASL_PLAINTEXT listener (PLAIN, user kplan, a random password kept "
                    "in D/sandbox.json)")
    up.add_argument("--ssl", action="store_true",
                    help="kafka engine: also an SSL listener requiring client certificates (a throwaway CA, keystore "
                    "and truststore made with keytool in D/kafka/tls; passwords kept in D/sandbox.json)")
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
        a.add_argument("--timeout", type=_seconds, metavar="S", help="seconds to wait for the controller to act")
        a.set_defaults(func=_broker_action, action_name=name)

    mig = actions.add_parser("migrate", help="kafka engine: walk the ZooKeeper-to-KRaft migration forward (KIP-866)",
                             description="Kafka's own procedure, one phase at a time, forward only: pre-migration "
                             "(a KRaft controller with the migration enabled), hybrid (brokers in migration mode; the "
                             "controller migrates the metadata and writes both), dual-write (brokers in KRaft mode), "
                             "finalized (the controller leaves ZooKeeper). docs/KAFKA_SANDBOX.md")
    _add_dir(mig)
    mig.add_argument("--to", required=True, choices=["pre-migration", "hybrid", "dual-write", "finalized"])
    mig.add_argument("--timeout", type=_seconds, default=180, metavar="S", help="seconds to wait for each phase (180)")
    mig.add_argument("--brokers", help="with --to dual-write: only these brokers to KRaft mode, the others stay in "
                     "ZooKeeper mode (a rolling migration half way: still the hybrid phase)")
    mig.set_defaults(func=_migrate)

    status = actions.add_parser("status", help="brokers, controller, offline and under-replicated partitions")
    _add_dir(status)
    status.add_argument("--json", action="store_true", help="print the full status as JSON")
    status.set_defaults(func=_status)

    wait = actions.add_parser("wait", help="wait until nothing is left to happen (elections, catch-ups)")
    _add_dir(wait)
    wait.add_argument("--timeout", type=_seconds, default=300, metavar="S")
    wait.set_defaults(func=_wait)

    wl = actions.add_parser("workload", help="kafka engine: produce (acks=all, idempotent) and consume with "
                                             "sequence checks while watching every partition; report at the end",
                            description="Runs until --duration or Ctrl-C / SIGTERM, printing a live line; then "
                                        "audits every partition and writes the report (JSON). Exit 0 when nothing "
                                        "was lost, duplicated or out of order and no partition was offline or "
                                        "under min ISR and no send failed; 1 otherwise. docs/WORKLOAD.md")
    _add_dir(wl)
    wl.add_argument("--topics", help="comma-separated topics (default: every topic not starting with __)")
    wl.add_argument("--rate", type=float, default=100.0, help="messages per second in all (100)")
    wl.add_argument("--size", type=int, default=200, help="bytes per message (200)")
    wl.add_argument("--duration", type=float, help="seconds to run (default: until Ctrl-C / SIGTERM)")
    wl.add_argument("--delivery-timeout", type=_seconds, default=30.0, metavar="S",
                    help="seconds a message may wait for its acknowledgement before it counts as failed (30)")
    wl.add_argument("--every", type=_seconds, default=5.0, metavar="S", help="seconds between live lines (5)")
    wl.add_argument("--report", help="report file (default D/workload-<UTC time>.json); never replaced")
    wl.add_argument("--samples", action="store_true",
                    help="keep every acknowledged message's latency in the report (for percentiles over any window)")
    wl.set_defaults(func=_workload)


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
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise BadInput(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    kafka: dict[str, Any] = {}
    if args.engine in ("kafka", "kraft"):
        kafka = dict(kafka_version=args.kafka_version, broker_heap_mb=args.broker_heap_mb,
                     data_bytes=args.data_bytes, data_scale=args.data_scale, sasl=args.sasl, ssl=args.ssl)
        if args.layout is not None:
            if args.engine != "kraft":
                raise BadInput("--layout needs --engine kraft")
            kafka["kraft_layout"] = args.layout
    elif args.kafka_version or args.data_bytes is not None or args.data_scale is not None or args.sasl or args.ssl:
        raise BadInput("--kafka-version, --data-bytes, --data-scale, --sasl and --ssl need --engine kafka or kraft")
    elif args.layout is not None:
        raise BadInput("--layout needs --engine kraft")
    sb = Sandbox.up(args.dir, cluster=args.cluster, brokers=args.brokers, racks=args.racks,
                    partitions=args.partitions, rf=args.rf, preset=preset, seed=args.seed, zk=args.zk,
                    chroot=args.chroot, timeout=args.timeout, engine=args.engine, **kafka, **timing)
    st = sb.status(limit=0)
    ctrl = st.get("controller") or {}
    if sb.engine == "kraft":
        feats = st.get("features", {})
        nodes = ("each also a controller (combined)" if st.get("layout") == "combined"
                 else f"and {len(st.get('controllers', {}))} controller")
        print(f"sandbox up in {sb.dir}: KRaft, {len(st['brokers'])} Kafka {sb.kafka_version} brokers {nodes} "
              f"(active: node {ctrl.get('broker')}), metadata.version "
              f"level {feats.get('metadata.version')}, eligible.leader.replicas.version "
              f"{feats.get('eligible.leader.replicas.version', 0)}, {st.get('partitions')} partitions, "
              f"{st.get('offline_count')} offline, {st.get('under_replicated_count')} under-replicated")
    else:
        what = f"Kafka {sb.kafka_version} broker JVMs" if sb.engine == "kafka" else "emulated brokers"
        print(f"sandbox up in {sb.dir}: ZooKeeper {sb.connect_string}, {len(st['brokers'])} {what}, "
              f"controller {ctrl.get('broker')} (epoch {ctrl.get('epoch')}), {st.get('partitions')} partitions, "
              f"{st.get('offline_count')} offline, {st.get('under_replicated_count')} under-replicated")
    if sb.engine in ("kafka", "kraft"):
        pids = sb.broker_pids
        print(f"  bootstrap servers {sb.bootstrap_servers}; broker pids "
              + ", ".join(f"{b}:{p}" for b, p in sorted(pids.items())))
        up = sb.info["kafka"].get("up", {})
        print(f"  up in {up.get('up_s')}s (brokers registered after {up.get('registered_s')}s); "
              f"{up.get('bytes', 0)} bytes produced (scale {sb.info['kafka']['data']['scale']:.3g})")
        if sb.kafka_sasl:
            print(f"  SASL_PLAINTEXT listeners {','.join(sorted(sb.kafka_endpoints('SASL_PLAINTEXT').values()))}: "
                  f"PLAIN user {sb.kafka_sasl['username']}, its password in sandbox.json (kafka.sasl.password)")
        if sb.kafka_ssl:
            c = sb.kafka_ssl
            print(f"  SSL listeners {','.join(sorted(sb.kafka_endpoints('SSL').values()))} (client certificates "
                  f"required): ssl.ca.location {c['ssl.ca.location']}, ssl.certificate.location "
                  f"{c['ssl.certificate.location']}, ssl.key.location {c['ssl.key.location']}, the key's password "
                  "in sandbox.json (kafka.ssl.client_key_password)")
    print(f"  {sb.dir / 'sandbox.json'} ({'bootstrap servers' if sb.engine == 'kraft' else 'connect string'}, pids), "
          f"{sb.dir / 'logdirs.json'} (partition sizes)")
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
    if sb.engine == "kraft":
        print(f"sandbox in {sb.dir} is down (KRaft JVMs killed: {len(report.get('brokers_killed', []))})")
        return 0
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
    if sb.engine == "kraft":
        print(f"sandbox {sb.dir}  KRaft {sb.bootstrap_servers}  settled: {'yes' if st.get('settled') else 'no'}")
        print(f"active controller: node {ctrl['broker']}" if ctrl else "active controller: none")
    else:
        print(f"sandbox {sb.dir}  ZooKeeper {sb.connect_string}  settled: {'yes' if st.get('settled') else 'no'}")
        print(f"controller: broker {ctrl['broker']} (epoch {ctrl['epoch']})" if ctrl else "controller: none")
    print("brokers:")
    for b in st["brokers"]:
        state = "shutting down" if b["shutting_down"] else "running" if b["running"] else b.get("state", "down")
        if b.get("fenced"):
            state += " (fenced)"
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


def _migrate(args: argparse.Namespace) -> int:
    from planner.sandbox import Sandbox

    sb = Sandbox(args.dir)
    report = sb.migrate(args.to, args.timeout, _broker_ids([args.brokers]) if args.brokers else None)
    steps = ", ".join(f"{k} {v}s" for k, v in report["steps"].items())
    print(f"sandbox {sb.dir}: migration phase {report['from']} -> {report['to']} ({steps})")
    return 0


def _wait(args: argparse.Namespace) -> int:
    from planner.sandbox import Sandbox

    st = Sandbox(args.dir).wait_settled(args.timeout)
    print(f"settled: {st.get('offline_count')} offline, {st.get('under_replicated_count')} under-replicated")
    return 0


def _workload(args: argparse.Namespace) -> int:
    import signal
    import threading
    import time

    from planner.sandbox.workload import Workload

    if args.duration is not None and not args.duration > 0:
        raise BadInput(f"--duration must be a positive number of seconds, got {args.duration:g}")
    topics = [t.strip() for t in args.topics.split(",") if t.strip()] if args.topics is not None else None
    if not args.verbose:
        # the client logs every lost connection and expired batch; the live line and the report count them
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
    w = Workload(args.dir, topics=topics, rate=args.rate, size=args.size, delivery_timeout=args.delivery_timeout,
                 samples=args.samples)
    report = Path(args.report) if args.report else \
        w.sandbox.dir / f"workload-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    if report.exists():
        raise BadInput(f"{report} exists; the workload never replaces a report (give another --report)")
    if not report.parent.is_dir():
        raise BadInput(f"{report.parent} is not a directory")
    done = threading.Event()
    previous = None

    def on_term(signum: int, frame: object) -> None:
        done.set()

    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, on_term)
    try:
        w.start()
        print(f"workload on {w.sandbox.dir}: {len(w.partitions)} partitions of {', '.join(w.topics)} at "
              f"{args.rate:g} msg/s ({args.size} B, acks=all, idempotent); Ctrl-C ends it", flush=True)
        deadline = time.monotonic() + args.duration if args.duration else None
        try:
            while not done.is_set():
                wait = args.every if deadline is None else min(args.every, deadline - time.monotonic())
                if wait <= 0 or done.wait(wait):
                    break
                print(_live_line(w.summary()), flush=True)
        except KeyboardInterrupt:
            print("stopping: waiting for the last acknowledgements, then auditing (Ctrl-C again aborts)",
                  flush=True)
        result = w.stop()
    except BaseException:
        w.abort()   # a second Ctrl-C while stopping, or a failure: no report, nothing left running
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    w.save(report)
    p, a = result["producer"], result["audit"]
    print(f"sent {p['sent']}, acknowledged {p['acked']}, failed {p['failed']}; audit read {a['read']}: lost "
          f"{a['lost']}, duplicated {a['duplicated']}, out of order {a['out_of_order']}; latency p50 "
          f"{result['latency_ms']['p50']} ms, p99 {result['latency_ms']['p99']} ms; offline intervals "
          f"{result['offline_intervals']}, under-min-ISR intervals {result['under_min_isr_intervals']}")
    for line in result["verdict"]["problems"]:
        print(f"  problem: {line}")
    ok = result["verdict"]["integrity"] and result["verdict"]["availability"]
    print(f"{'ok' if ok else 'NOT OK'}: report {report}")
    return 0 if ok else 1


def _live_line(s: dict[str, Any]) -> str:
    errors = sum(s["errors"].values())
    retried = sum(s["retried"].values())
    lat = f"p50 {s['p50_ms']} ms p99 {s['p99_ms']} ms" if s["p50_ms"] is not None else "no acks last second"
    off, under = s.get("offline_now", []), s.get("under_min_isr_now", [])
    return (f"{s['elapsed_s']:>7.1f}s  sent {s['sent']}  acked {s['acked']}  failed {errors}  retried {retried}  "
            f"consumed {s['consumed']}  dup {s['duplicated']}  ooo {s['out_of_order']}  {lat}  "
            f"offline {len(off)}{' ' + ','.join(off[:5]) if off else ''}  under-min-ISR {len(under)}"
            f"{' ' + ','.join(under[:5]) if under else ''}")
