"""HTTPS for the public RUM listener (``rum.tls: {cert, key}``): the operator's own
certificate (a public CA's, since browsers check it; its chain may follow it in the file)
and key, TLS 1.2 or newer, no client certificates, no session tickets kept.

Like the API's (`gtmcluster.api.tls`), every new connection is built from the options in use
at that moment, so `RumTLS.use` (a reload that read renewed files) changes the certificate
for new connections without a restart. Reading the files (regular, bounded: ``runtime.files``)
is the config's; here they are PEM bytes.
"""

from __future__ import annotations

from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from OpenSSL import SSL, crypto
from twisted.internet import ssl
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator
from twisted.protocols.tls import TLSMemoryBIOFactory
from zope.interface import implementer

from gtmcluster.sync.tls import MIN_TLS


def server_options(cert_pem: bytes, key_pem: bytes) -> ssl.CertificateOptions:
    """Serve the first certificate of *cert_pem* (the rest as its chain) with *key_pem*.
    Raises ValueError when they cannot be read or do not match."""
    try:
        certs = x509.load_pem_x509_certificates(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as e:
        raise ValueError(f"rum.tls: {e}") from None
    if certs[0].public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
        raise ValueError("rum.tls: the key is not the certificate's")
    return ssl.CertificateOptions(
        privateKey=crypto.PKey.from_cryptography_key(key),  # type: ignore[arg-type]
        certificate=crypto.X509.from_cryptography(certs[0]),
        extraCertChain=[crypto.X509.from_cryptography(c) for c in certs[1:]],
        raiseMinimumTo=MIN_TLS,
        enableSessions=False,
    )


@implementer(IOpenSSLServerConnectionCreator)
class RumTLS:
    """The TLS settings new connections to the RUM listener get."""

    label = "HTTPS RUM listener"

    def __init__(self, cert_pem: bytes, key_pem: bytes):
        self.cert_pem = cert_pem
        self._options = server_options(cert_pem, key_pem)

    def use(self, cert_pem: bytes, key_pem: bytes) -> bool:
        """New connections use *cert_pem* and *key_pem*; False when nothing changed."""
        if cert_pem == self.cert_pem:
            return False
        self._options = server_options(cert_pem, key_pem)
        self.cert_pem = cert_pem
        return True

    def serverConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        return SSL.Connection(self._options.getContext(), None)


def wrap(factory: Any, tls: RumTLS, clock: Any) -> TLSMemoryBIOFactory:
    """*factory* (the listener's site) served over TLS as *tls* says."""
    wrapped = TLSMemoryBIOFactory(tls, False, factory, clock)
    wrapped.noisy = False
    return wrapped
