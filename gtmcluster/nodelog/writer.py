"""`NodeLog`: the service that writes the node's own log, whatever twistd was told.

Every event of level info and above goes, as one line (`gtmcluster.nodelog.record`), to
``<log_dir>/<node>.jsonl``, a file of at most `MAX_BYTES` (then it is renamed ``.1``, the
older ones ``.2`` ... up to ``.KEEP``, and the oldest deleted), and to the readers that
follow it (``GET /api/v1/logs?follow=1``). It is written from the reactor thread, unbuffered,
as twistd's own log file is. `snapshot` opens the files as they stand, so that a reader
reads exactly what was written before it started following, and no line twice.

Started after twistd drops privileges, so the files belong to the node's user.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from twisted.application.service import Service
from twisted.logger import ILogObserver, Logger, LogLevel, LogPublisher, globalLogPublisher
from twisted.python import threadable
from twisted.python.logfile import LogFile
from zope.interface import implementer

from gtmcluster.nodelog.record import event_line

#: bytes in the current file before it is rotated
MAX_BYTES = 10 * 1024 * 1024
#: rotated files kept (``NODE.jsonl.1`` newest ... ``NODE.jsonl.KEEP`` oldest)
KEEP = 5
FILE_MODE = 0o640
DIR_MODE = 0o750

Listener = Callable[[str], None]


def log_path(log_dir: Path, node: str) -> Path:
    return log_dir / f"{node}.jsonl"


@dataclass
class Snapshot:
    """The node's log files as they stood at one moment, oldest first: each open file and
    how many of its bytes belong to the snapshot (None: all of it)."""

    files: list[tuple[IO[bytes], int | None]]

    def close(self) -> None:
        for f, _ in self.files:
            f.close()
        self.files = []


@implementer(ILogObserver)
class NodeLog(Service):
    """Writes the node's log file and feeds its followers (see the module docstring)."""

    def __init__(
        self,
        log_dir: Path,
        node: str,
        seconds: Callable[[], float],
        publisher: LogPublisher = globalLogPublisher,
        max_bytes: int = MAX_BYTES,
        keep: int = KEEP,
        level: LogLevel = LogLevel.info,
        call_from_thread: Callable[..., object] | None = None,
    ):
        self.log_dir = log_dir
        self.node = node
        self.path = log_path(log_dir, node)
        self.seconds = seconds
        self.publisher = publisher
        self.max_bytes = max_bytes
        self.keep = keep
        self.level = level
        #: the reactor's callFromThread: an event logged in another thread is written, and
        #: sent to followers, from the reactor thread
        self.call_from_thread = call_from_thread
        self.file: LogFile | None = None
        self.listeners: list[Listener] = []
        #: why the file could not be opened or written, when it could not
        self.problem: str | None = None
        self._emitting = False

    def startService(self) -> None:
        super().startService()
        try:
            self.log_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            self.file = LogFile(
                self.path.name,
                str(self.log_dir),
                rotateLength=self.max_bytes,
                defaultMode=FILE_MODE,
                maxRotatedFiles=self.keep,
            )
            self.problem = None
        except OSError as e:
            self.file = None
            self.problem = f"cannot write {self.path}: {e.strerror or e}"
        self.publisher.addObserver(self)
        if self.problem is not None:
            Logger(namespace=__name__, observer=self.publisher).error(
                "the node's own log is not written: {problem}", problem=self.problem
            )

    def stopService(self) -> None:
        super().stopService()
        self.publisher.removeObserver(self)
        if self.file is not None:
            self.file.close()
            self.file = None

    def __call__(self, event: dict[str, Any]) -> None:
        level = event.get("log_level", LogLevel.info)
        if isinstance(level, type(LogLevel.info)) and level < self.level:
            return
        line = event_line(event, self.node, self.seconds())
        if self.call_from_thread is not None and not threadable.isInIOThread():
            self.call_from_thread(self._emit, line)
        else:
            self._emit(line)

    def _emit(self, line: str) -> None:
        if self._emitting:
            return
        self._emitting = True  # what a follower's transport logs does not loop back here
        try:
            self.write(line)
            for listener in list(self.listeners):
                listener(line)
        finally:
            self._emitting = False

    def write(self, line: str) -> None:
        if self.file is None:
            return
        try:
            self.file.write((line + "\n").encode("utf-8"))
        except OSError as e:
            # no log call here (it would come back to this observer): say it once on stderr
            self.problem = f"cannot write {self.path}: {e.strerror or e}"
            print(f"gtmcluster: {self.problem}; the node's own log stops", file=sys.stderr)
            self.file.close()
            self.file = None

    def follow(self, listener: Listener) -> Callable[[], None]:
        """Call *listener* with every line from now on; returns the function that stops it."""
        return following(self.listeners, listener)

    def snapshot(self) -> Snapshot:
        """Open the files as they stand (rotated ones, then the current one up to what has
        been written), for a reader to go through later, in a thread."""
        return snapshot_of(self.path, self.keep, self.file)


def following(listeners: list[Listener], listener: Listener) -> Callable[[], None]:
    """Add *listener* to *listeners* (a log's followers); the function that takes it out."""
    listeners.append(listener)

    def stop() -> None:
        if listener in listeners:
            listeners.remove(listener)

    return stop


def snapshot_of(path: Path, keep: int, file: LogFile | None) -> Snapshot:
    """The files of a log rotated as `LogFile` rotates (``PATH.KEEP`` ... ``PATH.1``, then
    *path* itself up to the bytes *file*, its writer, has written; not *path* when *file*
    is None) as they stand, opened for a reader."""
    files: list[tuple[IO[bytes], int | None]] = []
    for n in range(keep, 0, -1):
        try:
            files.append((open(f"{path}.{n}", "rb"), None))  # noqa: SIM115 (closed by Snapshot.close)
        except OSError:
            continue
    if file is not None:
        try:
            current = open(path, "rb")  # noqa: SIM115
        except OSError:
            pass
        else:
            files.append((current, int(file.size)))
    return Snapshot(files)
