"""The sockets of the LDNS path probes: one datagram exchange or one TCP handshake, timed.

`send_datagram` sends one datagram from a UDP socket of its own, connected to the LDNS, and
reads what comes back through ``reactor.addReader``: replies, and the ICMP errors about the
datagram from the socket's error queue (``IP_RECVERR`` / ``IPV6_RECVERR``), each with its
received TTL / hop limit and kernel receive stamp (`pathwire.parse_ancillary`). Plain
sockets rather than ``listenUDP``: under the epoll reactor Twisted closes a connected UDP
port on an ICMP error instead of calling ``connectionRefused`` (twisted#6467), and a
`DatagramProtocol` sees neither the TTL nor the error's details.

`connect_tcp` starts a non-blocking ``connect`` and waits, through ``reactor.addWriter``, for
its answer: a completed handshake (SYN-ACK) or a refusal (RST), told apart by ``SO_ERROR``.
Plain sockets here too: Twisted's ``connectTCP`` calls ``connect`` one reactor turn later,
which the round trip must not include.

Both end an `Attempt`, which closes the socket and removes the reader/writer with its
verdict, and fill in a `Measure`: monotonic time read right before the send / ``connect``
and right after the reply is read, plus the kernel's own figure where there is one (the
receive stamp of ``SO_TIMESTAMPNS``, the handshake RTT of ``TCP_INFO``).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.abstract import FileDescriptor
from twisted.internet.interfaces import IReactorFDSet
from twisted.python.failure import Failure

from gtmcluster.probe import pathwire
from gtmcluster.probe.attempt import Attempt
from gtmcluster.probe.base import IPAddress
from gtmcluster.probe.icmp import SocketFactory
from gtmcluster.probe.pathwire import MSG_ERRQUEUE, Ancillary, QueuedError, parse_ancillary
from gtmcluster.probe.udp import Verdict
from gtmcluster.runtime.reactors import FDSet, as_fdset

MAX_DATAGRAM = 65535
#: room for a TTL, a timestamp and an extended error with its offender's address
ANCILLARY_SIZE = 512
#: datagrams read per wake-up before yielding to the reactor
READS_PER_WAKEUP = 16
FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}

#: Linux: getsockopt(IPPROTO_TCP, TCP_INFO) returns struct tcp_info, whose tcpi_rtt
#: (microseconds) follows 8 one-byte fields and 15 32-bit ones
TCP_INFO = 11
TCP_INFO_SIZE = 104
TCPI_RTT_OFFSET = 68
#: what a finished connection attempt's error code says, for the codes that are answers
TCP_ANSWERS = {0: "SYN-ACK", errno.ECONNREFUSED: "RST"}
#: codes that mean the connection attempt is still going
TCP_PENDING = (errno.EINPROGRESS, errno.EALREADY, errno.EAGAIN, errno.ENOTCONN)

ReplyJudge = Callable[[bytes], Verdict | None]  # None: not a reply to this attempt, keep waiting
ErrorJudge = Callable[[QueuedError], Verdict]


@dataclass(frozen=True, slots=True)
class Clocks:
    """The clocks a round trip is timed with (fakes in tests)."""

    monotonic_ns: Callable[[], int] = time.monotonic_ns
    wall_ns: Callable[[], int] = time.time_ns  # only to compare with kernel receive stamps


@dataclass(slots=True)
class Measure:
    """The timestamps and TTL of one attempt."""

    sent_ns: int = 0  # monotonic, right before the send
    sent_wall_ns: int = 0  # the wall clock at the same moment (to compare a kernel stamp with)
    received_ns: int = 0  # monotonic, right after the reply was read
    stamp_ns: int | None = None  # the kernel's receive stamp (wall clock), when it gave one
    kernel_rtt_ns: int | None = None  # a round trip the kernel measured (TCP handshake)
    ttl: int | None = None  # the reply's IP TTL / hop limit, when known

    def mark_sent(self, clocks: Clocks) -> None:
        self.sent_wall_ns = clocks.wall_ns()
        self.sent_ns = clocks.monotonic_ns()

    def rtt_ns(self) -> int:
        """The round trip: the kernel's own figure or receive stamp when it is plausible
        (positive, and not longer than what we saw), else our own clock's."""
        measured = self.received_ns - self.sent_ns
        if self.kernel_rtt_ns is not None and 0 < self.kernel_rtt_ns <= measured:
            return self.kernel_rtt_ns
        if self.stamp_ns is not None:
            stamped = self.stamp_ns - self.sent_wall_ns
            if 0 < stamped <= measured:
                return stamped
        return measured

    def rtt_us(self) -> int:
        """The round trip in whole microseconds, rounded up: at least 1."""
        return max(1, math.ceil(self.rtt_ns() / 1000))

    def hops(self) -> int:
        return pathwire.hops_from_ttl(self.ttl)


