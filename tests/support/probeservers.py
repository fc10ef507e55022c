"""Test doubles for the health checks: in-memory transports, and real servers on loopback.

In memory: `UdpMemoryReactor` adds a recording ``listenUDP`` to Twisted's
`MemoryReactorClock` (which has none); `accept_tcp` plays the server side of a recorded
``connectTCP`` with a `StringTransport`; `refuse_tcp` fails it.

Real: small servers run in threads of the test process on ephemeral loopback ports (TCP
echo, HTTP and HTTPS, UDP echo, a DNS responder), and `make_certificates` writes a CA and a
server certificate for 127.0.0.1, ::1 and localhost. `run_checks` runs checks with the real
reactor in a subprocess (`tests.support.runcheck`) and returns its JSON output.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import selectors
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IListeningPort, IProtocol
from twisted.internet.protocol import DatagramProtocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from zope.interface import implementer

from gtmcluster.config.monitoring import Check, DnsCheck, HttpCheck, IcmpCheck, Monitor, TcpCheck, UdpCheck
from gtmcluster.probe.base import Result

ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- in memory


@implementer(IListeningPort)
@dataclass
class FakeDatagramPort:
    """What ``listenUDP`` returned: records what the check does with its socket."""

    protocol: DatagramProtocol
    interface: str
    connected_to: tuple[str, int] | None = None
    written: list[bytes] = field(default_factory=list)
    stopped: bool = False
    write_error: Exception | None = None

    def connect(self, host: str, port: int) -> None:
        self.connected_to = (host, port)

    def write(self, datagram: bytes, addr: Any = None) -> None:
        if self.write_error is not None:
            raise self.write_error
        self.written.append(datagram)

    def startListening(self) -> None:
        """(listening from the start, as ``listenUDP``'s port is)"""

    def stopListening(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.protocol.doStop()

    def getHost(self) -> Any:
        return IPv6Address("UDP", "::", 40000) if ":" in self.interface else IPv4Address("UDP", "0.0.0.0", 40000)

    # the server's side

    def reply(self, datagram: bytes) -> None:
        assert self.connected_to is not None
        self.protocol.datagramReceived(datagram, self.connected_to)

    def lose_by_reactor(self) -> None:
        """What the epoll reactor does on an ICMP error: close the port under the protocol."""
        self.stopped = True
        self.protocol.doStop()


class UdpMemoryReactor(MemoryReactorClock):
    """`MemoryReactorClock` with a recording ``listenUDP``."""

    def __init__(self) -> None:
        super().__init__()
        self.udp: list[FakeDatagramPort] = []
        self.listen_error: Exception | None = None  # listenUDP raises it
        self.write_error: Exception | None = None  # the port's write raises it

    def listenUDP(
        self, port: int, protocol: DatagramProtocol, interface: str = "", maxPacketSize: int = 8192
    ) -> FakeDatagramPort:
        if self.listen_error is not None:
            raise self.listen_error
        fake = FakeDatagramPort(protocol, interface, write_error=self.write_error)
        self.udp.append(fake)
        protocol.makeConnection(fake)  # type: ignore[arg-type]
        return fake


def accept_tcp(reactor: MemoryReactorClock, index: int = -1) -> tuple[IProtocol, StringTransport]:
    """Complete the recorded connection attempt *index*: the check's protocol, connected to
    a `StringTransport` that records what it writes."""
    host, port, factory, _timeout, _bind = reactor.tcpClients[index]
    address = IPv6Address("TCP", host, port) if ":" in host else IPv4Address("TCP", host, port)
    protocol = factory.buildProtocol(address)
    assert protocol is not None
    transport = StringTransport(peerAddress=address)
    protocol.makeConnection(transport)
    return protocol, transport


def refuse_tcp(reactor: MemoryReactorClock, reason: Exception, index: int = -1) -> None:
    """Fail the recorded connection attempt *index* with *reason*."""
    factory = reactor.tcpClients[index][2]
    factory.clientConnectionFailed(reactor.connectors[index], Failure(reason))


class FakeIcmpSocket:
    """An ICMP socket for an `IcmpPinger` in memory: records what is sent, serves `inbox`."""

    def __init__(self, fd: int = 100) -> None:
        self.fd = fd
        self.sent: list[tuple[bytes, tuple[Any, ...]]] = []
        self.inbox: list[tuple[bytes, tuple[Any, ...]]] = []
        self.closed = False
        self.blocking = True
        self.options: list[tuple[Any, ...]] = []
        self.send_error: OSError | None = None

    def fileno(self) -> int:
        return -1 if self.closed else self.fd

    def sendto(self, data: bytes, address: tuple[Any, ...], /) -> int:
        if self.send_error is not None:
            raise self.send_error
        self.sent.append((data, address))
        return len(data)

    def recvfrom(self, bufsize: int, /) -> tuple[bytes, Any]:
        if not self.inbox:
            raise BlockingIOError
        return self.inbox.pop(0)

    def close(self) -> None:
        self.closed = True

    def setblocking(self, flag: bool) -> None:
        self.blocking = flag

    def setsockopt(self, *args: Any) -> None:
        self.options.append(args)


def monitor(check: Check, timeout: float = 2.0, port: int | None = None) -> Monitor:
    """A monitor around *check* settings (interval and thresholds do not matter to a check)."""
    if isinstance(check, HttpCheck):
        kind = "https" if check.tls else "http"
    else:
        kind = {TcpCheck: "tcp", UdpCheck: "udp", DnsCheck: "dns", IcmpCheck: "icmp"}[type(check)]
    return Monitor("m", kind, max(timeout, 5.0), timeout, 2, 3, check, port=port)


def result_of(d: Deferred[Result]) -> Result:
    """The result *d* has fired with (fails the test if it has not fired yet)."""
    out: list[object] = []
    d.addBoth(out.append)
    assert out, "the check has no result yet"
    assert isinstance(out[0], Result), out[0]
    return out[0]


def still_running(d: Deferred[Result]) -> bool:
    return not d.called


# --------------------------------------------------------------------------- real servers

LOOPBACKS = {4: "127.0.0.1", 6: "::1"}
FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}


class SocketLoop:
    """A thread that calls ``handle(sock)`` whenever *sock* is readable, until stopped."""

    def __init__(self, sock: socket.socket, handle: Callable[[socket.socket], None]) -> None:
        self.sock = sock
        self._handle = handle
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.sock, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                for key, _ in selector.select():
                    if key.fileobj is self._wake_r:
                        return
                    with contextlib.suppress(OSError):
                        self._handle(self.sock)

    def stop(self) -> None:
        self._wake_w.send(b"x")
        self._thread.join(5)
        for s in (self.sock, self._wake_r, self._wake_w):
            s.close()


def bound(version: int, kind: int) -> socket.socket:
    sock = socket.socket(FAMILY[version], kind)
    sock.bind((LOOPBACKS[version], 0))
    return sock


@contextlib.contextmanager
def tcp_echo(version: int) -> Iterator[SocketLoop]:
    """A TCP server that answers each connection's first read with ``echo:`` + the bytes."""
    sock = bound(version, socket.SOCK_STREAM)
    sock.listen(16)

    def handle(server: socket.socket) -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(2)
            data = conn.recv(4096)
            conn.sendall(b"echo:" + data)

    loop = SocketLoop(sock, handle)
    try:
        yield loop
    finally:
        loop.stop()


@contextlib.contextmanager
def canned(reply: bytes, version: int = 4) -> Iterator[SocketLoop]:
    """A TCP server that reads each connection's first bytes, sends *reply* and closes."""
    sock = bound(version, socket.SOCK_STREAM)
    sock.listen(16)

    def handle(server: socket.socket) -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(2)
            conn.recv(4096)
            conn.sendall(reply)

    loop = SocketLoop(sock, handle)
    try:
        yield loop
    finally:
        loop.stop()


def closed_port(version: int, kind: int) -> int:
    """A port nothing listens on (bound, then closed again)."""
    with bound(version, kind) as sock:
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def udp_echo(version: int) -> Iterator[SocketLoop]:
    """A UDP server that sends each datagram back prefixed with ``echo:``."""

    def handle(sock: socket.socket) -> None:
        data, peer = sock.recvfrom(65535)
        sock.sendto(b"echo:" + data, peer)

    loop = SocketLoop(bound(version, socket.SOCK_DGRAM), handle)
    try:
        yield loop
    finally:
        loop.stop()


DNS_ANSWERS = {
    ("ok.test.", dns.rdatatype.A): "192.0.2.10",
    ("ok.test.", dns.rdatatype.AAAA): "2001:db8::10",
}


@contextlib.contextmanager
def dns_responder(version: int) -> Iterator[SocketLoop]:
    """A tiny authoritative responder: ``ok.test`` A/AAAA exist, every other name is NXDOMAIN."""

    def handle(sock: socket.socket) -> None:
        data, peer = sock.recvfrom(65535)
        query = dns.message.from_wire(data)
        response = dns.message.make_response(query)
        q = query.question[0]
        address = DNS_ANSWERS.get((q.name.to_text().lower(), q.rdtype))
        if address is not None:
            response.answer.append(dns.rrset.from_text(q.name, 60, "IN", q.rdtype, address))
        elif q.name.to_text().lower() != "ok.test.":
            response.set_rcode(dns.rcode.NXDOMAIN)
        sock.sendto(response.to_wire(), peer)

    loop = SocketLoop(bound(version, socket.SOCK_DGRAM), handle)
    try:
        yield loop
    finally:
        loop.stop()


class _Handler(BaseHTTPRequestHandler):
    """``/`` 200 "all ok", ``/down`` 503, ``/other`` 200 with another body."""

    server: _HTTPServer

    ROUTES = {  # noqa: RUF012
        "/": (200, b"all ok\n"),
        "/down": (503, b"maintenance\n"),
        "/other": (200, b"nothing to see here\n"),
    }

    def do_GET(self) -> None:
        self.server.requests.append((self.requestline, self.headers.get("Host", ""), self.headers.get("User-Agent")))
        status, body = self.ROUTES.get(self.path, (404, b"not found\n"))
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, version: int, tls: ssl.SSLContext | None) -> None:
        self.address_family = FAMILY[version]
        self.requests: list[tuple[str, str, str | None]] = []
        super().__init__((LOOPBACKS[version], 0), _Handler)
        if tls is not None:
            # the handshake happens in the request's thread, on its first read
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that rejects our certificate is an expected outcome here


