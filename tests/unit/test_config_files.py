"""Files a config names (`gtmcluster.runtime.files`), read safely: a FIFO, a device, a
directory or a file over its kind's cap is one clear problem at once, naming the file and
the reason, never a blocked read, endless memory or a traceback; the API's token file must
be private. Each kind is tried where the code reads it: the config itself, address lists,
the token file, PEM files, DNSSEC keys, GeoIP databases, monitors' CA files."""

from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import maxminddb
import pytest

from gtmcluster.config.load import load
from gtmcluster.config.model import TLSFiles
from gtmcluster.config.problems import ConfigError, Problem
from gtmcluster.dnsdata import keys
from gtmcluster.probe.http import load_trust
from gtmcluster.runtime import files, slices
from gtmcluster.sync import certs
from gtmcluster.sync.tls import CredentialError, load_credentials
from gtmcluster.topology import addrlist
from gtmcluster.topology.geoip import GeoIPError, open_database
from tests.support import configs, geodb
from tests.support.hostilefiles import DEV_ZERO, make_fifo, memory_capped, released_after, sparse

TOKEN = "a-token-of-enough-characters"
CHMOD = "chmod 600 it (or 640 to let its group read it)"
#: a refusal takes no time: the FIFO is released after this (code that blocks fails late)
RELEASE_AFTER = 2.0


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = make_fifo(tmp_path / "fifo")
    with released_after(path, RELEASE_AFTER):
        yield path


def quickly(action: Callable[[], Any], within: float = 1.0) -> Any:
    """Run *action* under a memory cap; it must end within *within* seconds. Returns what
    it raised (or returned)."""
    started = time.monotonic()
    with memory_capped():
        try:
            outcome = action()
        except Exception as e:
            outcome = e.with_traceback(None)  # (its frames may hold what was read)
    elapsed = time.monotonic() - started
    assert elapsed < within, f"took {elapsed:.2f}s: {outcome!r}"
    return outcome


# --- the helper ------------------------------------------------------------------------


def test_a_regular_file_is_read_whole_and_in_pieces(tmp_path: Path) -> None:
    """A regular file within its cap is read whole, or in pieces of at most the size asked."""
    path = tmp_path / "list"
    data = os.urandom(3000)
    path.write_bytes(data)
    assert files.read_bytes(path, files.ADDRESS_LIST) == data
    pieces = list(files.chunks(path, files.ADDRESS_LIST, 1024))
    assert [len(p) for p in pieces] == [1024, 1024, 952] and b"".join(pieces) == data


