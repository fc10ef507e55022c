"""The ``tcp`` check: connect, optionally send bytes and wait for expected bytes.

Without `TcpCheck.expect` the connection itself is the success ("connected"; the `send`
bytes, if any, are written and flushed before the close). With `expect`, the bytes read
must contain it; reading stops when it is found, when the peer closes, or at the timeout.
On a real reactor the connection is a bare socket (`gtmcluster.probe.bare`: the same
verdicts at about half the cost).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime, ITransport
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure

from gtmcluster.config.monitoring import TcpCheck
from gtmcluster.probe import bare as bare_stream
from gtmcluster.probe.attempt import Attempt, show
from gtmcluster.probe.base import Result, Target
from gtmcluster.probe.stream import connect


def close(transport: ITransport | None, ok: bool) -> None:
    """Close after a verdict: gracefully (flushing what was written) after a success,
    at once (reset) after a failure or timeout."""
    if transport is None:
        return
    abort = getattr(transport, "abortConnection", None)  # ITCPTransport, TLS, test transports
    if not ok and callable(abort):
        abort()
    else:
        transport.loseConnection()


class TcpProbe(Protocol):
    """One connection of a tcp check."""

    def __init__(self, settings: TcpCheck, attempt: Attempt) -> None:
        self._settings = settings
        self._attempt = attempt
        self._tail = b""  # the last len(expect) - 1 bytes, for a match across reads
        self._received = 0
        self._ok = False

    def connectionMade(self) -> None:
        self._attempt.closing(lambda: close(self.transport, self._ok))
        s = self._settings
        if s.send:
            assert self.transport is not None
            self.transport.write(s.send)
        if s.expect is None:
            self._verdict(True, "connected")
        else:
            self._attempt.waiting_for = "reply"

    def dataReceived(self, data: bytes) -> None:
        expect = self._settings.expect
        if self._attempt.done or expect is None:
            return
        self._received += len(data)
        window = self._tail + data
        if expect in window:
            self._verdict(True, f"received {show(expect)}")
            return
        self._tail = window[-(len(expect) - 1) :] if len(expect) > 1 else b""
        self._attempt.waiting_for = f"{show(expect)} in reply"

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        expect = self._settings.expect
        if self._attempt.done or expect is None:
            return
        if self._received:
            self._verdict(False, f"closed after {self._received} bytes without {show(expect)}")
        else:
            self._verdict(False, "closed without a reply")

    def _verdict(self, ok: bool, reason: str) -> None:
        self._ok = ok
        self._attempt.finish(ok, reason)


class TcpChecker:
    """``check(target)`` for a tcp monitor."""

    def __init__(
        self, settings: TcpCheck, reactor: Any, timeout: float, port: int | None = None, bare: bool = True
    ) -> None:
        """*bare*: on a real reactor, connect on a bare socket (False: Twisted's client, as
        the tests that compare the two need)."""
        self._settings = settings
        self._reactor = reactor
        self._timeout = timeout
        self._port = port
        self._bare = bare and bare_stream.usable(reactor)

    def __call__(self, target: Target) -> Deferred[Result]:
        clock: IReactorTime = self._reactor
        attempt = Attempt(clock, self._timeout)
        probe = TcpProbe(self._settings, attempt)
        port = self._port or target.port
        if self._bare:
            bare_stream.connect(self._reactor, target.address, port, probe, attempt, self._timeout)
        else:
            connect(self._reactor, target.address, port, probe, attempt, self._timeout)
        return attempt.deferred
