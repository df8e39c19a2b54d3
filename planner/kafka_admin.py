"""The planner's one door to Kafka's own protocol (the Admin API), through kafka-python (pinned in
pyproject.toml). Everything else reads ZooKeeper; what ZooKeeper does not know comes through here. The
interface is narrow on purpose (kafka-kit's cluster interface is the model): KRaft clusters (issue 24) grow it
into a second cluster backend.

    security = KafkaSecurity.from_config({...})            # librdkafka keys: the Airflow Kafka connection's
    report = describe_log_dirs({1: "h1:9092", ...}, security, timeout=10)    # extra, or the CLI's options

`describe_log_dirs` asks every broker at its own endpoint (the brokers' ZooKeeper registrations give them:
`pick_endpoint`) for DescribeLogDirs (KIP-113; TotalBytes / UsableBytes since v4, KIP-827, Kafka 3.3), all
brokers at once, and never raises for one broker: each broker's outcome is recorded (answered, unreachable,
authentication failed, refused) so the caller can name it.

Why kafka-python and not Kafka's Java Admin or confluent-kafka (measured, README "Sizes from the brokers"):
confluent-kafka 2.16 (librdkafka) has no DescribeLogDirs at all (nor the reassignment APIs issue 24 needs);
the Java Admin covers everything but costs a JVM start and its jars on every snapshot host; kafka-python
speaks DescribeLogDirs v1-v5, SASL (PLAIN, SCRAM, GSSAPI, OAUTHBEARER) and SSL, is pure Python, already a
dependency, and decodes a 200-broker, 600,000-replica answer in well under a second.

Secrets: `KafkaSecurity` keeps the password and key password out of its repr; nothing here logs a config,
and kafka-python's own loggers are held at WARNING while a request runs.
"""

from __future__ import annotations

import logging
import re
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.errors import BadInput

log = logging.getLogger(__name__)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")
# librdkafka / Airflow Kafka connection keys this module understands; others (group.id, client.id, ...) are
# a consumer's or producer's and are ignored.
CONFIG_KEYS = {
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "bootstrap.servers",
}


