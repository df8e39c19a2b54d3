"""Real Apache Kafka for the `kafka` sandbox engine: Kafka's own jars from Maven Central (`jars`), broker JVMs
(`broker`), Kafka's own command-line tools (`tools`) and produced data (`data`).

Nothing here imports the planner's replay, risk or optimizer code: the real brokers are the ground truth that
those are compared with.
"""

from __future__ import annotations

DEFAULT_VERSION = "3.9.2"
KRAFT_VERSION = "4.1.1"   # the kraft engine's default: KRaft only (Kafka 4 removed ZooKeeper), ELR on by default
