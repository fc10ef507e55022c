"""Certificates before they expire, without a process: the one reading of a certificate's
end (`sync.tls.Expiry`, `api.tls.expiries` over a node's real TLS parts), the days left and
problems `gtmcluster status` shows (`cli.certdays`), and `gtmcluster certs renew` (`certs.renew`
and its command): a new pair from the CA, staged and renamed together, key 0600; refused for
an unknown node, a CA key that is missing or that others may read, leaving every file as it
was. (A renewal taken by a running group under DNS load: tests/process/test_cert_renew.py.)"""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gtmcluster.api.tls import ApiTLS, expiries
from gtmcluster.cli import certdays
from gtmcluster.cli.main import main
from gtmcluster.config.model import TLSFiles
from gtmcluster.sync import certs
from gtmcluster.sync.certs import CertError
from gtmcluster.sync.tls import Credentials, TLSContexts, expiry, load_credentials
from tests.support import configs
from tests.unit.test_certs import TWISTED_PYOPENSSL_DEPRECATION

UTC = datetime.UTC
NOW = datetime.datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
DAY = 86400.0


@pytest.fixture
def cadir(tmp_path: Path) -> Path:
    """A CA made at NOW and n1's first pair, good for 30 days."""
    directory = tmp_path / "certs"
    certs.init_ca(directory, now=NOW)
    certs.issue(directory, "n1", days=30, now=NOW)
    return directory