@dataclass(frozen=True)
class KafkaSecurity:
    """How to talk to the brokers: the security protocol of the listener to use and its credentials."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    listener: str | None = None             # a listener name to use instead of the first of `protocol`

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise BadInput(f"Kafka security protocol must be one of {', '.join(PROTOCOLS)}, not {self.protocol!r}")
        if self.protocol.startswith("SASL"):
            if self.sasl_mechanism not in MECHANISMS:
                raise BadInput(f"{self.protocol} needs a SASL mechanism ({', '.join(MECHANISMS)}), got "
                               f"{self.sasl_mechanism!r}")
            if self.sasl_mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and not (
                    self.username and self.password is not None):
                raise BadInput(f"SASL {self.sasl_mechanism} needs a username and a password (the password from "
                               "the environment or the connection, never an argument)")

    @classmethod
    def from_config(cls, config: Mapping[str, Any], listener: str | None = None) -> KafkaSecurity:
        """From librdkafka-style keys: an Airflow connection of the Apache Kafka provider's type keeps exactly
        these in its extra ("Config Dict"), and `--kafka-config FILE` takes the same JSON object."""
        if not isinstance(config, Mapping):
            raise BadInput("Kafka client config must be a JSON object of librdkafka keys (security.protocol, ...)")
        c = {str(k): v for k, v in config.items()}
        ignored = sorted(k for k in c if k not in CONFIG_KEYS)
        if ignored:
            log.info("Kafka client config: ignoring keys the planner does not use: %s", ", ".join(ignored))
        algo = str(c.get("ssl.endpoint.identification.algorithm", "https") or "none").lower()
        return cls(protocol=str(c.get("security.protocol", "PLAINTEXT")).upper(),
                   sasl_mechanism=_opt(c.get("sasl.mechanism", c.get("sasl.mechanisms"))),
                   username=_opt(c.get("sasl.username")), password=_opt(c.get("sasl.password")),
                   ssl_cafile=_opt(c.get("ssl.ca.location")), ssl_certfile=_opt(c.get("ssl.certificate.location")),
                   ssl_keyfile=_opt(c.get("ssl.key.location")), ssl_key_password=_opt(c.get("ssl.key.password")),
                   ssl_check_hostname=algo != "none", listener=listener)

    def client_config(self) -> dict[str, Any]:
        """kafka-python connection settings (never logged). For SSL, one TLS context for every broker
        (`ssl_context`), built and checked here: a file that is missing or unreadable is a BadInput naming it."""
        cfg: dict[str, Any] = {"security_protocol": self.protocol}
        if self.protocol.startswith("SASL"):
            cfg.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.username,
                       sasl_plain_password=self.password)
        if self.protocol.endswith("SSL"):
            cfg.update(ssl_context=self.ssl_context(), ssl_check_hostname=self.ssl_check_hostname)
        return cfg

    def ssl_context(self) -> ssl.SSLContext:
        """The client's TLS context, as kafka-python builds one (TLS 1.2+, the CA of `ssl.ca.location`, else the
        system's; a client certificate and key when given), with each file checked: a bad one is a BadInput that
        names the file and the key, never the key's password."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = self.ssl_check_hostname
        if self.ssl_cafile:
            _readable("ssl.ca.location", self.ssl_cafile)
            try:
                ctx.load_verify_locations(self.ssl_cafile)
            except ssl.SSLError as e:
                raise BadInput(f"ssl.ca.location {self.ssl_cafile}: not a PEM CA certificate file "
                               f"({e.reason or e.__class__.__name__})") from None
        else:
            ctx.load_default_certs()
        if self.ssl_keyfile and not self.ssl_certfile:
            raise BadInput("ssl.key.location needs ssl.certificate.location (the client certificate of that key)")
        if self.ssl_certfile:
            _readable("ssl.certificate.location", self.ssl_certfile)
            if self.ssl_keyfile:
                _readable("ssl.key.location", self.ssl_keyfile)
            try:
                # a password callback: an encrypted key without ssl.key.password fails here instead of prompting
                ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, password=lambda: self.ssl_key_password or "")
            except ssl.SSLError:
                raise BadInput(f"the client certificate {self.ssl_certfile} and key {self.ssl_keyfile or '(in it)'} "
                               "could not be loaded: not PEM, not a matching pair, or the key is encrypted and "
                               "ssl.key.password is "
                               + ("wrong" if self.ssl_key_password else "not set")) from None
        if not self.ssl_check_hostname:
            log.warning("TLS host name verification is off (ssl.endpoint.identification.algorithm=none)")
        return ctx

    def describe(self) -> str:
        """For messages: protocol and mechanism and user, never a secret."""
        if self.protocol.startswith("SASL"):
            return f"{self.protocol} ({self.sasl_mechanism}, user {self.username})"
        return self.protocol


