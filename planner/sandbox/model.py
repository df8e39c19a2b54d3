"""The controller's in-memory view of one partition, and Kafka's replica-assignment arithmetic (KIP-455).

One `Part` per partition, with `__slots__` so a 100,000-partition context stays small. It mirrors what
Kafka's `ControllerContext` keeps: the full replica assignment (RS, which is the union ORS + TRS while a
reassignment runs, target first), the adding/removing sets, the last leader/ISR read from or written to the
state znode with that znode's stat version (the partition epoch), and the partition state machine state.
"""

from __future__ import annotations

# Partition state machine states (kafka.controller.PartitionState).
NEW, ONLINE, OFFLINE = 0, 1, 2

Assignment = tuple[list[int], list[int], list[int]]  # (replicas, adding, removing)


class Part:
    __slots__ = ("topic", "pid", "replicas", "adding", "removing", "has_state", "leader", "epoch", "isr",
                 "lrs", "cepoch", "version", "state")

    def __init__(self, topic: str, pid: int, replicas: list[int], adding: list[int], removing: list[int]):
        self.topic = topic
        self.pid = pid
        self.replicas = replicas
        self.adding = adding
        self.removing = removing
        self.has_state = False
        self.leader = -1
        self.epoch = 0
        self.isr: list[int] = []
        self.lrs = 0
        self.cepoch = 0
        self.version = -1
        self.state = NEW

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.pid)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.pid}"

    @property
    def assignment(self) -> Assignment:
        return (self.replicas, self.adding, self.removing)

    @property
    def target(self) -> list[int]:
        """TRS: the replicas the partition ends with (RS minus removing)."""
        if not self.removing:
            return self.replicas
        return [r for r in self.replicas if r not in self.removing]

    @property
    def origin(self) -> list[int]:
        """ORS: the replicas before the reassignment (RS minus adding)."""
        if not self.adding:
            return self.replicas
        return [r for r in self.replicas if r not in self.adding]

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    def set_state(self, leader: int, epoch: int, isr: list[int], lrs: int, cepoch: int, version: int) -> None:
        self.has_state = True
        self.leader = leader
        self.epoch = epoch
        self.isr = isr
        self.lrs = lrs
        self.cepoch = cepoch
        self.version = version

    def __repr__(self) -> str:
        return (f"Part({self.name} replicas={self.replicas} adding={self.adding} removing={self.removing} "
                f"leader={self.leader} epoch={self.epoch} isr={self.isr})")


def reassign_to(current_origin: list[int], target: list[int]) -> Assignment:
    """`ReplicaAssignment.reassignTo`: RS = TRS ++ (ORS - TRS), AR = RS - ORS, RR = RS - TRS."""
    full = list(dict.fromkeys(list(target) + list(current_origin)))
    adding = [r for r in full if r not in current_origin]
    removing = [r for r in full if r not in target]
    return (full, adding, removing)
