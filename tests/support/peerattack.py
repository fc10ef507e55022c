"""An attacker on a running member's peer port, for process tests: AMP boxes by hand, a TLS
(or plaintext) client that records what came back, the running group it attacks, and
certificates made to measure (any dates, any extended key usage).

The group has three members in its config, n1 and n2 running; n3's certificate (a real
member's, whose node is not running) serves the attacks that need a legitimate identity.
Every attack goes to n1's peer port from its own loopback address, so the node's log lines
about it can be told apart from everything else.

With TLS 1.3 a client finishes its handshake before the server has checked its certificate:
the client learns of a rejection only afterwards, as an alert or a closed connection. So
attacks do not stop at the handshake's result: they send a correct Hello anyway and look at
what comes back (no AMP box at all, for a refused peer), when the node closes the
connection, and what the node logged.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

from gtmcluster.sync import certs
from tests.support.madecert import write_member_certificate
from tests.support.nodeproc import loopback_address
from tests.support.trio import GROUP, POLL, Group, running_group, summarize

TARGET = "n1"  # attacked
PARTNER = "n2"  # its real peer
IDLE_MEMBER = "n3"  # in the config, not running: its certificate is the attackers' "legitimate" one
#: how long an attack waits for the node to close the connection
CLOSE_WITHIN = 5.0
#: how long to wait for a node's log line about an attack
LOG_WITHIN = 3.0


# -- AMP by hand ------------------------------------------------------------------------------


def amp_box(**fields: str | int | bytes) -> bytes:
    """One AMP box: (2-byte length, key, 2-byte length, value) per field, then two zero bytes."""
    out = b""
    for key, value in fields.items():
        data = value if isinstance(value, bytes) else str(value).encode()
        out += struct.pack("!H", len(key)) + key.encode() + struct.pack("!H", len(data)) + data
    return out + b"\0\0"


def amp_field(key: str, value: str) -> bytes:
    """How one key and value of a box look on the wire."""
    data = value.encode()
    return struct.pack("!H", len(key)) + key.encode() + struct.pack("!H", len(data)) + data


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
    #: the node's certificate as the client saw it (DER), when the handshake got that far
    server_certificate: bytes | None = None
    compression: str | None = None

    @property
    def boxes(self) -> list[dict[bytes, bytes]]:
        return parse_boxes(self.data)

    def answered(self, ask: str | None = None) -> bool:
        """Whether an answer (to the command with ``_ask`` *ask*, or any) came back."""
        if ask is not None and amp_field("_answer", ask) not in self.data:
            return False  # (a quick look first: a flood's answers are many, and this runs per read)
        return any(b"_answer" in box and (ask is None or box[b"_answer"] == ask.encode()) for box in self.boxes)

    def answer(self, ask: str) -> dict[bytes, bytes] | None:
        return next((box for box in self.boxes if box.get(b"_answer") == ask.encode()), None)

    @property
    def server_serial(self) -> str | None:
        if self.server_certificate is None:
            return None
        return f"{x509.load_der_x509_certificate(self.server_certificate).serial_number:x}"


def attack(
    group: Group,
    context: ssl.SSLContext | None,
    send: bytes = b"",
    after_answer: bytes | Callable[[Outcome], bytes] = b"",
    within: float = CLOSE_WITHIN,
    until_answered: str | bool = False,
    target: str = TARGET,
) -> Outcome:
    """Connect to *target*'s peer port (TLS when *context*, else plaintext) from a fresh
    loopback address, send *send*, then *after_answer* once an ``_answer`` box came back,
    and read until the node closes the connection or *within* seconds pass (or, with
    *until_answered*, until an answer (to that ``_ask``, when a string) came)."""
    source = loopback_address()
    started = time.monotonic()
    raw = socket.create_connection(group.members[target].peer, timeout=within, source_address=(source, 0))
    host, port = raw.getsockname()[:2]
    outcome = Outcome(f"{host}:{port}")
    sock: socket.socket = raw
    wanted = until_answered if isinstance(until_answered, str) else None
    try:
        if context is not None:
            tls = context.wrap_socket(raw, server_hostname=target)
            sock = tls
            outcome.tls = tls.version()
            outcome.server_certificate = tls.getpeercert(binary_form=True)
            outcome.compression = tls.compression()
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
            if until_answered and outcome.answered(wanted):
                break
            if after_answer and not outcome.sent_after_answer and outcome.answered():
                outcome.sent_after_answer = True
                sock.sendall(after_answer(outcome) if callable(after_answer) else after_answer)
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

    def member_context(self, node: str = IDLE_MEMBER) -> ssl.SSLContext:
        """A client showing member *node*'s own certificate."""
        c = self.group.certs
        return client_context(c / "ca.pem", c / f"{node}.pem", c / f"{node}.key")


@contextmanager
def running_lab(
    workdir: Path,
    customize: Callable[[dict[str, Any]], None] | None = None,
    before_start: Callable[[Group], AbstractContextManager[object]] | None = None,
) -> Iterator[Lab]:
    """A group of three members with n1 and n2 running and connected, and a foreign CA;
    *before_start* (the group's files exist, no node runs yet) lasts as long as the lab."""
    with (
        running_group(workdir, 3, run=[], customize=customize) as group,
        before_start(group) if before_start is not None else nullcontext(),
    ):
        group.start(TARGET, PARTNER)
        statuses = group.wait_converged([TARGET, PARTNER])
        other_ca = workdir / "other-ca"
        certs.init_ca(other_ca)
        certs.issue(other_ca, IDLE_MEMBER)
        yield Lab(group, statuses[TARGET]["config_digest"], time.monotonic(), other_ca)


@dataclass
class Dialled:
    """One connection a `fake_member` accepted."""

    source: str  # the dialling node's address
    error: str | None = None  # what ended the TLS handshake, if it failed
    data: bytes = b""  # application bytes received


@contextmanager
def fake_member(group: Group, node: str, cert: Path, key: Path) -> Iterator[list[Dialled]]:
    """A TLS server on member *node*'s peer address showing *cert*, requiring a client
    certificate from the group CA, as a member's node would; yields the connections it got
    (each read for up to a second after the handshake), growing while it runs."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    context.load_verify_locations(cafile=str(group.certs / "ca.pem"))
    context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(group.members[node].peer)
    listener.settimeout(POLL)
    seen: list[Dialled] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, address = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection = Dialled(address[0])
            seen.append(connection)
            raw.settimeout(1.0)
            try:
                with context.wrap_socket(raw, server_side=True) as tls:
                    connection.data = tls.recv(65536)
            except (ssl.SSLError, OSError) as e:
                connection.error = f"{type(e).__name__}: {e}"
            finally:
                raw.close()

    thread = threading.Thread(target=serve, name=f"fake {node}", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def made_certificate(
    group: Group,
    node: str,
    days: tuple[int, int],
    name: str,
    usages: list[x509.ObjectIdentifier] | None = None,
) -> tuple[Path, Path]:
    """A certificate for member *node* signed by the group CA, valid from days[0] to days[1]
    (relative to today), with the extended key *usages* given (None: no such extension, so
    any use), built here rather than by `certs.issue` so it can be anything. Written as
    ``<workdir>/<name>/<node>.pem`` and ``.key``."""
    return write_member_certificate(group.certs, node, group.workdir / name, days, usages)
