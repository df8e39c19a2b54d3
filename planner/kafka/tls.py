"""Throwaway TLS material for a sandbox's SSL listener, made with the JDK's keytool when the sandbox starts
(nothing of it is committed, and it lives only in the sandbox's folder):

- a CA (self-signed, `bc:c`), valid for 2 days;
- the brokers' keystore (PKCS12): one key pair for every broker of the sandbox, its certificate signed by the
  CA for `127.0.0.1` and `localhost` (subjectAltName, so clients verify the host name), with the CA in its
  chain;
- the brokers' truststore (PKCS12, the CA): the SSL listener requires client certificates
  (`ssl.client.auth=required`), as production mTLS listeners do;
- for clients: the CA as PEM (`ssl.ca.location`), a client certificate signed by the CA (PEM,
  `ssl.certificate.location`) and its private key as an encrypted PEM (`ssl.key.location` +
  `ssl.key.password`). keytool cannot write a private key out, so `openssl pkcs12` converts that one key.

Every password is random, reaches keytool and openssl through the environment (`-storepass:env`,
`-passin env:`), never a command line, and is kept only in the sandbox's private sandbox.json and in the
brokers' 0600 server.properties.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

from planner.errors import PlannerError
from planner.zkserver import java_executable

SAN = "ip:127.0.0.1,dns:localhost"
VALID_DAYS = "2"


class TlsError(PlannerError):
    """keytool or openssl failed while making a sandbox's TLS material."""


def keytool() -> str:
    java = Path(java_executable())
    beside = java.parent / "keytool"
    found = str(beside) if beside.exists() else shutil.which("keytool")
    if not found:
        raise TlsError("keytool not found (it comes with the JDK that runs the brokers)")
    return found


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        # the passwords are only in `env`: keytool and openssl never print them
        raise TlsError(f"{Path(argv[0]).name} {argv[1] if len(argv) > 1 else ''} failed: "
                       f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")


def make(directory: Path) -> dict[str, Any]:
    """Write the CA, the brokers' keystore and truststore and the client's PEM files into `directory`; returns
    their paths and passwords (for the sandbox's private record)."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    kt = [keytool(), "-J-XX:TieredStopAtLevel=1", "-J-Xshare:auto"]
    store_pw, trust_pw, key_pw = (secrets.token_hex(12) for _ in range(3))
    env = {"KPLAN_TLS_STORE": store_pw, "KPLAN_TLS_TRUST": trust_pw, "KPLAN_TLS_KEY": key_pw}
    store = ["-storetype", "PKCS12", "-storepass:env", "KPLAN_TLS_STORE"]
    ec = ["-keyalg", "EC", "-groupname", "secp256r1", "-validity", VALID_DAYS]
    d = directory
    for f in ("ca.p12", "broker.p12", "client.p12", "truststore.p12"):
        (d / f).unlink(missing_ok=True)
    steps = [
        [*kt, "-genkeypair", "-alias", "ca", *ec, "-dname", "CN=kplan-sandbox-ca", "-ext", "bc:c",
         "-keystore", "ca.p12", *store],
        [*kt, "-exportcert", "-rfc", "-alias", "ca", "-keystore", "ca.p12", *store, "-file", "ca.pem"],
    ]
    for who, cn, ext in (("broker", "localhost", ["-ext", f"SAN={SAN}"]), ("client", "kplan", [])):
        steps += [
            [*kt, "-genkeypair", "-alias", who, *ec, "-dname", f"CN={cn}", "-keystore", f"{who}.p12", *store],
            [*kt, "-certreq", "-alias", who, "-keystore", f"{who}.p12", *store, "-file", f"{who}.csr"],
            [*kt, "-gencert", "-alias", "ca", "-keystore", "ca.p12", *store, "-infile", f"{who}.csr", "-outfile",
             f"{who}.pem", "-rfc", "-validity", VALID_DAYS, *ext],
        ]
    steps += [
        [*kt, "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem", "-keystore", "broker.p12", *store],
        [*kt, "-importcert", "-noprompt", "-alias", "broker", "-file", "broker.pem", "-keystore", "broker.p12",
         *store],
        [*kt, "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem", "-keystore", "truststore.p12",
         "-storetype", "PKCS12", "-storepass:env", "KPLAN_TLS_TRUST"],
        ["openssl", "pkcs12", "-in", "client.p12", "-passin", "env:KPLAN_TLS_STORE", "-nocerts", "-out",
         "client-key.pem", "-passout", "env:KPLAN_TLS_KEY"],
    ]
    if not shutil.which("openssl"):
        raise TlsError("openssl not found (it writes the client's private key as PEM for the Python client)")
    for argv in steps:
        _run(argv, env, d)
    for f in d.iterdir():
        f.chmod(0o600)
    for f in ("ca.p12", "client.p12", "broker.csr", "client.csr"):
        (d / f).unlink(missing_ok=True)        # the CA's key and the client's store: nothing needs them again
    return {"dir": str(d), "keystore": str(d / "broker.p12"), "keystore_password": store_pw,
            "truststore": str(d / "truststore.p12"), "truststore_password": trust_pw,
            "ca": str(d / "ca.pem"), "client_cert": str(d / "client.pem"), "client_key": str(d / "client-key.pem"),
            "client_key_password": key_pw}


def broker_settings(tls: dict[str, Any]) -> dict[str, str]:
    """server.properties entries of the SSL listener (named `SSL`): keystore, truststore, client certificates
    required (Kafka's `listener.name.<name>.` prefix, KIP-103)."""
    p = "listener.name.ssl."
    return {p + "ssl.keystore.type": "PKCS12", p + "ssl.keystore.location": tls["keystore"],
            p + "ssl.keystore.password": tls["keystore_password"], p + "ssl.key.password": tls["keystore_password"],
            p + "ssl.truststore.type": "PKCS12", p + "ssl.truststore.location": tls["truststore"],
            p + "ssl.truststore.password": tls["truststore_password"], p + "ssl.client.auth": "required"}


def client_config(tls: dict[str, Any]) -> dict[str, str]:
    """librdkafka-style keys (an Airflow Kafka connection's extra, `kplan snapshot --kafka-config`) for the
    sandbox's SSL listener; the key password among them."""
    return {"security.protocol": "SSL", "ssl.ca.location": tls["ca"], "ssl.certificate.location": tls["client_cert"],
            "ssl.key.location": tls["client_key"], "ssl.key.password": tls["client_key_password"]}
