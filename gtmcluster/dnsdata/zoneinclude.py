"""Where a zone file's ``$INCLUDE`` may read (issue 30): the rule (`Includes`) and the
files a zone's reading opens (`Files`), the zone file's and those its includes name.

Shared (the default, and always under config sync), an include is named relative to the
including file, neither absolute nor with ``..``: the name a config bundle carries the
file under, so every member reads the same bytes. Outside config sync it may also be an
absolute path. Either way, read from disk, its real path (links followed) must be in the
zone file's folder, or a folder the config opens (``zones[].include_dirs``). A file given
in memory (a bundle's, `Read`) is found by its name alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from gtmcluster.runtime import files


@dataclass(frozen=True, slots=True)
class Includes:
    """Where a zone's ``$INCLUDE`` may read.

    *shared* (the default, and always under config sync): a name relative to the including
    file, neither absolute nor with ``..`` (a config bundle carries the file under that
    name). Otherwise (``sync_group.config_sync: false``) an absolute or relative path. Either
    way the file's real path (links followed) must be in the zone file's folder or one of
    *dirs* (absolute; ``zones[].include_dirs``, outside config sync only)."""

    shared: bool = True
    dirs: tuple[str, ...] = ()


class Refused(Exception):
    """An $INCLUDE that may not be read (the message says why)."""


#: reads a file by its path: raises OSError (and FileNotFoundError for one not there)
Read = Callable[[str], bytes]


def _disk(path: str, limit: int | None = None) -> bytes:
    """The file at *path*, *limit* bytes of it at most when given; read as every file a
    config names is (`runtime.files`: a regular file, never blocking, within a zone file's
    cap), so a FIFO or a device named by an ``$INCLUDE`` is refused, not waited on."""
    if limit is None:
        return files.read_bytes(path, files.ZONE_FILE)
    pieces, got = [], 0
    reading = files.chunks(path, files.ZONE_FILE)
    try:
        for piece in reading:
            pieces.append(piece[: limit - got])
            got += len(pieces[-1])
            if got >= limit:
                break
    finally:
        reading.close()
    return b"".join(pieces)


class Files:
    """The zone file and what it may include: paths are the zone file's and those made
    from it, each checked against `Includes`. On disk (no *read*) a path is under *base*
    (when given: a config bundle's names are relative to it), and the real path of each
    included file must be in the zone file's folder (or an opened one)."""

    def __init__(self, zone_path: str, includes: Includes, read: Read | None = None, base: str = ""):
        self.includes = includes
        self.base = base
        self.on_disk = read is None
        self._read = read
        top = os.path.dirname(self.disk(zone_path))
        self.roots = [os.path.realpath(top or ".")] + [os.path.realpath(d) for d in includes.dirs]
        self.folders = "the zone file's folder" + (" or include_dirs" if includes.dirs else "")

    def disk(self, path: str) -> str:
        return os.path.join(self.base, path) if self.base else path

    def read(self, path: str, limit: int | None = None) -> bytes:
        """The file at *path* (from disk: *limit* bytes at most when given)."""
        return _disk(self.disk(path), limit) if self._read is None else self._read(path)

    def include(self, including: str, arg: str) -> str:
        """The path $INCLUDE *arg* names in the file at *including*; raises `Refused`."""
        if not arg or "\0" in arg:
            raise Refused("$INCLUDE names no file")
        if self.includes.shared:
            if "\\" in arg:
                raise Refused("$INCLUDE names a file with a backslash: a shared zone names its files as a bundle does")
            if os.path.isabs(arg):
                raise Refused(
                    "$INCLUDE names an absolute path: a zone shared by config sync includes a file by its name "
                    "relative to the zone file's folder (the bundle carries it)"
                )
            if ".." in PurePosixPath(arg).parts:
                raise Refused(
                    "$INCLUDE names a path with '..': a zone shared by config sync includes files inside "
                    "the zone file's folder (the bundle carries them)"
                )
            path = str(PurePosixPath(os.path.dirname(including)) / arg)
        else:
            path = arg if os.path.isabs(arg) else os.path.join(os.path.dirname(including), arg)
        if self.on_disk:
            real = os.path.realpath(self.disk(path))
            if not any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in self.roots):
                raise Refused(f"$INCLUDE names a file outside {self.folders}")
        return path
