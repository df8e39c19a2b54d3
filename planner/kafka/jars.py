"""Apache Kafka's jars from Maven Central, fetched once into a cache outside the repository.

`ensure_jars("3.9.2")` returns a `KafkaJars` whose `lib` folder holds `kafka_2.13`, `kafka-tools` and their
runtime closure. The first call runs Maven on the pom shipped inside this package (`pom.xml`, package data,
so a non-editable install has it too); later calls find the folder complete (every jar the manifest lists,
with its size) and run nothing. When the folder is incomplete, Maven runs offline (`-o`) first, which
succeeds whenever the local Maven repository already holds everything, and only then online.

Cache: `$KPLAN_KAFKA_CACHE/<version>/` (default `~/.cache/kplan/kafka/<version>/`): `lib/*.jar` and
`jars.json` (the manifest). A fetch writes into a temporary folder and renames it, under a file lock, so
parallel test processes and CLI calls neither collide nor see half a cache.

A failed fetch raises `KafkaJarsError` carrying Maven's own error lines: never a silent fallback.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from planner.errors import BadInput, PlannerError
from planner.kafka import DEFAULT_VERSION

log = logging.getLogger("planner.kafka.jars")

CACHE_ENV = "KPLAN_KAFKA_CACHE"
MANIFEST = "jars.json"
VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
# Where Kafka's reassign tool lives: kafka-tools since 3.7 (KAFKA-14595), the core jar before.
REASSIGN_CLASSES = ("org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "kafka.admin.ReassignPartitionsCommand")


class KafkaJarsError(PlannerError):
    """Kafka's jars could not be fetched (Maven missing, Maven Central unreachable, unknown version...)."""


@dataclass(frozen=True)
class KafkaJars:
    version: str
    root: Path           # <cache>/<version>
    manifest: dict

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    @property
    def classpath(self) -> str:
        return f"{self.lib}/*"

    @property
    def reassign_class(self) -> str:
        return self.manifest["classes"]["reassign"]

    @property
    def fetched_by(self) -> str:
        return self.manifest.get("fetched_by", "")


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path.home() / ".cache" / "kplan" / "kafka"


def parse_version(version: str, mode: str = "zookeeper") -> tuple[int, int, int]:
    """The version as a tuple, refused (BadInput) unless it runs in `mode`: "zookeeper" (2.4 - 3.9, with
    KIP-455 reassignment), "kraft" (3.7+: KIP-853's StorageTool and the KRaft admin APIs the planner reads; the
    sandbox's kraft engine) or "any" (a version Maven may fetch)."""
    m = VERSION_RE.match(str(version).strip())
    if not m:
        raise BadInput(f"Kafka version {version!r} must look like 3.9.2 (major.minor.patch)")
    v = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if mode == "zookeeper" and not (2, 4, 0) <= v < (4, 0, 0):
        raise BadInput(f"Kafka {version} has no ZooKeeper mode with KIP-455 reassignment (2.4 - 3.9 do)")
    if mode == "kraft" and v < (3, 7, 0):
        raise BadInput(f"Kafka {version} is too old for the kraft engine (3.7 or later; 4.x has no ZooKeeper)")
    if mode == "any" and not (2, 4, 0) <= v:
        raise BadInput(f"Kafka {version} is older than 2.4, which the planner does not support")
    return v


def pom_path() -> Path:
    return Path(str(resources.files("planner.kafka").joinpath("pom.xml")))


