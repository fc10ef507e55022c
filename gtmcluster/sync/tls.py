"""TLS between peers: the group CA is the only trust root, both sides show certificates,
TLS 1.2 at least, and a peer is who its certificate's DNS name says, if that is a member.

The identity comes from the certificate, never from what the peer says in a message: the
Hello's node name must match it.

This node's own credentials can change while it runs (`TLSContexts.use`, on a reload that
finds renewed files): new connections, accepted or dialled, take the credentials in use at
the moment they start; connections already open keep the certificate they began with.

Renegotiation is refused (`OP_NO_RENEGOTIATION`): OpenSSL 3.0 and later refuse a
client's request by default, older versions did not, and a peer still proving itself could
make the node repeat the handshake's public-key work for as long as it liked.

Peer connections run over `PeerTLSTransport`, whose clean close first unregisters the
producer its protocol registers to watch its output (`sync.peer`).
"""

from __future__ import annotations

import datetime
import math
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from OpenSSL import SSL
from twisted.internet import defer, ssl
from twisted.internet.interfaces import (
    IOpenSSLClientConnectionCreator,
    IOpenSSLServerConnectionCreator,
    IProtocol,
    IProtocolFactory,
    IReactorTime,
    IStreamClientEndpoint,
)
from twisted.protocols.tls import BufferingTLSTransport, TLSMemoryBIOFactory
from twisted.python.failure import Failure
from zope.interface import implementer

from gtmcluster.config.model import TLSFiles
from gtmcluster.runtime import files
from gtmcluster.sync.certs import describe, dns_names

MIN_TLS = ssl.TLSVersion.TLSv1_2

#: why OpenSSL refused a peer's certificate (X509_V_ERR_* codes), for the log line
VERIFY_ERRORS = {
    2: "unable to get issuer certificate",
    7: "certificate signature failure",
    9: "certificate is not yet valid",
    10: "certificate has expired",
    18: "self-signed certificate",
    19: "self-signed certificate in certificate chain",
    20: "unable to get local issuer certificate (not from the group CA)",
    21: "unable to verify the first certificate",
    24: "invalid CA certificate",
    26: "unsupported certificate purpose (its extended key usage)",
}
#: TLS connection (the protocol OpenSSL serves) -> why its peer's certificate was refused
_refusals: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

#: the extended key usage a peer's certificate needs for its side of a connection
SERVER_AUTH = ("serverAuth", ExtendedKeyUsageOID.SERVER_AUTH)
CLIENT_AUTH = ("clientAuth", ExtendedKeyUsageOID.CLIENT_AUTH)


class CredentialError(Exception):
    """This node's TLS files are missing, unreadable or do not fit together."""


class IdentityError(Exception):
    """A peer's certificate does not name a member we may talk to."""


@dataclass(frozen=True)
class Credentials:
    node: str
    ca: ssl.Certificate
    own: ssl.PrivateCertificate
    not_after: datetime.datetime  # this node's certificate expiry
    certificate: x509.Certificate  # this node's certificate
    ca_certificate: x509.Certificate

    @property
    def serial(self) -> str:
        return f"{self.certificate.serial_number:x}"


#: the certificates a node reports the expiry of (`Expiry.certificate`): its own (the peers'
#: side), the group CA's, and the one its HTTPS API serves
EXPIRING = ("node", "ca", "api")
DAY = 86400.0


@dataclass(frozen=True)
class Expiry:
    """When one certificate a node uses stops being valid: the one reading of a not-after that
    the status page, the CLI and ``/metrics`` share (`expiry`; a node's: `api.tls.expiries`)."""

    certificate: str  # one of `EXPIRING`
    serial: str  # hex, as the logs and the status page write serials
    not_after: datetime.datetime  # timezone-aware, UTC

    @property
    def timestamp(self) -> float:
        """The not-after as Unix seconds (what a Prometheus gauge of it holds)."""
        return self.not_after.timestamp()

    def days_left(self, now: float) -> int:
        """Whole days from *now* (Unix seconds) to the not-after, rounded down: 0 on its
        last day, negative once it has passed."""
        return math.floor((self.timestamp - now) / DAY)

    def to_json(self, now: float) -> dict[str, Any]:
        return {"serial": self.serial, "not_after": _when(self.not_after), "days_left": self.days_left(now)}


def expiry(certificate: str, cert: x509.Certificate) -> Expiry:
    """*cert*'s expiry, reported as *certificate* (one of `EXPIRING`)."""
    return Expiry(certificate, f"{cert.serial_number:x}", cert.not_valid_after_utc)


def _read(path: Path, what: str, hint: str) -> bytes:
    """The PEM file *path* (a regular file of at most `files.PEM`: a FIFO named here would
    hold the reload that reads it)."""
    try:
        return files.read_bytes(path, files.PEM)
    except FileNotFoundError:
        raise CredentialError(f"{path}: no such file ({what}); {hint}") from None
    except OSError as e:
        raise CredentialError(f"{path}: cannot read {what}: {e.strerror or e}") from None


