"""The node's own directories (``state_dir``, ``log_dir``): only the node's user may change
what is in them.

The node keeps its state snapshot and API token in ``state_dir`` and twistd writes its log
to ``log_dir``; whoever may create, rename or replace entries there could swap a file for a
symbolic link (the node then writing where that link points), read the state, or forge it.
So at start (`gtmcluster.tap`, before anything is opened) a directory that is writable by
its group or by others, or that belongs to another user than the one the node runs as
(twistd ``--uid``), is refused with a one-line reason. One that does not exist yet is fine:
the node makes ``state_dir`` itself, mode 0700.

Plain file work, no Twisted.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


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