def _readable(key: str, path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise BadInput(f"{key} {path}: {e.strerror or e}") from None


def _opt(v: Any) -> str | None:
    return None if v is None or v == "" else str(v)


def pick_endpoint(endpoints: list[str], protocol_map: Mapping[str, str] | None, security: KafkaSecurity
                  ) -> str | None:
    """`host:port` of the broker's listener to use: the listener named by `security.listener`, else the first
    whose security protocol (the registration's listener_security_protocol_map) is `security.protocol`."""
    pmap = dict(protocol_map or {})
    for ep in endpoints:
        name, sep, hostport = ep.partition("://")
        if not sep:
            continue
        proto = pmap.get(name, name)
        if (security.listener and name == security.listener) or (not security.listener and proto == security.protocol):
            return hostport
    return None


@dataclass
class BrokerLogDirs:
    """One broker's answer, or why there is none."""

    broker: int
    endpoint: str | None
    status: str = "ok"              # ok | no-endpoint | unreachable | auth-failed | tls-failed | error
    error: str | None = None
    api_version: int | None = None
    dirs: list[dict[str, Any]] = field(default_factory=list)   # {dir, error, total_bytes, usable_bytes}
    # replicas, parallel: topic, partition, size, is_future (planner/kafka_log_dirs.py reads them as arrays)
    topics: list[str] = field(default_factory=list)
    partitions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    future: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


def _error_name(code: int) -> str | None:
    if not code:
        return None
    import kafka.errors as Errors

    return getattr(Errors.for_code(code), "message", None) or f"error code {code}"


def describe_log_dirs(endpoints: Mapping[int, str | None], security: KafkaSecurity, timeout: float = 10.0
                      ) -> dict[int, BrokerLogDirs]:
    """DescribeLogDirs (all topics) from every broker at once; each broker's outcome, never an exception for
    one broker. `endpoints`: broker id -> host:port (None: the broker has no listener of that protocol)."""
    from kafka.net.manager import KafkaConnectionManager
    from kafka.net.selector import NetworkSelector

    from planner import kafka_log_dirs

    out = {b: BrokerLogDirs(b, ep) for b, ep in endpoints.items()}
    targets = [(b, ep) for b, ep in sorted(endpoints.items()) if ep]
    for b, ep in endpoints.items():
        if not ep:
            out[b].status, out[b].error = "no-endpoint", f"no {security.listener or security.protocol} listener " \
                                                          "in its registration"
    if not targets:
        return out
    quiet = _QuietKafkaLogs()
    cfg = {"request_timeout_ms": int(timeout * 1000), "socket_connection_setup_timeout_ms": int(timeout * 1000),
           "socket_connection_setup_timeout_max_ms": int(timeout * 1000), "receive_message_max_bytes": 1 << 30,
           "reconnect_backoff_ms": 50, "client_id": "kplan", **security.client_config()}
    with quiet:
        net = NetworkSelector(**cfg)
        manager = KafkaConnectionManager(net, bootstrap_servers=[ep for _, ep in targets], **cfg)
        deadline = time.monotonic() + timeout

        # kafka-python shuffles its bootstrap list: find each broker's node by its host:port
        nodes = {f"{n.host}:{n.port}": n.node_id for n in manager.cluster.bootstrap_brokers()}

        async def one(b: int, ep: str) -> None:
            rec = out[b]
            node = nodes.get(ep) or nodes.get(_normal(ep))
            conn = None
            try:
                # no metadata refresh on a failed connection: that would bootstrap, and the bootstrap closes
                # the connections other brokers' requests are waiting on
                conn = manager.get_connection(node, timeout_ms=max(1, int((deadline - time.monotonic()) * 1000)),
                                              refresh_metadata_on_err=False)
                await conn
            except Exception as e:  # noqa: BLE001 - every failure of one broker is that broker's outcome
                rec.status, rec.error = _classify(e, manager.auth_failure(node), security)
                if rec.status == "unreachable" and security.protocol.startswith("SASL") and conn is not None \
                        and conn.broker_version_data is not None:
                    # ApiVersions answered, then the connection closed during SASL: Kafka's answer to rejected
                    # credentials (SaslServerAuthenticator closes the channel after a failed authentication).
                    # Kafka's SaslAuthenticate error answer comes just before that close; when both are in the
                    # socket at one read, kafka-python 3.0.12 drops the answer (net/transport.py
                    # _read_from_sock: `if err: return self.abort(error=err)` discards the bytes read with the
                    # EOF), so its reason is shown only when it was read alone (7 of 12 tries here had both)
                    rec.status = "auth-failed"
                    rec.error = (f"the broker closed the connection during SASL {security.sasl_mechanism} "
                                 "authentication, as Kafka does when it rejects the credentials")
                return
            try:
                ans = await conn.send_request(kafka_log_dirs.request())
            except Exception as e:  # noqa: BLE001
                rec.status, rec.error = "error", _text(e)
                return
            rec.api_version = ans.api_version
            if ans.error_code:
                rec.status, rec.error = "error", f"DescribeLogDirs answered {_error_name(ans.error_code)}"
                return
            topics, parts, sizes, future = [], [], [], []
            for d in ans.dirs:
                rec.dirs.append({"dir": d.log_dir, "error": _error_name(d.error_code),
                                 "total_bytes": int(d.total_bytes), "usable_bytes": int(d.usable_bytes)})
                if d.error_code:
                    continue
                topics.append(np.repeat(np.asarray(d.topics, dtype=object), d.counts))
                parts.append(d.partitions)
                sizes.append(d.sizes)
                future.append(d.future)
            if topics:
                rec.topics = np.concatenate(topics).tolist()
                rec.partitions = np.concatenate(parts)
                rec.sizes = np.concatenate(sizes)
                rec.future = np.concatenate(future)

        async def all_of() -> None:
            tasks = [manager.call_soon(one, b, ep) for b, ep in targets]
            for (b, _), t in zip(targets, tasks, strict=True):
                try:
                    await t
                except Exception as e:  # noqa: BLE001 - a bug in recording one broker's outcome: say so
                    out[b].status, out[b].error = "error", _text(e)

        try:
            net.run(all_of)
        finally:
            manager.close()
            if hasattr(net, "close"):
                net.close()
    return out


def _normal(ep: str) -> str:
    host, _, port = ep.rpartition(":")
    return f"{host.strip('[]')}:{int(port)}" if port.isdigit() else ep


def _text(e: BaseException) -> str:
    s = str(e).strip() or type(e).__name__
    return s.splitlines()[0][:300]


def _classify(e: BaseException, auth: BaseException | None, security: KafkaSecurity) -> tuple[str, str]:
    import kafka.errors as Errors

    err = auth or e
    auth_types = tuple(t for t in (getattr(Errors, n, None) for n in (
        "SaslAuthenticationFailedError", "AuthenticationFailedError", "UnsupportedSaslMechanismError",
        "IllegalSaslStateError")) if isinstance(t, type))
    if isinstance(err, auth_types) or "Authentication" in type(err).__name__:
        # kafka-python's text repeats the class: "[Error 58] SaslAuthenticationFailedError:
        # SaslAuthenticationFailedError: Authentication failed: ..."; Kafka's own reason is what follows
        return "auth-failed", re.sub(r"^(\[Error \d+\] )?(\w+Error: )+(?=\S)", "", _text(err))
    tls = _tls_error(err, security)
    if tls is not None:
        return "tls-failed", tls
    return "unreachable", _text(err)


def _tls_error(err: BaseException, security: KafkaSecurity) -> str | None:
    """What went wrong in a TLS handshake, in words (the SSL error may sit in the exception's cause or args).
    A broker that will not take the client's certificate answers with a TLS alert: bad_certificate (TLS 1.2),
    certificate_required (TLS 1.3), unknown_ca (Java's SSLEngine for a certificate of an unknown CA)."""
    seen: list[BaseException] = []
    e: BaseException | None = err
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__ or next((a for a in getattr(e, "args", ()) if isinstance(a, BaseException)),
                                                 None)
    found = next((x for x in seen if isinstance(x, ssl.SSLError)), None)
    text = " ".join(_text(x) for x in seen).lower()
    if found is None and "ssl" not in text and "certificate" not in text and "tls" not in text:
        return None
    if isinstance(found, ssl.SSLCertVerificationError):
        why = found.verify_message or found.reason or "certificate verify failed"
        return (f"the broker's TLS certificate was not accepted ({why}): check ssl.ca.location (the CA that "
                "signed the brokers' certificates) and the host name in the certificate")
    reason = str((found.reason if found is not None else None) or _text(seen[-1]))
    alert = reason.upper()
    if any(a in alert for a in ("ALERT_BAD_CERTIFICATE", "ALERT_CERTIFICATE_REQUIRED", "ALERT_UNKNOWN_CA",
                                "ALERT_CERTIFICATE_UNKNOWN", "ALERT_HANDSHAKE_FAILURE")):
        if not security.ssl_certfile:
            return (f"the broker requires a client certificate (it answered {reason}): set "
                    "ssl.certificate.location and ssl.key.location")
        return (f"the broker did not accept the client certificate {security.ssl_certfile} (it answered "
                f"{reason}): is it signed by a CA in the brokers' truststore, and still valid?")
    return f"TLS handshake failed ({reason})"


class _QuietKafkaLogs:
    """kafka-python logs connection failures at ERROR, and at DEBUG every request it sends, SASL tokens (the
    password) included. The planner reports each broker's outcome itself, so while it talks to the brokers
    kafka-python's loggers, children included whatever level they were given, say nothing."""

    NAMES = ("kafka", "kafka.net", "kafka.net.connection", "kafka.net.transport", "kafka.net.manager",
             "kafka.net.sasl", "kafka.net.sasl.plain", "kafka.net.sasl.scram", "kafka.protocol",
             "kafka.protocol.parser", "kafka.cluster")

    def __enter__(self) -> None:
        self.saved = []
        for name in self.NAMES:
            lg = logging.getLogger(name)
            self.saved.append((lg, lg.level, lg.disabled))
            lg.setLevel(logging.CRITICAL + 1)
            lg.disabled = True

    def __exit__(self, *exc: object) -> None:
        for lg, level, disabled in self.saved:
            lg.setLevel(level)
            lg.disabled = disabled
