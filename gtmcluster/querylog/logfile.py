"""The query log's file on disk: a Frame Streams file of dnstap records, rotated by size,
that touches only files the log wrote itself and never leaves a broken frame.

Its methods block (file I/O): `writer.QueryLogWriter` calls them in a thread, one call at a
time. Plain file work, no Twisted.

**Where it writes.** The file ``PATH`` and its rotated copies ``PATH.1`` .. ``PATH.<keep>``
live in one folder under the log's own folder (``log_dir``, or ``dns_server.query_log.dir``:
config/querylog.py refuses a path outside it). That folder is opened once, and every
file in it by name relative to it (``openat``), so nothing is looked up through a path
again. The folders between the log's own folder and the file are made if missing and
opened with ``O_NOFOLLOW``: a symbolic link there is refused, never followed. The log's
own folder and every folder below it must belong to the node's user and not be writable
by its group or by others (the rule `gtmcluster.runtime.private` applies to ``log_dir`` at start):
whoever could change what is in it could swap a file for a link between a check and its
use. The file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (never an existing file,
never through a link), mode 0640.

**Answering workers.** With ``dns_server.processes`` above 1 each answering worker writes
a file of its own beside ``PATH`` (`worker_path`: ``queries.dnstap`` -> ``queries.w1.dnstap``),
a log of its own in every way (rotated, checked and cut back as here); the readers merge
the files by time (``python -m gtmcluster.querylog.read --merge``).

**Whose file it is.** A file is the log's own only when it has one of its names (``PATH``,
``PATH.<n>``), is a regular file (not a link, checked without following it) and begins
with the exact START control frame the log writes (Frame Streams, content type
``protobuf:dnstap.Dnstap``). Before a rotation renames or removes anything, every file it
would touch is checked; one that is not the log's own (`NotOurs`) stops it with nothing
moved: the log writes nothing (each batch counted as failed, the reason logged) until an
operator moves that file away, and then goes on by itself. So the log never replaces,
renames or removes a file it did not write.

**Whole frames.** A write that the disk cuts short (a short ``write``, ENOSPC, EDQUOT,
EIO) is cut back with ``ftruncate`` to the end of the last whole frame it wrote, and
raises `Unwritten` saying how many frames went in whole: the rest are counted as lost,
and the next write, when there is room again, goes on after a whole frame. A START frame
that does not fit removes the file just made; a STOP frame that does not fit leaves the
file ending after its last whole record (both readers take that, as a file still being
written).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from gtmcluster.querylog import dnstap

#: the first bytes of every file the log writes (and of none it did not)
START = dnstap.start_frame()
#: modes
FILE_MODE = 0o640
DIR_MODE = 0o750


def worker_path(path: Path, index: int) -> Path:
    """The file answering worker *index* (``dns_server.processes`` above 1) writes for the
    log at *path*: its index before the suffix (``queries.dnstap`` -> ``queries.w1.dnstap``;
    ``queries`` -> ``queries.w1``), in the same folder, rotated as ``queries.w1.dnstap.1``
    and so on: never one of the node's names (``PATH``, ``PATH.<n>``) nor another worker's."""
    return path.with_name(f"{path.stem}.w{index}{path.suffix}")


class NotOurs(Exception):
    """Something in the log's way that it did not make (a file, a link, a folder others may
    write in): nothing is touched until an operator moves it. The message says what."""


class Unwritten(Exception):
    """A write that put only its first *written* frames in the file (whole: the file was
    cut back to the end of the last whole one); *reason* says why, in one line."""

    def __init__(self, written: int, reason: str):
        super().__init__(reason)
        self.written = written
        self.reason = reason


class _Short(Exception):
    def __init__(self, written: int, error: OSError):
        super().__init__(written)
        self.written = written
        self.error = error


def reason_of(error: BaseException) -> str:
    """*error* in one line for an operator."""
    if isinstance(error, OSError):
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"the disk is full ({error.strerror})"
        text = error.strerror or str(error)
        return f"{error.filename}: {text}" if error.filename else text
    return str(error)


def _folder_problem(st: os.stat_result, uid: int) -> str | None:
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != uid:
        return f"belongs to uid {st.st_uid}, not to the node's user (uid {uid})"
    if st.st_mode & 0o022:
        return f"is writable by its group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


class LogFile:
    """A Frame Streams file of dnstap records at *path*, rotated by size, inside *folder*
    (default: the file's own folder), which it may write in (see the module's docstring)."""

    def __init__(self, path: Path, max_bytes: int, keep: int, folder: Path | None = None):
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self.folder = folder if folder is not None else path.parent
        #: the folders from *folder* down to the file's (made if missing, never through a link)
        self._below = path.parent.relative_to(self.folder).parts
        self._dir: int | None = None  # the file's folder, opened
        self._fd: int | None = None
        #: the file's length: the end of its last whole frame
        self.size = 0
        self.rotations = 0
        #: the write(2) it calls (tests put a disk with little room here)
        self.os_write: Callable[[int, memoryview], int] = os.write

    def write(self, frames: Sequence[bytes]) -> int:
        """Append *frames* (data frames), rotating first whenever one would take the file past
        `max_bytes` (a single frame larger than that gets a file of its own); returns how
        many were written (all of them). Raises `Unwritten` with how many went in whole
        when the rest could not be written (the file then ends after a whole frame)."""
        written = 0
        try:
            if self._fd is None:
                self._open()
            total = sum(map(len, frames))
            if self.size + total + len(dnstap.STOP_FRAME) <= self.max_bytes:  # (mostly: all of it fits)
                self._append(frames)
                return len(frames)
            pending: list[bytes] = []
            size = self.size
            for frame in frames:
                if self._fd is None:
                    self._open()
                    size = self.size
                elif size + len(frame) + len(dnstap.STOP_FRAME) > self.max_bytes and size > len(START):
                    self._append(pending)
                    written += len(pending)
                    pending = []
                    self._close()
                    self._rotate()
                    self._open()
                    size = self.size
                pending.append(frame)
                size += len(frame)
            self._append(pending)
            return written + len(pending)
        except _Short as e:
            raise Unwritten(written + e.written, reason_of(e.error)) from None
        except NotOurs as e:
            raise Unwritten(written, str(e)) from None
        except OSError as e:
            raise Unwritten(written, reason_of(e)) from None

    def close(self) -> None:
        """End the file with a STOP frame (where there is room) and close it."""
        if self._fd is not None:
            self._close()
        if self._dir is not None:
            os.close(self._dir)
            self._dir = None

    # -- the folder ----------------------------------------------------------------------------

    def _folder(self) -> int:
        """The file's folder, opened: the log's own folder as named (made if missing), then
        each folder below it without following a link."""
        if self._dir is not None:
            return self._dir
        uid = os.geteuid()
        self.folder.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        where = self.folder
        try:
            problem = _folder_problem(os.fstat(fd), uid)
            if problem is not None:
                raise NotOurs(f"the query log's folder {where} {problem}: the log writes nothing there")
            for part in self._below:
                where = where / part
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, DIR_MODE, dir_fd=fd)
                try:
                    below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        kind = "a symbolic link (never followed)" if _is_link(part, fd) else "not a folder"
                        raise NotOurs(f"{where} is {kind}: the query log writes nothing there") from None
                    raise
                os.close(fd)
                fd = below
                problem = _folder_problem(os.fstat(fd), uid)
                if problem is not None:
                    raise NotOurs(f"{where} {problem}: the query log writes nothing there")
        except BaseException:
            os.close(fd)
            raise
        self._dir = fd
        return fd

    def _foreign(self, name: str) -> str | None:
        """Why the file *name* (in the file's folder) is not the log's own; None when it is,
        or when there is nothing there."""
        folder = self._folder()
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return "is a symbolic link"
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        except FileNotFoundError:
            return None
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(opened.st_mode):
                return "changed while it was examined"
            head = b""
            while len(head) < len(START):
                chunk = os.read(fd, len(START) - len(head))
                if not chunk:
                    break
                head += chunk
        finally:
            os.close(fd)
        if head != START:
            return "is not a query log file (it does not begin with a dnstap Frame Streams START frame)"
        return None

    # -- the file ------------------------------------------------------------------------------

    def _open(self) -> None:
        folder = self._folder()
        name = self.path.name
        if self._exists(name):
            self._rotate()  # a previous run's file: never appended to after its STOP frame
        try:
            # (client addresses: readable by the node's user and group only)
            fd = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                FILE_MODE,
                dir_fd=folder,
            )
        except FileExistsError:
            raise NotOurs(f"{self.path} appeared while the query log opened it: the log leaves it alone") from None
        self._fd = fd
        self.size = 0
        try:
            self._append([START])
        except _Short as e:
            os.close(fd)
            self._fd = None
            os.unlink(name, dir_fd=folder)  # (made just now, by this log)
            raise e.error from None

    def _exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self._folder(), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def _append(self, chunks: Sequence[bytes]) -> None:
        """Write *chunks* (whole frames) at the end; raise `_Short` with how many went in
        whole, the file cut back to the end of the last of them, when not all did."""
        if not chunks:
            return
        assert self._fd is not None
        data = memoryview(b"".join(chunks))
        at = 0
        try:
            while at < len(data):
                n = self.os_write(self._fd, data[at:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                at += n
        except OSError as e:
            whole = count = 0
            for chunk in chunks:
                if whole + len(chunk) > at:
                    break
                whole += len(chunk)
                count += 1
            if at > whole:
                self._cut(self.size + whole)
            self.size += whole
            raise _Short(count, e) from None
        self.size += at

    def _cut(self, size: int) -> None:
        """Cut the file back to *size* bytes (the end of a whole frame)."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, size)
        except OSError:
            # (the file ends with part of a frame: close it; the next write rotates it
            # away, so nothing is ever written after the cut)
            os.close(self._fd)
            self._fd = None
            raise

    def _close(self) -> None:
        assert self._fd is not None
        try:
            self._append([dnstap.STOP_FRAME])
        except _Short:
            pass  # (no room: the file ends after its last whole record, and is read so)
        finally:
            if self._fd is not None:
                os.close(self._fd)
            self._fd = None

    def _rotate(self) -> None:
        """PATH -> PATH.1 -> ... -> PATH.<keep>; the oldest goes (with keep 0, PATH itself).
        Every file it would rename or remove is checked first: one that is not the log's
        own raises `NotOurs`, nothing moved."""
        folder = self._folder()
        name = self.path.name
        touched = [name, *(f"{name}.{n}" for n in range(1, self.keep + 1))]
        for each in touched:
            why = self._foreign(each)
            if why is not None:
                raise NotOurs(
                    f"{self.path.with_name(each)} {why}: the query log never replaces, renames or removes a file "
                    "it did not write (move it away)"
                )
        if self.keep == 0:
            _unlink(name, folder)
        else:
            _unlink(touched[-1], folder)
            for n in range(self.keep - 1, 0, -1):
                if self._exists(touched[n]):
                    os.rename(touched[n], touched[n + 1], src_dir_fd=folder, dst_dir_fd=folder)
            os.rename(name, touched[1], src_dir_fd=folder, dst_dir_fd=folder)
        self.rotations += 1


def _unlink(name: str, folder: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False
