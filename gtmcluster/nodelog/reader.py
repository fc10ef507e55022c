"""Reading the node's log files back: the last lines, or those since a time. Plain file
work (meant for a thread): it never holds more than `MAX_LINES` lines, nor (`within`) more
than the bytes it is given."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
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
    return within(snapshot, since, count, None)[0]


def within(
    snapshot: Snapshot,
    since: str | None,
    count: int,
    max_bytes: int | None,
    keep: Callable[[str], bool] | None = None,
) -> tuple[list[str], bool]:
    """As `history`, and at most *max_bytes* bytes of lines (newlines counted; None: no
    limit), only lines *keep* keeps (None: all): (the lines, whether older lines were left
    out to keep within *max_bytes*)."""
    count = min(count, MAX_LINES)
    kept: deque[str] = deque()
    size = 0
    cut = False
    if count == 0:
        return [], False
    for f, limit in reversed(snapshot.files):
        older: deque[str] = deque()
        older_size = 0
        first: str | None = None
        for line in _lines(f, limit):
            stamp = line_time(line)
            if first is None and stamp is not None:
                first = stamp
            if (since is None or (stamp is not None and stamp >= since)) and (keep is None or keep(line)):
                older.append(line)
                older_size += len(line.encode("utf-8")) + 1
                while older and (
                    len(older) > count - len(kept) or (max_bytes is not None and older_size > max_bytes - size)
                ):
                    if len(older) <= count - len(kept):
                        cut = True  # (not for want of room in lines: for bytes)
                    older_size -= len(older.popleft().encode("utf-8")) + 1
        kept.extendleft(reversed(older))
        size += older_size
        if cut or len(kept) >= count or (since is not None and first is not None and first < since):
            break
    return list(kept), cut
