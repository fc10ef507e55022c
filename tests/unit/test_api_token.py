"""The node's own API token (`gtmcluster.api.token`) and how the CLI finds a token
(`gtmcluster.cli.nodeapi.Tokens`): made once with mode 0600 whatever the umask, kept across
starts, never through a symbolic link; unsafe files refused with the reason; the CLI's
order: --token-file, GTM_API_TOKEN, the config, the member's own file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from twisted.python import usage

from gtmcluster.api import token
from gtmcluster.cli.nodeapi import CliError, Tokens
from gtmcluster.config.load import load
from gtmcluster.tap import Options
from tests.support import configs

NOBODY = 65534


def test_made_once_private_and_kept(tmp_path: Path) -> None:
    """The first start makes the directory (0700) and a 0600 file of 43 URL-safe characters,
    even under umask 0; later starts read the same token."""
    state = tmp_path / "var" / "state" / "n1"
    old = os.umask(0)
    try:
        made = token.settle(state)
    finally:
        os.umask(old)
    path = state / "api-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert len(made) == 43 and path.read_text() == made + "\n"
    assert token.settle(state) == made == token.read(state)
    assert token.settle(tmp_path / "other") != made


@pytest.mark.parametrize("dangling", [True, False])
def test_a_symbolic_link_is_refused_and_not_followed(tmp_path: Path, dangling: bool) -> None:
    """A link at the token's place is refused; nothing is created or changed at its target."""
    target = tmp_path / "elsewhere"
    if not dangling:
        target.write_text("precious\n")
        target.chmod(0o644)
    state = tmp_path / "state"
    state.mkdir()
    (state / "api-token").symlink_to(target)
    with pytest.raises(token.TokenFileError, match="symbolic link"):
        token.settle(state)
    if dangling:
        assert not target.exists()
    else:
        assert target.read_text() == "precious\n" and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_unsafe_files_are_refused_with_the_reason(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    path = state / "api-token"
    path.write_text("a-token-someone-could-read-0123\n")
    path.chmod(0o644)
    with pytest.raises(token.TokenFileError, match=r"readable or writable by others \(mode 0644\): remove it"):
        token.settle(state)
    assert token.read(state) == "a-token-someone-could-read-0123", "the CLI reads it regardless"
    path.chmod(0o600)
    path.write_text("short\n")
    with pytest.raises(token.TokenFileError, match="does not hold a token"):
        token.settle(state)
    path.unlink()
    path.mkdir()
    with pytest.raises(token.TokenFileError, match="not a regular file"):
        token.settle(state)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand files to another user")
def test_files_of_another_user_and_the_user_twistd_switches_to(tmp_path: Path) -> None:
    """A token file of another user is refused; with twistd --uid, what is made belongs to
    that user (the node runs as it after start), and is then accepted for it."""
    tmp_path.chmod(0o755)
    state = tmp_path / "state"
    made = token.settle(state, owner=(NOBODY, NOBODY))
    st = (state / "api-token").stat()
    assert (st.st_uid, st.st_gid, state.stat().st_uid) == (NOBODY, NOBODY, NOBODY)
    assert token.settle(state, owner=(NOBODY, NOBODY)) == made
    with pytest.raises(token.TokenFileError, match=f"belongs to uid {NOBODY}"):
        token.settle(state)


def test_twistd_refuses_to_start_on_an_unusable_token_file(tmp_path: Path) -> None:
    """`twistd gtm` says what is wrong in one line, before opening any socket."""
    path = configs.write(tmp_path, configs.base("127.0.0.1", 5353))
    state = tmp_path / "var" / "state" / "n1"
    state.mkdir(parents=True)
    (state / "api-token").symlink_to(tmp_path / "nowhere")
    with pytest.raises(usage.UsageError, match=r"^the API's token: .*api-token is a symbolic link"):
        Options().parseOptions(["--config", str(path), "--node", "n1"])


def test_where_the_cli_finds_the_token(tmp_path: Path) -> None:
    """--token-file, then GTM_API_TOKEN, then the config's api.token, then the member's own
    file; each says where it came from."""
    raw = configs.base("127.0.0.1", 5353)
    plain = load(configs.write(tmp_path, raw))
    member = plain.member("n1")
    assert Tokens(plain, environ={}).for_member(member) is None
    made = token.settle(plain.state_dir_for("n1"))
    found = Tokens(plain, environ={}).for_member(member)
    assert found is not None and found.value == made and found.source.endswith("var/state/n1/api-token")

    raw["api"] = {"token": "configured-token-0123456789"}
    configured = load(configs.write(tmp_path, raw, name="configured.yaml"))
    found = Tokens(configured, environ={}).for_member(member)
    assert found is not None and (found.value, found.source) == (
        "configured-token-0123456789",
        "the config's api.token",
    )
    environ = {"GTM_API_TOKEN": " from-the-environment-0123 \n"}
    found = Tokens(configured, environ=environ).for_member(member)
    assert found is not None and (found.value, found.source) == ("from-the-environment-0123", "GTM_API_TOKEN")
    given = tmp_path / "token.txt"
    given.write_text("from-the-file-0123456789\n")
    found = Tokens(configured, str(given), environ=environ).for_member(member)
    assert found is not None and (found.value, found.source) == ("from-the-file-0123456789", f"--token-file {given}")

    with pytest.raises(CliError, match=r"cannot read --token-file .*missing"):
        Tokens(plain, str(tmp_path / "missing"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(CliError, match="is empty"):
        Tokens(plain, str(tmp_path / "empty"))


def test_the_cli_says_why_a_token_file_cannot_be_read(tmp_path: Path) -> None:
    plain = load(configs.write(tmp_path, configs.base("127.0.0.1", 5353)))
    (plain.state_dir_for("n1") / "api-token").mkdir(parents=True)
    tokens = Tokens(plain, environ={})
    assert tokens.for_member(plain.member("n1")) is None
    assert "not a regular file" in tokens.unreadable["n1"]
    assert "--token-file PATH or GTM_API_TOKEN" in tokens.where(plain.member("n1"))
