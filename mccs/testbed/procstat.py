"""What a process costs, read from /proc (Linux): resident memory and CPU seconds."""
from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")


def rss(pid: int) -> int:
    """Resident bytes (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds so far (utime and stime of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICK
