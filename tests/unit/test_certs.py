"""`gtmcluster.sync.certs` and `gtmcluster certs`: the sync group CA, node certificates, safe
file writing, clear errors, and certificates that Twisted's TLS accepts for mutual authentication."""

from __future__ import annotations

import datetime
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from OpenSSL import SSL
from service_identity import VerificationError
from twisted.internet import protocol, ssl, task
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from twisted.test.iosim import connectedServerAndClient

from gtmcluster.sync import certs
from gtmcluster.sync.certs import CertError

UTC = datetime.UTC
NOW = datetime.datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
DAY = datetime.timedelta(days=1)
SKEW = datetime.timedelta(minutes=5)
GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"


def read(path: Path) -> bytes:
    return path.read_bytes()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def extension(cert: x509.Certificate, kind: type[x509.ExtensionType]) -> x509.Extension[x509.ExtensionType]:
    return cert.extensions.get_extension_for_class(kind)


def verify_signed_by(leaf: x509.Certificate, ca: x509.Certificate) -> None:
    """Raise InvalidSignature unless `ca`'s public key made `leaf`'s signature."""
    public = ca.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert leaf.signature_hash_algorithm is not None
    public.verify(leaf.signature, leaf.tbs_certificate_bytes, ec.ECDSA(leaf.signature_hash_algorithm))


@pytest.fixture
def cadir(tmp_path: Path) -> Path:
    """A directory holding a CA made at NOW."""
    directory = tmp_path / "certs"
    certs.init_ca(directory, now=NOW)
    return directory


# -- the CA -------------------------------------------------------------------------------


