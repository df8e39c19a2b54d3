"""Arguments shared by several commands: the cluster (connect string, credentials), rates, broker lists, and the
progress line."""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any

from planner.errors import BadInput


def add_zk(p: argparse.ArgumentParser, kraft: bool = False) -> None:
    """--zk (and its credentials); with `kraft`, also --bootstrap-server and the --kafka-* security options (a plan
    made from a KRaft snapshot is applied, verified and cancelled through the Admin API: docs/KRAFT.md)."""
    p.add_argument("--zk", required=not kraft, metavar="HOST:PORT[/chroot]",
                   help="ZooKeeper connect string, with Kafka's chroot if it has one (e.g. zk1:2181/kafka)"
                   + ("; or --bootstrap-server for a KRaft cluster" if kraft else ""))
    if kraft:
        p.add_argument("--bootstrap-server", dest="bootstrap", metavar="HOST:PORT[,HOST:PORT...]",
                       help="a KRaft cluster's brokers (a plan made from a KRaft snapshot): the Admin API only, "
                       "fenced through the __kplan topic; security from --kafka-config / --kafka-*")
        add_kafka(p)
    p.add_argument("--zk-auth-env", metavar="VAR",
                   help="environment variable holding digest credentials user:password "
                   "(default: KPLAN_ZK_AUTH when set)")
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for ZooKeeper to answer the connection (default 10)")


