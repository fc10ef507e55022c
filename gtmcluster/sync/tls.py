"""TLS between peers: the group CA is the only trust root, both sides show certificates,
TLS 1.2 at least, and a peer is who its certificate's DNS name says, if that is a member.

The identity comes from the certificate, never from what the peer says in a message: the
Hello's node name must match it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from twisted.internet import ssl
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator

from gtmcluster.config.model import TLSFiles
from gtmcluster.sync.certs import dns_names

MIN_TLS = ssl.TLSVersion.TLSv1_2


class CredentialError(Exception):
    """This node's TLS files are missing, unreadable or do not fit together."""


class IdentityError(Exception):
    """A peer's certificate does not name a member we may talk to."""


@dataclass(frozen=True)
class Credentials:
    node: str
    ca: ssl.Certificate
    own: ssl.PrivateCertificate
    not_after: Any  # datetime of this node's certificate expiry


def _read(path: Path, what: str, hint: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CredentialError(f"{path}: no such file ({what}); {hint}") from None
    except OSError as e:
        raise CredentialError(f"{path}: cannot read {what}: {e.strerror or e}") from None


def load_credentials(files: TLSFiles, node: str) -> Credentials:
    """Load and check the CA, this node's certificate and key. Raises `CredentialError`."""
    certs_dir = files.ca.parent
    ca_pem = _read(files.ca, "the sync group CA", f"create it with: gtmcluster certs init --dir {certs_dir}")
    hint = f"create it with: gtmcluster certs issue {node} --dir {files.cert.parent}"
    cert_pem = _read(files.cert, f"{node}'s certificate", hint)
    key_pem = _read(files.key, f"{node}'s key", hint)
    try:
        ca = x509.load_pem_x509_certificate(ca_pem)
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as e:
        raise CredentialError(f"{files.cert} / {files.key} / {files.ca}: not PEM certificates and key: {e}") from None
    if key.public_key() != cert.public_key():
        raise CredentialError(f"{files.key} is not the key of {files.cert}")
    try:
        cert.verify_directly_issued_by(ca)
    except Exception as e:  # InvalidSignature, ValueError, TypeError
        raise CredentialError(f"{files.cert} is not signed by the sync group CA {files.ca}: {e!r}") from None
    if node not in dns_names(cert):
        raise CredentialError(f"{files.cert} is for {', '.join(dns_names(cert)) or 'no DNS name'}, not {node}")
    try:
        own = ssl.PrivateCertificate.loadPEM(cert_pem + b"\n" + key_pem)
        ca_cert = ssl.Certificate.loadPEM(ca_pem)
    except Exception as e:
        raise CredentialError(f"{files.cert}: OpenSSL cannot use it: {e}") from None
    return Credentials(node, ca_cert, own, cert.not_valid_after_utc)


def server_options(creds: Credentials) -> ssl.CertificateOptions:
    """Accept only clients with a certificate from the group CA, over TLS 1.2 or newer."""
    return ssl.CertificateOptions(
        privateKey=creds.own.privateKey.original,
        certificate=creds.own.original,
        verify=True,
        caCerts=[creds.ca.original],
        requireCertificate=True,
        raiseMinimumTo=MIN_TLS,
        enableSessions=False,
    )


def client_options(creds: Credentials, peer: str) -> IOpenSSLClientConnectionCreator:
    """Connect to member *peer*: its certificate must come from the group CA and name it."""
    return ssl.optionsForClientTLS(
        peer,
        trustRoot=creds.ca,
        clientCertificate=creds.own,
        extraCertificateOptions={"raiseMinimumTo": MIN_TLS},
    )


def peer_identity(transport: Any, members: frozenset[str], me: str, expected: str | None) -> str:
    """The member a connected peer's certificate names. Raises `IdentityError`.

    OpenSSL has already checked that the certificate chains to the group CA and is within
    its validity dates; here its DNS name must be a member of the group other than us
    (and the one we dialled, for outgoing connections).
    """
    peer_cert = transport.getPeerCertificate() if hasattr(transport, "getPeerCertificate") else None
    if peer_cert is None:
        raise IdentityError("no client certificate")
    names = dns_names(peer_cert.to_cryptography())
    matching = sorted(n for n in names if n in members)
    if not matching:
        raise IdentityError(f"certificate names {', '.join(names) or 'nothing'}, not a member of the group")
    if len(matching) > 1:
        raise IdentityError(f"certificate names several members ({', '.join(matching)})")
    name = matching[0]
    if name == me:
        raise IdentityError(f"certificate names this node ({me}): a copy of our own certificate?")
    if expected is not None and name != expected:
        raise IdentityError(f"dialled {expected} but the certificate names {name}")
    return name
