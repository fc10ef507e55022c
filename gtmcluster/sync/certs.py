"""Sync group certificates: one private CA per group, one key and certificate per node.

`init_ca` makes the CA (``ca.pem``, ``ca.key``); `issue` makes ``NODE.pem`` and ``NODE.key``
signed by it, with NODE as the certificate's only DNS name (SAN), which the TLS layer checks
against the config's member names, and `renew` replaces them with a new pair;
`issue_client` makes an operator's client certificate for the HTTPS API
(``clients/NAME.pem``, no DNS name: never a peer's). Keys are EC P-256,
unencrypted PKCS8 PEM. Every file is written to a temporary name in the same directory,
created with its final mode (keys 0600, certificates 0644), synced and then renamed into
place, so a crash never leaves a half-written or readable key; nothing is overwritten
unless asked (``force``): `gtmcluster.runtime.private` writes them. Uses `cryptography`
only: no ``openssl`` command is run.

The loaders and `describe` are for the TLS layer and its logs. Every failure is a `CertError`
whose message says what to do.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes, CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gtmcluster.config import membername
from gtmcluster.config.membername import CA_STEM
from gtmcluster.runtime import files, private

CA_CERT = f"{CA_STEM}.pem"
CA_KEY = f"{CA_STEM}.key"
CA_NAME = "gtmcluster sync group CA"
#: default lifetimes in days: ten years for the CA; 825 days (the old CA/Browser Forum
#: maximum) for node certificates, which are cheap to reissue
CA_DAYS = 3650
NODE_DAYS = 825
MAX_DAYS = 36500
#: certificates start this long before "now", so a peer whose clock is a little behind
#: does not reject a certificate issued a moment ago
CLOCK_SKEW = datetime.timedelta(minutes=5)
KEY_MODE = private.KEY_MODE
CERT_MODE = 0o644


class CertError(Exception):
    """A certificate operation that cannot be done; the message says why and what to do."""


@dataclass(frozen=True)
class CaFiles:
    """The CA files `init_ca` wrote and the certificate in them."""

    cert: Path
    key: Path
    certificate: x509.Certificate

    @property
    def written(self) -> tuple[Path, ...]:
        """The files, in the order they were written."""
        return (self.key, self.cert)


@dataclass(frozen=True)
class NodeFiles:
    """A node's files that `issue` wrote and the certificate in them."""

    node: str
    cert: Path
    key: Path
    certificate: x509.Certificate
    #: the requested lifetime would have outlived the CA, so the certificate ends with it
    capped: bool

    @property
    def written(self) -> tuple[Path, ...]:
        """The files, in the order they were written."""
        return (self.key, self.cert)


# -- names and numbers --------------------------------------------------------------------


def node_name(text: str) -> str:
    """Return `text` if it can be a node certificate's DNS name and file name, else raise:
    the config's member-name rule (`config.membername.check`), as a `CertError`."""
    try:
        return membername.check(text)
    except membername.BadName as e:
        raise CertError(str(e)) from None


def _check_days(days: int) -> int:
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise CertError(f"--days must be a whole number of days from 1 to {MAX_DAYS}, not {days!r}")
    return days


def _now(now: datetime.datetime | None) -> datetime.datetime:
    if now is None:
        now = datetime.datetime.now(datetime.UTC)
    elif now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    # certificates keep whole seconds; keep the same here so callers can compare exactly
    return now.astimezone(datetime.UTC).replace(microsecond=0)


def _init_command(directory: Path, *, force: bool = False) -> str:
    return f"gtmcluster certs init --dir {shlex.quote(str(directory))}" + (" --force" if force else "")


# -- the CA and node certificates ---------------------------------------------------------


