"""Attacks on a running member's peer port, over real TLS on loopback, with Python's `ssl` as
the attacker.

The group has three members in its config, n1 and n2 running; n3's certificate (a real
member's, whose node is not running) serves the attacks that need a legitimate identity.
Every attack goes to n1's peer port from its own loopback address, so the node's log lines
about it can be told apart from everything else.

With TLS 1.3 a client finishes its handshake before the server has checked its certificate:
the client learns of a rejection only afterwards, as an alert or a closed connection. So
the tests do not stop at the handshake's result: they send a correct Hello anyway and check
that no answer (no AMP box at all) ever comes back, that the node closes the connection, and
what the node logged. After every attack, and at the end, n1 and n2 are still connected
over their original channel and a new record written on n1 still reaches n2.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gtmcluster.sync import certs
from tests.support import dnsclient
from tests.support.nodeproc import loopback_address
from tests.support.trio import GROUP, POLL, SYNC_SETTINGS, Group, running_group, summarize

pytestmark = pytest.mark.process

TARGET = "n1"  # attacked
PARTNER = "n2"  # its real peer
IDLE_MEMBER = "n3"  # in the config, not running: its certificate is the attackers' "legitimate" one
HANDSHAKE_TIMEOUT = float(SYNC_SETTINGS["handshake_timeout"])
#: how long after its own deadline a node may take to close (scheduling, the poll period)
SLACK = 1.5
#: how long an attack waits for the node to close the connection
CLOSE_WITHIN = 5.0
#: how long to wait for a node's log line about an attack
LOG_WITHIN = 3.0
#: the node drops a box larger than this (gtmcluster.sync.peer.MAX_BOX)
MAX_BOX = 256 * 1024
WIDEIP = "gslb.example.test"


# -- AMP by hand ------------------------------------------------------------------------------


def amp_box(**fields: str | int | bytes) -> bytes:
    """One AMP box: (2-byte length, key, 2-byte length, value) per field, then two zero bytes."""
    out = b""
    for key, value in fields.items():
        data = value if isinstance(value, bytes) else str(value).encode()
        out += struct.pack("!H", len(key)) + key.encode() + struct.pack("!H", len(data)) + data
    return out + b"\0\0"


def parse_boxes(data: bytes) -> list[dict[bytes, bytes]]:
    """The complete AMP boxes at the start of *data* (a partial last one is left out)."""
    boxes: list[dict[bytes, bytes]] = []
    box: dict[bytes, bytes] = {}
    i = 0
    while i + 2 <= len(data):
        (n,) = struct.unpack("!H", data[i : i + 2])
        if n == 0:
            boxes.append(box)
            box = {}
            i += 2
            continue
        key = data[i + 2 : i + 2 + n]
        j = i + 2 + n
        if j + 2 > len(data):
            break
        (m,) = struct.unpack("!H", data[j : j + 2])
        if j + 2 + m > len(data):
            break
        box[key] = data[j + 2 : j + 2 + m]
        i = j + 2 + m
    return boxes


def hello(config_digest: str, node: str = IDLE_MEMBER, **changes: str | int) -> bytes:
    """A Hello as the initiator of a connection sends it."""
    fields: dict[str, str | int | bytes] = {
        "_command": "Hello",
        "_ask": "1",
        "node": node,
        "group": GROUP,
        "datacenter": "DC3",
        "version": 1,
        "min_version": 1,
        "config_digest": config_digest,
    }
    fields.update(changes)
    return amp_box(**fields)


def oversized_publish() -> bytes:
    """A Publish box of five 65,000-byte values: about 325 kB, over the node's box limit."""
    values: dict[str, str | int | bytes] = {f"v{i}": b"x" * 65_000 for i in range(5)}
    return amp_box(_command="Publish", _ask="2", **values)


# -- the attacker -----------------------------------------------------------------------------


