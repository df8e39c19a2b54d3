"""Timing and behaviour knobs of the emulated cluster. Defaults are Kafka's where Kafka has one; tests shorten
them (retries, catch-up, rebalance) so scenarios run in seconds."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from planner.errors import BadInput


@dataclass
class Timing:
    # A replica that was out of the ISR (its broker was down) rejoins after this long once it can fetch.
    catch_up_delay: float = 2.0
    # Controlled shutdown: attempts and the pause between them (controlled.shutdown.max.retries = 3,
    # controlled.shutdown.retry.backoff.ms = 5000); after the last failed attempt the broker stops anyway.
    shutdown_retries: int = 3
    shutdown_retry_interval: float = 5.0
    # auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds, leader.imbalance.per.broker.percentage;
    # the first check runs 5 s after a controller takes over, as in Kafka.
    auto_rebalance: bool = True
    rebalance_interval: float = 300.0
    rebalance_initial_delay: float = 5.0
    imbalance_pct: float = 10.0
    # Bytes/s a broker's network link moves (shared by the fetches into, and out of, one broker); the
    # replication throttles in /config cap it further.
    link_rate: float = 1.25e9
    # How often the emulated followers make progress.
    tick: float = 0.1
    # ZooKeeper session timeout of each emulated broker (zookeeper.session.timeout.ms is 18 s in Kafka 3.x).
    session_timeout: float = 10.0
    # Static broker default of unclean.leader.election.enable (topic and dynamic overrides win).
    unclean_default: bool = False

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> Timing:
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for name, value in kwargs.items():
            if value is None:
                continue
            if name not in known:
                raise BadInput(f"unknown sandbox setting {name!r} (known: {', '.join(sorted(known))})")
            default = getattr(cls, name)
            try:
                if isinstance(default, bool):
                    value = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
                elif isinstance(default, int):
                    value = int(value)
                else:
                    value = float(value)
            except (TypeError, ValueError):
                raise BadInput(f"sandbox setting {name} must be a number, got {value!r}") from None
            if not isinstance(value, bool) and not math.isfinite(value):   # nan slips past `< 0`; inf never ends
                raise BadInput(f"sandbox setting {name} must be a finite number, got {value}")
            if not isinstance(value, bool) and value < 0:
                raise BadInput(f"sandbox setting {name} must not be negative, got {value}")
            values[name] = value
        t = cls(**values)
        if t.shutdown_retries < 1:
            raise BadInput("shutdown_retries must be at least 1")
        if t.tick <= 0 or t.link_rate <= 0 or t.rebalance_interval <= 0 or t.session_timeout < 2:
            raise BadInput("tick, link_rate and rebalance_interval must be positive, session_timeout >= 2 s")
        return t

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