def init_ca(
    directory: Path,
    *,
    days: int = CA_DAYS,
    force: bool = False,
    name: str = CA_NAME,
    now: datetime.datetime | None = None,
) -> CaFiles:
    """Create the sync group CA in `directory`: ``ca.key`` (0600) and ``ca.pem`` (0644).

    The certificate is self-signed, may sign only end-entity certificates (path length 0)
    and is valid from `now` (minus `CLOCK_SKEW`) for `days`. The directory is created (0700)
    when missing. Existing CA files are replaced only with `force`, after which every node
    certificate must be issued again.
    """
    directory = Path(directory)
    _check_days(days)
    if not isinstance(name, str) or not 1 <= len(name.strip()) <= 64:
        raise CertError(f"the CA name must be 1 to 64 characters, not {name!r}")
    now = _now(now)
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if not force:
        _refuse_existing(
            [key_path, cert_path], "pass --force to replace the CA (every node certificate must then be issued again)"
        )
    _make_directory(directory)

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name.strip())])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_pair(key_path, _key_pem(key), cert_path, certificate.public_bytes(serialization.Encoding.PEM), force)
    return CaFiles(cert=cert_path, key=key_path, certificate=certificate)


def issue(
    directory: Path,
    node: str,
    *,
    days: int = NODE_DAYS,
    force: bool = False,
    now: datetime.datetime | None = None,
) -> NodeFiles:
    """Create ``NODE.key`` (0600) and ``NODE.pem`` (0644) in `directory`, signed by its CA.

    The certificate names NODE as subject CN and as its only DNS name, is good for TLS
    servers and clients alike, and is valid from `now` (minus `CLOCK_SKEW`) for `days`, but
    never beyond the CA's own expiry (`NodeFiles.capped` says when that shortened it).
    Existing files are replaced only with `force`.
    """
    directory = Path(directory)
    _check_days(days)
    node = node_name(node)
    now = _now(now)
    ca_cert, ca_key = load_ca(directory)
    ca_end = ca_cert.not_valid_after_utc
    if ca_end <= now:
        raise CertError(
            f"the CA in {directory} expired on {_when(ca_end)}: make a new one with "
            f"{_init_command(directory, force=True)}, then issue every node again"
        )
    cert_path, key_path = directory / f"{node}.pem", directory / f"{node}.key"
    if not force:
        _refuse_existing([key_path, cert_path], f"pass --force to replace {node}'s key and certificate")

    wanted_end = now + datetime.timedelta(days=days)
    not_after = min(wanted_end, ca_end)
    not_before = max(now - CLOCK_SKEW, ca_cert.not_valid_before_utc)
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(node)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(_authority_key_identifier(ca_cert, ca_key), critical=False)
        .sign(ca_key, _signature_hash(ca_key))
    )
    _write_pair(key_path, _key_pem(key), cert_path, certificate.public_bytes(serialization.Encoding.PEM), force)
    return NodeFiles(node=node, cert=cert_path, key=key_path, certificate=certificate, capped=not_after < wanted_end)


@dataclass(frozen=True)
class Renewed:
    """What `renew` replaced, and with what."""

    old: x509.Certificate
    new: NodeFiles


def renew(
    directory: Path,
    node: str,
    *,
    days: int = NODE_DAYS,
    now: datetime.datetime | None = None,
) -> Renewed:
    """Replace NODE's key and certificate in `directory` with a new pair from its CA (as
    `issue` with ``force``; both files staged, then renamed into place together).

    Refused (`CertError`, saying what to do) when NODE has no certificate there yet (renew
    replaces; `issue` makes the first), when the CA is incomplete, or when the CA's key may
    be read by others than its owner (not 0600: the new certificate would rest on a key
    that may have been copied). A running node takes the new pair on its next reload."""
    directory = Path(directory)
    node = node_name(node)
    _check_days(days)
    cert_path = directory / f"{node}.pem"
    if not private.exists(cert_path):
        raise CertError(
            f"{node} has no certificate in {directory} ({cert_path.name}): renew replaces a member's key and "
            f"certificate; make its first with gtmcluster certs issue {node} --dir {shlex.quote(str(directory))}"
        )
    old = load_certificate(cert_path)
    ca_key = directory / CA_KEY
    try:
        loose = private.loose_mode(ca_key)
    except FileNotFoundError:
        loose = None  # (load_ca says what is missing)
    except OSError as e:
        raise CertError(f"cannot examine {ca_key}: {e.strerror or e}") from e
    if loose is not None:
        raise CertError(
            f"{ca_key} is mode {loose:04o}: others than its owner may read the CA's key, which must be 0600; "
            f"chmod 600 {shlex.quote(str(ca_key))}, and if it may have been copied, make a new group CA "
            "(docs/operations.md, Certificates)"
        )
    return Renewed(old, issue(directory, node, days=days, force=True, now=now))


