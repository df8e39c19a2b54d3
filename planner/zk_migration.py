"""A ZooKeeper-to-KRaft migration (KIP-866, Kafka 3.4-3.9) as ZooKeeper shows it: its state, which side is
authoritative, and why writing through ZooKeeper is unsafe in every state of it.

What Kafka 3.9 writes, and when (metadata/.../migration/KRaftMigrationDriver.java, ZkMigrationState.java,
ZkMigrationLeadershipState.java; core/.../zk/ZkData.scala MigrationZNode, ZkMigrationClient.scala):

| Kafka's ZkMigrationState (docs' phase) | ZooKeeper shows | authoritative |
|---|---|---|
| (none: ZooKeeper mode) | no `/migration`; `/controller` a broker, `kraftControllerEpoch` -1 | ZooKeeper |
| PRE_MIGRATION ("provisioning the KRaft controller quorum"; brokers being rolled into migration mode) | `/migration` with `kraft_metadata_offset` -1: created by the KRaft controller as soon as it starts (RecoverMigrationStateFromZKEvent: getOrCreateMigrationRecoveryState), before it waits for the brokers (WAIT_FOR_BROKERS); `/controller` still a ZooKeeper-mode broker | ZooKeeper: "the metadata log does not yet contain the cluster's data ... [the quorum] is not doing anything useful yet" (ZkMigrationState.PRE_MIGRATION) |
| MIGRATION, the initial metadata load | `/controller` names the KRaft controller (its `kraftControllerEpoch` > 0: BecomeZkControllerEvent, claimControllerLeadership), `kraft_metadata_offset` still -1 while MigrateMetadataEvent copies ZooKeeper into the metadata log | the KRaft controller (it controls the brokers from here on) |
| MIGRATION, hybrid (some brokers in ZooKeeper mode) and dual-write (all brokers in KRaft mode) | `kraft_metadata_offset` > 0 ("Finished initial migration", ZkMigrationLeadershipState.initialZkMigrationComplete); the controller writes every change to ZooKeeper as well (DUAL_WRITE: KRaftMigrationZkWriter); ZooKeeper-mode brokers stay registered in `/brokers/ids`, KRaft brokers do not | the KRaft controller: ZooKeeper is a copy it writes |
| POST_MIGRATION (finalized) | nothing is written any more: `/migration` stays as last written | the KRaft controller |

Reading: in PRE_MIGRATION the ZooKeeper controller still runs the cluster, so ZooKeeper is read, and the snapshot
says so (manifest `source.migration`). From the moment the KRaft controller claims `/controller` it is the
controller: a ZooKeeper read would describe a copy (lagging, and without the KRaft brokers at all), so it is
refused, naming the state, and the cluster is read through its bootstrap servers (the Admin API).

Writing through ZooKeeper is refused in every state:
- MIGRATION / finalized: the KRaft controller never reads `/admin/reassign_partitions`, the preferred-election
  znode or `/config/changes` (it has no ZooKeeper watches; ZooKeeper is written by KRaftMigrationZkWriter), and
  dual-write overwrites the topic and config znodes with the metadata log's state: a write would be ignored or
  lost.
- PRE_MIGRATION: the ZooKeeper controller still acts on writes, but the migration begins by itself as soon as
  the last broker runs with the migration settings (WaitForZkBrokersEvent: areZkBrokersReadyForMigration), and
  what it copies is the topic znodes, adding/removing replicas included (ZkMigrationClient.migrateTopics), never
  `/admin/reassign_partitions` or a pending throttle's notification: an apply running across that moment would
  wait on a znode nobody acts on any more. Finish the migration and apply through the Admin API, or revert it
  (Kafka's docs: deprovision the KRaft controller quorum, delete `/controller` and `/migration`, roll the brokers
  without the migration settings) and apply in ZooKeeper mode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PRE_MIGRATION, MIGRATION = "PRE_MIGRATION", "MIGRATION"


@dataclass(frozen=True)
class Migration:
    """A migration as ZooKeeper shows it (module docstring)."""

    state: str                   # Kafka's ZkMigrationState name: PRE_MIGRATION or MIGRATION
    phase: str                   # Kafka's docs' words: pre-migration, initial metadata load, hybrid, dual-write
    kraft_controller_id: int     # /migration (-1 before a KRaft controller led)
    kraft_controller_epoch: int
    kraft_metadata_offset: int   # > 0 once the initial metadata load is complete
    controller: int              # /controller's brokerid (-1: none)
    zk_brokers: int              # brokers registered in ZooKeeper (the brokers still in ZooKeeper mode)

    @property
    def authoritative(self) -> str:
        return "zookeeper" if self.state == PRE_MIGRATION else "kraft"

    def describe(self) -> str:
        if self.state == PRE_MIGRATION:
            return (f"ZooKeeper-to-KRaft migration state PRE_MIGRATION (a KRaft controller quorum with the "
                    f"migration enabled waits for the brokers; ZooKeeper-mode broker {self.controller} is still the "
                    "controller)")
        ctrl = f"KRaft controller {self.kraft_controller_id} (epoch {self.kraft_controller_epoch})" \
            if self.kraft_controller_id >= 0 else f"KRaft controller {self.controller}"
        what = {"initial metadata load": "it is copying ZooKeeper's metadata into its log",
                "hybrid": f"{self.zk_brokers} brokers still run in ZooKeeper mode; it writes ZooKeeper as well "
                          "(dual-write)",
                "dual-write": "no broker runs in ZooKeeper mode any more; it writes ZooKeeper as well until the "
                              "migration is finalized, and nothing after, which ZooKeeper does not show"}.get(
                    self.phase, self.phase)
        return f"ZooKeeper-to-KRaft migration state MIGRATION, {self.phase} phase ({ctrl} is the controller; {what})"

    def read_refusal(self) -> str:
        """Why ZooKeeper is not read (the KRaft controller leads), and what to read instead."""
        if self.phase == "initial metadata load":
            return (f"this cluster is in {self.describe()}: the KRaft controller leads but has not finished "
                    "copying the metadata, so neither side holds the whole cluster yet; read it again once "
                    "/migration records the copy (kraft_metadata_offset > 0)")
        return (f"this cluster is in {self.describe()}: the KRaft controller is authoritative, and ZooKeeper holds "
                "only the copy it writes and no broker registration (KRaft brokers register with the controller "
                "only); read the cluster through its bootstrap servers (the Admin API)")

    def write_refusal(self) -> str:
        if self.state == PRE_MIGRATION:
            return (f"this cluster is in {self.describe()}: ZooKeeper is still authoritative, but the migration "
                    "begins by itself once the last broker runs with zookeeper.metadata.migration.enable, and "
                    "the KRaft controller then neither copies nor acts on a reassignment, election or throttle "
                    "written to ZooKeeper: finish the migration and apply a plan made through the bootstrap "
                    "servers (the Admin API), or revert the migration (Kafka's docs: deprovision the KRaft "
                    "controllers, delete /controller and /migration, roll the brokers without the migration "
                    "settings) and apply in ZooKeeper mode")
        return (f"this cluster is in {self.describe()}: the KRaft controller ignores reassignments, elections and "
                "config changes written to ZooKeeper and overwrites ZooKeeper with its own metadata, so ZooKeeper "
                "must not be written: finish the migration and apply a plan made through the bootstrap servers "
                "(the Admin API)")

    def as_manifest(self) -> dict[str, Any]:
        return {"state": self.state, "phase": self.phase, "authoritative": self.authoritative,
                "kraft_controller_id": self.kraft_controller_id, "kraft_controller_epoch": self.kraft_controller_epoch,
                "kraft_metadata_offset": self.kraft_metadata_offset, "zk_controller": self.controller,
                "zk_brokers": self.zk_brokers}


def _int(obj: dict[str, Any], key: str) -> int:
    v = obj.get(key, -1)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else -1


def classify(migration_znode: bytes | None, controller: int, kraft_controller_epoch: int,
             zk_brokers: int) -> Migration | None:
    """The migration state from `/migration`'s content (None: no such znode), `/controller`'s brokerid and
    kraftControllerEpoch (-1: none) and how many brokers are registered in ZooKeeper; None in ZooKeeper mode.
    A `/migration` that does not parse as Kafka's MigrationZNode counts as a migration with unknown offsets."""
    kraft_ctrl = kraft_controller_epoch > 0
    if migration_znode is None and not kraft_ctrl:
        return None
    try:
        obj = json.loads(migration_znode) if migration_znode is not None else {}
    except ValueError:
        obj = {}
    if not isinstance(obj, dict):
        obj = {}
    offset = _int(obj, "kraft_metadata_offset")
    cid, cepoch = _int(obj, "kraft_controller_id"), _int(obj, "kraft_controller_epoch")
    if offset <= 0 and not kraft_ctrl:
        return Migration(PRE_MIGRATION, "pre-migration", cid, cepoch, offset, controller, zk_brokers)
    if offset <= 0:
        phase = "initial metadata load"
    elif zk_brokers > 0:
        phase = "hybrid"
    else:
        phase = "dual-write"
    if kraft_ctrl and cid < 0:
        cid, cepoch = controller, kraft_controller_epoch
    return Migration(MIGRATION, phase, cid, cepoch, offset, controller, zk_brokers)