def _complete(root: Path) -> dict | None:
    """The manifest when every jar it lists is present with its recorded size, else None."""
    try:
        manifest = json.loads((root / MANIFEST).read_text())
        jars = manifest["jars"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    lib = root / "lib"
    for name, size in jars.items():
        try:
            if (lib / name).stat().st_size != size:
                return None
        except OSError:
            return None
    return manifest if jars else None


def cached(version: str = DEFAULT_VERSION) -> KafkaJars | None:
    """The cached jars of this version if the cache is complete (no Maven, no network), else None."""
    parse_version(version, "any")
    root = cache_root() / version
    manifest = _complete(root)
    if manifest and needs_log4j2_binding(version) and not any(j.startswith("log4j-slf4j") for j in manifest["jars"]):
        return None      # fetched without the logging binding (before pom.xml had it): fetch again
    return KafkaJars(version, root, manifest) if manifest else None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def maven_executable() -> str:
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaJarsError("mvn not found: Kafka's jars come from Maven Central through Maven "
                             "(`make setup` installs it with apt: .ci/ensure-maven)")
    return mvn


def needs_log4j2_binding(version: str) -> bool:
    """Kafka 4.x logs through log4j 2 and its Maven artifacts lack the slf4j binding (pom.xml's profile)."""
    return parse_version(version, "any") >= (4, 0, 0)


def maven_command(version: str, out: Path, offline: bool) -> list[str]:
    cmd = [maven_executable(), "-B", "-q", "-f", str(pom_path()), f"-Dkafka.version={version}",
           "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={out}"]
    if needs_log4j2_binding(version):
        cmd.insert(-3, "-Dkplan.log4j2=true")
    if offline:
        cmd.insert(2, "-o")
    return cmd


def _maven_errors(output: str) -> str:
    """Maven's own error lines (with -q, Maven prints only errors); the whole output if none are tagged."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", output)
    lines = [ln for ln in text.splitlines() if ln.startswith("[ERROR]")]
    return "\n".join(lines[:30]) if lines else text.strip()[-4000:]


def _find_class(lib: Path, candidates: tuple[str, ...]) -> str:
    paths = {c: c.replace(".", "/") + ".class" for c in candidates}
    for jar in sorted(lib.glob("*.jar")):
        if not (jar.name.startswith("kafka-tools") or jar.name.startswith("kafka_")):
            continue
        with zipfile.ZipFile(jar) as z:
            names = set(z.namelist())
        for c in candidates:
            if paths[c] in names:
                return c
    raise KafkaJarsError(f"none of {', '.join(candidates)} is in the jars under {lib}")


def ensure_jars(version: str = DEFAULT_VERSION, timeout: float = 900) -> KafkaJars:
    """The jars of this Kafka version, fetched with Maven if the cache is not complete."""
    parse_version(version, "any")
    hit = cached(version)
    if hit is not None:
        return hit
    root = cache_root() / version
    with _locked(cache_root() / f".{version}.lock"):
        hit = cached(version)  # another process may have fetched it while we waited
        if hit is not None:
            return hit
        tmp = cache_root() / f".{version}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "lib").mkdir(parents=True)
        started = time.monotonic()
        attempts: list[str] = []
        fetched_by = None
        for offline in (True, False):
            cmd = maven_command(version, tmp / "lib", offline)
            log.info("fetching Kafka %s jars: %s", version, " ".join(cmd))
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(tmp))
            except subprocess.TimeoutExpired:
                attempts.append(f"{' '.join(cmd)}: timed out after {timeout:.0f}s")
                continue
            if done.returncode == 0 and any((tmp / "lib").glob("kafka_*.jar")):
                fetched_by = " ".join(cmd)
                break
            attempts.append(f"$ {' '.join(cmd)}\n(exit {done.returncode})\n{_maven_errors(done.stdout + done.stderr)}")
        if fetched_by is None:
            shutil.rmtree(tmp, ignore_errors=True)
            raise KafkaJarsError(f"could not fetch Apache Kafka {version} from Maven Central; Maven said:\n"
                                 + "\n".join(attempts[-1:]))
        jars = {p.name: p.stat().st_size for p in sorted((tmp / "lib").glob("*.jar"))}
        manifest = {"version": version, "jars": jars, "fetched_by": fetched_by,
                    "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "seconds": round(time.monotonic() - started, 1),
                    "classes": {"reassign": _find_class(tmp / "lib", REASSIGN_CLASSES), "broker": "kafka.Kafka"}}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(tmp, root)
        log.info("Kafka %s: %d jars in %s (%.1fs)", version, len(jars), root / "lib", manifest["seconds"])
    hit = cached(version)
    if hit is None:
        raise KafkaJarsError(f"the Kafka {version} jar cache in {root} is incomplete right after the fetch")
    return hit
