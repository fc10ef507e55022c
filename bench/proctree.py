"""A benchmarked server's process tree, read from /proc: its processes (`descendants`), their
CPU (`tree_cpu_seconds`), a process told from a reused PID (`start_time`), and pinning the
tree to CPUs (`set_tree_affinity`). Linux only; nothing from gtmcluster."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # fields from 3 (state) on; comm may hold spaces


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None when gone): tells a reused PID."""
    try:
        return int(_stat_fields(pid)[19])
    except (OSError, ValueError, IndexError):
        return None


def descendants(root: int) -> list[int]:
    """*root* and every process below it (from /proc, each PPid)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                ppid = int(_stat_fields(int(entry.name))[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU of *root*'s tree, including children it has reaped (cutime, cstime)."""
    ticks = 0
    for pid in descendants(root):
        try:
            f = _stat_fields(pid)
        except OSError:
            continue
        ticks += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])  # utime stime cutime cstime
    return ticks / CLOCK_TICKS


def set_tree_affinity(root: int, cpus: set[int]) -> None:
    """Pin every thread of every process of *root*'s tree to *cpus*."""
    for pid in descendants(root):
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            with contextlib.suppress(OSError):  # a thread that just ended
                os.sched_setaffinity(tid, cpus)
