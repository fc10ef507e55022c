"""Reading the node's log files back: the last lines, or those since a time. Plain file
work (meant for a thread): it never holds more than `MAX_LINES` lines and one file's worth
of the one being read."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import IO

from gtmcluster.nodelog.record import line_time
from gtmcluster.nodelog.writer import Snapshot

#: lines one request may get from the files
MAX_LINES = 10000
READ_SIZE = 65536


def _lines(f: IO[bytes], limit: int | None) -> Iterator[str]:
    """The complete lines of *f* within its first *limit* bytes (all of it: None)."""
    f.seek(0)
    left = limit
    partial = b""
    while left is None or left > 0:
        data = f.read(READ_SIZE if left is None else min(READ_SIZE, left))
        if not data:
            break
        if left is not None:
            left -= len(data)
        parts = (partial + data).split(b"\n")
        partial = parts.pop()
        for part in parts:
            if part:
                yield part.decode("utf-8", errors="replace")


def history(snapshot: Snapshot, since: str | None, count: int) -> list[str]:
    """The last *count* lines of the snapshot's files (oldest first) whose time is at or
    after *since* (a log time field; None: any). Files are read newest first, and no older
    one once enough lines are in or a file begins before *since*."""
    count = min(count, MAX_LINES)
    kept: deque[str] = deque(maxlen=count)
    if count == 0:
        return []
    for f, limit in reversed(snapshot.files):
        older: deque[str] = deque(maxlen=count)
        first: str | None = None
        for line in _lines(f, limit):
            stamp = line_time(line)
            if first is None and stamp is not None:
                first = stamp
            if since is None or (stamp is not None and stamp >= since):
                older.append(line)
        room = count - len(kept)
        kept.extendleft(reversed(list(older)[-room:] if room > 0 else []))
        if len(kept) >= count or (since is not None and first is not None and first < since):
            break
    return list(kept)
