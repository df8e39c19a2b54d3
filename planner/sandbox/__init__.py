"""The sandbox: a Kafka cluster on a real ZooKeeper, with two engines behind one `Sandbox` class: emulated
brokers and ZooKeeper-mode controller (daemon.py, controller.py), or real Apache Kafka broker JVMs
(kafka_engine.py).

It must not import the planner's replay, risk, optimizer or snapshot code: tests compare what the planner
predicts with what this independent emulation, and the real brokers, do.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Sandbox", "SandboxError"]


def __getattr__(name: str) -> Any:
    # Lazy, so `python -m planner.sandbox.daemon` does not import the daemon module twice.
    if name in __all__:
        from planner.sandbox import api

        return getattr(api, name)
    raise AttributeError(name)
