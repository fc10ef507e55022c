"""`gtmcluster.dnsdata.keys` and `gtmcluster dnssec`: keys written 0600, read back, DS records
computed as RFC 4034 5.1.4 says, and clear errors for missing or unusable key files."""

from __future__ import annotations

import base64
import hashlib
import stat
import struct
import subprocess
import sys
from pathlib import Path

import dns.dnssec
import dns.name
import dns.rdata
import pytest

from gtmcluster.dnsdata import keys
from gtmcluster.dnsdata.keys import DnssecKeyError

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keygen_writes_one_combined_key_0600_in_a_0700_directory(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    written = keys.keygen(directory, "Example.COM.")
    assert written == [directory / "example.com.csk.key"]
    assert mode(written[0]) == 0o600
    assert mode(directory) == 0o700
    (key,) = keys.load(directory, "example.com")
    assert (key.role, key.algorithm, key.dnskey.flags) == ("csk", 13, 257)
    assert key.signs_keys and key.signs_zone


def test_keygen_split_ed25519_makes_a_ksk_and_a_zsk(tmp_path: Path) -> None:
    written = keys.keygen(tmp_path, "example.com", keys.ED25519, split=True)
    assert [p.name for p in written] == ["example.com.ksk.key", "example.com.zsk.key"]
    assert all(mode(p) == 0o600 for p in written)
    loaded = {k.role: k for k in keys.load(tmp_path, "example.com")}
    assert (loaded["ksk"].dnskey.flags, loaded["zsk"].dnskey.flags) == (257, 256)
    assert {k.algorithm for k in loaded.values()} == {15}
    assert not loaded["ksk"].signs_zone and not loaded["zsk"].signs_keys
    # only the KSK goes to the parent
    (ds,) = keys.ds_records("example.com", list(loaded.values()))
    assert ds.key_tag == loaded["ksk"].tag


def test_keygen_keeps_existing_keys_unless_forced(tmp_path: Path) -> None:
    (path,) = keys.keygen(tmp_path, "example.com")
    before = path.read_bytes()
    with pytest.raises(DnssecKeyError, match="already exists: pass --force"):
        keys.keygen(tmp_path, "example.com")
    with pytest.raises(DnssecKeyError, match="already exists"):
        keys.keygen(tmp_path, "example.com", split=True)  # a pair beside the CSK
    assert path.read_bytes() == before
    keys.keygen(tmp_path, "example.com", split=True, force=True)
    assert not path.exists()  # the pair replaced the CSK
    assert [k.role for k in keys.load(tmp_path, "example.com")] == ["ksk", "zsk"]


def test_ds_is_the_sha256_of_owner_and_dnskey(tmp_path: Path) -> None:
    keys.keygen(tmp_path, "example.com")
    (key,) = keys.load(tmp_path, "example.com")
    (ds,) = keys.ds_records("example.com.", [key])
    # RFC 4034 5.1.4: digest = SHA-256(owner name in canonical wire form | DNSKEY RDATA)
    rdata = struct.pack("!HBB", 257, 3, 13) + key.dnskey.key
    owner = b"\x07example\x03com\x00"
    assert ds.digest == hashlib.sha256(owner + rdata).digest()
    assert (ds.algorithm, ds.digest_type) == (13, 2)
    # RFC 4034 appendix B: the key tag
    acc = sum(b << 8 if i % 2 == 0 else b for i, b in enumerate(rdata))
    assert ds.key_tag == (acc + (acc >> 16)) & 0xFFFF == key.tag


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: None, "no keys for example.com in .*make them with: gtmcluster dnssec keygen example.com"),
        (lambda d: (d / "example.com.csk.key").write_text("not a key"), "is not an unencrypted PEM private key"),
        (
            lambda d: (d / "example.com.ksk.key").write_text("x"),
            "holds example.com.ksk.key for example.com",
        ),
        (lambda d: (d / "example.com.csk.key").mkdir(), "cannot read .*example.com.csk.key"),
    ],
)
def test_load_errors_name_the_file_and_problem(tmp_path: Path, setup: object, message: str) -> None:
    assert callable(setup)
    setup(tmp_path)
    with pytest.raises(DnssecKeyError, match=message):
        keys.load(tmp_path, "example.com")


def test_load_refuses_a_missing_directory_and_a_key_of_another_kind(tmp_path: Path) -> None:
    with pytest.raises(DnssecKeyError, match="is not a directory"):
        keys.load(tmp_path / "nowhere", "example.com")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    other = ec.generate_private_key(ec.SECP384R1())
    pem = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "example.com.csk.key").write_bytes(pem)
    with pytest.raises(DnssecKeyError, match="ECDSA P-256 or Ed25519"):
        keys.load(tmp_path, "example.com")


def test_cli_keygen_and_ds(tmp_path: Path) -> None:
    out = subprocess.run(
        [GTMCLUSTER, "dnssec", "keygen", "example.com", "--dir", tmp_path / "k", "--algorithm", "15"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == f"wrote {tmp_path / 'k' / 'example.com.csk.key'} (mode 0600)\n"
    out = subprocess.run(
        [GTMCLUSTER, "dnssec", "ds", "example.com", "--dir", tmp_path / "k", "--dnskey"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    dnskey_line, ds_line = out.splitlines()
    assert dnskey_line.startswith("example.com. 3600 IN DNSKEY 257 3 15 ")
    dnskey = dns.rdata.from_text("IN", "DNSKEY", dnskey_line.split(" IN DNSKEY ")[1].split(" ;")[0])
    ds = dns.rdata.from_text("IN", "DS", ds_line.split(" IN DS ")[1])
    assert ds == dns.dnssec.make_ds(dns.name.from_text("example.com"), dnskey, "SHA256")
    assert len(base64.b64decode("".join(dnskey_line.split(" 257 3 15 ")[1].split(" ;")[0].split()))) == 32


def test_cli_reports_errors_without_a_traceback(tmp_path: Path) -> None:
    run = subprocess.run(
        [GTMCLUSTER, "dnssec", "ds", "example.com", "--dir", tmp_path], capture_output=True, text=True, check=False
    )
    assert run.returncode == 1
    assert run.stderr.startswith("gtmcluster dnssec ds: no keys for example.com in ")
    assert "Traceback" not in run.stderr
