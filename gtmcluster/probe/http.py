"""The ``http`` and ``https`` checks: one HTTP/1.0 request, judged on status and body.

The request is ``METHOD path HTTP/1.0`` with ``Host`` (the monitor's `host`, else the
address), ``User-Agent: gtmcluster-monitor`` and ``Connection: close``. Every check has a
cap and a deadline: at most `HttpCheck.max_response_bytes` of the response (status line,
headers and body) are read, beyond that the connection is closed and the verdict is made on
what was read (the reason says so); and the monitor's timeout covers the whole exchange,
connecting to the body's last byte, after which the connection is aborted. The verdict
comes as soon as it is certain, and the connection is closed then: a status outside
`expect_status` fails at once (an error's body is never read), a good status without body
conditions succeeds at once, and body conditions are judged when the body is complete (the
peer closed, ``Content-Length`` bytes arrived, the last chunk came: `probe.httpframe`, or
the cap was reached); a chunked body is joined first. A monitor with a `load` source also
reads the server's load figures from the body (`gtmcluster.probe.loadread`; its counters'
rates are kept per target by the checker), and fails when they cannot be read, or when the
body is not whole (over the cap, cut short, malformed chunks): a cut line would read as a
wrong figure. A link's counters over HTTP (`probe.httpcounters`) are read by the same
check, with figures of its own. Plain http on a real reactor connects on a bare socket
(`gtmcluster.probe.bare`), https through Twisted's TLS client.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from urllib.parse import quote

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from OpenSSL import SSL
from twisted.internet import ssl
from twisted.internet._sslverify import IOpenSSLTrustRoot  # the type platformTrust() returns
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IHandshakeListener, IOpenSSLClientConnectionCreator
from twisted.internet.protocol import Protocol, connectionDone
from twisted.protocols.tls import TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from zope.interface import implementer

from gtmcluster.config.monitoring import HttpCheck, LoadSource, status_classes
from gtmcluster.probe import bare as bare_stream
from gtmcluster.probe import httpframe, loadread
from gtmcluster.probe.attempt import Attempt, show
from gtmcluster.probe.base import IPAddress, Result, Target
from gtmcluster.probe.stream import connect, lost_reason
from gtmcluster.probe.tcp import close
from gtmcluster.runtime import files
from gtmcluster.runtime.reactors import TimeFDSetTCP, as_time, polls_descriptors

USER_AGENT = "gtmcluster-monitor"
STATUS_LINE = re.compile(rb"HTTP/\d\.\d (\d{3})(?: [^\r\n]*)?\r?")
#: statuses (and the method) whose response has no body
BODYLESS = frozenset({204, 304})


def request_bytes(settings: HttpCheck, address: IPAddress, port: int) -> bytes:
    """The request for one check of *address*:*port*."""
    path = quote(settings.path, safe="/:@!$&'()*+,;=?%~-._")
    lines = [
        f"{settings.method} {path} HTTP/1.0",
        f"Host: {host_header(settings, address, port)}",
        f"User-Agent: {USER_AGENT}",
        "Accept: */*",
        "Connection: close",
    ]
    if settings.method == "POST":
        lines.append("Content-Length: 0")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


def host_header(settings: HttpCheck, address: IPAddress, port: int) -> str:
    """The configured host as given; else the address, with the port unless it is the default."""
    if settings.host:
        return settings.host
    host = f"[{address}]" if address.version == 6 else str(address)
    default = 443 if settings.tls else 80
    return host if port == default else f"{host}:{port}"


def server_name(settings: HttpCheck, address: IPAddress) -> str:
    """The name the certificate must carry (and SNI sends): the host without a port, else the address."""
    host = settings.host
    if not host:
        return str(address)
    if host.startswith("["):
        return host[1 : host.index("]")] if "]" in host else host
    if not isIPv6Address(host) and re.fullmatch(r"[^:]+:\d+", host):
        return host.rsplit(":", 1)[0]
    return host


@implementer(IOpenSSLClientConnectionCreator)
class Unverified:
    """TLS without certificate verification (``verify_tls: false``), still sending SNI."""

    def __init__(self, name: str) -> None:
        self._context = ssl.CertificateOptions(verify=False).getContext()
        self._sni: bytes | None = None
        if not (isIPAddress(name) or isIPv6Address(name)):
            try:
                self._sni = name.encode("idna")
            except UnicodeError:
                self._sni = None  # not a valid DNS name: connect without SNI

    def clientConnectionForTLS(self, tlsProtocol: TLSMemoryBIOProtocol) -> SSL.Connection:
        connection = SSL.Connection(self._context, None)
        connection.set_app_data(tlsProtocol)
        if self._sni:
            connection.set_tlsext_host_name(self._sni)
        return connection


def load_trust(ca_file: Path) -> IOpenSSLTrustRoot:
    """Every certificate in a PEM file, as the trust root of a verified check."""
    pem = files.read_bytes(ca_file, files.PEM)  # (read on the reactor thread: never a FIFO)
    certificates = [ssl.Certificate.loadPEM(c.public_bytes(Encoding.PEM)) for c in x509.load_pem_x509_certificates(pem)]
    root: IOpenSSLTrustRoot = ssl.trustRootFromCertificates(certificates)
    return root


@implementer(IHandshakeListener)
class HttpProbe(Protocol):
    """One request and its response."""

    def __init__(
        self,
        settings: HttpCheck,
        request: bytes,
        attempt: Attempt,
        name: str | None,
        load: Callable[[bytes], Mapping[str, float]] | None = None,
    ) -> None:
        """*load*: the body's load figures (raises `loadread.Unreadable`), with `settings.load`."""
        self._settings = settings
        self._load = load
        self._request = request
        self._attempt = attempt
        self._name = name  # TLS server name, None without TLS
        self._buffer = bytearray()
        self._capped = False
        self._status: int | None = None
        self._scanned = 0  # bytes already searched for the marker looked for now
        self._body_start: int | None = None
        self._length: int | None = None
        self._chunks: httpframe.Chunks | None = None  # (HAProxy's stats answer HTTP/1.0 requests with chunks)
        self._closed = False  # the connection is gone: no more bytes
        self._ok = False

    @property
    def buffered(self) -> int:
        """Bytes of the response held (at most `HttpCheck.max_response_bytes`)."""
        return len(self._buffer)

    # -- Twisted callbacks

    def connectionMade(self) -> None:
        # TLS is closed at once: a graceful TLS close would wait for the peer's close_notify.
        self._attempt.closing(lambda: close(self.transport, self._ok and self._name is None))
        self._attempt.waiting_for = "response" if self._name is None else "TLS handshake"
        assert self.transport is not None
        self.transport.write(self._request)

    def handshakeCompleted(self) -> None:
        if self._attempt.waiting_for == "TLS handshake":
            self._attempt.waiting_for = "response"

    def dataReceived(self, data: bytes) -> None:
        if self._attempt.done:
            return
        room = self._settings.max_response_bytes - len(self._buffer)
        if len(data) > room:
            self._capped = True
            data = data[:room]
        self._buffer += data
        self._attempt.waiting_for = "complete response"
        self._progress(final=self._capped)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._closed = True
        if self._attempt.done:
            return
        problem = lost_reason(reason, self._name)
        if problem is not None and self._status is None:
            self._verdict(False, problem)
            return
        self._progress(final=True)

    # -- the verdict

    def _progress(self, final: bool) -> None:
        """Judge as far as the bytes so far allow; *final*: no more bytes will come."""
        s = self._settings
        buf = self._buffer
        if self._status is None:
            end = buf.find(b"\n", self._scanned)
            if end < 0:
                self._scanned = len(buf)
                if not b"HTTP/".startswith(bytes(buf[:5])):
                    self._verdict(False, f"not an HTTP response: {show(bytes(buf))}")
                elif final:
                    if not buf:
                        self._verdict(False, "connection closed without a response")
                    elif self._capped:
                        self._verdict(False, f"no status line in {s.max_response_bytes} bytes")
                    else:
                        self._verdict(False, f"connection closed inside the status line {show(bytes(buf))}")
                return
            line = bytes(buf[:end])
            m = STATUS_LINE.fullmatch(line)
            if m is None:
                self._verdict(False, f"malformed status line {show(line)}")
                return
            self._status = int(m.group(1))
            if self._status not in s.expect_status:
                wanted = ", ".join(str(c) for c in status_classes(s.expect_status))
                self._verdict(False, f"HTTP {self._status} not in [{wanted}]")
                return
            if self._load is None and (s.expect_body, s.expect_body_regex, s.reject_body_regex) == (None, None, None):
                self._verdict(True, f"HTTP {self._status}")
                return
            self._scanned = end
        if self._body_start is None:
            # search only what is new (and the 3 bytes before it, for a split marker)
            start = max(self._scanned - 3, 0)
            crlf, lf = buf.find(b"\r\n\r\n", start), buf.find(b"\n\n", start)
            ends = [i + 4 for i in (crlf,) if i >= 0] + [i + 2 for i in (lf,) if i >= 0]
            if not ends:
                self._scanned = len(buf)
                if final:
                    where = f"in {s.max_response_bytes} bytes" if self._capped else "before the connection closed"
                    self._verdict(False, f"HTTP {self._status}: no end of headers {where}")
                return
            self._body_start = min(ends)
            header = bytes(buf[: self._body_start])
            if s.method == "HEAD" or self._status in BODYLESS:
                self._length = 0
            elif httpframe.is_chunked(header):  # (chunks frame the body, whatever the length says)
                self._chunks = httpframe.Chunks(self._body_start)
            else:
                try:
                    self._length = httpframe.content_length(header)
                except httpframe.BadFraming as e:
                    self._verdict(False, f"HTTP {self._status}: {e}")
                    return
        # Whether the body is whole, from what is new only: no copy of it until the verdict.
        if self._chunks is not None:
            self._chunks.scan(buf)
            final = final or self._chunks.done or self._chunks.problem is not None
        elif self._length is not None and len(buf) - self._body_start >= self._length:
            final = True
        if final:
            self._judge_body(self._body())

    def _body(self) -> bytes:
        """The body as read: a chunked one's data (its well-formed part), at most
        ``Content-Length`` bytes."""
        assert self._body_start is not None
        if self._chunks is not None:
            return self._chunks.data(self._buffer)
        end = len(self._buffer) if self._length is None else self._body_start + self._length
        return bytes(self._buffer[self._body_start : end])

    def _incomplete(self) -> str | None:
        """Why the body read is not the whole body (so its figures cannot be trusted: a
        cut line reads as a wrong figure), or None when it is."""
        assert self._body_start is not None
        received = len(self._buffer) - self._body_start
        if self._chunks is not None:
            if self._chunks.done:
                return None
            if self._chunks.problem is not None:
                return self._chunks.problem
        elif self._length is not None:
            if received >= self._length:
                return None
        elif self._closed and not self._capped:
            return None  # (a body without a length or chunks ends when the server closes)
        if self._capped:
            return f"the body is over max_response_bytes ({self._settings.max_response_bytes})"
        if self._chunks is not None:
            return "the connection closed before the chunked body's last chunk"
        return f"the connection closed after {received} of the body's {self._length} bytes"

    def _judge_body(self, body: bytes) -> None:
        s = self._settings
        capped = f" (read capped at {s.max_response_bytes} bytes)" if self._capped else ""
        if s.expect_body is not None and s.expect_body.encode("utf-8") not in body:
            self._verdict(False, f"HTTP {self._status}, body lacks {show(s.expect_body)}{capped}")
        elif s.expect_body_regex is not None and not re.search(
            s.expect_body_regex, body.decode("utf-8", errors="replace")
        ):
            self._verdict(False, f"HTTP {self._status}, body does not match /{_short(s.expect_body_regex)}/{capped}")
        elif s.reject_body_regex is not None and re.search(s.reject_body_regex, body.decode("utf-8", errors="replace")):
            self._verdict(False, f"HTTP {self._status}, body matches rejected /{_short(s.reject_body_regex)}/{capped}")
        elif self._load is not None:
            self._judge_load(body)
        else:
            self._verdict(True, f"HTTP {self._status}{capped}")

    def _judge_load(self, body: bytes) -> None:
        assert self._load is not None
        incomplete = self._incomplete()
        if incomplete is not None:
            self._verdict(False, f"HTTP {self._status}, load not read: {incomplete}")
            return
        try:
            data = self._load(body)
        except loadread.Unreadable as e:
            self._verdict(False, f"HTTP {self._status}, {e}")
            return
        self._ok = True
        if not data:  # counters only, first reading: rates come with the next
            self._attempt.finish(True, f"HTTP {self._status}, load counters read (rates from the next check)")
        else:
            self._attempt.finish(True, f"HTTP {self._status}, load {loadread.describe(data)}", data)

    def _verdict(self, ok: bool, reason: str) -> None:
        self._ok = ok
        self._attempt.finish(ok, reason)


