"""Attacks on a running member's peer port, over real TLS on loopback, with Python's `ssl`
(and, for what no TLS library offers any more, ClientHellos written by hand) as the
attacker; see `tests.support.peerattack` for the group and how an attack is judged.

Every attack goes to n1's peer port from its own loopback address; the tests check what
came back (no AMP box at all, for a refused peer), when the node closed the connection, and
what it logged. After every attack, and at the end, n1 and n2 are still connected over their
original channel and a new record written on n1 still reaches n2.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID

from gtmcluster.sync import certs
from tests.support import dnsclient, tlswire
from tests.support.nodeproc import loopback_address
from tests.support.peerattack import (
    CLOSE_WITHIN,
    IDLE_MEMBER,
    PARTNER,
    TARGET,
    Dialled,
    Lab,
    amp_box,
    assert_refused_silently,
    attack,
    client_context,
    fake_member,
    hello,
    made_certificate,
    parse_boxes,
    running_lab,
)
from tests.support.trio import POLL, SYNC_SETTINGS, Group, summarize

pytestmark = pytest.mark.process

HANDSHAKE_TIMEOUT = float(SYNC_SETTINGS["handshake_timeout"])
#: how long after its own deadline a node may take to close (scheduling, the poll period)
SLACK = 1.5
#: the node drops a box larger than this (gtmcluster.sync.peer.MAX_BOX)
MAX_BOX = 256 * 1024
WIDEIP = "gslb.example.test"


def oversized_publish() -> bytes:
    """A Publish box of five 65,000-byte values: about 325 kB, over the node's box limit."""
    values: dict[str, str | int | bytes] = {f"v{i}": b"x" * 65_000 for i in range(5)}
    return amp_box(_command="Publish", _ask="2", **values)


def customize(config: dict[str, Any]) -> None:
    """LDNS persistence on the wide IP, so a query writes a record that must replicate."""
    config["wideips"][WIDEIP]["persistence"] = {"ttl": 600}


