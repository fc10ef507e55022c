"""The plain tcp check's connection attempt, on a bare non-blocking socket.

A tcp check without `send` or `expect` only asks whether a connection can be made. Twisted's
client machinery (an endpoint, a connector, a transport, a protocol, a turn to "resolve"
the address, a second timer) cost about as much again as the rest of the check
(bench/checker.py: 5,000 servers at interval 5 are 1,000 such checks a second). So on a
reactor that polls real descriptors, `connect_only` opens a non-blocking socket, starts
connecting, and waits until it is writable (or in error): ``SO_ERROR`` then tells the
outcome. The reasons are those of the general path (`stream.connect_error_reason`, from
the exception Twisted would have raised for the same errno); tests/unit/test_probe_real.py
runs both paths against the same targets and compares.

A connection made is closed at once (a FIN, as after the general path's success); a check
that ends otherwise (refused, timed out, cancelled) removes the socket from the reactor
and closes it, so it holds its descriptor only while it runs.
"""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

from twisted.internet import error
from twisted.internet.interfaces import IReadWriteDescriptor
from twisted.internet.posixbase import PosixReactorBase
from twisted.python.failure import Failure
from zope.interface import implementer

from gtmcluster.probe.attempt import Attempt
from gtmcluster.probe.base import IPAddress
from gtmcluster.probe.stream import connect_error_reason

#: connect_ex results that mean "in progress": wait until the socket is writable
IN_PROGRESS = frozenset({errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY})


def lean(reactor: Any) -> bool:
    """Whether *reactor* polls real descriptors (epoll, poll, select), so `connect_only` can
    be used with it (a test's memory reactor cannot: it gets the general path)."""
    return isinstance(reactor, PosixReactorBase)


@implementer(IReadWriteDescriptor)
class Connecting:
    """One socket being connected, watched by the reactor until the verdict."""

    __slots__ = ("_attempt", "_fd", "_reactor", "_socket", "_timeout")

    def __init__(self, reactor: Any, sock: socket.socket, attempt: Attempt, timeout: float) -> None:
        self._reactor = reactor
        self._socket = sock
        self._fd = sock.fileno()
        self._attempt = attempt
        self._timeout = timeout

    def fileno(self) -> int:
        return self._fd

    def logPrefix(self) -> str:
        return "tcp-check"

    def doWrite(self) -> None:
        """Writable: connected, or the connection failed (``SO_ERROR`` says which)."""
        if self._attempt.done:
            return
        code = self._socket.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code == 0:
            self._attempt.finish(True, "connected")
        else:
            self._fail(code)

    def doRead(self) -> None:
        self.doWrite()

    def connectionLost(self, reason: Failure) -> None:
        # The reactor saw an error or hang-up on the socket (a refusal, a reset).
        self.doWrite()

    def close(self) -> None:
        self._reactor.removeWriter(self)
        self._socket.close()

    def _fail(self, code: int) -> None:
        e = error.getConnectError((code, os.strerror(code)))
        self._attempt.finish(False, connect_error_reason(e, self._timeout))


def connect_only(reactor: Any, address: IPAddress, port: int, attempt: Attempt, timeout: float) -> None:
    """Connect to *address*:*port* and end *attempt* with "connected" or why not."""
    attempt.waiting_for = "connection"
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:  # out of descriptors, say
        attempt.finish(False, connect_error_reason(error.ConnectBindError(e.errno, e.strerror), timeout))
        return
    sock.setblocking(False)
    watched = Connecting(reactor, sock, attempt, timeout)
    attempt.closing(watched.close)
    code = sock.connect_ex((str(address), port))
    if code in (0, errno.EISCONN):
        attempt.finish(True, "connected")
    elif code in IN_PROGRESS:
        reactor.addWriter(watched)
    else:
        watched._fail(code)