def _short(pattern: str) -> str:
    return pattern if len(pattern) <= 40 else pattern[:40] + "…"


class HttpChecker:
    """``check(target)`` for an http or https monitor."""

    def __init__(
        self,
        settings: HttpCheck,
        reactor: TimeFDSetTCP,
        timeout: float,
        port: int | None = None,
        bare: bool = True,
        figures: Callable[[bytes], Mapping[str, float]] | None = None,
    ) -> None:
        """*bare*: plain http on a real reactor connects on a bare socket (False: Twisted's
        client, as the tests that compare the two need). *figures*: read these from each
        whole body instead of `settings.load`'s (raises `loadread.Unreadable`)."""
        self._figures = figures
        self._settings = settings
        self._reactor = reactor
        self._timeout = timeout
        self._port = port
        self._bare = bare and not settings.tls and polls_descriptors(reactor)
        self._trust: IOpenSSLTrustRoot | None = None
        self._trust_problem: str | None = None
        self._creators: dict[str, IOpenSSLClientConnectionCreator] = {}
        self._rates = loadread.CounterRates()
        if settings.tls and settings.verify_tls and settings.ca_file is not None:
            try:
                self._trust = load_trust(settings.ca_file)
            except (OSError, ValueError) as e:
                self._trust_problem = f"cannot use ca_file {settings.ca_file}: {e}"

    def __call__(self, target: Target) -> Deferred[Result]:
        clock = as_time(self._reactor)
        attempt = Attempt(clock, self._timeout)
        s = self._settings
        if self._trust_problem is not None:
            attempt.finish(False, self._trust_problem)
            return attempt.deferred
        port = self._port or target.port
        name = server_name(s, target.address) if s.tls else None
        load = self._figures
        if load is None and s.load is not None:
            load = self._load_of(s.load, (target.address, port))
        probe = HttpProbe(s, request_bytes(s, target.address, port), attempt, name, load)
        tls = self._creator(name) if name is not None else None
        if self._bare:
            bare_stream.connect(self._reactor, target.address, port, probe, attempt, self._timeout)
        else:
            connect(self._reactor, target.address, port, probe, attempt, self._timeout, tls)
        return attempt.deferred

    def _load_of(self, source: LoadSource, key: Hashable) -> Callable[[bytes], Mapping[str, float]]:
        """The figures of *source* in a body of target *key* (its counters' rates since its
        last check)."""

        def load(body: bytes) -> Mapping[str, float]:
            reading = loadread.read(body, source)
            rates = self._rates.update(key, reading.counters, self._reactor.seconds())
            return loadread.figures(reading, rates)

        return load

    def _creator(self, name: str) -> IOpenSSLClientConnectionCreator:
        """TLS settings for one server name, made once (loading trust reads files)."""
        creator = self._creators.get(name)
        if creator is None:
            if self._settings.verify_tls:
                creator = ssl.optionsForClientTLS(name, self._trust if self._trust is not None else ssl.platformTrust())
            else:
                creator = Unverified(name)
            self._creators[name] = creator
        return creator