def os_text(e: OSError) -> str:
    return (e.strerror or str(e) or type(e).__name__).lower()


def errno_text(code: int) -> str:
    return os.strerror(code).lower()


def sockaddr(address: IPAddress, port: int) -> tuple[Any, ...]:
    return (str(address), port) if address.version == 4 else (str(address), port, 0, 0)


# --------------------------------------------------------------------------- UDP


def ask_for_ancillary(sock: Any, version: int) -> None:
    """Ask for the TTL / hop limit, the ICMP errors and a receive stamp of each datagram.
    Each is optional: without one, that detail is simply unknown."""
    if version == 4:
        options = [(pathwire.SOL_IP, pathwire.IP_RECVERR), (pathwire.SOL_IP, pathwire.IP_RECVTTL)]
    else:
        options = [(pathwire.SOL_IPV6, pathwire.IPV6_RECVERR), (pathwire.SOL_IPV6, pathwire.IPV6_RECVHOPLIMIT)]
    options.append((socket.SOL_SOCKET, pathwire.SO_TIMESTAMPNS))
    for level, option in options:
        with contextlib.suppress(OSError):
            sock.setsockopt(level, option, 1)


def send_datagram(
    reactor: FDSet,
    sockets: SocketFactory,
    clocks: Clocks,
    address: IPAddress,
    port: int,
    payload: bytes,
    attempt: Attempt,
    measure: Measure,
    on_reply: ReplyJudge,
    on_error: ErrorJudge,
) -> None:
    """Send *payload* to *address*:*port* from a socket of its own; the first datagram
    *on_reply* decides on, or the first queued error, ends *attempt*."""
    try:
        sock = sockets(FAMILY[address.version], socket.SOCK_DGRAM, 0)
    except OSError as e:
        attempt.finish(False, f"cannot open a UDP socket: {os_text(e)}")
        return
    attempt.closing(sock.close)
    try:
        sock.setblocking(False)
        ask_for_ancillary(sock, address.version)
        sock.connect(sockaddr(address, port))
    except OSError as e:
        attempt.finish(False, os_text(e))
        return
    fds = as_fdset(reactor)
    reader = DatagramExchange(fds, sock, attempt, measure, clocks, on_reply, on_error)
    fds.addReader(reader)
    attempt.closing(lambda: fds.removeReader(reader))
    measure.mark_sent(clocks)
    try:
        sock.send(payload)
    except OSError as e:
        attempt.finish(False, f"send failed: {os_text(e)}")