@pytest.mark.parametrize("name", ["fifo", "dev_zero", "directory", "socket", "dev_null"])
def test_anything_but_a_regular_file_is_refused_without_being_opened(
    tmp_path: Path, fifo: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO, a device, a directory or a socket is refused at once, naming what it is,
    and is never opened (opening a device may do things; opening a FIFO may block)."""
    target = {"fifo": fifo, "dev_zero": DEV_ZERO, "directory": tmp_path, "dev_null": Path("/dev/null")}.get(name)
    if name == "socket":
        target = tmp_path / "sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
        server.close()
    assert target is not None
    opened: list[str] = []
    real_open = os.open

    def spied_open(p: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(os.fspath(p))
        return real_open(p, *args, **kwargs)

    monkeypatch.setattr(os, "open", spied_open)
    refused = quickly(lambda: files.read_bytes(target, files.ADDRESS_LIST))
    kind = {"fifo": "a FIFO", "dev_zero": "a character device", "dev_null": "a character device"}
    kind |= {"directory": "a directory", "socket": "a socket"}
    assert isinstance(refused, files.Refused) and isinstance(refused, OSError)
    assert str(refused) == f"{target}: {kind[name]}, not a regular file"
    assert opened == []


def test_a_regular_file_swapped_for_a_fifo_before_the_open_is_refused_without_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the look (stat) and the open the name may come to point at a FIFO: the open
    does not block (O_NONBLOCK) and the file opened is refused (fstat)."""
    path = tmp_path / "list"
    path.write_text("192.0.2.0/24\n")
    other = make_fifo(tmp_path / "other")
    real_stat = os.stat

    def stat_then_swap(p: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        found = real_stat(p, *args, **kwargs)
        if os.fspath(p) == str(path):
            os.replace(other, path)
        return found

    monkeypatch.setattr(os, "stat", stat_then_swap)
    with released_after(path, RELEASE_AFTER):
        refused = quickly(lambda: files.read_bytes(path, files.ADDRESS_LIST))
    assert isinstance(refused, files.Refused) and refused.strerror == "a FIFO, not a regular file"


def test_a_file_over_its_cap_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    """A file bigger than its kind may be is refused on its size, saying both sizes."""
    big = sparse(tmp_path / "big", files.ADDRESS_LIST.cap + 1)
    refused = quickly(lambda: files.read_bytes(big, files.ADDRESS_LIST), within=0.2)
    assert isinstance(refused, files.Refused)
    assert refused.strerror == "67,108,865 bytes, more than an address list may hold (64 MiB)"
    exact = sparse(tmp_path / "exact", 4096)
    assert len(files.read_bytes(exact, files.Kind("a test file", 4096))) == 4096


def test_a_file_that_holds_more_than_its_size_says_is_cut_at_the_cap() -> None:
    """A file that grows while read, or says it is empty and is not (as /proc's files do),
    is refused once it passes the cap: at most the cap and one byte are read."""
    small = files.Kind("a test file", 100)
    assert os.stat("/proc/self/status").st_size == 0
    refused = quickly(lambda: files.read_bytes("/proc/self/status", small))
    assert isinstance(refused, files.Refused)
    assert refused.strerror == "it grew past 100 bytes while read, more than a test file may hold"
    assert files.read_bytes("/proc/self/status", files.ADDRESS_LIST).startswith(b"Name:")


def test_text_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "list"
    path.write_bytes(b"192.0.2.0/24\n\xff\xfe\n")
    refused = quickly(lambda: files.read_text(path, files.ADDRESS_LIST))
    assert isinstance(refused, files.Refused)
    assert refused.strerror == "not UTF-8 text (byte 13: invalid start byte)"


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        (0o600, None),
        (0o400, None),
        (0o640, None),
        (0o644, "it may be read by others (mode 0644)"),
        (0o660, "it may be written by its group (mode 0660)"),
        (0o602, "it may be written by others (mode 0602)"),
        (0o666, "it may be read by others and written by its group and others (mode 0666)"),
    ],
)
def test_a_secret_others_may_read_or_anyone_else_write_is_refused(tmp_path: Path, mode: int, problem: str) -> None:
    """A secret may be read by its group (operators) but not by others, and written by no
    one but its owner (whoever may write the API's token may set their own)."""
    path = tmp_path / "token"
    path.write_text(TOKEN)
    path.chmod(mode)
    if problem is None:
        assert files.read_text(path, files.SECRET) == TOKEN
    else:
        with pytest.raises(files.Refused) as refused:
            files.read_text(path, files.SECRET)
        assert refused.value.strerror == f"{problem}: {CHMOD}"


def test_a_symbolic_link_is_followed_and_what_it_points_at_is_checked(tmp_path: Path, fifo: Path) -> None:
    """Links are followed (certificates and mounted secrets are often links); the checks
    apply to the file reached, so a link makes nothing pass that would not."""
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    (tmp_path / "link").symlink_to(token)
    assert files.read_text(tmp_path / "link", files.SECRET) == TOKEN
    token.chmod(0o644)
    with pytest.raises(files.Refused, match="read by others"):
        files.read_text(tmp_path / "link", files.SECRET)
    (tmp_path / "to-fifo").symlink_to(fifo)
    refused = quickly(lambda: files.read_bytes(tmp_path / "to-fifo", files.PEM))
    assert isinstance(refused, files.Refused) and refused.strerror == "a FIFO, not a regular file"


