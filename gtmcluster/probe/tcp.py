"""The ``tcp`` check: connect, optionally send bytes and wait for expected bytes.

Without `TcpCheck.expect` or `reject` the connection itself is the success ("connected";
the `send` bytes, if any, are written and flushed before the close). With `expect`, the
bytes read must contain it; reading stops when it is found, when the peer closes, or at the
timeout. With `reject` (F5's ``reverse``) it is the other way round: the check fails as soon
as the bytes read contain it, and passes when a reply ends without it (the peer closes, or
the timeout comes after some bytes came); no reply at all is a failure, as for `expect`.
On a real reactor the connection is a bare socket (`gtmcluster.probe.bare`: the same
verdicts at about half the cost).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import ITransport
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure

from gtmcluster.config.monitoring import TcpCheck
from gtmcluster.probe import bare as bare_stream
from gtmcluster.probe.attempt import Attempt, seconds, show
from gtmcluster.probe.base import Result, Target
from gtmcluster.probe.stream import connect
from gtmcluster.runtime.reactors import TimeFDSetTCP, as_time, polls_descriptors


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
        if s.expect is None and s.reject is None:
            self._verdict(True, "connected")
        else:
            self._attempt.waiting_for = "reply"

    def dataReceived(self, data: bytes) -> None:
        s = self._settings
        pattern = s.expect if s.expect is not None else s.reject
        if self._attempt.done or pattern is None:
            return
        self._received += len(data)
        window = self._tail + data
        if pattern in window:
            if s.expect is not None:
                self._verdict(True, f"received {show(pattern)}")
            else:
                self._verdict(False, f"reply contains {show(pattern)}")
            return
        self._tail = window[-(len(pattern) - 1) :] if len(pattern) > 1 else b""
        if s.expect is not None:
            self._attempt.waiting_for = f"{show(pattern)} in reply"
        else:
            within = seconds(self._attempt.timeout)
            self._ok = True  # (a timeout now is a success: close gracefully then)
            self._attempt.expire_as(True, f"{self._received} bytes without {show(pattern)} within {within}")

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        s = self._settings
        pattern = s.expect if s.expect is not None else s.reject
        if self._attempt.done or pattern is None:
            return
        if not self._received:
            self._verdict(False, "closed without a reply")
        elif s.expect is not None:
            self._verdict(False, f"closed after {self._received} bytes without {show(pattern)}")
        else:
            self._verdict(True, f"closed after {self._received} bytes without {show(pattern)}")

    def _verdict(self, ok: bool, reason: str) -> None:
        self._ok = ok
        self._attempt.finish(ok, reason)


class TcpChecker:
    """``check(target)`` for a tcp monitor."""

    def __init__(
        self, settings: TcpCheck, reactor: TimeFDSetTCP, timeout: float, port: int | None = None, bare: bool = True
    ) -> None:
        """*bare*: on a real reactor, connect on a bare socket (False: Twisted's client, as
        the tests that compare the two need)."""
        self._settings = settings
        self._reactor = reactor
        self._timeout = timeout
        self._port = port
        self._bare = bare and polls_descriptors(reactor)

    def __call__(self, target: Target) -> Deferred[Result]:
        clock = as_time(self._reactor)
        attempt = Attempt(clock, self._timeout)
        probe = TcpProbe(self._settings, attempt)
        port = self._port or target.port
        if self._bare:
            bare_stream.connect(self._reactor, target.address, port, probe, attempt, self._timeout)
        else:
            connect(self._reactor, target.address, port, probe, attempt, self._timeout)
        return attempt.deferred
