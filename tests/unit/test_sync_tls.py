"""This node's TLS credentials: what `load_credentials` refuses (with the reason), extended key
usage as OpenSSL and `peer_identity` enforce it, and `TLSContexts`, which gives new
connections the credentials in use at the moment they start (rotation without a restart).
In-memory TLS connections (real OpenSSL, no sockets)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from OpenSSL import SSL
from twisted.internet import ssl

from gtmcluster.config.model import TLSFiles
from gtmcluster.sync import certs
from gtmcluster.sync.tls import (
    CredentialError,
    Credentials,
    TLSContexts,
    client_options,
    load_credentials,
    refusal,
    server_options,
)
from tests.support.madecert import write_member_certificate
from tests.unit.test_certs import TWISTED_PYOPENSSL_DEPRECATION, tls_connection


@pytest.fixture
def group(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    certs.init_ca(directory)
    for node in ("gtm-a", "gtm-b"):
        certs.issue(directory, node)
    return directory


def files(directory: Path, node: str) -> TLSFiles:
    return TLSFiles(directory / "ca.pem", directory / f"{node}.pem", directory / f"{node}.key")


def made(
    directory: Path,
    node: str,
    days: tuple[int, int] = (-1, 30),
    usages: list[x509.ObjectIdentifier] | None = None,
) -> None:
    """Replace *node*'s files with a certificate from the group CA valid from days[0] to
    days[1] and with the extended key *usages* given (None: no such extension)."""
    write_member_certificate(directory, node, directory, days, usages)


@pytest.mark.parametrize(
    ("days", "usages", "message"),
    [
        ((-30, -1), None, "expired on"),
        ((1, 30), None, "is valid only from"),
        ((-1, 30), [ExtendedKeyUsageOID.SERVER_AUTH], "may not be used for clientAuth"),
        ((-1, 30), [ExtendedKeyUsageOID.CLIENT_AUTH], "may not be used for serverAuth"),
    ],
)
def test_own_certificates_that_peers_would_refuse_are_refused_with_the_reason(
    group: Path, days: tuple[int, int], usages: list[x509.ObjectIdentifier] | None, message: str
) -> None:
    """An expired or not yet valid certificate, or one whose extended key usage leaves out
    accepting or dialling, is refused at load (start or reload), saying what to do."""
    made(group, "gtm-a", days, usages)
    with pytest.raises(CredentialError, match=message) as e:
        load_credentials(files(group, "gtm-a"), "gtm-a")
    assert "gtm-a.pem" in str(e.value)


def test_a_certificate_without_extended_key_usage_serves_both_ends(group: Path) -> None:
    """RFC 5280: no extended key usage extension means any use, so such a certificate loads."""
    made(group, "gtm-a", usages=None)
    assert load_credentials(files(group, "gtm-a"), "gtm-a").node == "gtm-a"


def serial(tls: object) -> str:
    peer = tls.getPeerCertificate()  # type: ignore[attr-defined]
    assert peer is not None
    return f"{peer.to_cryptography().serial_number:x}"


@TWISTED_PYOPENSSL_DEPRECATION
def test_new_connections_take_the_credentials_in_use_and_open_ones_keep_theirs(group: Path) -> None:
    """After `use` with renewed credentials, a new connection shows the new certificate, in
    both directions; a connection made before still works with the old one."""
    a = TLSContexts(load_credentials(files(group, "gtm-a"), "gtm-a"))
    b = TLSContexts(load_credentials(files(group, "gtm-b"), "gtm-b"))
    old = a.creds.serial
    server, client, _, client_tls = tls_connection(a.server_creator(), b.client_creator("gtm-a"))  # type: ignore[arg-type]
    assert serial(client_tls) == old and server.received == b"hello from the client"

    certs.issue(group, "gtm-a", force=True)
    renewed = load_credentials(files(group, "gtm-a"), "gtm-a")
    assert a.use(renewed) and not a.use(renewed)
    assert renewed.serial != old
    _, _, _, client_tls2 = tls_connection(a.server_creator(), b.client_creator("gtm-a"))  # type: ignore[arg-type]
    assert serial(client_tls2) == renewed.serial
    server3, _, server_tls3, _ = tls_connection(b.server_creator(), a.client_creator("gtm-b"))  # type: ignore[arg-type]
    assert serial(server_tls3) == renewed.serial and server3.received == b"hello from the client"
    # the first connection is still up, on the old certificate
    assert server.lost is None and client.lost is None and serial(client_tls) == old


@TWISTED_PYOPENSSL_DEPRECATION
@pytest.mark.parametrize(("side", "usage"), [("client", "serverAuth"), ("server", "clientAuth")])
def test_openssl_refuses_a_certificate_lacking_the_usage_of_its_side(group: Path, side: str, usage: str) -> None:
    """A dialling peer whose certificate allows only serverAuth, or an accepting one whose
    certificate allows only clientAuth, fails the handshake: no data crosses."""
    only = ExtendedKeyUsageOID.SERVER_AUTH if usage == "serverAuth" else ExtendedKeyUsageOID.CLIENT_AUTH
    good = TLSContexts(load_credentials(files(group, "gtm-b"), "gtm-b"))
    bad_dir = group.parent / "bad"
    bad_dir.mkdir()
    for name in ("ca.pem", "ca.key"):
        (bad_dir / name).write_bytes((group / name).read_bytes())
    made(bad_dir, "gtm-a", usages=[only])
    # loaded by hand: load_credentials itself refuses such a certificate for this node
    pem, ca_pem = (bad_dir / "gtm-a.pem").read_bytes(), (group / "ca.pem").read_bytes()
    own = ssl.PrivateCertificate.loadPEM(pem + b"\n" + (bad_dir / "gtm-a.key").read_bytes())
    cert = x509.load_pem_x509_certificate(pem)
    ca = ssl.Certificate.loadPEM(ca_pem)
    bad = Credentials("gtm-a", ca, own, cert.not_valid_after_utc, cert, x509.load_pem_x509_certificate(ca_pem))
    if side == "client":
        server, client, server_tls, _ = tls_connection(good.server_creator(), client_options(bad, "gtm-b"))  # type: ignore[arg-type]
        # the accepting side keeps OpenSSL's reason for its log line
        assert refusal(server_tls) == "unsupported certificate purpose (its extended key usage)"
    else:
        server, client, _, _ = tls_connection(server_options(bad), good.client_creator("gtm-a"))
    assert (server.received, client.received) == (b"", b"")
    assert server.lost is not None and client.lost is not None
    errors = str(server.lost.value) + str(client.lost.value)
    assert "certificate verify failed" in errors and "unsupported certificate" in errors


def _pump(a: SSL.Connection, b: SSL.Connection) -> None:
    """Move what each side wrote to the other until nothing moves (memory BIOs)."""
    moved = True
    while moved:
        moved = False
        for source, sink in ((a, b), (b, a)):
            try:
                data = source.bio_read(65536)
            except SSL.WantReadError:
                continue
            if data:
                sink.bio_write(data)
                moved = True


def _step(connection: SSL.Connection, call: str) -> str:
    """Run *call* (do_handshake, recv) once; what came of it."""
    try:
        if call == "recv":
            return f"ok {connection.recv(100)!r}"
        connection.do_handshake()
    except SSL.WantReadError:
        return "want read"
    except SSL.Error as e:
        return f"error {e}"
    return "ok"


@TWISTED_PYOPENSSL_DEPRECATION
def test_the_peer_port_never_renegotiates(group: Path) -> None:
    """The listener's TLS context refuses renegotiation (`OP_NO_RENEGOTIATION`), and a TLS
    1.2 client that asks for it once connected gets a no_renegotiation alert, not a second
    handshake. (OpenSSL 3.0 and later refuse a client's request by default, so on main only
    the option was missing; older OpenSSL versions renegotiated.)"""
    creds = load_credentials(files(group, "gtm-a"), "gtm-a")
    assert server_options(creds).getContext().set_options(0) & SSL.OP_NO_RENEGOTIATION

    server = TLSContexts(creds).server_connection()
    server.set_accept_state()
    peer = load_credentials(files(group, "gtm-b"), "gtm-b")
    context = SSL.Context(SSL.TLS_METHOD)
    context.set_max_proto_version(SSL.TLS1_2_VERSION)  # (TLS 1.3 has no renegotiation at all)
    context.use_certificate(peer.own.original)
    context.use_privatekey(peer.own.privateKey.original)
    client = SSL.Connection(context, None)
    client.set_connect_state()
    for _ in range(5):
        _step(client, "handshake")
        _step(server, "handshake")
        _pump(client, server)
    assert server.get_protocol_version_name() == "TLSv1.2"

    assert client.renegotiate()
    _step(client, "handshake")
    _pump(client, server)
    outcomes = []
    for _ in range(3):
        outcomes += [_step(server, "recv"), _step(client, "recv")]
        _pump(client, server)
    assert server.total_renegotiations() == 0
    assert any("no renegotiation" in outcome for outcome in outcomes), outcomes