def test_ca_is_a_self_signed_ca_limited_to_signing_node_certificates(tmp_path: Path) -> None:
    """The CA certificate is self-signed (and verifies), CA=true with path length 0, critical;
    key usage keyCertSign + cRLSign only, critical; it has a subject key identifier."""
    ca = certs.init_ca(tmp_path / "certs", now=NOW)
    cert = certs.load_certificate(ca.cert)
    assert cert == ca.certificate
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == certs.CA_NAME
    verify_signed_by(cert, cert)
    cert.verify_directly_issued_by(cert)

    constraints = extension(cert, x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value == x509.BasicConstraints(ca=True, path_length=0)
    usage = extension(cert, x509.KeyUsage)
    assert usage.critical
    assert isinstance(usage.value, x509.KeyUsage)
    assert usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature and not usage.value.key_encipherment
    ski = extension(cert, x509.SubjectKeyIdentifier).value
    assert ski == x509.SubjectKeyIdentifier.from_public_key(cert.public_key())
    assert certs.dns_names(cert) == []


def test_ca_key_is_unencrypted_pkcs8_p256_matching_the_certificate(tmp_path: Path) -> None:
    """ca.key is a PKCS8 PEM ("BEGIN PRIVATE KEY"), unencrypted, EC P-256, and the CA
    certificate carries its public key."""
    ca = certs.init_ca(tmp_path / "certs", now=NOW)
    data = read(ca.key)
    assert data.startswith(b"-----BEGIN PRIVATE KEY-----\n")
    key = serialization.load_pem_private_key(data, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert isinstance(key.curve, ec.SECP256R1)
    der = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    assert key.public_key().public_bytes(*der) == ca.certificate.public_key().public_bytes(*der)


def test_ca_validity_starts_before_now_for_clock_skew_and_lasts_days(tmp_path: Path) -> None:
    """The CA is valid from now minus 5 minutes for the given days (default 3650)."""
    default = certs.init_ca(tmp_path / "a", now=NOW).certificate
    assert default.not_valid_before_utc == NOW - SKEW
    assert default.not_valid_after_utc == NOW + 3650 * DAY
    short = certs.init_ca(tmp_path / "b", days=7, now=NOW).certificate
    assert short.not_valid_after_utc == NOW + 7 * DAY


def test_init_creates_a_private_directory_but_leaves_an_existing_one_alone(tmp_path: Path) -> None:
    """A new directory (and its missing parents) is created, the directory itself 0700;
    an existing directory keeps its mode."""
    old = os.umask(0o000)
    try:
        certs.init_ca(tmp_path / "deep" / "certs", now=NOW)
        existing = tmp_path / "existing"
        existing.mkdir()
        existing.chmod(0o755)
        certs.init_ca(existing, now=NOW)
    finally:
        os.umask(old)
    assert mode(tmp_path / "deep" / "certs") == 0o700
    assert mode(existing) == 0o755
    assert listing(existing) == ["ca.key", "ca.pem"]


def test_init_refuses_a_file_where_the_directory_should_be(tmp_path: Path) -> None:
    """--dir naming a file is a CertError that says so."""
    (tmp_path / "certs").write_text("not a directory")
    with pytest.raises(CertError, match="exists and is not a directory"):
        certs.init_ca(tmp_path / "certs", now=NOW)


# -- node certificates --------------------------------------------------------------------


def test_node_certificate_chains_to_the_ca(cadir: Path) -> None:
    """The node certificate's issuer is the CA's subject, its signature verifies with the
    CA's public key (and not with another CA's), and its authority key identifier is the
    CA's subject key identifier."""
    node = certs.issue(cadir, "gtm-a", now=NOW)
    ca = certs.load_certificate(cadir / "ca.pem")
    leaf = certs.load_certificate(node.cert)
    assert leaf.issuer == ca.subject
    verify_signed_by(leaf, ca)
    leaf.verify_directly_issued_by(ca)
    other = certs.init_ca(cadir.parent / "other", now=NOW).certificate
    with pytest.raises(InvalidSignature):
        verify_signed_by(leaf, other)
    aki = extension(leaf, x509.AuthorityKeyIdentifier).value
    assert isinstance(aki, x509.AuthorityKeyIdentifier)
    ski = extension(ca, x509.SubjectKeyIdentifier).value
    assert isinstance(ski, x509.SubjectKeyIdentifier)
    assert aki.key_identifier == ski.digest


def test_node_certificate_names_only_the_node_and_serves_both_ends_of_tls(cadir: Path) -> None:
    """Subject CN=NODE, SAN exactly DNS:NODE; CA=false (critical); key usage digitalSignature
    only (critical); extended key usage exactly serverAuth + clientAuth."""
    leaf = certs.issue(cadir, "gtm-a", now=NOW).certificate
    assert leaf.subject == x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gtm-a")])
    san = extension(leaf, x509.SubjectAlternativeName).value
    assert isinstance(san, x509.SubjectAlternativeName)
    assert list(san) == [x509.DNSName("gtm-a")]
    assert certs.dns_names(leaf) == ["gtm-a"]
    constraints = extension(leaf, x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value == x509.BasicConstraints(ca=False, path_length=None)
    usage = extension(leaf, x509.KeyUsage)
    assert usage.critical
    assert isinstance(usage.value, x509.KeyUsage)
    assert usage.value.digital_signature
    assert not (usage.value.key_cert_sign or usage.value.crl_sign or usage.value.key_encipherment)
    eku = extension(leaf, x509.ExtendedKeyUsage).value
    assert isinstance(eku, x509.ExtendedKeyUsage)
    assert sorted(oid.dotted_string for oid in eku) == sorted(
        [ExtendedKeyUsageOID.SERVER_AUTH.dotted_string, ExtendedKeyUsageOID.CLIENT_AUTH.dotted_string]
    )


def test_node_key_is_its_own_and_serials_are_random(cadir: Path) -> None:
    """Each node gets its own P-256 key (PKCS8, unencrypted) matching its certificate, and
    certificates get distinct random serials."""
    a = certs.issue(cadir, "gtm-a", now=NOW)
    b = certs.issue(cadir, "gtm-b", now=NOW)
    der = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    keys = []
    for node in (a, b):
        assert read(node.key).startswith(b"-----BEGIN PRIVATE KEY-----\n")
        key = serialization.load_pem_private_key(read(node.key), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        assert isinstance(key.curve, ec.SECP256R1)
        assert key.public_key().public_bytes(*der) == node.certificate.public_key().public_bytes(*der)
        keys.append(key.public_key().public_bytes(*der))
    ca_key = certs.load_certificate(cadir / "ca.pem").public_key().public_bytes(*der)
    assert len({*keys, ca_key}) == 3
    assert a.certificate.serial_number != b.certificate.serial_number
    assert a.certificate.serial_number.bit_length() > 64


def test_node_validity_is_within_the_cas(cadir: Path) -> None:
    """A node certificate starts 5 minutes before now but never before the CA does, and
    lasts the given days (default 825)."""
    ca = certs.load_certificate(cadir / "ca.pem")
    later = certs.issue(cadir, "gtm-a", now=NOW + DAY).certificate
    assert later.not_valid_before_utc == NOW + DAY - SKEW
    assert later.not_valid_after_utc == NOW + DAY + 825 * DAY
    early = certs.issue(cadir, "gtm-b", now=NOW - datetime.timedelta(hours=1), days=30).certificate
    assert early.not_valid_before_utc == ca.not_valid_before_utc
    for leaf in (later, early):
        assert ca.not_valid_before_utc <= leaf.not_valid_before_utc < leaf.not_valid_after_utc
        assert leaf.not_valid_after_utc <= ca.not_valid_after_utc


def test_node_certificate_never_outlives_the_ca(tmp_path: Path) -> None:
    """With a CA that ends in 30 days, an 825-day request ends with the CA (capped), a
    10-day one is left alone."""
    directory = tmp_path / "certs"
    ca = certs.init_ca(directory, days=30, now=NOW).certificate
    capped = certs.issue(directory, "gtm-a", now=NOW)
    assert capped.capped
    assert capped.certificate.not_valid_after_utc == ca.not_valid_after_utc
    short = certs.issue(directory, "gtm-b", days=10, now=NOW)
    assert not short.capped
    assert short.certificate.not_valid_after_utc == NOW + 10 * DAY


def test_an_expired_ca_issues_nothing(tmp_path: Path) -> None:
    """Once the CA has expired, issue refuses, says so and suggests a new CA; no files."""
    directory = tmp_path / "certs"
    certs.init_ca(directory, days=30, now=NOW)
    with pytest.raises(CertError, match=r"expired on 2025-07-01 12:00:00Z.*certs init --dir .* --force"):
        certs.issue(directory, "gtm-a", now=NOW + 31 * DAY)
    assert listing(directory) == ["ca.key", "ca.pem"]


# -- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gtm-a", "gtm1", "0gtm", "a", "x--y", "gtm-cnc.example.net", "a" * 63])
def test_dns_style_node_names_are_accepted_as_they_are(cadir: Path, name: str) -> None:
    """Lower-case labels of letters, digits and inner hyphens, dot-separated, up to 63
    characters: the certificate and files carry the name unchanged."""
    node = certs.issue(cadir, name, now=NOW)
    assert node.node == name
    assert (node.cert.name, node.key.name) == (f"{name}.pem", f"{name}.key")
    assert certs.dns_names(node.certificate) == [name]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("GTM-A", r"'GTM-A' has upper-case letters: use 'gtm-a'"),
        ("gtm_a", r"contains '_'.*use 'gtm-a'"),
        ("gtm-", r"the label 'gtm-' starts or ends with '-'"),
        ("a.-b", r"the label '-b' starts or ends with '-'"),
        ("a..b", "empty label"),
        ("a.", "empty label"),
        ("-gtm", "not a valid node name"),
        (".gtm", "not a valid node name"),
        ("", "empty"),
        ("a" * 64, "not a valid node name"),
        ("gtm a", "not a valid node name"),
        ("gtm/a", "not a valid node name"),
        ("../a", "not a valid node name"),
        ("gtm\n", "not a valid node name"),
        ("gtm-é", "not a valid node name"),
        ("192.0.2.1", "reads as an IP address"),
        ("123", "reads as an IP address"),
        ("ca", "reserved: ca.pem and ca.key are the CA's own files"),
    ],
)
def test_names_that_cannot_be_a_dns_name_or_file_name_are_refused(cadir: Path, name: str, message: str) -> None:
    """Upper case is refused (not folded: the name is also the file name and the member
    name), as are '_', bad labels, non-ASCII, IP-like names and 'ca'; nothing is written."""
    with pytest.raises(CertError, match=message):
        certs.issue(cadir, name, now=NOW)
    assert listing(cadir) == ["ca.key", "ca.pem"]


# -- days -------------------------------------------------------------------------------------


@pytest.mark.parametrize("days", [0, -1, 36501, True])
def test_init_refuses_lifetimes_out_of_range_before_touching_the_disk(tmp_path: Path, days: int) -> None:
    """--days must be 1 to 36500; otherwise no directory and no file is made."""
    with pytest.raises(CertError, match="--days must be a whole number of days from 1 to 36500"):
        certs.init_ca(tmp_path / "certs", days=days, now=NOW)
    assert not (tmp_path / "certs").exists()


@pytest.mark.parametrize("days", [0, -5, 36501])
def test_issue_refuses_lifetimes_out_of_range(cadir: Path, days: int) -> None:
    """A node certificate's --days must be 1 to 36500 as well; nothing is written."""
    with pytest.raises(CertError, match="--days must be a whole number"):
        certs.issue(cadir, "gtm-a", days=days, now=NOW)
    assert listing(cadir) == ["ca.key", "ca.pem"]


# -- file modes and safe writing ---------------------------------------------------------------


@pytest.fixture(params=[0o022, 0o000, 0o077], ids=lambda m: f"umask{m:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_keys_are_0600_and_certificates_0644_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    """Under umask 022, 000 or 077: keys 0600, certificates 0644, a new directory 0700, and
    no temporary file is left behind."""
    directory = tmp_path / "certs"
    ca = certs.init_ca(directory, now=NOW)
    node = certs.issue(directory, "gtm-a", now=NOW)
    assert (mode(ca.key), mode(node.key)) == (0o600, 0o600)
    assert (mode(ca.cert), mode(node.cert)) == (0o644, 0o644)
    assert mode(directory) == 0o700
    assert listing(directory) == ["ca.key", "ca.pem", "gtm-a.key", "gtm-a.pem"]


def test_key_bytes_only_ever_go_to_a_file_that_is_already_0600(
    tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every write of private-key bytes goes to a file descriptor whose file is mode 0600
    at that moment (created so, not chmod-ed afterwards), and not to the final name."""
    modes: list[int] = []
    real_write = os.write

    def recording_write(fd: int, data: bytes | memoryview) -> int:
        if b"PRIVATE KEY" in bytes(data):
            modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
            assert os.fstat(fd).st_nlink == 1
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", recording_write)
    directory = tmp_path / "certs"
    certs.init_ca(directory, now=NOW)
    certs.issue(directory, "gtm-a", now=NOW)
    certs.issue(directory, "gtm-a", now=NOW, force=True)
    assert modes == [0o600, 0o600, 0o600]


def test_a_failed_write_leaves_no_key_and_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the disk fails mid-way, the error names the file and nothing is left: no key,
    no certificate, no temporary file; a later init works."""
    directory = tmp_path / "certs"
    directory.mkdir()

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(CertError, match=r"cannot write .*ca\.key: Input/output error"):
        certs.init_ca(directory, now=NOW)
    assert listing(directory) == []
    monkeypatch.undo()
    certs.init_ca(directory, now=NOW)
    assert listing(directory) == ["ca.key", "ca.pem"]


def test_a_failed_certificate_write_removes_the_new_key(cadir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --force, a certificate that cannot be written takes its new key with it, so
    the next try is not refused for a half-made pair."""
    real_link = os.link

    def failing_link(src: str | Path, dst: str | Path, **kwargs: object) -> None:
        if str(dst).endswith(".pem"):
            raise OSError(28, "No space left on device")
        real_link(src, dst)

    monkeypatch.setattr(os, "link", failing_link)
    with pytest.raises(CertError, match=r"cannot write .*gtm-a\.pem: No space left on device"):
        certs.issue(cadir, "gtm-a", now=NOW)
    assert listing(cadir) == ["ca.key", "ca.pem"]


# -- overwriting --------------------------------------------------------------------------------


def test_init_never_overwrites_without_force(cadir: Path) -> None:
    """A second init fails with a message naming the files and --force; the CA's bytes are
    unchanged."""
    before = read(cadir / "ca.pem"), read(cadir / "ca.key")
    with pytest.raises(CertError, match=r"ca\.key and .*ca\.pem already exist: pass --force"):
        certs.init_ca(cadir, now=NOW)
    assert (read(cadir / "ca.pem"), read(cadir / "ca.key")) == before


def test_init_refuses_when_either_ca_file_exists(cadir: Path) -> None:
    """A lone ca.key (or ca.pem) also blocks init, and the missing one is not created."""
    (cadir / "ca.pem").unlink()
    key = read(cadir / "ca.key")
    with pytest.raises(CertError, match=r"ca\.key already exists: pass --force"):
        certs.init_ca(cadir, now=NOW)
    assert listing(cadir) == ["ca.key"]
    assert read(cadir / "ca.key") == key


def test_init_with_force_replaces_the_ca(cadir: Path) -> None:
    """--force writes a new CA (new key, new certificate, same modes); certificates from the
    old CA no longer chain to it."""
    old_leaf = certs.issue(cadir, "gtm-a", now=NOW).certificate
    before = read(cadir / "ca.pem"), read(cadir / "ca.key")
    ca = certs.init_ca(cadir, force=True, now=NOW)
    assert read(cadir / "ca.pem") != before[0]
    assert read(cadir / "ca.key") != before[1]
    assert (mode(ca.key), mode(ca.cert)) == (0o600, 0o644)
    with pytest.raises(InvalidSignature):
        verify_signed_by(old_leaf, ca.certificate)


def test_issue_never_overwrites_without_force_and_replaces_with_it(cadir: Path) -> None:
    """A second issue for the same node fails and leaves both files as they were; with
    --force the node gets a new key and certificate."""
    certs.issue(cadir, "gtm-a", now=NOW)
    before = read(cadir / "gtm-a.pem"), read(cadir / "gtm-a.key")
    with pytest.raises(CertError, match=r"gtm-a\.key and .*gtm-a\.pem already exist: pass --force"):
        certs.issue(cadir, "gtm-a", now=NOW)
    assert (read(cadir / "gtm-a.pem"), read(cadir / "gtm-a.key")) == before
    node = certs.issue(cadir, "gtm-a", force=True, now=NOW)
    assert read(node.cert) != before[0]
    assert read(node.key) != before[1]
    assert (mode(node.key), mode(node.cert)) == (0o600, 0o644)
    assert listing(cadir) == ["ca.key", "ca.pem", "gtm-a.key", "gtm-a.pem"]


# -- a missing or broken CA ------------------------------------------------------------------


def test_issue_without_a_ca_says_to_run_init(tmp_path: Path) -> None:
    """No CA (an empty or missing directory): the message says exactly what to run; the
    missing directory is not created."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for directory in (empty, tmp_path / "missing"):
        with pytest.raises(CertError) as caught:
            certs.issue(directory, "gtm-a", now=NOW)
        assert str(caught.value) == f"no CA in {directory}: run gtmcluster certs init --dir {directory} first"
    assert listing(empty) == []
    assert not (tmp_path / "missing").exists()


def _encrypt_ca_key(directory: Path) -> None:
    key = serialization.load_pem_private_key(read(directory / "ca.key"), password=None)
    (directory / "ca.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )


def _leaf_as_ca(directory: Path) -> None:
    node = certs.issue(directory, "gtm-z", now=NOW)
    node.cert.replace(directory / "ca.pem")
    node.key.replace(directory / "ca.key")


def _other_ca_key(directory: Path) -> None:
    other = certs.init_ca(directory.parent / "other", now=NOW)
    (directory / "ca.key").write_bytes(read(other.key))


def _ca_pem_is_a_directory(directory: Path) -> None:
    (directory / "ca.pem").unlink()
    (directory / "ca.pem").mkdir()


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda d: (d / "ca.key").unlink(), r"no CA in .*: ca\.key is missing \(ca\.pem is there\).*--force"),
        (lambda d: (d / "ca.pem").unlink(), r"no CA in .*: ca\.pem is missing \(ca\.key is there\)"),
        (lambda d: (d / "ca.pem").write_text("garbage\n"), r"ca\.pem is not a PEM certificate"),
        (lambda d: (d / "ca.key").write_text("garbage\n"), r"ca\.key is not a PEM private key"),
        (_ca_pem_is_a_directory, r"cannot read .*ca\.pem"),
        (_encrypt_ca_key, r"ca\.key is encrypted: gtmcluster needs an unencrypted key"),
        (_other_ca_key, r"ca\.key does not belong to .*ca\.pem"),
        (_leaf_as_ca, r"ca\.pem is not a CA certificate"),
    ],
    ids=["no-key", "no-cert", "bad-cert", "bad-key", "unreadable", "encrypted", "mismatch", "not-a-ca"],
)
def test_a_broken_ca_is_refused_with_a_clear_message(
    cadir: Path, breakage: Callable[[Path], object], message: str
) -> None:
    """Each way the CA files can be wrong gives a CertError saying which file and what to
    do, and no node file is written."""
    breakage(cadir)
    before = listing(cadir)
    with pytest.raises(CertError, match=message):
        certs.issue(cadir, "gtm-a", now=NOW)
    assert listing(cadir) == before


# -- helpers for the TLS layer ---------------------------------------------------------------


def test_load_certificate_and_describe(cadir: Path) -> None:
    """load_certificate reads PEM and refuses other files clearly; describe gives subject,
    DNS names, validity, issuer and fingerprint on one line."""
    node = certs.issue(cadir, "gtm-a", now=NOW)
    cert = certs.load_certificate(node.cert)
    text = certs.describe(cert)
    assert "\n" not in text
    assert text.startswith("subject CN=gtm-a; DNS names gtm-a; valid 2025-06-01 11:55:00Z to 2027-09-04 12:00:00Z; ")
    assert "issuer CN=gtmcluster sync group CA" in text
    assert cert.fingerprint(hashes.SHA256()).hex() in text
    with pytest.raises(CertError, match="does not exist"):
        certs.load_certificate(cadir / "nope.pem")
    with pytest.raises(CertError, match="is not a PEM certificate"):
        certs.load_certificate(node.key)


# -- the command ------------------------------------------------------------------------------


def gtmcluster(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GTMCLUSTER), "certs", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_cli_init_and_issue_write_the_files_and_report_their_modes(tmp_path: Path) -> None:
    """`certs init` and `certs issue NODE` (default --dir certs) print one line per file
    with its mode, exit 0, and the node certificate chains to the CA with the asked days."""
    init = gtmcluster(tmp_path, "init")
    assert (init.returncode, init.stderr) == (0, "")
    assert init.stdout.splitlines() == ["wrote certs/ca.key (mode 0600)", "wrote certs/ca.pem (mode 0644)"]
    issue = gtmcluster(tmp_path, "issue", "gtm-cnc", "--days", "90")
    assert (issue.returncode, issue.stderr) == (0, "")
    assert issue.stdout.splitlines() == ["wrote certs/gtm-cnc.key (mode 0600)", "wrote certs/gtm-cnc.pem (mode 0644)"]
    ca = certs.load_certificate(tmp_path / "certs" / "ca.pem")
    leaf = certs.load_certificate(tmp_path / "certs" / "gtm-cnc.pem")
    verify_signed_by(leaf, ca)
    assert certs.dns_names(leaf) == ["gtm-cnc"]
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc == 90 * DAY + SKEW


def test_cli_refuses_to_overwrite_until_forced(tmp_path: Path) -> None:
    """A second `certs init --dir D` exits 1 with one line naming the files and --force,
    and the CA is unchanged; `--force` replaces it. The same holds for `certs issue`."""
    d = tmp_path / "pki"
    assert gtmcluster(tmp_path, "init", "--dir", str(d)).returncode == 0
    assert gtmcluster(tmp_path, "issue", "gtm-a", "--dir", str(d)).returncode == 0
    before = {name: read(d / name) for name in listing(d)}

    again = gtmcluster(tmp_path, "init", "--dir", str(d))
    assert again.returncode == 1
    assert again.stdout == ""
    assert again.stderr == (
        f"gtmcluster certs init: {d}/ca.key and {d}/ca.pem already exist: pass --force to replace the CA "
        "(every node certificate must then be issued again)\n"
    )
    reissue = gtmcluster(tmp_path, "issue", "gtm-a", "--dir", str(d))
    assert reissue.returncode == 1
    assert "already exist: pass --force" in reissue.stderr
    assert {name: read(d / name) for name in listing(d)} == before

    forced = gtmcluster(tmp_path, "issue", "gtm-a", "--dir", str(d), "--force")
    assert forced.returncode == 0
    assert forced.stdout.splitlines() == [f"wrote {d}/gtm-a.key (mode 0600)", f"wrote {d}/gtm-a.pem (mode 0644)"]
    assert read(d / "gtm-a.key") != before["gtm-a.key"]
    assert read(d / "ca.pem") == before["ca.pem"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["issue", "gtm-a", "--dir", "nowhere"],
            "issue: no CA in nowhere: run gtmcluster certs init --dir nowhere first",
        ),
        (["issue", "GTM-A", "--dir", "nowhere"], "issue: 'GTM-A' has upper-case letters: use 'gtm-a'"),
        (["init", "--days", "0"], "init: --days must be a whole number of days from 1 to 36500, not 0"),
        (["issue", "gtm-a", "--days", "-1"], "issue: --days must be a whole number of days from 1 to 36500, not -1"),
    ],
    ids=["no-ca", "bad-name", "init-days", "issue-days"],
)
def test_cli_errors_are_one_line_and_exit_1(tmp_path: Path, args: list[str], error: str) -> None:
    """Mistakes give exit status 1 and one line on stderr that starts with the command and
    says what to do: no traceback, nothing on stdout, no file written."""
    result = gtmcluster(tmp_path, *args)
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"gtmcluster certs {error}")
    assert "Traceback" not in result.stderr
    assert listing(tmp_path) == []


def test_cli_notes_a_certificate_capped_by_the_ca(tmp_path: Path) -> None:
    """When the CA ends sooner than --days, issue still succeeds and says so on stderr."""
    assert gtmcluster(tmp_path, "init", "--days", "10").returncode == 0
    result = gtmcluster(tmp_path, "issue", "gtm-a")
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 2
    assert "note: certs/gtm-a.pem expires with the CA on " in result.stderr
    assert "sooner than --days 825" in result.stderr


# -- interop: the files as Twisted's TLS uses them -------------------------------------------------


#: Twisted's CertificateOptions takes pyOpenSSL X509/PKey objects, which pyOpenSSL 26 deprecates
#: passing on to a Context; that is Twisted's call to make, not ours
TWISTED_PYOPENSSL_DEPRECATION = pytest.mark.filterwarnings(
    "ignore:Passing pyOpenSSL (X509|PKey) objects is deprecated:DeprecationWarning"
)


class Greeter(protocol.Protocol):
    """Says `greeting` as soon as it is connected and keeps what it hears."""

    def __init__(self, greeting: bytes):
        self.greeting = greeting
        self.received = b""
        self.lost: Failure | None = None

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(self.greeting)

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        self.lost = reason


class OneProtocol(protocol.Factory):
    def __init__(self, proto: protocol.Protocol):
        self.proto = proto

    def buildProtocol(self, addr: object) -> protocol.Protocol:
        return self.proto


def node_options(directory: Path, node: str, ca_dir: Path | None = None) -> ssl.CertificateOptions:
    """Mutual-TLS options for `node`, trusting only the CA in `ca_dir` (default: `directory`)."""
    pem = read(directory / f"{node}.pem") + read(directory / f"{node}.key")
    mine = ssl.PrivateCertificate.loadPEM(pem)
    ca = ssl.Certificate.loadPEM(read((ca_dir or directory) / "ca.pem"))
    return ssl.CertificateOptions(
        privateKey=mine.privateKey.original,
        certificate=mine.original,
        verify=True,
        caCerts=[ca.original],
        requireCertificate=True,
    )


def tls_connection(
    server_options: ssl.CertificateOptions, client_options: ssl.CertificateOptions | IOpenSSLClientConnectionCreator
) -> tuple[Greeter, Greeter, TLSMemoryBIOProtocol, TLSMemoryBIOProtocol]:
    """An in-memory TLS connection, pumped until quiet: (server, client) inner protocols, then TLS."""
    clock = task.Clock()
    server, client = Greeter(b"hello from the server"), Greeter(b"hello from the client")
    server_tls = TLSMemoryBIOFactory(server_options, isClient=False, wrappedFactory=OneProtocol(server), clock=clock)
    client_tls = TLSMemoryBIOFactory(client_options, isClient=True, wrappedFactory=OneProtocol(client), clock=clock)
    address = IPv4Address("TCP", "127.0.0.1", 4353)
    client_proto, server_proto, pump = connectedServerAndClient(
        lambda: server_tls.buildProtocol(address), lambda: client_tls.buildProtocol(address), clock=clock
    )
    pump.flush()
    assert isinstance(server_proto, TLSMemoryBIOProtocol) and isinstance(client_proto, TLSMemoryBIOProtocol)
    return server, client, server_proto, client_proto


def peer_names(tls: TLSMemoryBIOProtocol) -> list[str]:
    peer = tls.getPeerCertificate()
    assert peer is not None
    return certs.dns_names(peer.to_cryptography())


@pytest.fixture
def group(tmp_path: Path) -> Path:
    """A CA (made now, as TLS checks dates against the real clock) and nodes gtm-a, gtm-b."""
    directory = tmp_path / "certs"
    certs.init_ca(directory)
    for node in ("gtm-a", "gtm-b"):
        certs.issue(directory, node)
    return directory


@TWISTED_PYOPENSSL_DEPRECATION
def test_two_nodes_of_one_group_talk_over_mutual_tls(group: Path) -> None:
    """Files loaded with PrivateCertificate.loadPEM / Certificate.loadPEM make a TLS
    connection where each side requires and verifies the other's certificate; data flows both
    ways and each side sees the other's DNS name."""
    server, client, server_tls, client_tls = tls_connection(node_options(group, "gtm-a"), node_options(group, "gtm-b"))
    assert server.received == b"hello from the client"
    assert client.received == b"hello from the server"
    assert (server.lost, client.lost) == (None, None)
    assert peer_names(server_tls) == ["gtm-b"]
    assert peer_names(client_tls) == ["gtm-a"]


@TWISTED_PYOPENSSL_DEPRECATION
@pytest.mark.parametrize("stranger", ["client", "server"])
def test_a_certificate_from_another_ca_is_refused(group: Path, stranger: str) -> None:
    """A node whose certificate comes from another CA (though it trusts ours) fails the
    handshake, as client or as server: no application data crosses, the verifying end fails
    with "certificate verify failed" and the stranger is told "unknown ca"."""
    other = group.parent / "other"
    certs.init_ca(other)
    certs.issue(other, "gtm-x")
    ours = node_options(group, "gtm-a")
    theirs = node_options(other, "gtm-x", ca_dir=group)
    server_options, client_options = (ours, theirs) if stranger == "client" else (theirs, ours)
    server, client, _, _ = tls_connection(server_options, client_options)
    assert (server.received, client.received) == (b"", b"")
    assert server.lost is not None and client.lost is not None
    assert server.lost.check(SSL.Error) and client.lost.check(SSL.Error)
    errors = {"server": str(server.lost.value), "client": str(client.lost.value)}
    verifier = "server" if stranger == "client" else "client"
    assert "certificate verify failed" in errors[verifier]
    assert "unknown ca" in errors[stranger]


@TWISTED_PYOPENSSL_DEPRECATION
def test_service_identity_accepts_the_node_name_and_only_it(group: Path) -> None:
    """optionsForClientTLS (service-identity, as the peer service will check names) accepts
    the server as the name it was issued for and refuses it under another member's name."""
    ca = ssl.Certificate.loadPEM(read(group / "ca.pem"))
    me = ssl.PrivateCertificate.loadPEM(read(group / "gtm-a.pem") + read(group / "gtm-a.key"))
    server_options = node_options(group, "gtm-b")

    right = ssl.optionsForClientTLS("gtm-b", trustRoot=ca, clientCertificate=me)
    server, client, _, _ = tls_connection(server_options, right)
    assert (server.received, client.received) == (b"hello from the client", b"hello from the server")

    wrong = ssl.optionsForClientTLS("gtm-c", trustRoot=ca, clientCertificate=me)
    server, client, _, _ = tls_connection(server_options, wrong)
    assert (server.received, client.received) == (b"", b"")
    assert client.lost is not None
    assert client.lost.check(VerificationError)
    assert "gtm-c" in str(client.lost.value)