def files_of(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file in *directory*: its bytes and mode (temporary files included)."""
    return {p.name: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for p in sorted(directory.iterdir())}


def creds_of(directory: Path, node: str = "n1", at: datetime.datetime = NOW) -> Credentials:
    """*node*'s files as a node loads them, *at* (plus an hour)."""
    files = TLSFiles(directory / "ca.pem", directory / f"{node}.pem", directory / f"{node}.key")
    return load_credentials(files, node, at + datetime.timedelta(hours=1))


# -- reading a certificate's end ------------------------------------------------------------------


def test_days_left_are_whole_days_rounded_down_and_negative_once_past(cadir: Path) -> None:
    cert = certs.load_certificate(cadir / "n1.pem")
    end = expiry("node", cert)
    assert end.not_after == NOW + datetime.timedelta(days=30)
    assert end.timestamp == (NOW + datetime.timedelta(days=30)).timestamp()
    at = NOW.timestamp()
    assert end.days_left(at) == 30
    assert end.days_left(at + 1) == 29
    assert end.days_left(end.timestamp - 1) == 0  # its last day
    assert end.days_left(end.timestamp + 1) == -1
    assert end.to_json(at + 10 * DAY) == {
        "serial": f"{cert.serial_number:x}",
        "not_after": "2025-07-01 12:00:00Z",
        "days_left": 20,
    }


@TWISTED_PYOPENSSL_DEPRECATION
def test_a_nodes_expiries_come_from_the_credentials_in_use(cadir: Path) -> None:
    """node and ca: what the peers use; api: what the HTTPS API serves, which a reload's
    `ApiTLS.use` replaces; without peers, node and ca are the API's; with neither, none."""
    first = creds_of(cadir)
    peers = SimpleNamespace(tls=TLSContexts(first))
    api = ApiTLS(first, require_client=False)
    service: Any = SimpleNamespace(peers=peers, parts=(object(), api))
    serial = f"{first.certificate.serial_number:x}"
    ca_serial = f"{first.ca_certificate.serial_number:x}"
    assert [(e.certificate, e.serial) for e in expiries(service)] == [
        ("node", serial),
        ("ca", ca_serial),
        ("api", serial),
    ]

    certs.renew(cadir, "n1", days=10, now=NOW)
    renewed = creds_of(cadir)
    assert api.use(renewed, require_client=False)
    new_serial = f"{renewed.certificate.serial_number:x}"
    found = {e.certificate: e for e in expiries(service)}
    assert found["api"].serial == new_serial and found["api"].days_left(NOW.timestamp()) == 10
    assert found["node"].serial == serial  # (the peers' side took nothing yet)
    assert peers.tls.use(renewed)
    now_used = {e.certificate: e.serial for e in expiries(service)}
    assert now_used == {"node": new_serial, "ca": ca_serial, "api": new_serial}

    alone: Any = SimpleNamespace(peers=None, parts=(api,))
    assert [e.certificate for e in expiries(alone)] == ["node", "ca", "api"]
    assert expiries(SimpleNamespace(peers=None, parts=())) == []  # type: ignore[arg-type]


# -- what `gtmcluster status` shows ---------------------------------------------------------------


def entry(days: int, serial: str = "ab12") -> dict[str, Any]:
    return {"serial": serial, "not_after": "2026-01-02 03:04:05Z", "days_left": days}


def test_status_rows_give_each_nodes_days_left_and_skip_nodes_without_them() -> None:
    statuses: dict[str, dict[str, Any]] = {
        "n1": {"certificates": {"node": entry(824), "ca": entry(3649, "ca1"), "api": entry(1)}},
        "n2": {"certificates": {"node": entry(-3), "ca": entry(3649, "ca1")}},
        "n3": {"error": "unreachable"},
        "n4": {},  # (a node from before certificates were reported)
    }
    assert certdays.rows(statuses) == [
        ["CERTIFICATES", "NODE", "CA", "API"],
        ["n1", "824 days (2026-01-02)", "3649 days (2026-01-02)", "1 day (2026-01-02)"],
        ["n2", "EXPIRED (2026-01-02)", "3649 days (2026-01-02)", "-"],
    ]
    assert certdays.rows({"n4": {}}) == []


def test_a_certificate_within_21_days_is_a_problem_that_says_how_to_renew() -> None:
    fine = {"certificates": {"node": entry(21), "ca": entry(3000, "ca1"), "api": entry(21)}}
    assert certdays.problems("n1", fine) == []
    near = {"certificates": {"node": entry(20), "ca": entry(5, "ca1"), "api": entry(20)}}
    assert certdays.problems("n1", near) == [
        "node certificate expires in 20 days (2026-01-02 03:04:05Z), serial ab12: "
        "gtmcluster certs renew n1 --config FILE --reload",
        "group CA expires in 5 days (2026-01-02 03:04:05Z), serial ca1: "
        "make a new group CA and move the group to it (docs/operations.md, Certificates)",
    ]  # (the API's certificate is the node's own: named once)
    other = {"certificates": {"node": entry(400), "api": entry(-1, "cd34")}}
    assert certdays.problems("n2", other) == [
        "HTTPS API certificate expired on 2026-01-02 03:04:05Z, serial cd34: "
        "gtmcluster certs renew n2 --config FILE --reload"
    ]


# -- certs.renew ----------------------------------------------------------------------------------


def test_renew_replaces_the_pair_with_a_new_one_from_the_same_ca(cadir: Path) -> None:
    old_cert = certs.load_certificate(cadir / "n1.pem")
    old_key = (cadir / "n1.key").read_bytes()
    ca_before = {name: files_of(cadir)[name] for name in ("ca.key", "ca.pem")}
    later = NOW + datetime.timedelta(days=25)
    renewed = certs.renew(cadir, "n1", days=90, now=later)
    new = certs.load_certificate(cadir / "n1.pem")
    assert renewed.old == old_cert and renewed.new.certificate == new
    assert new.serial_number != old_cert.serial_number
    assert (cadir / "n1.key").read_bytes() != old_key
    assert new.not_valid_after_utc == later + datetime.timedelta(days=90)
    assert certs.dns_names(new) == ["n1"]
    creds_of(cadir, at=later)  # (the key is the certificate's, signed by the CA, for n1: a node loads it)
    after = files_of(cadir)
    assert {name: after[name] for name in ("ca.key", "ca.pem")} == ca_before
    assert sorted(after) == ["ca.key", "ca.pem", "n1.key", "n1.pem"]  # no temporary file left
    assert after["n1.key"][1] == 0o600 and after["n1.pem"][1] == 0o644


def test_renew_refuses_a_node_without_a_certificate_and_writes_nothing(cadir: Path) -> None:
    before = files_of(cadir)
    with pytest.raises(CertError, match=r"n9 has no certificate in .*certs \(n9\.pem\).*gtmcluster certs issue n9"):
        certs.renew(cadir, "n9", now=NOW)
    with pytest.raises(CertError, match="is not a valid node name"):
        certs.renew(cadir, "../n1", now=NOW)
    assert files_of(cadir) == before


def test_renew_refuses_when_the_ca_key_is_missing(cadir: Path) -> None:
    (cadir / "ca.key").unlink()
    before = files_of(cadir)
    with pytest.raises(CertError, match=r"ca\.key is missing \(ca\.pem is there\): restore it"):
        certs.renew(cadir, "n1", now=NOW)
    assert files_of(cadir) == before


@pytest.mark.parametrize("loose", [0o644, 0o640, 0o604, 0o660])
def test_renew_refuses_a_ca_key_others_may_read(cadir: Path, loose: int) -> None:
    os.chmod(cadir / "ca.key", loose)
    before = files_of(cadir)
    with pytest.raises(CertError, match=rf"ca\.key is mode {loose:04o}: .* must be 0600; chmod 600"):
        certs.renew(cadir, "n1", now=NOW)
    assert files_of(cadir) == before
    os.chmod(cadir / "ca.key", 0o400)  # stricter than 0600 is fine
    certs.renew(cadir, "n1", now=NOW)


def test_a_failed_renewal_leaves_the_old_pair_whole(cadir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key and the certificate are both staged before either is renamed: a disk that
    fails on the certificate leaves the old key beside the old certificate, and no
    temporary file."""
    before = files_of(cadir)
    real_write = os.write

    def failing_write(fd: int, data: bytes | memoryview) -> int:
        if b"CERTIFICATE" in bytes(data):
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", failing_write)
    with pytest.raises(CertError, match=r"cannot write .*n1\.pem: No space left on device"):
        certs.renew(cadir, "n1", now=NOW)
    assert files_of(cadir) == before


# -- the command ----------------------------------------------------------------------------------


def test_the_command_renews_and_says_what_it_replaced(
    cadir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(cadir.parent)
    old = f"{certs.load_certificate(cadir / 'n1.pem').serial_number:x}"
    assert main(["certs", "renew", "n1", "--days", "60"]) == 0
    new = f"{certs.load_certificate(cadir / 'n1.pem').serial_number:x}"
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert lines[0].startswith(f"renewed n1: serial {old} (until 2025-07-01 12:00:00Z)")
    assert lines[1].startswith(f"  replaced by serial {new} (until ")
    assert lines[2:] == [
        "wrote certs/n1.key (mode 0600)",
        "wrote certs/n1.pem (mode 0644)",
        "n1 takes them on its next reload (SIGHUP: systemctl reload gtm@n1) once they are where its "
        "sync_group.tls names them",
    ]
    assert out.err == ""


def test_the_command_refuses_with_one_line_and_exit_1(
    cadir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files_of(cadir)
    assert main(["certs", "renew", "n9", "--dir", str(cadir)]) == 1
    assert capsys.readouterr().err.startswith("gtmcluster certs renew: n9 has no certificate in ")

    config = configs.write(tmp_path, configs.base("127.0.0.1"))
    assert main(["certs", "renew", "n9", "--dir", str(cadir), "--config", str(config)]) == 1
    assert "'n9' is not a member of sync group" in capsys.readouterr().err

    os.chmod(cadir / "ca.key", 0o644)
    assert main(["certs", "renew", "n1", "--dir", str(cadir)]) == 1
    assert "ca.key is mode 0644" in capsys.readouterr().err

    assert main(["certs", "renew", "n1", "--dir", str(cadir), "--reload"]) == 2
    assert "--reload needs --config FILE" in capsys.readouterr().err
    os.chmod(cadir / "ca.key", 0o600)
    assert files_of(cadir) == {**before}
