"""The one narrow interface between a snapshot and a cluster backend (kafka-kit's `kafkazk.Handler` is the
model: one interface, an implementation per metadata store).

    reader: ClusterReader = ZkClusterReader(...)        # ZooKeeper mode: planner.snapshot
    reader: ClusterReader = AdminClusterReader(...)     # KRaft, Admin API only: planner.admin_reader
    read = reader.read_cluster(say)                     # frozen records (planner.snapshot_reader)
    tables = snapshot_assembly.assemble(read, lenient)  # pure: the same tables from either backend

Everything after the read (assembly, sizes from DescribeLogDirs, health, the manifest, plan, risk) takes a
`ClusterRead` and never asks which backend produced it; the manifest's `source.backend` records it for the
steps that must differ (a KRaft apply is refused until the Admin API writer exists: docs/KRAFT.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from planner.snapshot_assembly import ClusterRead

Progress = Callable[[str], None]


@runtime_checkable
class ClusterReader(Protocol):
    """Reads one cluster, read-only, as consistent as its backend can make it."""

    backend: str          # "zookeeper" | "kraft" (snapshot_io.BACKENDS)

    def read_cluster(self, say: Progress) -> ClusterRead:
        """Everything the snapshot holds: controller, brokers (racks, fenced), dynamic broker configs,
        reassignments, topics with their configs and partition states. Raises BadInput (exit 2) for what the
        operator must fix, a retryable PlannerError when the cluster stopped answering."""
        ...

    def source(self) -> dict[str, Any]:
        """The manifest's `source` (never a credential): where it was read from and, for KRaft, `backend`,
        `metadata_version` and the finalized `features`."""
        ...

    def close(self) -> None:
        ...
