"""Plain (not TLS) stream checks on a bare non-blocking socket.

A tcp or http check opens one short connection, writes a few bytes and reads a short reply.
Twisted's client machinery for that (an endpoint, a connector, a transport, a turn to
"resolve" the address, a second timer, and reference cycles among them that only the
garbage collector frees) cost about as much again as the rest of the check, and at 1,000
checks a second that matters (bench/checker.py). So on a reactor that polls real
descriptors (`runtime.reactors.polls_descriptors`; a test's memory reactor gets the general
path), `connect` puts the check's protocol on a `BareStream` instead: a
non-blocking socket, watched by the reactor while it connects and then while it reads,
with just what the checks' protocols use of a transport (`write`, `loseConnection`,
`abortConnection`).

The verdicts and reasons are those of the general path (`stream.connect`): a failed
connection is named by `stream.connect_error_reason` from the exception Twisted would have
raised for the same errno; tests/unit/test_probe_real.py runs both paths against the same
servers and compares. Closing is immediate: `loseConnection` hands what is unsent to the
kernel (a check writes a few hundred bytes at most) and closes (a FIN), `abortConnection`
closes with a reset; either way the descriptor is released before the call returns, so a
check holds one only while it runs. TLS checks (https) keep the general path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
from typing import Any

from twisted.internet import error
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IReadWriteDescriptor, ITransport
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from gtmcluster.probe.attempt import Attempt
from gtmcluster.probe.base import IPAddress
from gtmcluster.probe.stream import connect_error_reason
from gtmcluster.runtime.reactors import FDSet

#: connect_ex results that mean "in progress": wait until the socket is writable
IN_PROGRESS = frozenset({errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY})
#: errors of send/recv that mean "not now"
AGAIN = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR})
#: bytes read at once
READ_SIZE = 65536
#: SO_LINGER on, 0 seconds: close() resets the connection
RESET = struct.pack("ii", 1, 0)


@implementer(IReadWriteDescriptor, ITransport)
class BareStream:
    """One check's connection: connecting, then connected to its protocol, then closed.
    As a transport it also has `abortConnection` (of ITCPTransport)."""

    def __init__(self, reactor: FDSet, sock: socket.socket, protocol: Protocol, attempt: Attempt, timeout: float):
        self._reactor = reactor
        self._socket = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._attempt = attempt
        self._timeout = timeout
        self._unsent = b""
        self.connected = False
        self.disconnected = False

    # -- the reactor's side

    def fileno(self) -> int:
        return self._fd

    def logPrefix(self) -> str:
        return "health-check"

    def doWrite(self) -> None:
        if self.disconnected:
            return
        if not self.connected:
            code = self._socket.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self._failed(code)
                return
            self._made()
            return
        self._flush()
        if not self._unsent:
            self._reactor.removeWriter(self)

    def doRead(self) -> None:
        if self.disconnected:
            return
        if not self.connected:
            self.doWrite()
            return
        try:
            data = self._socket.recv(READ_SIZE)
        except OSError as e:
            if e.errno in AGAIN:
                return
            self._lost(error.ConnectionLost(os.strerror(e.errno or 0)))
            return
        if not data:
            self._lost(error.ConnectionDone())
            return
        self._protocol.dataReceived(data)

    def connectionLost(self, reason: Failure) -> None:
        # The reactor saw an error or a hang-up on the socket: read what it says.
        if self.connected:
            self.doRead()
            if not self.disconnected:
                self._lost(error.ConnectionLost())
        else:
            self.doWrite()

    # -- the protocol's side (what the checks use of a transport)

    def write(self, data: bytes) -> None:
        if self.disconnected or not data:
            return
        self._unsent += data
        self._flush()
        if self._unsent:
            self._reactor.addWriter(self)

    def writeSequence(self, data: Any) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        """Close now, after handing what is unsent to the kernel (a FIN)."""
        if not self.disconnected:
            self._flush()
            self._close(error.ConnectionDone(), reset=False)

    def abortConnection(self) -> None:
        """Close now with a reset."""
        if not self.disconnected:
            self._close(error.ConnectionAborted(), reset=True)

    def getPeer(self) -> IPv4Address | IPv6Address:
        host, port = self._socket.getpeername()[:2]
        return IPv6Address("TCP", host, port) if ":" in host else IPv4Address("TCP", host, port)

    def getHost(self) -> IPv4Address | IPv6Address:
        host, port = self._socket.getsockname()[:2]
        return IPv6Address("TCP", host, port) if ":" in host else IPv4Address("TCP", host, port)

    # -- the attempt's side

    def stop_connecting(self) -> None:
        """The attempt ended (timeout, cancelled) before the connection was made."""
        if not self.connected and not self.disconnected:
            self.disconnected = True
            self._release()

    # -- inside

    def _made(self) -> None:
        self.connected = True
        self._reactor.removeWriter(self)
        self._reactor.addReader(self)
        self._protocol.makeConnection(self)

    def _failed(self, code: int) -> None:
        e = error.getConnectError((code, os.strerror(code)))
        self.disconnected = True
        self._release()
        self._attempt.finish(False, connect_error_reason(e, self._timeout))

    def _flush(self) -> None:
        while self._unsent:
            try:
                sent = self._socket.send(self._unsent)
            except OSError as e:
                if e.errno not in AGAIN:
                    self._unsent = b""  # the connection is gone; reading will say so
                return
            self._unsent = self._unsent[sent:]

    def _lost(self, reason: Exception) -> None:
        """The peer closed, or the connection broke."""
        self._close(reason, reset=False)

    def _close(self, reason: Exception, reset: bool) -> None:
        self.disconnected = True
        if reset:
            with contextlib.suppress(OSError):
                self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
        self._release()
        protocol, self._protocol = self._protocol, Protocol()
        protocol.connectionLost(Failure(reason))

    def _release(self) -> None:
        self._reactor.removeReader(self)
        self._reactor.removeWriter(self)
        self._socket.close()


def connect(
    reactor: FDSet, address: IPAddress, port: int, protocol: Protocol, attempt: Attempt, timeout: float
) -> None:
    """Connect *protocol* to *address*:*port* on a bare socket; failures end *attempt*."""
    attempt.waiting_for = "connection"
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:  # out of descriptors, say
        attempt.finish(False, connect_error_reason(error.ConnectBindError(e.errno, e.strerror), timeout))
        return
    sock.setblocking(False)
    stream = BareStream(reactor, sock, protocol, attempt, timeout)
    attempt.closing(stream.stop_connecting)
    code = sock.connect_ex((str(address), port))
    if code in (0, errno.EISCONN):
        stream._made()
    elif code in IN_PROGRESS:
        reactor.addWriter(stream)
    else:
        stream._failed(code)