#: where `issue_client` writes, under the CA's directory: apart from the nodes' files, so a
#: client's name never collides with a member's
CLIENTS_DIR = "clients"
#: an operator's name: letters, digits and ``.-_@``, starting with a letter or digit
_CLIENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
#: the organizational unit of client certificates (they name no member, so no peer takes them)
CLIENT_OU = "gtmcluster API client"


def issue_client(
    directory: Path,
    name: str,
    *,
    days: int = NODE_DAYS,
    force: bool = False,
    now: datetime.datetime | None = None,
) -> NodeFiles:
    """Create ``clients/NAME.key`` (0600) and ``clients/NAME.pem`` (0644) under `directory`,
    signed by its CA: an operator's certificate for the HTTPS API (``api.client_certificates:
    required``). It names NAME as subject CN only (no DNS name, so no member accepts it as a
    peer) and is good for TLS client authentication only."""
    directory = Path(directory)
    _check_days(days)
    if not isinstance(name, str) or not _CLIENT_RE.fullmatch(name):
        raise CertError(
            f"{name!r} is not a client name: use letters, digits and '.', '-', '_', '@' "
            "(starting with a letter or digit; at most 64)"
        )
    now = _now(now)
    ca_cert, ca_key = load_ca(directory)
    ca_end = ca_cert.not_valid_after_utc
    if ca_end <= now:
        raise CertError(f"the CA in {directory} expired on {_when(ca_end)}: make a new one first")
    clients = directory / CLIENTS_DIR
    cert_path, key_path = clients / f"{name}.pem", clients / f"{name}.key"
    if not force:
        _refuse_existing([key_path, cert_path], f"pass --force to replace {name}'s key and certificate")
    _make_directory(clients)
    wanted_end = now + datetime.timedelta(days=days)
    not_after = min(wanted_end, ca_end)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, CLIENT_OU),
            x509.NameAttribute(NameOID.COMMON_NAME, name),
        ]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(max(now - CLOCK_SKEW, ca_cert.not_valid_before_utc))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(_authority_key_identifier(ca_cert, ca_key), critical=False)
        .sign(ca_key, _signature_hash(ca_key))
    )
    _write_pair(key_path, _key_pem(key), cert_path, certificate.public_bytes(serialization.Encoding.PEM), force)
    return NodeFiles(node=name, cert=cert_path, key=key_path, certificate=certificate, capped=not_after < wanted_end)


