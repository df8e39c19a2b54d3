"""Kafka's own command-line tools, run from the fetched jars (what `bin/kafka-*.sh` run).

`reassign(jars, bootstrap, file, "execute" | "verify")` is `kafka-reassign-partitions.sh`: an operator's
fallback is always Kafka's own tool on our reassignment.json / rollback.json, and the tests prove it accepts
them.
"""

from __future__ import annotations

import logging
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from planner.errors import PlannerError
from planner.kafka.jars import KafkaJars
from planner.zkserver import java_executable

log = logging.getLogger("planner.kafka.tools")

TOOLS_LOG4J = """log4j.rootLogger=WARN, E
log4j.appender.E=org.apache.log4j.ConsoleAppender
log4j.appender.E.Target=System.err
log4j.appender.E.layout=org.apache.log4j.PatternLayout
log4j.appender.E.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


class ToolError(PlannerError):
    """A Kafka tool exited with an error."""


@dataclass
class ToolResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_tool(jars: KafkaJars, main_class: str, args: list[str], timeout: float = 120,
             heap_mb: int = 256, check: bool = True) -> ToolResult:
    with tempfile.NamedTemporaryFile("w", suffix=".properties", prefix="kplan-tools-log4j-", delete=False) as f:
        f.write(TOOLS_LOG4J)
        cfg = f.name
    cmd = [java_executable(), f"-Xmx{heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           f"-Dlog4j.configuration=file:{cfg}", "-cp", jars.classpath, main_class, *args]
    log.info("running %s %s", main_class, " ".join(args))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise ToolError(f"{main_class} did not finish within {timeout:.0f}s") from e
    finally:
        Path(cfg).unlink(missing_ok=True)
    res = ToolResult(cmd, done.returncode, done.stdout, done.stderr)
    if check and done.returncode != 0:
        raise ToolError(f"{main_class} {' '.join(args)} exited with {done.returncode}:\n"
                        f"{(done.stdout + done.stderr).strip()[-3000:]}")
    return res


def reassign(jars: KafkaJars, bootstrap: str, reassignment_file: Path | str, action: str,
             timeout: float = 120, extra: list[str] | None = None) -> ToolResult:
    """kafka-reassign-partitions.sh --bootstrap-server B --reassignment-json-file F --execute|--verify."""
    if action not in ("execute", "verify"):
        raise ValueError(action)
    args = ["--bootstrap-server", bootstrap, "--reassignment-json-file", str(reassignment_file), f"--{action}",
            *(extra or [])]
    return run_tool(jars, jars.reassign_class, args, timeout=timeout)


_DONE = re.compile(r"Reassignment of partition (\S+) is completed\.")
_LEFT = re.compile(r"Reassignment of partition (\S+) is still in progress\.")
_ELSE = re.compile(r"There is no active reassignment of partition (\S+), but replica set is")


def verify_status(output: str) -> dict[str, str]:
    """Per partition, what `--verify` said (ReassignPartitionsCommand's wording): 'completed', 'in progress',
    or 'different' (no reassignment running, but the replicas are not the file's)."""
    out: dict[str, str] = {}
    for rx, state in ((_DONE, "completed"), (_LEFT, "in progress"), (_ELSE, "different")):
        for m in rx.finditer(output):
            out[m.group(1)] = state
    return out


# kafka-topics.sh: kafka-tools since 3.5 (KAFKA-14592), the core jar before.
TOPIC_CLASSES = ("org.apache.kafka.tools.TopicCommand", "kafka.admin.TopicCommand")


def topic_class(jars: KafkaJars) -> str:
    from planner.kafka.jars import _find_class

    return _find_class(jars.lib, TOPIC_CLASSES)


def create_topic(jars: KafkaJars, bootstrap: str, name: str, assignment: list[list[int]],
                 config: dict[str, str] | None = None, timeout: float = 120) -> ToolResult:
    """kafka-topics.sh --bootstrap-server B --create --topic T --replica-assignment 2:3,4:2 [--config k=v]:
    a topic with this exact assignment, created the way operators create one (Kafka's CreateTopics through
    the controller; every partition must have the same number of replicas, as Kafka requires)."""
    spec = ",".join(":".join(str(b) for b in replicas) for replicas in assignment)
    args = ["--bootstrap-server", bootstrap, "--create", "--topic", name, "--replica-assignment", spec]
    for k, v in (config or {}).items():
        args += ["--config", f"{k}={v}"]
    return run_tool(jars, topic_class(jars), args, timeout=timeout)
