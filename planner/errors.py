"""Error types that map to the CLI's exit codes (DESIGN.md: 0 done, 1 refused/not converged, 2 bad input)."""

from __future__ import annotations


class PlannerError(Exception):
    """Base class. `exit_code` is what `kplan` returns when this error ends a command."""

    exit_code = 1


class BadInput(PlannerError):
    """The user's input (arguments, files, connect string, snapshot) is wrong. Nothing was written."""

    exit_code = 2


class ZkUnavailable(BadInput):
    """ZooKeeper could not be reached (or authenticated to) within the time allowed."""


class NotAKafkaCluster(BadInput):
    """The connect string / chroot reaches ZooKeeper but holds no Kafka cluster."""


class CodecError(BadInput):
    """A znode's content does not match Kafka's format. The message names the path and the problem."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class KraftMigration(PlannerError):
    """The cluster is migrating to KRaft: ZooKeeper must not be written (and its state is not authoritative)."""


class SafetyRefusal(PlannerError):
    """A write was refused by a safety rule (stale plan, lock held, reassignment in flight...)."""
