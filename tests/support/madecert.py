"""Member certificates made to measure (dates, extended key usage) from a group CA, for the
tests that need certificates `certs.issue` would never make."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gtmcluster.sync import certs


def write_member_certificate(
    ca_dir: Path,
    node: str,
    out_dir: Path,
    days: tuple[int, int] = (-1, 30),
    usages: list[x509.ObjectIdentifier] | None = None,
) -> tuple[Path, Path]:
    """A certificate for member *node* signed by the CA in *ca_dir*, valid from days[0] to
    days[1] (relative to today), with the extended key *usages* given (None: no such
    extension, so any use). Written as ``<out_dir>/<node>.pem`` and ``.key`` (0600)."""
    ca_cert, ca_key = certs.load_ca(ca_dir)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + datetime.timedelta(days=days[0]))
        .not_valid_after(now + datetime.timedelta(days=days[1]))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(node)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if usages is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    certificate = builder.sign(ca_key, hashes.SHA256())
    out_dir.mkdir(exist_ok=True)
    cert_path, key_path = out_dir / f"{node}.pem", out_dir / f"{node}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return cert_path, key_path