@dataclass
class HTTPServerHandle:
    server: _HTTPServer

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def requests(self) -> list[tuple[str, str, str | None]]:
        return self.server.requests


@contextlib.contextmanager
def http_server(version: int, tls: ssl.SSLContext | None = None) -> Iterator[HTTPServerHandle]:
    server = _HTTPServer(version, tls)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield HTTPServerHandle(server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


def make_certificates(directory: Path) -> Certificates:
    """A CA and a server certificate it signed, for localhost, 127.0.0.1 and ::1."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gtmcluster test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    out = Certificates(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    out.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return out


# --------------------------------------------------------------------------- the subprocess


def job(kind: str, address: str, port: int = 0, timeout: float = 0.5, **fields: Any) -> dict[str, Any]:
    """One check for `run_checks`: a monitor of *kind* with *fields*, against *address*:*port*."""
    return {"monitor": {"type": kind, "timeout": timeout, **fields}, "address": address, "port": port}


@dataclass(frozen=True)
class CheckRun:
    results: list[dict[str, Any]]
    leftovers: dict[str, list[str]]

    def reasons(self) -> list[str]:
        return [r["reason"] for r in self.results]


def run_checks(*jobs: dict[str, Any]) -> CheckRun:
    """Run *jobs* at once with the real reactor in a fresh process (`tests.support.runcheck`)."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.runcheck", json.dumps(list(jobs))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if out.returncode != 0:
        raise AssertionError(f"runcheck failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return CheckRun(data["results"], data["leftovers"])