def _when(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def missing_usage(cert: x509.Certificate, *needed: tuple[str, x509.ObjectIdentifier]) -> list[str]:
    """The extended key usages among *needed* that *cert* does not allow.

    A certificate without the extension may serve any purpose (RFC 5280, 4.2.1.12); one
    with it serves only the purposes it lists.
    """
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return []
    return [name for name, oid in needed if oid not in usages]


def load_credentials(files: TLSFiles, node: str, now: datetime.datetime | None = None) -> Credentials:
    """Load and check the CA, this node's certificate and key. Raises `CredentialError`.

    The certificate must be the key's, signed by the CA, name *node*, be valid *now*
    (default: the current time) and be usable both to accept and to dial peers.
    """
    now = now or datetime.datetime.now(datetime.UTC)
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
    renew = f"issue a new one with: gtmcluster certs issue {node} --dir {files.cert.parent} --force"
    for path, c in ((files.ca, ca), (files.cert, cert)):
        if c.not_valid_after_utc <= now:
            raise CredentialError(
                f"{path} expired on {_when(c.not_valid_after_utc)}: "
                + (renew if c is cert else "make a new group CA and issue every node again")
            )
        if c.not_valid_before_utc > now:
            raise CredentialError(
                f"{path} is valid only from {_when(c.not_valid_before_utc)} (it is {_when(now)} here): "
                "check this host's clock"
            )
    missing = missing_usage(cert, SERVER_AUTH, CLIENT_AUTH)
    if missing:
        raise CredentialError(
            f"{files.cert} may not be used for {' and '.join(missing)} (its extended key usage), "
            f"which a member needs to accept and dial peers: {renew}"
        )
    try:
        own = ssl.PrivateCertificate.loadPEM(cert_pem + b"\n" + key_pem)
        ca_cert = ssl.Certificate.loadPEM(ca_pem)
    except Exception as e:
        raise CredentialError(f"{files.cert}: OpenSSL cannot use it: {e}") from None
    return Credentials(node, ca_cert, own, cert.not_valid_after_utc, cert, ca)


def server_options(creds: Credentials) -> ssl.CertificateOptions:
    """Accept only clients with a certificate from the group CA, over TLS 1.2 or newer,
    never renegotiating."""
    options = ssl.CertificateOptions(
        privateKey=creds.own.privateKey.original,
        certificate=creds.own.original,
        verify=True,
        caCerts=[creds.ca.original],
        requireCertificate=True,
        raiseMinimumTo=MIN_TLS,
        enableSessions=False,
    )
    # (the context is made once and kept: set before any connection is made from it)
    options.getContext().set_options(SSL.OP_NO_RENEGOTIATION)
    return options


def client_options(creds: Credentials, peer: str) -> IOpenSSLClientConnectionCreator:
    """Connect to member *peer*: its certificate must come from the group CA and name it."""
    return ssl.optionsForClientTLS(
        peer,
        trustRoot=creds.ca,
        clientCertificate=creds.own,
        extraCertificateOptions={"raiseMinimumTo": MIN_TLS},
    )


class TLSContexts:
    """The TLS settings of this node's peer connections, from the credentials in use.

    `server_creator` and `client_creator` give the listener and each dialler an object
    that builds every new connection from the credentials current at that moment, so
    `use` changes the certificate for new connections without a restart.
    """

    def __init__(self, creds: Credentials):
        self.creds = creds
        self._server = server_options(creds)
        self._clients: dict[str, IOpenSSLClientConnectionCreator] = {}

    def use(self, creds: Credentials) -> bool:
        """Take *creds* for new connections; False when they are the ones in use already."""
        if _same(creds, self.creds):
            return False
        self.creds = creds
        self._server = server_options(creds)
        self._clients = {}
        return True

    def server_creator(self) -> IOpenSSLServerConnectionCreator:
        return _CurrentServer(self)

    def client_creator(self, peer: str) -> IOpenSSLClientConnectionCreator:
        return _CurrentClient(self, peer)

    def server_connection(self) -> SSL.Connection:
        context = self._server.getContext()
        connection = SSL.Connection(context, None)
        connection.set_verify(context.get_verify_mode(), _note_refusal)
        return connection

    def client_connection(self, peer: str, protocol: Any) -> SSL.Connection:
        options = self._clients.get(peer)
        if options is None:
            options = self._clients[peer] = client_options(self.creds, peer)
        return options.clientConnectionForTLS(protocol)

    def describe(self) -> dict[str, Any]:
        """This node's certificate, for the status page."""
        cert = self.creds.certificate
        return {
            "serial": self.creds.serial,
            "not_before": _when(cert.not_valid_before_utc),
            "not_after": _when(cert.not_valid_after_utc),
            "ca_serial": f"{self.creds.ca_certificate.serial_number:x}",
        }

    def summary(self) -> str:
        return describe(self.creds.certificate)


def _same(a: Credentials, b: Credentials) -> bool:
    # the key was checked to be the certificate's: equal certificates mean equal keys
    return a.certificate == b.certificate and a.ca_certificate == b.ca_certificate


def _note_refusal(connection: SSL.Connection, cert: Any, errnum: int, depth: int, ok: int) -> bool:
    """OpenSSL's verdict on one certificate of the peer's chain, unchanged; a refusal's
    reason is kept for `refusal` (OpenSSL's own error says only "certificate verify failed")."""
    if not ok:
        transport = connection.get_app_data()
        if transport is not None:
            _refusals[transport] = VERIFY_ERRORS.get(errnum, f"X509 verify error {errnum}")
    return bool(ok)


def refusal(transport: Any) -> str | None:
    """Why the TLS connection *transport* refused its peer's certificate, if it did."""
    try:
        return _refusals.get(transport)
    except TypeError:  # not weakly referenceable: not one of ours
        return None


@implementer(IOpenSSLServerConnectionCreator)
class _CurrentServer:
    def __init__(self, contexts: TLSContexts):
        self.contexts = contexts

    def serverConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        return self.contexts.server_connection()


@implementer(IOpenSSLClientConnectionCreator)
class _CurrentClient:
    def __init__(self, contexts: TLSContexts, peer: str):
        self.contexts = contexts
        self.peer = peer

    def clientConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        return self.contexts.client_connection(self.peer, tlsProtocol)


def peer_identity(transport: Any, members: frozenset[str], me: str, expected: str | None) -> str:
    """The member a connected peer's certificate names. Raises `IdentityError`.

    OpenSSL has already checked that the certificate chains to the group CA, is within
    its validity dates and, when it lists extended key usages, allows its side of the
    connection; here its DNS name must be a member of the group other than us (and the
    one we dialled, for outgoing connections), and the usage is checked once more.
    """
    peer_cert = transport.getPeerCertificate() if hasattr(transport, "getPeerCertificate") else None
    if peer_cert is None:
        raise IdentityError("no client certificate")
    cert = peer_cert.to_cryptography()
    names = dns_names(cert)
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
    missing = missing_usage(cert, SERVER_AUTH if expected is not None else CLIENT_AUTH)
    if missing:
        raise IdentityError(f"{name}'s certificate may not be used for {missing[0]} (its extended key usage)")
    return name


class PeerTLSTransport(BufferingTLSTransport):
    """TLS for a peer connection. Its protocol registers a producer to watch its own
    output (`sync.peer`), and a TLS connection with a producer registered waits for it to
    unregister before it closes: so a clean close (`loseConnection`, from this node's code
    or from Twisted's `ClientService` stopping a dialler) unregisters it first."""

    def loseConnection(self) -> None:
        self.unregisterProducer()
        super().loseConnection()


class PeerTLSFactory(TLSMemoryBIOFactory):
    """`TLSMemoryBIOFactory` with `PeerTLSTransport` connections."""

    protocol = PeerTLSTransport


@implementer(IStreamClientEndpoint)
class PeerTLSEndpoint:
    """Dials *tcp* and runs `PeerTLSTransport` over it (`wrapClientTLS` with the peer
    connections' own TLS transport); fires with the application's protocol."""

    def __init__(self, creator: IOpenSSLClientConnectionCreator, tcp: IStreamClientEndpoint, clock: IReactorTime):
        self.creator = creator
        self.tcp = tcp
        self.clock = clock

    def connect(self, protocolFactory: IProtocolFactory) -> defer.Deferred[IProtocol]:
        factory = PeerTLSFactory(self.creator, True, protocolFactory, self.clock)
        connecting: defer.Deferred[Any] = self.tcp.connect(factory)
        return connecting.addCallback(lambda tls: tls.wrappedProtocol)


def handshake_failure(transport: Any, reason: Failure) -> str:
    """Why a TLS handshake with a peer failed: the error, and OpenSSL's reason if any."""
    why = refusal(transport)
    message = reason.getErrorMessage()
    return f"{message} ({why})" if why else message


def certificate_summary(transport: Any) -> dict[str, str]:
    """Serial (hex) and expiry of the peer's certificate, for logs and the status page."""
    peer_cert = transport.getPeerCertificate() if hasattr(transport, "getPeerCertificate") else None
    if peer_cert is None:
        return {}
    cert = peer_cert.to_cryptography()
    return {
        "serial": f"{cert.serial_number:x}",
        "not_after": cert.not_valid_after_utc.strftime("%Y-%m-%d %H:%M:%SZ"),
    }