def test_a_missing_file_is_the_usual_error() -> None:
    with pytest.raises(FileNotFoundError):
        files.read_bytes("/nonexistent/file", files.PEM)


# --- each kind, where the code reads it ------------------------------------------------


def config_problems(directory: Path, change: Callable[[dict[str, Any]], None]) -> list[Problem]:
    config = configs.base()
    change(config)
    path = configs.write(directory, config)
    outcome = quickly(lambda: load(path))
    assert isinstance(outcome, ConfigError), outcome
    return outcome.problems


def hostile(tmp_path: Path, fifo: Path, name: str, kind: files.Kind) -> Path:
    """The FIFO, /dev/zero, or a file one byte over *kind*'s cap."""
    return {"fifo": fifo, "dev_zero": DEV_ZERO}.get(name) or sparse(tmp_path / "huge", kind.cap + 1)


HOSTILE = ["fifo", "dev_zero", "over_cap"]
WHY = {"fifo": "a FIFO, not a regular file", "dev_zero": "a character device, not a regular file"}


def why(name: str, kind: files.Kind) -> str:
    return WHY.get(name) or f"{kind.cap + 1:,} bytes, more than {kind.what} may hold ({files.size_text(kind.cap)})"


@pytest.mark.parametrize("name", HOSTILE)
def test_the_config_file_itself(tmp_path: Path, fifo: Path, name: str) -> None:
    """`load` of a FIFO, /dev/zero or a file over 64 MiB: one problem, at once."""
    path = hostile(tmp_path, fifo, name, files.CONFIG)
    outcome = quickly(lambda: load(path))
    assert isinstance(outcome, ConfigError)
    assert [str(p) for p in outcome.problems] == [
        f"{path}: (top level): cannot read the config: {why(name, files.CONFIG)}"
    ]


@pytest.mark.parametrize("name", HOSTILE)
def test_an_address_list(tmp_path: Path, fifo: Path, name: str) -> None:
    """A region's address list: one problem at its key path, naming the file and why."""
    path = hostile(tmp_path, fifo, name, files.ADDRESS_LIST)
    problems = config_problems(tmp_path, lambda c: c["regions"].update(r3=[{"file": str(path)}]))
    assert [(p.path, p.message) for p in problems] == [
        (("regions", "r3", 0, "file"), f"cannot read {path}: {why(name, files.ADDRESS_LIST)}")
    ]


def test_an_address_list_that_is_not_text(tmp_path: Path) -> None:
    (tmp_path / "list").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(64))
    problems = config_problems(tmp_path, lambda c: c["regions"].update(r3=[{"file": "list"}]))
    assert [p.message for p in problems] == [
        f"cannot read {tmp_path / 'list'}: not UTF-8 text (byte 0: invalid start byte)"
    ]
    assert addrlist.parse("192.0.2.0/24\n")[0]  # (the parser itself is unchanged)


def token_file_config(path: Path) -> Callable[[dict[str, Any]], None]:
    return lambda c: c.update(api={"token_file": str(path)})


@pytest.mark.parametrize("name", HOSTILE)
def test_the_api_token_file_that_is_no_regular_file(tmp_path: Path, fifo: Path, name: str) -> None:
    path = hostile(tmp_path, fifo, name, files.SECRET)
    problems = config_problems(tmp_path, token_file_config(path))
    assert [(p.path, p.message) for p in problems] == [
        (("api", "token_file"), f"cannot read {path}: {why(name, files.SECRET)}")
    ]