def add_kafka(p: argparse.ArgumentParser, lease: bool = True) -> None:
    """The --kafka-* security options of a KRaft cluster (with --bootstrap-server), and the fence's --lease."""
    k = p.add_argument_group("KRaft (with --bootstrap-server)")
    k.add_argument("--kafka-config", metavar="FILE",
                   help="JSON object of librdkafka-style client keys, as an Airflow Kafka connection's extra")
    k.add_argument("--kafka-security-protocol", choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
    k.add_argument("--kafka-sasl-mechanism", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    k.add_argument("--kafka-sasl-username", metavar="USER")
    k.add_argument("--kafka-password-env", metavar="VAR", default="KPLAN_KAFKA_PASSWORD",
                   help="environment variable holding the SASL password (default KPLAN_KAFKA_PASSWORD)")
    k.add_argument("--kafka-ssl-key-password-env", metavar="VAR", default="KPLAN_KAFKA_SSL_KEY_PASSWORD")
    k.add_argument("--kafka-listener", metavar="NAME", help=argparse.SUPPRESS)
    k.add_argument("--kafka-timeout", type=float, default=10.0, metavar="S",
                   help="seconds for the brokers to answer (default 10)")
    if lease:
        k.add_argument("--lease", type=float, default=30.0, metavar="S",
                       help="the one-writer fence's lease: Admin writes only within S seconds of the last "
                       "committed transition; a writer taking over from one that did not release waits S first "
                       "(default 30)")


def cluster(args: argparse.Namespace) -> dict[str, Any]:
    """The request fields naming the cluster: zk, auth and timeout, or bootstrap, kafka, kafka_timeout, lease."""
    from planner import zk as zkmod

    bootstrap = getattr(args, "bootstrap", None)
    if (args.zk is None) == (bootstrap is None):
        raise BadInput("give either --zk HOST:PORT[/chroot] (a ZooKeeper-mode cluster) or --bootstrap-server "
                       "HOST:PORT[,...] (a KRaft cluster), " + ("not both" if args.zk else "one of them"))
    if bootstrap is None:
        return {"zk": args.zk, "auth": zkmod.auth_from_env(args.zk_auth_env), "timeout": args.connect_timeout}
    from planner.commands.snapshot import kafka_from_args

    return {"zk": None, "bootstrap": bootstrap, "kafka": kafka_from_args(args), "kafka_timeout": args.kafka_timeout,
            "lease": args.lease}


def rate(text: str) -> int:
    """Bytes per second: 50000000, 50MB, 50MiB (optionally followed by /s)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)(i?b)?(/s)?\s*", text, re.IGNORECASE)
    if m and int(m.group(1)) == 0:
        raise argparse.ArgumentTypeError("a throttle of 0 would stall the copy (to copy without a throttle, say "
                                         "--no-throttle)")
    if not m or int(m.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate in bytes/s (e.g. 50000000, 50MB, 40MiB)")
    base = 1024 if (m.group(3) or "").lower() == "ib" else 1000
    return int(m.group(1)) * base ** " kmgt".index((m.group(2) or " ").lower())



# A library message names a request's option by its field; the command line says the flag that sets it (whole
# phrases, so a field named in another sense stays as it is; tests/test_layering.py checks each is still said).
OPTIONS = {
    "a lower max_concurrent_per_broker": "a lower --max-concurrent-per-broker",
    "plan with rack_aware=False": "plan with rack_aware off (--no-rack-aware)",
    "Snapshot anyway with partial_sizes": "Snapshot anyway with --partial-sizes",
    "a sizes file (sizes) or sizes_from=\"none\"": "--sizes FILE or --no-sizes",
    "(kafka security settings)": "(connection or --kafka-* options)",
    "credentials user:password (auth)": "credentials user:password (auth; kplan reads them from $KPLAN_ZK_AUTH or "
                                        "the variable its --zk-auth-env names)",
    "records folder (out)": "folder (--out)",
    "(max_moves / max_bytes)": "(--max-moves / --max-bytes)",
}
_ON_PLAN = ("apply", "cancel", "verify", "roll")


def flags(text: str) -> str:
    """A library message with each option it names as the command line's flag."""
    for field, flag in OPTIONS.items():
        text = text.replace(field, flag)
    return text


def command(step: Any, args: argparse.Namespace) -> str:
    """A next step (errors.NextStep) as the command line that runs it on the same cluster (and plan)."""
    zk = getattr(args, "zk", None) or "ZK"
    ids = ",".join(map(str, step.brokers))
    where = f"--bootstrap-server {args.bootstrap}" if getattr(args, "bootstrap", None) else f"--zk {zk}"
    if step.step in _ON_PLAN:
        return f"`kplan {step.step} {where} --plan {getattr(args, 'plan', None) or 'P'}`"
    if step.step == "maintenance carry":
        return f"`kplan maintenance carry --zk {zk} --bootstrap-server {getattr(args, 'bootstrap', None) or 'HOST:PORT'}`"
    if step.step == "follow-up drain":
        return (f"kplan snapshot --zk {zk} --out S2 && kplan plan drain --snapshot S2 --brokers {ids} --out P2, review "
                "it, then kplan apply and kplan verify P2")
    return f"`kplan {step.step}" + (f" --brokers {ids}`" if ids else "`")


def said(text: str, next_steps: Any, args: argparse.Namespace) -> str:
    """A library message (its options as flags) followed by its next steps (errors.NextStep) as the command lines
    that run them on the same cluster and plan: "text. `kplan cancel --zk Z --plan P` waits for it; ..."."""
    text = flags(text)
    if not next_steps:
        return text
    return text + ". " + "; ".join(f"{command(s, args)} {s.does}" for s in next_steps)


def broker_list(text: str) -> list[int]:
    """--brokers 1,2,3 -> [1, 2, 3] (plan drain / return / restart, maintenance clear)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise BadInput("--brokers is empty: name at least one broker id")
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise BadInput(f"--brokers {text!r}: broker ids are integers, comma separated") from None


class ProgressLine:
    """The terminal's progress line: rewritten in place on a terminal, one line every `every` s otherwise."""

    def __init__(self, stream: Any = None, every: float = 10.0):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every
        self._last = 0.0
        self._key: Any = None
        self._width = 0
        self.state: str | None = None   # the state last shown (the apply's signal handler asks)

    def __call__(self, p: Any) -> None:
        from planner.execution.progress import Progress, line

        text = line(Progress(**p.detail)) if getattr(p, "detail", None) else p.message
        self.state = (getattr(p, "detail", None) or {}).get("state")
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
            self.stream.flush()
            return
        detail = getattr(p, "detail", None) or {}
        key = (detail.get("state"), detail.get("unit"))
        now = time.monotonic()
        if key != self._key or now - self._last >= self.every:
            self._key, self._last = key, now
            print(text, file=self.stream, flush=True)

    def end(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
