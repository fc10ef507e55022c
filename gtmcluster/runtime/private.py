"""The node's own directories (``state_dir``, ``log_dir``): only the node's user may change
what is in them.

The node keeps its state snapshot and API token in ``state_dir`` and twistd writes its log
to ``log_dir``; whoever may create, rename or replace entries there could swap a file for a
symbolic link (the node then writing where that link points), read the state, or forge it.
So at start (`gtmcluster.tap`, before anything is opened) a directory that is writable by
its group or by others, or that belongs to another user than the one the node runs as
(twistd ``--uid``), is refused with a one-line reason. One that does not exist yet is fine:
the node makes ``state_dir`` itself, mode 0700.

The files only their owner may read (private keys: the sync group's, the zones' DNSSEC
keys and their roll state) are written here (`write`): to a temporary name in the same
directory, created with its final mode, synced and then moved into place, so a crash never
leaves a half-written or readable key; nothing is overwritten unless asked; a key and its
certificate replaced together are staged first (`replace_together`). Their
directories are made 0700 (`make_directory`). A failure is a `WriteError` whose message
says why and what to do.

Plain file work, no Twisted.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

#: a private key's mode, and its directory's
KEY_MODE = 0o600
DIR_MODE = 0o700


def directory_problem(path: Path, uid: int, what: str) -> str | None:
    """Why the directory *path* (the config's *what*) may not be used by a node running as
    *uid*, in one line; None when it may (or does not exist yet)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{what} {path} cannot be examined: {e.strerror or e}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{what} {path} is not a directory"
    if st.st_uid != uid:
        return f"{what} {path} belongs to uid {st.st_uid}, not to the node's user (uid {uid}): chown it to that user"
    if st.st_mode & 0o022:
        who = "its group and others" if st.st_mode & 0o022 == 0o022 else "others" if st.st_mode & 0o002 else "its group"
        mode = stat.S_IMODE(st.st_mode)
        return f"{what} {path} is writable by {who} (mode {mode:04o}): chmod go-w {path}"
    return None


# -- writing a private file ---------------------------------------------------------------


class WriteError(Exception):
    """A private file or directory that cannot be written; the message says why and what to do."""


def exists(path: Path) -> bool:
    """Whether *path* is there, a dangling symbolic link too."""
    return path.exists() or path.is_symlink()


def refuse_existing(paths: Iterable[Path], hint: str) -> None:
    """Refuse (`WriteError`, ending with *hint*) when any of *paths* is there already."""
    existing = [str(p) for p in paths if exists(p)]
    if existing:
        verb = "exists" if len(existing) == 1 else "exist"
        raise WriteError(f"{' and '.join(existing)} already {verb}: {hint}")


def loose_mode(path: Path) -> int | None:
    """*path*'s mode when its group or others may do anything with it (a private key's must
    be 0600 or stricter), else None; FileNotFoundError when it is not there."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    return mode if mode & 0o077 else None


def make_directory(directory: Path) -> None:
    """Make *directory* (and its parents), mode exactly 0700; one that is there is fine."""
    try:
        directory.mkdir(mode=DIR_MODE, parents=True)
    except FileExistsError:
        if not directory.is_dir():
            raise WriteError(f"{directory} exists and is not a directory: choose another --dir") from None
        return
    except OSError as e:
        raise WriteError(f"cannot create {directory}: {e.strerror or e}") from e
    with contextlib.suppress(OSError):
        os.chmod(directory, DIR_MODE)  # exactly 0700, whatever the umask


def write(path: Path, data: bytes, mode: int, replace: bool) -> None:
    """Write `data` to `path` with `mode` through a temporary file in the same directory.

    The temporary file is created with `mode` (O_EXCL, so never an existing file) and fixed
    to exactly `mode` before any byte is written, then synced and moved into place: by
    rename when `replace`, else by hard link, which fails rather than overwrite a file that
    appeared meanwhile.
    """
    try:
        temp = _staged(path, data, mode)
        try:
            if replace:
                os.replace(temp, path)
            else:
                _link_new(temp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
    except FileExistsError as e:
        raise WriteError(f"{path} already exists: pass --force to replace it") from e
    except OSError as e:
        raise WriteError(f"cannot write {path}: {e.strerror or e}") from e
    _sync_directory(path.parent)


def replace_together(entries: Sequence[tuple[Path, bytes, int]]) -> None:
    """Replace each (path, data, mode) of *entries*, as `write` with `replace` does, but
    staged first: every temporary file is written and synced before the first rename, so a
    full disk or a write error changes none of them, and the renames follow each other with
    nothing between (a key and its certificate are never a new key beside an old
    certificate for longer than that)."""
    staged: list[Path] = []
    try:
        for path, data, mode in entries:
            try:
                staged.append(_staged(path, data, mode))
            except OSError as e:
                raise WriteError(f"cannot write {path}: {e.strerror or e}") from e
        for (path, _, _), temp in zip(entries, staged, strict=True):
            try:
                os.replace(temp, path)
            except OSError as e:
                raise WriteError(f"cannot write {path}: {e.strerror or e}") from e
    finally:
        for temp in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
    for directory in dict.fromkeys(path.parent for path, _, _ in entries):
        _sync_directory(directory)


def _staged(path: Path, data: bytes, mode: int) -> Path:
    """*data* in a new temporary file beside *path*, exactly *mode* before its first byte,
    synced; removed again if writing it fails."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have taken bits away (or, for certificates, we want 0644)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return temp


def _link_new(temp: Path, path: Path) -> None:
    try:
        os.link(temp, path)
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise
        # a file system without hard links: check, then rename (a small window, no worse)
        if exists(path):
            raise FileExistsError(errno.EEXIST, "File exists", str(path)) from e
        os.rename(temp, path)


def _sync_directory(directory: Path) -> None:
    """Make the rename durable; best effort (not every platform can open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
