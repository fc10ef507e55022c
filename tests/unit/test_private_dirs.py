"""The node's own directories (gtmcluster/runtime/private.py): a state_dir or log_dir that others may
write in, or that belongs to another user than the node's (twistd --uid), is refused at
start with a one-line reason, before anything is made in it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from twisted.python import usage
from twisted.scripts._twistd_unix import ServerOptions

from gtmcluster.runtime.private import directory_problem
from gtmcluster.tap import Options
from tests.support import configs
from tests.support.nodeproc import loopback_address

NOBODY = 65534
ME = os.geteuid()


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        (0o700, None),
        (0o755, None),
        (0o775, "is writable by its group (mode 0775): chmod go-w"),
        (0o757, "is writable by others (mode 0757)"),
        (0o777, "is writable by its group and others (mode 0777)"),
        (0o1777, "is writable by its group and others (mode 1777)"),
    ],
)
def test_a_directory_others_may_write_in_is_refused(tmp_path: Path, mode: int, problem: str | None) -> None:
    directory = tmp_path / "state"
    directory.mkdir()
    directory.chmod(mode)
    found = directory_problem(directory, ME, "state_dir")
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(f"state_dir {directory} ") and problem in found, found


def test_what_is_not_there_yet_or_not_a_directory(tmp_path: Path) -> None:
    assert directory_problem(tmp_path / "missing", ME, "log_dir") is None  # the node makes state_dir
    (tmp_path / "file").write_text("")
    assert directory_problem(tmp_path / "file", ME, "log_dir") == f"log_dir {tmp_path / 'file'} is not a directory"


@pytest.mark.skipif(ME != 0, reason="needs root to hand a directory to another user")
def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    os.chown(directory, NOBODY, NOBODY)
    assert directory_problem(directory, NOBODY, "state_dir") is None  # the user twistd --uid switches to
    found = directory_problem(directory, 0, "state_dir")
    assert found == (
        f"state_dir {directory} belongs to uid {NOBODY}, not to the node's user (uid 0): chown it to that user"
    )


def config_with(tmp_path: Path) -> Path:
    raw = configs.base(loopback_address(), 5353)  # (its sockets are bound when nothing is refused)
    raw["state_dir"] = "state/{node}"
    raw["log_dir"] = "log"
    return configs.write(tmp_path, raw)


@pytest.mark.parametrize("which", ["state_dir", "log_dir"])
def test_twistd_refuses_to_start_with_a_directory_others_may_write_in(tmp_path: Path, which: str) -> None:
    """`twistd gtm` says what is wrong in one line, and makes nothing in the directory (no
    API token)."""
    path = config_with(tmp_path)
    state, log = tmp_path / "state" / "n1", tmp_path / "log"
    state.mkdir(parents=True)
    log.mkdir()
    (state if which == "state_dir" else log).chmod(0o777)
    with pytest.raises(usage.UsageError) as refused:
        Options().parseOptions(["--config", str(path), "--node", "n1"])
    assert str(refused.value).startswith(f"{which} ") and "\n" not in str(refused.value), refused.value
    assert "is writable by its group and others (mode 0777)" in str(refused.value)
    assert list(state.iterdir()) == []


@pytest.mark.skipif(ME != 0, reason="needs root for twistd --uid")
def test_with_twistd_uid_the_directories_must_be_that_users(tmp_path: Path) -> None:
    """Under `twistd --uid`, the node's user is the one twistd switches to: root's own
    state_dir is refused, that user's is taken."""
    path = config_with(tmp_path)
    state = tmp_path / "state" / "n1"
    state.mkdir(parents=True, mode=0o700)
    args = ["--uid", str(NOBODY), "--gid", str(NOBODY), "gtm", "--config", str(path), "--node", "n1"]
    with pytest.raises(
        usage.UsageError, match=rf"^state_dir {state} belongs to uid 0, not to the node's user \(uid {NOBODY}\)"
    ):
        ServerOptions().parseOptions(args)
    os.chown(state, NOBODY, NOBODY)
    options = ServerOptions()
    try:
        options.parseOptions(args)
    finally:
        sub = options.subOptions
        if sub is not None:
            sub._release()
    assert (state / "api-token").stat().st_uid == NOBODY
