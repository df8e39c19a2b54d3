"""The host-disk check the real-broker tests need before they start (tests/conftest.py runs it).

Every sandbox broker's log dir is in the session's temporary folder, on the host's filesystem, and Kafka's
DescribeLogDirs reports that filesystem's total and usable bytes as the broker's capacity (LogDirsCommand and
the AdminClient read `LogDirDescription.totalBytes()` / `usableBytes()`, which the broker takes from
`FileStore.getTotalSpace()` / `getUsableSpace()`: statvfs f_blocks and f_bavail). The planner's capacity check
counts total - usable as used and refuses a plan that leaves a broker above 85 % (`--max-disk-usage`). On a host
filesystem already near that, every plan made from real brokers is refused: correctly, but it reads like a
product bug in 18 tests. So the session stops first, with the reason, above LIMIT (margin for the data the
tests write and copy themselves)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

LIMIT = 0.80
GIB = 1024 ** 3


def verdict(total: int, usable: int, where: str, limit: float | None = None) -> str | None:
    """The one-line refusal when the filesystem's use by Kafka's measure, (total - usable) / total, is above
    `limit` (default LIMIT); None when there is room."""
    limit = LIMIT if limit is None else limit
    used = (total - usable) / total
    if used <= limit:
        return None
    need = (used - limit) * total / GIB
    return (f"host disk too full for the real-broker tests: {where} is {used:.1%} used by Kafka's measure "
            f"({(total - usable) / GIB:.1f} of {total / GIB:.1f} GiB, {usable / GIB:.1f} GiB usable); above "
            f"{limit:.0%} the sandbox brokers' DescribeLogDirs makes the planner's 85 % disk-capacity check "
            f"refuse their plans, so free at least {need:.1f} GiB there and run again")


def mount_of(path: Path) -> tuple[str, str]:
    """(mount point, device) of the filesystem holding `path` (the device from /proc/self/mounts, if known)."""
    p = Path(os.path.realpath(path))
    while not os.path.ismount(p):
        p = p.parent
    device = "?"
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 1 and fields[1] == str(p):
                device = fields[0]   # the last entry for a mount point is the one in effect
    except OSError:
        pass
    return str(p), device


def check(path: Path, limit: float | None = None) -> str | None:
    """verdict() for the filesystem holding `path`, measured now."""
    usage = shutil.disk_usage(path)   # total = f_blocks * f_frsize, free = f_bavail * f_frsize: Kafka's two
    mount, device = mount_of(path)
    return verdict(usage.total, usage.free, f"the filesystem {mount} ({device}) holding {path}", limit)


def session_problem(items: list, basetemp: Path) -> str | None:
    """check() of the session's temporary folder when any of the session's tests runs real brokers (the `kafka`
    marker); None otherwise (a session of light tests is not stopped by a full disk it does not need)."""
    if any(item.get_closest_marker("kafka") for item in items):
        return check(basetemp)
    return None
