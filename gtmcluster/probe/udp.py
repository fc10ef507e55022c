"""The ``udp`` check, and the datagram exchange it shares with the ``dns`` check.

`exchange` opens a UDP socket on an ephemeral port of the target's address family, connects
it to the target (so only the target's datagrams arrive, and an ICMP port unreachable is
reported as ``connectionRefused``), sends one datagram and lets a judge decide on each
datagram that comes back. The socket is closed when the verdict is in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import CannotListenError, MessageLengthError
from twisted.internet.protocol import DatagramProtocol

from gtmcluster.config.monitoring import UdpCheck
from gtmcluster.probe.attempt import Attempt, seconds, show
from gtmcluster.probe.base import IPAddress, Result, Target
from gtmcluster.runtime.reactors import UDP, TimeUDP, as_time

#: (ok, reason), or None: not an answer to this check, keep waiting
Verdict = tuple[bool, str]
Judge = Callable[[bytes], Verdict | None]


class DatagramProbe(DatagramProtocol):
    """The protocol of one exchange: each datagram goes to the judge."""

    def __init__(self, attempt: Attempt, judge: Judge) -> None:
        self._attempt = attempt
        self._judge = judge
        self.ignored = 0

    def datagramReceived(self, datagram: bytes, addr: Any) -> None:
        if self._attempt.done:
            return
        verdict = self._judge(datagram)
        if verdict is None:
            self.ignored += 1
            self._attempt.waiting_for = "matching reply"
            return
        self._attempt.finish(*verdict)

    def connectionRefused(self) -> None:
        self._attempt.finish(False, "port unreachable")

    def stopProtocol(self) -> None:
        # The port closed before a verdict, so not by us. Under the epoll reactor this is how
        # an ICMP error arrives: Linux flags the connected socket (EPOLLERR without EPOLLIN)
        # and Twisted closes the port instead of calling connectionRefused. Without
        # IP_RECVERR, Linux only reports hard errors there, in practice port unreachable.
        self._attempt.finish(False, "port unreachable")


def exchange(reactor: UDP, address: IPAddress, port: int, payload: bytes, judge: Judge, attempt: Attempt) -> None:
    """Send *payload* to *address*:*port* and let *judge* end *attempt* on a reply."""
    probe = DatagramProbe(attempt, judge)
    try:
        listening = reactor.listenUDP(
            0, probe, interface="::" if address.version == 6 else "0.0.0.0", maxPacketSize=65535
        )
    except CannotListenError as e:
        attempt.finish(False, f"cannot open a UDP socket: {e.socketError}")
        return
    attempt.closing(listening.stopListening)
    transport = probe.transport
    assert transport is not None
    try:
        transport.connect(str(address), port)
        transport.write(payload, None)  # connected: no address
    except OSError as e:
        attempt.finish(False, f"send failed: {(e.strerror or str(e)).lower()}")
    except MessageLengthError:
        attempt.finish(False, f"send failed: {len(payload)} bytes do not fit in a datagram")


def judge_udp(settings: UdpCheck) -> Judge:
    """Any reply is a success, or only one containing `expect`."""

    def judge(datagram: bytes) -> Verdict:
        if settings.expect is None:
            return True, "reply"
        if settings.expect in datagram:
            return True, f"reply with {show(settings.expect)}"
        return False, f"reply lacks {show(settings.expect)}"

    return judge


class UdpChecker:
    """``check(target)`` for a udp monitor (with `UdpCheck.up_without_reply`, silence
    until the timeout is a success: only a port unreachable or a wrong reply fail)."""

    def __init__(self, settings: UdpCheck, reactor: TimeUDP, timeout: float, port: int | None = None) -> None:
        self._settings = settings
        self._reactor = reactor
        self._timeout = timeout
        self._port = port
        self._judge = judge_udp(settings)

    def __call__(self, target: Target) -> Deferred[Result]:
        clock = as_time(self._reactor)
        attempt = Attempt(clock, self._timeout)
        if self._settings.up_without_reply:
            attempt.expire_as(True, f"no reply and no port unreachable within {seconds(self._timeout)}")
        exchange(self._reactor, target.address, self._port or target.port, self._settings.send, self._judge, attempt)
        return attempt.deferred