#: the connections n1 and n2 made to the fake n3 (see `lab`), as they come
DIALLED: dict[str, list[Dialled]] = {}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A group of three members with n1 and n2 running and connected. From before they
    start, n3's peer address is served by a fake n3 whose certificate (from the group CA)
    allows only clientAuth; what n1 and n2 do when they dial it lands in `DIALLED`."""

    @contextmanager
    def fake_n3(group: Group) -> Iterator[None]:
        usage = [ExtendedKeyUsageOID.CLIENT_AUTH]
        cert, key = made_certificate(group, IDLE_MEMBER, (-1, 30), "client-only-n3", usage)
        with fake_member(group, IDLE_MEMBER, cert, key) as dialled:
            DIALLED[IDLE_MEMBER] = dialled
            yield

    with running_lab(tmp_path_factory.mktemp("sync-security"), customize, fake_n3) as lab:
        yield lab


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
    cert, key = made_certificate(lab.group, IDLE_MEMBER, (-30, 30), "current")
    control = attack(lab.group, client_context(ca, cert, key), hello(lab.config_digest), until_answered=True)
    assert control.answered(), f"a current certificate made the same way was refused: {control}"

    offset = lab.mark()
    cert, key = made_certificate(lab.group, IDLE_MEMBER, (-30, -1), "expired")
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
    outcome = attack(lab.group, lab.member_context(), hello(lab.config_digest, node=PARTNER))
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
    outcome = attack(lab.group, lab.member_context(), hello(lab.config_digest, version=7, min_version=7))
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
    outcome = attack(lab.group, lab.member_context(), hello(lab.config_digest), after_answer=oversized_publish())
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
    tls = lab.member_context().wrap_socket(
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


def test_a_certificate_not_yet_valid_is_refused(lab: Lab) -> None:
    """A certificate for member n3 from the group CA whose validity starts tomorrow is refused
    like an expired one: no answer, closed at once, the group intact, the refusal logged."""
    offset = lab.mark()
    cert, key = made_certificate(lab.group, IDLE_MEMBER, (1, 30), "not-yet-valid")
    outcome = attack(lab.group, client_context(lab.group.certs / "ca.pem", cert, key), hello(lab.config_digest))
    assert_refused_silently(outcome)
    lab.assert_intact()
    assert "certificate" in lab.wait_rejection_logged(offset, outcome)


def test_a_certificate_not_for_client_use_is_refused(lab: Lab) -> None:
    """n3's certificate from the group CA whose extended key usage allows only serverAuth
    cannot dial: no answer, closed at once, and the node logs the certificate's purpose as
    the reason. (The same with clientAuth is answered: the usage is what is refused.)"""
    ca = lab.group.certs / "ca.pem"
    cert, key = made_certificate(lab.group, IDLE_MEMBER, (-1, 30), "client-use", [ExtendedKeyUsageOID.CLIENT_AUTH])
    control = attack(lab.group, client_context(ca, cert, key), hello(lab.config_digest), until_answered=True)
    assert control.answered(), f"a certificate for client use was refused: {control}"

    offset = lab.mark()
    cert, key = made_certificate(lab.group, IDLE_MEMBER, (-1, 30), "server-only", [ExtendedKeyUsageOID.SERVER_AUTH])
    outcome = attack(lab.group, client_context(ca, cert, key), hello(lab.config_digest))
    assert_refused_silently(outcome)
    lab.assert_intact()
    assert "purpose" in lab.wait_rejection_logged(offset, outcome)


def test_a_member_whose_certificate_is_not_for_server_use_is_not_talked_to(lab: Lab) -> None:
    """n1 and n2 dial n3 (a fake whose group-CA certificate allows only clientAuth) and abort
    each TLS handshake: the fake sees their "unsupported certificate" alert and never a byte
    of application data (no Hello); n1 logs the failed outgoing handshake and lists n3 as
    not connected. (Nodes dial from the wildcard address, so the fake cannot tell n1 from
    n2: every connection it got must have ended so.)"""
    dialled = DIALLED[IDLE_MEMBER]
    line = lab.wait_line(0, f"dropping peer connection {IDLE_MEMBER} (outgoing)", within=20.0)
    assert "TLS handshake failed" in line, line
    assert dialled, "the fake n3 was never dialled"
    ended = [c for c in dialled if c.error is not None or c.data]
    assert ended and all(c.data == b"" for c in ended), ended
    assert all("unsupported certificate" in (c.error or "").lower() for c in ended), ended
    n3 = next(p for p in lab.group.status(TARGET)["peers"] if p["name"] == IDLE_MEMBER)
    assert not n3["connected"], n3


@pytest.mark.parametrize("version", [tlswire.TLS1_0, tlswire.TLS1_1])
def test_tls_below_1_2_is_refused(lab: Lab, version: int) -> None:
    """A ClientHello offering at most TLS 1.0 or 1.1 (written by hand, so whatever this
    machine's OpenSSL allows a client) gets a protocol_version alert and no ServerHello, the
    node closes the connection and logs it."""
    offset = lab.mark()
    source = loopback_address()
    reply = tlswire.first_reply(lab.group.members[TARGET].peer, tlswire.client_hello(version), source)
    assert reply.record_type == tlswire.ALERT, reply
    assert reply.alert == tlswire.PROTOCOL_VERSION_ALERT, reply
    assert reply.closed, reply
    line = lab.wait_line(offset, "[gtmcluster.", f"{source}:")
    assert "unsupported protocol" in line, line
    lab.assert_intact()


def test_compression_is_never_chosen(lab: Lab) -> None:
    """A TLS 1.2 ClientHello that prefers DEFLATE compression gets a ServerHello with the null
    method (so nothing a peer sends is ever decompressed: no compression bomb), and a
    modern client's connection reports no compression."""
    reply = tlswire.first_reply(
        lab.group.members[TARGET].peer,
        tlswire.client_hello(tlswire.TLS1_2, bytes([tlswire.DEFLATE, tlswire.NULL_COMPRESSION])),
        loopback_address(),
    )
    assert reply.record_type == tlswire.HANDSHAKE, reply
    assert reply.version == tlswire.TLS1_2 and reply.compression == tlswire.NULL_COMPRESSION, reply
    outcome = attack(lab.group, lab.member_context(), hello(lab.config_digest), until_answered=True)
    assert outcome.answered() and outcome.compression is None, outcome


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
