"""The sandbox folder's own files: their names and how they are written (atomically; the private ones 0600).
Shared by the sandbox (planner.sandbox.api) and its engines (planner.sandbox.kafka_engine) below it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SANDBOX_FILE = "sandbox.json"     # the cluster's record (ports, pids, the sandbox's own credentials: private)


def write_json(path: Path, obj: Any, private: bool = False, compact: bool = False) -> None:
    """`obj` as JSON at `path`, replaced atomically (a reader sees the old file or the new one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text((json.dumps(obj, separators=(",", ":")) if compact else json.dumps(obj, indent=2)) + "\n")
    if private:
        os.chmod(tmp, 0o600)
    os.replace(tmp, path)
