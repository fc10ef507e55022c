"""HTTPS for the API (``api: {tls: true}``): the member's sync group certificate, TLS 1.2 or
newer, and, with ``client_certificates: required``, a client certificate from the group CA.

The node's certificate names the member (its DNS name), so a client checks it against the
group CA and the member's name, as peers do. With ``client_certificates: required`` a
client certificate must chain to the group CA or to the operators' CA and allow client
authentication (OpenSSL checks both in the handshake). With an operators' CA
(``api.tls: {client_ca: FILE}``) every client is asked for a certificate, and one from any
CA is taken in the handshake: whether it proves an identity of the users file is judged per
request (`gtmcluster.api.clientcert`), so that one from another CA is answered 401, as a
wrong token is, rather than a handshake failure a client cannot read.

Like the peers' `gtmcluster.sync.tls.TLSContexts`, every new connection is built from the
credentials in use at that moment, so a reload that finds renewed files (`ApiTLS.use`)
changes the certificate without a restart; open connections keep theirs.

`expiries` reads when the certificates a node uses end, for the status page and ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cryptography import x509
from OpenSSL import SSL, crypto
from twisted.internet import ssl
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOFactory
from zope.interface import implementer

from gtmcluster.nodeparts import Reload
from gtmcluster.sync.tls import MIN_TLS, Credentials, Expiry, expiry

if TYPE_CHECKING:
    from gtmcluster.nodeservice import NodeService

#: (a reload's lines keep the system name of the node's reload)
log = Logger(namespace="gtmcluster.service")


def server_options(creds: Credentials, require_client: bool, client_ca_pem: bytes = b"") -> ssl.CertificateOptions:
    """Serve with *creds*' certificate; with *require_client*, accept only clients showing a
    certificate from the group CA (or the operators' CA, *client_ca_pem*); without, but with
    an operators' CA, ask every client for one and take any (`clientcert` judges it)."""
    operators = (
        [crypto.X509.from_cryptography(c) for c in x509.load_pem_x509_certificates(client_ca_pem)]
        if client_ca_pem
        else []
    )
    options = ssl.CertificateOptions(
        privateKey=creds.own.privateKey.original,
        certificate=creds.own.original,
        verify=require_client or bool(operators),
        caCerts=[creds.ca.original, *operators] if require_client or operators else None,
        requireCertificate=require_client,
        raiseMinimumTo=MIN_TLS,
        enableSessions=False,
    )
    if operators and not require_client:
        # ask for a certificate (naming the CAs) but take whichever comes: judged per request
        options.getContext().set_verify(SSL.VERIFY_PEER, lambda connection, cert, errno, depth, ok: True)
    return options


@implementer(IOpenSSLServerConnectionCreator)
class ApiTLS:
    """The TLS settings of the API's connections: this node's credentials, and whether a
    client must show a certificate. A part of the node that takes a new config
    (`nodeparts.Reconfigurable`): renewed files, or a new client certificate rule."""

    label = "HTTPS API"

    def __init__(self, creds: Credentials, require_client: bool, client_ca_pem: bytes = b""):
        self.creds = creds
        self.require_client = require_client
        self.client_ca_pem = client_ca_pem
        self._options = server_options(creds, require_client, client_ca_pem)

    def use(self, creds: Credentials, require_client: bool, client_ca_pem: bytes = b"") -> bool:
        """New connections use *creds*, *require_client* and the operators' CA
        *client_ca_pem*; False when nothing changed."""
        same = creds.certificate == self.creds.certificate and creds.ca_certificate == self.creds.ca_certificate
        if same and require_client == self.require_client and client_ca_pem == self.client_ca_pem:
            return False
        self.creds = creds
        self.require_client = require_client
        self.client_ca_pem = client_ca_pem
        self._options = server_options(creds, require_client, client_ca_pem)
        return True

    def prepare(self, reload: Reload) -> Callable[[], None]:
        """New connections will use *reload*'s credentials (read and checked already; the
        running ones when it has none) and client certificate rule."""
        creds, require_client = reload.creds, reload.config.api.client_certificates_required
        client_ca_pem = reload.config.api.client_ca_pem
        # (built now, so that a CA that OpenSSL refuses refuses the reload, not the commit)
        server_options(creds or self.creds, require_client, client_ca_pem)

        def https() -> None:
            if self.use(creds or self.creds, require_client, client_ca_pem):
                log.info(
                    "HTTPS API: new connections use certificate serial {serial}; client certificates {clients}",
                    serial=self.creds.serial,
                    clients="required" if self.require_client else "not asked for",
                    event="api_tls_changed",
                )

        return https

    def describe(self) -> dict[str, Any]:
        """For the status page: the certificate served, and whether clients need one."""
        return {
            "serial": self.creds.serial,
            "not_after": self.creds.not_after.strftime("%Y-%m-%d %H:%M:%SZ"),
            "client_certificates": "required"
            if self.require_client
            else ("asked for (operators' CA)" if self.client_ca_pem else "none"),
        }

    def serverConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        return SSL.Connection(self._options.getContext(), None)


def wrap(factory: Any, tls: ApiTLS, clock: Any) -> TLSMemoryBIOFactory:
    """*factory* (the API's site) served over TLS as *tls* says."""
    wrapped = TLSMemoryBIOFactory(tls, False, factory, clock)
    wrapped.noisy = False
    return wrapped


def expiries(service: NodeService) -> list[Expiry]:
    """When the certificates *service* uses now end, in `gtmcluster.sync.tls.EXPIRING` order:
    ``node`` and ``ca`` from the credentials its peers use (else its HTTPS API's), ``api``
    from the certificate its HTTPS API serves (absent without ``api.tls``); empty for a node
    with neither. Read from the credentials in use, which a reload replaces: no file is read."""
    api = next((part for part in service.parts if isinstance(part, ApiTLS)), None)
    creds = service.peers.tls.creds if service.peers is not None else api.creds if api is not None else None
    found = []
    if creds is not None:
        found += [expiry("node", creds.certificate), expiry("ca", creds.ca_certificate)]
    if api is not None:
        found.append(expiry("api", api.creds.certificate))
    return found
