"""Identities proven by a TLS client certificate of the operators' CA (``api.tls.client_ca``).

The API asks every HTTPS client for a certificate when the config names an operators' CA
(`tls.server_options`), and takes any in the handshake; here a certificate counts as an
identity only when it chains to that CA (OpenSSL's check, against the certificates of the
CA file: an intermediate CA goes in that file too), is valid now, allows client
authentication (when it lists extended key usages at all), and its subject or one of its
subject alternative names is that of an identity of the users file (`config.users`). A
certificate that does not count says why (`identify` gives the reason), which the 401 of a
request needing an identity repeats. A bearer token, when the request gives one, decides
instead.
"""

from __future__ import annotations

from functools import lru_cache

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from OpenSSL import crypto

from gtmcluster.api.identity import Identity
from gtmcluster.config.users import ApiUsers, sans_of, subject_of


@lru_cache(maxsize=4)
def _store_certificates(pem: bytes) -> tuple[crypto.X509, ...]:
    return tuple(crypto.X509.from_cryptography(c) for c in x509.load_pem_x509_certificates(pem))


def identify(certificate: x509.Certificate, ca_pem: bytes, users: ApiUsers) -> Identity | str:
    """The identity *certificate* proves under the operators' CA *ca_pem*, or why none."""
    shown = certificate.subject.rfc4514_string()[:200] or "(empty subject)"
    if not ca_pem:
        return f"; the client certificate ({shown}) is no identity: the config names no api.tls.client_ca"
    store = crypto.X509Store()
    for ca in _store_certificates(ca_pem):
        store.add_cert(ca)
    try:
        crypto.X509StoreContext(store, crypto.X509.from_cryptography(certificate)).verify_certificate()
    except crypto.X509StoreContextError as e:
        return f"; the client certificate ({shown}) is not one of the operators' CA (api.tls.client_ca): {e}"
    try:
        usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usages = None
    if usages is not None and ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
        return f"; the client certificate ({shown}) does not allow client authentication"
    user = users.by_subject.get(subject_of(certificate.subject))
    if user is None:
        user = next((u for san in sans_of(certificate) if (u := users.by_san.get(san)) is not None), None)
    if user is None:
        return f"; the client certificate ({shown}) names no identity of the users file (api.users_file)"
    return Identity(user.name, user.role, "certificate")
