"""The node's own API token: made once, kept in its state_dir, found there by the CLI.

Every write to the API needs a bearer token. When the config sets none (``api.token`` or
``api.token_file``), the node uses the one in ``STATE_DIR/api-token``, which it makes at
its first start: 32 random bytes (URL-safe base64), in a file created with mode 0600 (so it
is never readable by others, not even for a moment), never through a symbolic link, and
never logged. Later starts use the same token; a file that is not a regular file of the
node's user, readable by others, or not a token, is refused with the reason.

Plain file work, no Twisted: the tap calls `settle` before the reactor runs, the CLI `read`.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from pathlib import Path

FILE_NAME = "api-token"
#: what a token looks like (the config's are checked for length only; ours are 43 characters)
_TOKEN = re.compile(r"[\x21-\x7e]{16,4096}")


class TokenFileError(Exception):
    """The token file cannot be used; the message says why and what to do."""


def path_in(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


def settle(state_dir: Path, owner: tuple[int, int] | None = None) -> str:
    """The token kept in *state_dir*, made now if there is none. *owner* (uid, gid): the
    user the node will run as after dropping privileges (twistd ``--uid``), who gets what is
    made here."""
    path = path_in(state_dir)
    found = _read(path, owner[0] if owner else os.geteuid())
    if found is not None:
        return found
    _make_directories(state_dir, owner)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # another process made it meanwhile: use theirs
        return settle(state_dir, owner)
    except OSError as e:
        raise TokenFileError(f"cannot create {path}: {e.strerror or e}") from None
    try:
        os.fchmod(fd, 0o600)  # exactly 0600 whatever the umask
        if owner is not None:
            os.fchown(fd, *owner)
        os.write(fd, token.encode() + b"\n")
        os.fsync(fd)
    except OSError as e:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise TokenFileError(f"cannot write {path}: {e.strerror or e}") from None
    os.close(fd)
    _fsync_directory(state_dir)
    return token


def read(state_dir: Path) -> str | None:
    """The token in *state_dir* (for the CLI), or None when there is none. Raises
    `TokenFileError` when it exists but cannot be read (as another user, typically)."""
    return _read(path_in(state_dir), None)


def _read(path: Path, owner: int | None) -> str | None:
    """The token at *path*, None when missing. With *owner*, the file must belong to that
    user and be private to it (the node's checks); without, any readable file is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise TokenFileError(f"{path} is a symbolic link: remove it (the node makes a new token)") from None
        raise TokenFileError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TokenFileError(f"{path} is not a regular file: remove it (the node makes a new token)")
        if owner is not None and st.st_uid != owner:
            raise TokenFileError(
                f"{path} belongs to uid {st.st_uid}, not to the node's user (uid {owner}): "
                "remove it (the node makes a new token)"
            )
        if owner is not None and st.st_mode & 0o077:
            raise TokenFileError(
                f"{path} is readable or writable by others (mode {stat.S_IMODE(st.st_mode):04o}): "
                "remove it and start the node again to have a new token made"
            )
        data = os.read(fd, 8192)
    except OSError as e:
        raise TokenFileError(f"cannot read {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    token = data.decode("ascii", errors="replace").strip()
    if not _TOKEN.fullmatch(token):
        raise TokenFileError(f"{path} does not hold a token: remove it (the node makes a new one)")
    return token


def _make_directories(state_dir: Path, owner: tuple[int, int] | None) -> None:
    """Create *state_dir* (mode 0700) and any missing parent, given to *owner*."""
    missing = []
    for directory in (state_dir, *state_dir.parents):
        if directory.exists():
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700 if directory == state_dir else 0o777)
        except FileExistsError:
            pass
        except OSError as e:
            raise TokenFileError(f"cannot create {directory}: {e.strerror or e}") from None
        if owner is not None:
            os.chown(directory, *owner)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