@pytest.mark.parametrize(
    ("content", "mode", "problem"),
    [
        ("x" * 1024 * 1024, 0o600, "cannot read {path}: 1,048,576 bytes, more than a secret file may hold (8 KiB)"),
        (
            TOKEN,
            0o644,
            "cannot read {path}: it may be read by others (mode 0644): " + CHMOD,
        ),
        (
            TOKEN,
            0o620,
            "cannot read {path}: it may be written by its group (mode 0620): " + CHMOD,
        ),
        ("", 0o600, "the token must have at least 16 characters"),
        ("x" * 15 + "\n", 0o600, "the token must have at least 16 characters"),
    ],
)
def test_the_api_token_file_is_read_as_a_secret(tmp_path: Path, content: str, mode: int, problem: str) -> None:
    """api.token_file: at most 8 KiB, not readable by others nor writable by anyone but its
    owner, at least 16 characters: each refusal one problem at api.token_file."""
    path = tmp_path / "token"
    path.write_text(content)
    path.chmod(mode)
    problems = config_problems(tmp_path, token_file_config(path))
    assert [(p.path, p.message) for p in problems] == [(("api", "token_file"), problem.format(path=path))]


@pytest.mark.parametrize("name", [*HOSTILE, "readable"])
def test_a_tsig_secret_file(tmp_path: Path, fifo: Path, name: str) -> None:
    """A TSIG key's secret_file is a secret as the token file is."""
    if name == "readable":
        path = tmp_path / "xfr.key"
        path.write_text("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n")
        path.chmod(0o644)
        reason = f"it may be read by others (mode 0644): {CHMOD}"
    else:
        path = hostile(tmp_path, fifo, name, files.SECRET)
        reason = why(name, files.SECRET)

    def with_key(config: dict[str, Any]) -> None:
        config["tsig_keys"] = {"xfr-key": {"secret_file": str(path)}}
        config["zones"][0]["transfer"] = {"allow": ["127.0.0.1/32"], "tsig": "xfr-key"}

    problems = config_problems(tmp_path, with_key)
    assert [(p.path, p.message) for p in problems if p.path[0] == "tsig_keys"] == [
        (("tsig_keys", "xfr-key", "secret_file"), f"cannot read {path}: {reason}")
    ]


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o640])
def test_a_private_api_token_file_is_read(tmp_path: Path, mode: int) -> None:
    """A private token file (or one its group may read), reached through a link, is the
    API's token."""
    path = tmp_path / "secret" / "token"
    path.parent.mkdir()
    path.write_text(TOKEN + "\n")
    path.chmod(mode)
    (tmp_path / "token-link").symlink_to(path)
    config = configs.base()
    config["api"] = {"token_file": "token-link"}
    loaded = load(configs.write(tmp_path, config))
    assert loaded.api.token == TOKEN
    assert loaded.api.token_file == tmp_path / "token-link"


@pytest.mark.parametrize("name", HOSTILE)
def test_a_geoip_database(tmp_path: Path, fifo: Path, name: str) -> None:
    """A GeoIP database: one problem at its key, no copy made of an oversized file."""
    path = hostile(tmp_path, fifo, name, files.GEOIP)
    problems = config_problems(tmp_path, lambda c: c.update(geoip={"country": str(path)}))
    assert [(p.path, p.message) for p in problems] == [
        (("geoip", "country"), f"cannot read {path}: {why(name, files.GEOIP)}")
    ]