def client_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """A TLS client that checks the node against the group CA and shows *cert* (if any)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


@dataclass
class Outcome:
    """What an attacker saw on one connection."""

    source: str  # its own address, host:port, as the node sees it
    tls: str | None = None  # the TLS version, when the client finished its handshake
    error: str | None = None  # the TLS or socket error that ended it, if any
    data: bytes = b""  # application bytes received
    closed_after: float | None = None  # seconds from connect to the close; None: still open
    sent_after_answer: bool = False

    @property
    def boxes(self) -> list[dict[bytes, bytes]]:
        return parse_boxes(self.data)

    def answered(self) -> bool:
        return any(b"_answer" in box for box in self.boxes)


def attack(
    group: Group,
    context: ssl.SSLContext | None,
    send: bytes = b"",
    after_answer: bytes = b"",
    within: float = CLOSE_WITHIN,
    until_answered: bool = False,
) -> Outcome:
    """Connect to the target's peer port (TLS when *context*, else plaintext) from a fresh
    loopback address, send *send*, then *after_answer* once an ``_answer`` box came back,
    and read until the node closes the connection or *within* seconds pass (or, with
    *until_answered*, until the answer came)."""
    source = loopback_address()
    started = time.monotonic()
    raw = socket.create_connection(group.members[TARGET].peer, timeout=within, source_address=(source, 0))
    host, port = raw.getsockname()[:2]
    outcome = Outcome(f"{host}:{port}")
    sock: socket.socket = raw
    try:
        if context is not None:
            sock = context.wrap_socket(raw, server_hostname=TARGET)
            outcome.tls = sock.version() if isinstance(sock, ssl.SSLSocket) else None
        if send:
            sock.sendall(send)
        sock.settimeout(POLL)
        deadline = started + within
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ssl.SSLWantReadError):
                continue
            if not chunk:
                outcome.closed_after = time.monotonic() - started
                break
            outcome.data += chunk
            if until_answered and outcome.answered():
                break
            if after_answer and not outcome.sent_after_answer and outcome.answered():
                outcome.sent_after_answer = True
                sock.sendall(after_answer)
    except TimeoutError as e:  # the handshake stalled: nothing was closed
        outcome.error = f"{type(e).__name__}: {e}"
    except (ssl.SSLError, OSError) as e:  # an alert, a reset or a broken pipe: closed
        outcome.error = f"{type(e).__name__}: {e}"
        outcome.closed_after = time.monotonic() - started
    finally:
        sock.close()
    return outcome


def assert_refused_silently(outcome: Outcome) -> None:
    """The node closed the connection quickly and sent no application data."""
    assert outcome.closed_after is not None, f"the connection was still open after {CLOSE_WITHIN}s: {outcome}"
    assert outcome.closed_after < 2.0, f"closed only after {outcome.closed_after:.2f}s: {outcome}"
    assert outcome.data == b"", f"the node sent application data to a refused peer: {outcome}"


# -- the group --------------------------------------------------------------------------------


@dataclass
class Lab:
    """The running group under attack, and what the attacks need to know about it."""

    group: Group
    config_digest: str
    #: when n1 and n2 were seen connected, before any attack
    converged_at: float
    other_ca: Path

    def mark(self) -> int:
        """The target's log size now: lines after it are about what follows."""
        return self.group.log_size(TARGET)

    def wait_line(self, offset: int, *texts: str, within: float = LOG_WITHIN) -> str:
        """The first line of the target's log after *offset* that holds every one of *texts*."""
        found: list[str] = []

        def seen() -> bool:
            lines = self.group.log_text(TARGET, offset).splitlines()
            found[:] = [line for line in lines if all(t in line for t in texts)]
            return bool(found)

        self.group.wait_for(
            seen, within, f"line with {texts} in {TARGET}'s log", lambda: self.group.log_text(TARGET, offset)
        )
        return found[0]

    def wait_rejection_logged(self, offset: int, outcome: Outcome) -> str:
        """The node's own (gtmcluster) log line about the refused connection from *outcome*'s
        address: every rejection is logged with its reason."""
        return self.wait_line(offset, "[gtmcluster.", outcome.source)

    def assert_intact(self) -> None:
        """n1 and n2 still list each other as connected, over the channel they had before
        the attacks (connected for at least that long), and hold the same state."""
        statuses = self.group.wait_converged([TARGET, PARTNER], timeout=10.0)
        up_for = time.monotonic() - self.converged_at
        for node, other in ((TARGET, PARTNER), (PARTNER, TARGET)):
            peer = next(p for p in statuses[node]["peers"] if p["name"] == other)
            assert peer["connected"], f"{node} lost {other}: {summarize(dict(statuses))}"
            assert peer["connected_for"] >= up_for - 1.0, (
                f"{node}'s channel to {other} is {peer['connected_for']}s old, but the group has been up "
                f"{up_for:.1f}s: it was dropped during the attacks"
            )


