"""HTTPS for the RUM listener (`gtmcluster.rum.tls`): the operator's certificate and chain
with its key, a key of another certificate refused, and a renewed certificate taken by new
connections; a real TLS handshake in memory (twisted's loopback) shows the site served."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gtmcluster.rum.tls import RumTLS, server_options


def pair(name: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    pkcs8 = serialization.PrivateFormat.PKCS8
    key_pem = key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def test_the_certificate_and_its_key_are_served_and_a_mismatch_refused() -> None:
    cert, key = pair("rum.example.net")
    other_cert, other_key = pair("other.example.net")
    assert server_options(cert + other_cert, key).getContext() is not None  # (a chain after it)
    with pytest.raises(ValueError, match="not the certificate's"):
        server_options(cert, other_key)
    with pytest.raises(ValueError, match=r"rum\.tls"):
        server_options(b"not pem", key)
    tls = RumTLS(cert, key)
    assert not tls.use(cert, key)
    assert tls.use(other_cert, other_key) and tls.cert_pem == other_cert
    with pytest.raises(ValueError):
        tls.use(cert, other_key)
    assert tls.cert_pem == other_cert  # (a bad renewal leaves the one in use)
