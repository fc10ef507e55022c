"""The node's audit log: one JSON line per change asked of this node's API, per refusal of
one (bounded by the API: `gtmcluster.api.auditbound`), and per change of the group's admin
state made on another member and taken here (`gtmcluster.api.audit` says what goes in).

A line is a compact JSON object whose first field is ``time`` in the node log's form (UTC
with microseconds, fixed width), so the node log's reader (`gtmcluster.nodelog.reader`)
reads it back unchanged, and the fields of `FIELDS` after it::

    {"time":"2026-12-01T15:11:51.123456Z","node":"n2","origin":"n1","id":"n1-5f0c9a2b7e41",
     "who":"alice","role":"operator","proof":"token","source":"192.0.2.7",
     "route":"POST /api/v1/admin/datacenter/DC1/disable","change":"disable data center DC1
     (maintenance)","result":"applied","status":200,"message":""}

The file is ``<log_dir>/audit/<node>.jsonl`` (a folder of its own: no node's name can make
it another node's log), rotated by size as the node's log is (twisted's `LogFile`: ``.1``
newest ... ``.KEEP`` oldest, the oldest deleted), so it takes at most ``MAX_BYTES x (KEEP +
1)`` of disk whatever comes.

A line is written whole or not at all (`AuditFile.write`): from the reactor thread, at once,
unbuffered (an entry is a few hundred bytes and entries come with writes, which are few);
a write that fails or is cut short (a full disk, a file size limit, a read-only file
system) is undone (the file cut back to where it was) and raises `AuditError`, so the
caller can refuse the change it was to record. A file that could not be opened is tried
again at the next entry: the log comes back once the disk has room.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from twisted.python.logfile import LogFile

from gtmcluster.nodelog.record import iso_time
from gtmcluster.nodelog.writer import DIR_MODE, FILE_MODE, Listener, Snapshot, following, snapshot_of

#: bytes in the current file before it is rotated
MAX_BYTES = 10 * 1024 * 1024
#: rotated files kept (``NODE.jsonl.1`` newest ... ``NODE.jsonl.KEEP`` oldest)
KEEP = 10
#: the fields of an entry after ``time``, in this order
FIELDS = (
    "node",
    "origin",
    "id",
    "who",
    "role",
    "proof",
    "source",
    "route",
    "change",
    "result",
    "status",
    "message",
    "detail",
)
#: characters of one text field at most (longer text keeps its start and says how much more)
MAX_FIELD = 1000


class AuditError(Exception):
    """The audit log cannot be written (the message says why)."""


def audit_path(log_dir: Path, node: str) -> Path:
    return log_dir / "audit" / f"{node}.jsonl"


def short(text: str, limit: int = MAX_FIELD) -> str:
    """*text*, or its first *limit* characters and how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]} ... ({len(text) - limit} more characters)"


def entry_line(entry: Mapping[str, Any], node: str, seconds: float) -> str:
    """*entry* (the fields of `FIELDS` it has; ``node`` is *node*) as one line, without the
    newline, at *seconds* since the epoch. Text is shortened (`short`), and text that is not
    valid Unicode escaped rather than lost."""
    out: dict[str, Any] = {"time": iso_time(seconds), "node": node}
    for field in FIELDS[1:]:
        if field not in entry:
            continue
        value = entry[field]
        if isinstance(value, str):
            value = short(value).encode("utf-8", "backslashreplace").decode("utf-8")
        out[field] = value
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"), default=str)


def parse_entry(line: str) -> dict[str, Any] | None:
    """The fields of an audit line, or None when it is not a JSON object with a time."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("time"), str):
        return None
    return value


class _WholeLines(LogFile):
    """twisted's rotated `LogFile`, writing each line whole or not at all."""

    def write_whole(self, data: bytes) -> None:
        if self.shouldRotate():
            self.flush()
            self.rotate()
        start = self.size
        done = 0
        try:
            while done < len(data):
                written = self._file.write(data[done:])  # (unbuffered: an OS write each)
                if not written:
                    raise OSError(f"only {done} of {len(data)} bytes could be written")
                done += written
        except OSError:
            if done:
                try:  # no part of a line is left behind for the next to be glued to
                    self._file.truncate(start)
                    self._file.seek(start)
                except OSError:
                    pass
            raise
        self.size += len(data)


class AuditFile:
    """The node's audit file (see the module docstring): `write` an entry, `snapshot` the
    files for a reader, `follow` the lines as they are written."""

    def __init__(
        self,
        log_dir: Path,
        node: str,
        seconds: Callable[[], float],
        max_bytes: int = MAX_BYTES,
        keep: int = KEEP,
    ):
        self.node = node
        self.path = audit_path(log_dir, node)
        self.seconds = seconds
        self.max_bytes = max_bytes
        self.keep = keep
        self.file: _WholeLines | None = None
        #: why the last write (or opening) failed, until one succeeds
        self.problem: str | None = None
        #: entries written, and writes that failed (for /metrics)
        self.counts = {"written": 0, "failed": 0}
        self.listeners: list[Listener] = []

    def open(self) -> None:
        """Open the file (creating its folder); OSError when it cannot be."""
        if self.file is not None:
            return
        self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        self.file = _WholeLines(
            self.path.name,
            str(self.path.parent),
            rotateLength=self.max_bytes,
            defaultMode=FILE_MODE,
            maxRotatedFiles=self.keep,
        )

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def _drop(self) -> None:
        file, self.file = self.file, None
        if file is not None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                file._file.close()

    def write(self, entry: Mapping[str, Any]) -> str:
        """Write *entry* as one line now (and tell the followers); returns the line.
        AuditError, with nothing written, when it cannot be."""
        line = entry_line(entry, self.node, self.seconds())
        try:
            self.open()
            assert self.file is not None
            self.file.write_whole((line + "\n").encode("utf-8"))
        except (OSError, ValueError) as e:  # (ValueError: a file a failed rotation closed)
            self.counts["failed"] += 1
            self.problem = f"{self.path}: {getattr(e, 'strerror', None) or e}"
            self._drop()  # opened again at the next entry
            raise AuditError(self.problem) from None
        self.problem = None
        self.counts["written"] += 1
        for listener in list(self.listeners):
            listener(line)
        return line

    def follow(self, listener: Listener) -> Callable[[], None]:
        """Call *listener* with every line from now on; returns the function that stops it."""
        return following(self.listeners, listener)

    def snapshot(self) -> Snapshot:
        """The files as they stand, for a reader (`gtmcluster.nodelog.reader`) in a thread."""
        return snapshot_of(self.path, self.keep, self.file)