def customize(config: dict[str, Any]) -> None:
    """LDNS persistence on the wide IP, so a query writes a record that must replicate."""
    config["wideips"][WIDEIP]["persistence"] = {"ttl": 600}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A group of three members with n1 and n2 running and connected."""
    workdir: Path = tmp_path_factory.mktemp("sync-security")
    with running_group(workdir, 3, run=[TARGET, PARTNER], customize=customize) as group:
        statuses = group.wait_converged([TARGET, PARTNER])
        other_ca = workdir / "other-ca"
        certs.init_ca(other_ca)
        certs.issue(other_ca, IDLE_MEMBER)
        yield Lab(group, statuses[TARGET]["config_digest"], time.monotonic(), other_ca)


def member_context(lab: Lab, node: str = IDLE_MEMBER) -> ssl.SSLContext:
    c = lab.group.certs
    return client_context(c / "ca.pem", c / f"{node}.pem", c / f"{node}.key")


def dated_certificate(lab: Lab, node: str, days: tuple[int, int], name: str) -> tuple[Path, Path]:
    """A certificate for member *node* signed by the group CA, valid from days[0] to days[1]
    (relative to today), built here rather than by `certs.issue` so its dates can be anything."""
    ca_cert, ca_key = certs.load_ca(lab.group.certs)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + datetime.timedelta(days=days[0]))
        .not_valid_after(now + datetime.timedelta(days=days[1]))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(node)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    directory = lab.group.workdir / name
    directory.mkdir(exist_ok=True)
    cert_path, key_path = directory / f"{node}.pem", directory / f"{node}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return cert_path, key_path


# -- the attacks ------------------------------------------------------------------------------


def test_a_certificate_from_another_ca_is_refused(lab: Lab) -> None:
    """A client showing a certificate for member n3 issued by another CA gets no answer to its
    Hello: the node closes the connection at once, its real peer stays connected, and the node
    logs the refused connection."""
    offset = lab.mark()
    context = client_context(lab.group.certs / "ca.pem", lab.other_ca / "n3.pem", lab.other_ca / "n3.key")
    outcome = attack(lab.group, context, hello(lab.config_digest))
    assert_refused_silently(outcome)
    lab.assert_intact()
    lab.wait_rejection_logged(offset, outcome)


def test_an_expired_certificate_from_the_group_ca_is_refused(lab: Lab) -> None:
    """A certificate for member n3, signed by the group CA but expired yesterday, is refused:
    no answer, the connection closed at once, the group intact, and the refusal logged. (The
    same certificate with current dates is accepted: its expiry is what is refused.)"""
    ca = lab.group.certs / "ca.pem"
    cert, key = dated_certificate(lab, IDLE_MEMBER, (-30, 30), "current")
    control = attack(lab.group, client_context(ca, cert, key), hello(lab.config_digest), until_answered=True)
    assert control.answered(), f"a current certificate made the same way was refused: {control}"

    offset = lab.mark()
    cert, key = dated_certificate(lab, IDLE_MEMBER, (-30, -1), "expired")
    outcome = attack(lab.group, client_context(ca, cert, key), hello(lab.config_digest))
    assert_refused_silently(outcome)
    lab.assert_intact()
    lab.wait_rejection_logged(offset, outcome)


def test_a_group_certificate_for_a_non_member_is_refused(lab: Lab) -> None:
    """A valid group-CA certificate for "intruder" (not in the config) is refused after the
    TLS handshake: no answer, closed, and the node logs that it is not a member, naming the
    connection's address."""
    offset = lab.mark()
    files = certs.issue(lab.group.certs, "intruder")
    context = client_context(lab.group.certs / "ca.pem", files.cert, files.key)
    outcome = attack(lab.group, context, hello(lab.config_digest, node="intruder"))
    assert_refused_silently(outcome)
    line = lab.wait_line(offset, "not a member")
    assert "intruder" in line and outcome.source in line, line
    lab.assert_intact()