class DatagramExchange(FileDescriptor):
    """The reader of one UDP attempt's socket: the first reply or ICMP error that decides
    ends the attempt, with the time it was read and its ancillary data in the `Measure`."""

    def __init__(
        self,
        reactor: IReactorFDSet,
        sock: Any,
        attempt: Attempt,
        measure: Measure,
        clocks: Clocks,
        on_reply: ReplyJudge,
        on_error: ErrorJudge,
    ) -> None:
        super().__init__(reactor)
        self._sock = sock
        self._attempt = attempt
        self._measure = measure
        self._now = clocks.monotonic_ns
        self._on_reply = on_reply
        self._on_error = on_error
        self.ignored = 0

    def fileno(self) -> int:
        return int(self._sock.fileno())

    def doRead(self) -> None:
        self._read()

    def connectionLost(self, reason: Failure) -> None:
        # Under the epoll and poll reactors an ICMP error (EPOLLERR without EPOLLIN) makes
        # the reactor drop this reader and call this instead of doRead: read it here.
        self._read()
        self._attempt.finish(False, "socket error")

    def logPrefix(self) -> str:
        return "path probe"

    def _read(self) -> None:
        self._read_errors()
        for _ in range(READS_PER_WAKEUP):
            if self._attempt.done:
                return
            try:
                data, ancdata, _flags, _source = self._sock.recvmsg(MAX_DATAGRAM, ANCILLARY_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                # a pending error the error queue did not explain (no IP_RECVERR here)
                self._decide(self._on_error(QueuedError(e.errno or 0, 0, 0, 0, None)), self._now(), Ancillary())
                return
            received = self._now()
            verdict = self._on_reply(data)
            if verdict is None:
                if not self.ignored:
                    self._attempt.waiting_for = f"matching {self._attempt.waiting_for}"
                self.ignored += 1
                continue
            self._decide(verdict, received, parse_ancillary(ancdata))

    def _read_errors(self) -> None:
        """Read the socket's error queue. It goes first: while an error is pending, every
        ordinary read fails with it."""
        while not self._attempt.done:
            try:
                _data, ancdata, _flags, _destination = self._sock.recvmsg(MAX_DATAGRAM, ANCILLARY_SIZE, MSG_ERRQUEUE)
            except OSError:  # EAGAIN: the queue is empty
                return
            received = self._now()
            ancillary = parse_ancillary(ancdata)
            if ancillary.error is not None:
                self._decide(self._on_error(ancillary.error), received, ancillary)

    def _decide(self, verdict: Verdict, received: int, ancillary: Ancillary) -> None:
        m = self._measure
        m.received_ns = received
        m.stamp_ns = ancillary.stamp_ns
        m.ttl = ancillary.ttl
        self._attempt.finish(*verdict)


# --------------------------------------------------------------------------- TCP


def connect_tcp(
    reactor: FDSet,
    sockets: SocketFactory,
    clocks: Clocks,
    address: IPAddress,
    port: int,
    attempt: Attempt,
    measure: Measure,
) -> None:
    """Start a connection to *address*:*port*; its SYN-ACK or RST (or failure) ends *attempt*."""
    try:
        sock = sockets(FAMILY[address.version], socket.SOCK_STREAM, 0)
    except OSError as e:
        attempt.finish(False, f"cannot open a TCP socket: {os_text(e)}")
        return
    attempt.closing(sock.close)
    try:
        sock.setblocking(False)
        measure.mark_sent(clocks)
        code = int(sock.connect_ex(sockaddr(address, port)))
    except OSError as e:
        code = e.errno or errno.EIO
    received = clocks.monotonic_ns()
    if code not in (errno.EINPROGRESS, errno.EAGAIN):
        if code == 0:
            measure.kernel_rtt_ns = handshake_rtt_ns(sock)
        tcp_verdict(attempt, measure, code, received)
        return
    fds = as_fdset(reactor)
    writer = ConnectAttempt(fds, sock, attempt, measure, clocks)
    fds.addWriter(writer)
    attempt.closing(lambda: fds.removeWriter(writer))


class ConnectAttempt(FileDescriptor):
    """The writer of one tcp attempt's socket: writable (or in error) once the handshake
    is answered; ``SO_ERROR`` says how."""

    def __init__(self, reactor: IReactorFDSet, sock: Any, attempt: Attempt, measure: Measure, clocks: Clocks) -> None:
        super().__init__(reactor)
        self._sock = sock
        self._attempt = attempt
        self._measure = measure
        self._now = clocks.monotonic_ns

    def fileno(self) -> int:
        return int(self._sock.fileno())

    def doWrite(self) -> None:
        self._settle(lost=False)

    def doRead(self) -> None:
        self._settle(lost=False)

    def connectionLost(self, reason: Failure) -> None:
        # epoll and poll report a refused connect (EPOLLERR|EPOLLHUP) this way
        self._settle(lost=True)

    def logPrefix(self) -> str:
        return "path probe"

    def _settle(self, lost: bool) -> None:
        if self._attempt.done:
            return
        received = self._now()
        try:
            code = int(self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
            if code == 0:
                self._sock.getpeername()  # ENOTCONN: woken before the handshake finished
        except OSError as e:
            code = e.errno or errno.ENOTCONN
        if code in TCP_PENDING and not lost:
            return
        if code == 0:
            self._measure.kernel_rtt_ns = handshake_rtt_ns(self._sock)
        tcp_verdict(self._attempt, self._measure, code, received)


def handshake_rtt_ns(sock: Any) -> int | None:
    """The kernel's RTT estimate of a connection just made (``tcpi_rtt`` of TCP_INFO), which
    is its SYN to SYN-ACK time; None where it is not available."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, TCP_INFO_SIZE)
    except (OSError, TypeError):
        return None
    if not isinstance(info, bytes) or len(info) < TCPI_RTT_OFFSET + 4:
        return None
    rtt_us: int = struct.unpack_from("=I", info, TCPI_RTT_OFFSET)[0]
    return rtt_us * 1000 if rtt_us else None


def tcp_verdict(attempt: Attempt, measure: Measure, code: int, received: int) -> None:
    """End *attempt* by the connect result *code* (0 or an errno)."""
    answer = TCP_ANSWERS.get(code)
    if answer is not None:
        measure.received_ns = received
        attempt.finish(True, answer)
    elif code in TCP_PENDING:
        attempt.finish(False, "connection lost")
    else:
        attempt.finish(False, errno_text(code))