def _key_usage(
    *, digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _authority_key_identifier(
    ca_cert: x509.Certificate, ca_key: CertificateIssuerPrivateKeyTypes
) -> x509.AuthorityKeyIdentifier:
    try:
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:  # a CA made elsewhere
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def _signature_hash(key: CertificateIssuerPrivateKeyTypes) -> hashes.SHA256 | None:
    # Ed25519 and Ed448 sign whole messages and take no separate hash
    return None if isinstance(key, (ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)) else hashes.SHA256()


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


# -- loading ------------------------------------------------------------------------------


def load_certificate(path: Path | str) -> x509.Certificate:
    """The PEM certificate in `path` (the first one, if it holds a chain)."""
    data = _read(Path(path))
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError as e:
        raise CertError(f"{path} is not a PEM certificate ({e})") from e


def load_private_key(path: Path | str) -> CertificateIssuerPrivateKeyTypes:
    """The unencrypted PEM private key in `path`, of a type that can sign certificates."""
    data = _read(Path(path))
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError as e:  # a password was needed
        raise CertError(f"{path} is encrypted: gtmcluster needs an unencrypted key (keep it mode 0600)") from e
    except (ValueError, UnsupportedAlgorithm) as e:
        raise CertError(f"{path} is not a PEM private key ({e})") from e
    signing = (
        ec.EllipticCurvePrivateKey,
        rsa.RSAPrivateKey,
        dsa.DSAPrivateKey,
        ed25519.Ed25519PrivateKey,
        ed448.Ed448PrivateKey,
    )
    if not isinstance(key, signing):
        raise CertError(f"{path} holds a {type(key).__name__}, which cannot sign certificates")
    return key


def load_ca(directory: Path) -> tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes]:
    """The CA certificate and key in `directory`, checked to be a CA and to belong together."""
    directory = Path(directory)
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    missing = [p for p in (cert_path, key_path) if not private.exists(p)]
    if len(missing) == 2:
        raise CertError(f"no CA in {directory}: run {_init_command(directory)} first")
    if missing:
        present = cert_path if missing[0] == key_path else key_path
        raise CertError(
            f"no CA in {directory}: {missing[0].name} is missing ({present.name} is there): restore it, or make a "
            f"new CA with {_init_command(directory, force=True)} and issue every node again"
        )
    certificate = load_certificate(cert_path)
    key = load_private_key(key_path)
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise CertError(
            f"{cert_path} is not a CA certificate (no basicConstraints CA=true): "
            f"make the group CA with {_init_command(directory, force=True)}"
        )
    if _public_der(key.public_key()) != _public_der(certificate.public_key()):
        raise CertError(
            f"{key_path} does not belong to {cert_path}: restore the CA's own key, or make a new CA with "
            f"{_init_command(directory, force=True)} and issue every node again"
        )
    return certificate, key


def _public_der(key: CertificatePublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def dns_names(cert: x509.Certificate) -> list[str]:
    """The certificate's DNS names (subjectAltName), in order; empty when it has none."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return list(san.get_values_for_type(x509.DNSName))


def describe(cert: x509.Certificate) -> str:
    """One line for logs: subject, DNS names, validity, issuer, serial and fingerprint."""
    names = ", ".join(dns_names(cert)) or "none"
    return (
        f"subject {cert.subject.rfc4514_string()}; DNS names {names}; "
        f"valid {_when(cert.not_valid_before_utc)} to {_when(cert.not_valid_after_utc)}; "
        f"issuer {cert.issuer.rfc4514_string()}; serial {cert.serial_number:x}; "
        f"sha256 {cert.fingerprint(hashes.SHA256()).hex()}"
    )


def _when(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _read(path: Path) -> bytes:
    """The PEM file *path*: a regular file of at most `files.PEM`."""
    try:
        return files.read_bytes(path, files.PEM)
    except FileNotFoundError as e:
        raise CertError(f"{path} does not exist") from e
    except OSError as e:
        raise CertError(f"cannot read {path}: {e.strerror or e}") from e


# -- writing ------------------------------------------------------------------------------


@contextlib.contextmanager
def _as_cert_error() -> Iterator[None]:
    """A file or directory that cannot be written (`private.WriteError`) is a `CertError`."""
    try:
        yield
    except private.WriteError as e:
        raise CertError(str(e)) from e.__cause__


def _refuse_existing(paths: Iterable[Path], hint: str) -> None:
    with _as_cert_error():
        private.refuse_existing(paths, hint)


def _make_directory(directory: Path) -> None:
    with _as_cert_error():
        private.make_directory(directory)


def _write_pair(key_path: Path, key_data: bytes, cert_path: Path, cert_data: bytes, force: bool) -> None:
    """Write a key, then its certificate. With `force`, both are staged before either replaces
    what is there; without, a failure removes the new key again."""
    with _as_cert_error():
        if force:  # both staged, then renamed one after the other
            private.replace_together([(key_path, key_data, KEY_MODE), (cert_path, cert_data, CERT_MODE)])
            return
        private.write(key_path, key_data, KEY_MODE, force)
        try:
            private.write(cert_path, cert_data, CERT_MODE, force)
        except BaseException:
            if not force:
                with contextlib.suppress(OSError):
                    key_path.unlink()
            raise