def test_a_member_claiming_another_name_in_hello_is_refused(lab: Lab) -> None:
    """With n3's own certificate, a Hello that claims to be n2 gets no answer: the node drops
    the connection, logs that the certificate names n3 while the Hello claims n2, and keeps
    its real connection to n2."""
    offset = lab.mark()
    outcome = attack(lab.group, member_context(lab), hello(lab.config_digest, node=PARTNER))
    assert outcome.tls is not None, f"the TLS handshake itself failed: {outcome}"
    assert outcome.closed_after is not None, f"still open after {CLOSE_WITHIN}s: {outcome}"
    assert not outcome.answered(), f"the node accepted the Hello: {outcome.boxes}"
    line = lab.wait_line(offset, "Hello claims")
    assert f"certificate names {IDLE_MEMBER}" in line and f"claims to be {PARTNER}" in line, line
    lab.assert_intact()


def test_a_hello_with_no_common_protocol_version_is_refused_clearly(lab: Lab) -> None:
    """A member that speaks only a later protocol (7..7) is refused clearly: before the
    connection closes it receives a REFUSED error that names the versions, so the other side
    can log why; the node logs it too."""
    offset = lab.mark()
    outcome = attack(lab.group, member_context(lab), hello(lab.config_digest, version=7, min_version=7))
    assert outcome.closed_after is not None, f"still open after {CLOSE_WITHIN}s: {outcome}"
    assert not outcome.answered(), f"the node accepted the Hello: {outcome.boxes}"
    line = lab.wait_line(offset, "protocol versions 7..7")
    assert outcome.source in line or IDLE_MEMBER in line, line
    lab.assert_intact()
    errors = [box for box in outcome.boxes if b"_error" in box]
    assert errors, f"the refused member got no REFUSED error, only the closed connection: {outcome}"
    assert errors[0].get(b"_error_code") == b"REFUSED", errors
    assert b"7..7" in errors[0].get(b"_error_description", b""), errors


def test_plaintext_on_the_peer_port_is_closed(lab: Lab) -> None:
    """A plaintext AMP Hello (no TLS at all) is never answered: the node closes the connection
    at once, sends nothing back, keeps its peer, and logs the refused connection."""
    offset = lab.mark()
    outcome = attack(lab.group, None, hello(lab.config_digest))
    assert_refused_silently(outcome)
    assert b"_answer" not in outcome.data
    lab.assert_intact()
    lab.wait_rejection_logged(offset, outcome)


def test_a_client_without_a_certificate_is_refused(lab: Lab) -> None:
    """A TLS client that shows no certificate gets no answer to its Hello and is closed at
    once; the group is intact and the node logs the refusal."""
    offset = lab.mark()
    outcome = attack(lab.group, client_context(lab.group.certs / "ca.pem"), hello(lab.config_digest))
    assert_refused_silently(outcome)
    lab.assert_intact()
    lab.wait_rejection_logged(offset, outcome)


def test_an_oversized_box_after_a_correct_hello_drops_the_peer(lab: Lab) -> None:
    """With n3's certificate and a correct Hello the node answers and takes n3 as a peer; a
    following Publish of ~325 kB (over the 256 KiB box limit) makes it drop that connection
    and log "larger than", while n2 stays connected."""
    offset = lab.mark()
    outcome = attack(lab.group, member_context(lab), hello(lab.config_digest), after_answer=oversized_publish())
    assert outcome.answered(), f"the correct Hello was not answered: {outcome}"
    assert outcome.sent_after_answer
    assert outcome.closed_after is not None, f"the oversized box did not end the connection: {outcome}"
    line = lab.wait_line(offset, "larger than")
    assert str(MAX_BOX) in line and IDLE_MEMBER in line, line
    lab.assert_intact()
    n3 = next(p for p in lab.group.status(TARGET)["peers"] if p["name"] == IDLE_MEMBER)
    assert not n3["connected"], n3