def test_a_truncated_geoip_database_is_not_a_maxmind_db(tmp_path: Path) -> None:
    data = geodb.write_country(tmp_path / "c.mmdb").read_bytes()
    (tmp_path / "c.mmdb").write_bytes(data[: len(data) // 2])
    with pytest.raises(GeoIPError) as refused:
        slices.whole(open_database("country", tmp_path / "c.mmdb"))
    assert str(refused.value).startswith(f"{tmp_path / 'c.mmdb'}: not a MaxMind DB (.mmdb) file: ")
    assert "/proc/self/fd" not in str(refused.value)  # the private copy is not what is named


def test_any_error_opening_a_geoip_database_is_not_a_maxmind_db(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the C extension, the pure-Python reader raises TypeError on metadata with a
    field it does not know: that too is one problem naming the file, not a traceback."""
    path = geodb.write_country(tmp_path / "c.mmdb")
    path.write_bytes(path.read_bytes().replace(b"node_count", b"node_xount"))
    monkeypatch.setattr(maxminddb, "_extension", None)  # a host without the C extension
    problems = config_problems(tmp_path, lambda c: c.update(geoip={"country": str(path)}))
    assert [(p.path, p.message) for p in problems] == [
        (
            ("geoip", "country"),
            f"{path}: not a MaxMind DB (.mmdb) file: "
            "Metadata.__init__() got an unexpected keyword argument 'node_xount'",
        )
    ]


def test_the_geoip_copy_is_in_memory_not_in_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The private copy the reader maps is a sealed memory file: nothing is written to
    $TMPDIR (or any folder), and the copy cannot be changed."""
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    path = geodb.write_country(tmp_path / "c.mmdb")
    database = slices.whole(open_database("country", path))
    try:
        maps = [line for line in Path("/proc/self/maps").read_text().splitlines() if "geoip" in line]
        assert maps and all("/memfd:gtm-geoip-country" in line for line in maps), maps
        assert not any(str(scratch) in line or str(tmp_path) in line for line in maps)
    finally:
        database.reader.close()


@pytest.mark.parametrize("which", ["ca", "cert", "key"])
@pytest.mark.parametrize("name", HOSTILE)
def test_sync_group_certificates_and_key(tmp_path: Path, fifo: Path, which: str, name: str) -> None:
    """This node's CA, certificate and key (read at start and on every reload)."""
    path = hostile(tmp_path, fifo, name, files.PEM)
    certs.init_ca(tmp_path / "certs")
    certs.issue(tmp_path / "certs", "n1")
    tls = {k: tmp_path / "certs" / f for k, f in (("ca", "ca.pem"), ("cert", "n1.pem"), ("key", "n1.key"))}
    tls[which] = path
    refused = quickly(lambda: load_credentials(TLSFiles(tls["ca"], tls["cert"], tls["key"]), "n1"))
    assert isinstance(refused, CredentialError)
    assert str(refused).startswith(f"{path}: cannot read ") and str(refused).endswith(why(name, files.PEM))


@pytest.mark.parametrize("name", HOSTILE)
def test_certificates_read_by_the_cli(tmp_path: Path, fifo: Path, name: str) -> None:
    path = hostile(tmp_path, fifo, name, files.PEM)
    for load_one in (certs.load_certificate, certs.load_private_key):
        refused = quickly(functools.partial(load_one, path))
        assert isinstance(refused, certs.CertError)
        assert str(refused) == f"cannot read {path}: {why(name, files.PEM)}"


@pytest.mark.parametrize("name", ["fifo", "over_cap"])
def test_a_dnssec_key(tmp_path: Path, fifo: Path, name: str) -> None:
    """A zone's key file that is a FIFO or huge: the zone's keys are refused, naming it."""
    directory = tmp_path / "keys"
    keys.keygen(directory, "example.test")
    key = keys.key_path(directory, "example.test", "csk")
    key.unlink()
    if name == "fifo":
        os.replace(fifo, key)
    else:
        sparse(key, files.DNSSEC_KEY.cap + 1)
    with released_after(key, RELEASE_AFTER):
        refused = quickly(lambda: keys.load(directory, "example.test"))
    assert isinstance(refused, keys.DnssecKeyError)
    reason = WHY["fifo"] if name == "fifo" else "65,537 bytes, more than a DNSSEC key may hold (64 KiB)"
    assert str(refused) == f"cannot read {key}: {reason}"


@pytest.mark.parametrize("name", HOSTILE)
def test_a_monitors_ca_file(tmp_path: Path, fifo: Path, name: str) -> None:
    """A monitor's ca_file is read on the reactor thread when its checks are built."""
    path = hostile(tmp_path, fifo, name, files.PEM)
    refused = quickly(lambda: load_trust(path))
    assert isinstance(refused, files.Refused) and refused.strerror == why(name, files.PEM)