def test_connections_that_stall_are_closed_after_the_handshake_timeout(lab: Lab) -> None:
    """Two stalled connections at once: one sends nothing at all (a TLS handshake that never
    starts), the other completes TLS with n3's certificate and never sends its Hello. The node
    closes each within handshake_timeout (+ slack), not sooner, and logs both."""
    offset = lab.mark()
    silent_source, tls_source = loopback_address(), loopback_address()
    peer = lab.group.members[TARGET].peer
    started = time.monotonic()
    silent = socket.create_connection(peer, timeout=5, source_address=(silent_source, 0))
    tls = member_context(lab).wrap_socket(
        socket.create_connection(peer, timeout=5, source_address=(tls_source, 0)), server_hostname=TARGET
    )
    closed: dict[str, float] = {}
    received: dict[str, bytes] = {"silent": b"", "tls": b""}
    sockets: dict[str, socket.socket] = {"silent": silent, "tls": tls}
    addresses = {name: "{}:{}".format(*s.getsockname()[:2]) for name, s in sockets.items()}
    try:
        for s in sockets.values():
            s.settimeout(POLL / 2)
        deadline = started + HANDSHAKE_TIMEOUT + SLACK + 1.0
        while len(closed) < len(sockets) and time.monotonic() < deadline:
            for name, s in sockets.items():
                if name in closed:
                    continue
                try:
                    chunk = s.recv(4096)
                except (TimeoutError, ssl.SSLWantReadError):
                    continue
                except (ssl.SSLError, OSError):
                    chunk = b""
                if chunk:
                    received[name] += chunk
                else:
                    closed[name] = time.monotonic() - started
    finally:
        for s in sockets.values():
            s.close()
    for name in sockets:
        assert name in closed, f"the {name} connection was still open {HANDSHAKE_TIMEOUT + SLACK + 1:.1f}s later"
        took = closed[name]
        assert HANDSHAKE_TIMEOUT - 0.5 <= took <= HANDSHAKE_TIMEOUT + SLACK, (
            f"the {name} connection was closed after {took:.2f}s; handshake_timeout is {HANDSHAKE_TIMEOUT}s"
        )
    assert received["silent"] == b"", received
    assert not any(b"_answer" in box for box in parse_boxes(received["tls"])), received
    lab.wait_line(offset, "no TLS handshake and Hello", addresses["silent"])
    lab.wait_line(offset, "no TLS handshake and Hello", IDLE_MEMBER)
    lab.assert_intact()


def test_after_the_attacks_the_members_still_replicate(lab: Lab) -> None:
    """After all of the above, n1 and n2 are still connected over their first channel, a new
    record on n1 (the persistence record of a query from a new client) reaches n2 (equal
    digests, one more n1 record on both), and neither node logged a traceback."""
    lab.assert_intact()
    before = lab.group.wait_converged([TARGET, PARTNER])
    count = before[PARTNER]["state"]["by_origin"].get(TARGET, 0)
    client = loopback_address()
    reply = dnsclient.udp(dnsclient.query(WIDEIP, "A"), lab.group.members[TARGET].dns, source=client)
    assert dnsclient.addresses(dnsclient.parse(reply)), dnsclient.parse(reply)

    after: dict[str, dict[str, Any]] = {}

    def reached() -> bool:
        after.update(lab.group.wait_converged([TARGET, PARTNER], timeout=10.0))
        return all(s["state"]["by_origin"].get(TARGET, 0) > count for s in after.values())

    lab.group.wait_for(reached, 10.0, f"n1's new record on n2 (had {count})", lambda: summarize(dict(after)))
    assert after[TARGET]["state"]["digest"] == after[PARTNER]["state"]["digest"], summarize(dict(after))
    for node in (TARGET, PARTNER):
        text = lab.group.log_text(node) + lab.group.output_text(node)
        assert "Traceback" not in text, f"{node}:\n{text}"
        assert "Unhandled" not in text, f"{node}:\n{text}"
