"""LDNS path probes: one round trip from this node to an LDNS, by the first protocol that answers.

`PathProber.probe` tries the configured protocols (`prober.protocols`) in order, each for up
to `timeout` seconds, until one gets a reply; any reply is a valid sample:

- ``dns_dot``: a query for ``.`` NS (RD off) to LDNS:53 over UDP; any DNS response with our
  ID and question counts, whatever its rcode. Only a DNS response counts: an ICMP error
  (port unreachable included) fails this protocol at once, and the next one is tried.
- ``dns_rev``: the same with a PTR query for the LDNS's own reverse name.
- ``udp``: a small datagram to LDNS:`udp_port` (33434, traceroute's); any datagram back
  counts, and so does an ICMP error sent by the LDNS itself (port unreachable). An ICMP
  error from anyone else (a router's host unreachable) fails the protocol at once.
- ``tcp``: a connection attempt to LDNS:53; a completed handshake (SYN-ACK) or a refusal
  (RST) counts; the connection is closed at once.
- ``icmp``: an echo request through the node's shared `IcmpPinger`.

The round trip is timed with a monotonic clock read right before the send and right after
the reply is read, or with the kernel's own figure where it has one (`pathsockets`). UDP
replies and ICMP errors carry the received TTL / hop limit, from which the hop count is
estimated (`pathwire.hops_from_ttl`); tcp and icmp samples have 0 hops (unknown).

Each attempt is an `Attempt` (one verdict, a timeout, clean-ups), so every socket, reader
and timer is released when its verdict is in; `PathProber.close` ends the probes still
running.
"""

from __future__ import annotations

import errno
import ipaddress
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gtmcluster.probe import pathwire
from gtmcluster.probe.attempt import Attempt
from gtmcluster.probe.base import IPAddress, Result, Target
from gtmcluster.probe.dnscheck import parse as parse_dns
from gtmcluster.probe.icmp import IcmpPinger, SocketFactory
from gtmcluster.probe.kinds import NO_PINGER
from gtmcluster.probe.pathsockets import Clocks, ErrorJudge, Measure, ReplyJudge, connect_tcp, send_datagram
from gtmcluster.probe.pathwire import QueuedError
from gtmcluster.probe.udp import Verdict
from gtmcluster.runtime.reactors import TimeFDSet, as_time

log = Logger()

PROTOCOLS = ("dns_dot", "dns_rev", "udp", "tcp", "icmp")
#: what each protocol waits for, for its timeout's reason ("no DNS reply within 2s")
WAITING_FOR = {
    "dns_dot": "DNS reply",
    "dns_rev": "DNS reply",
    "udp": "reply",
    "tcp": "SYN-ACK or RST",
    "icmp": "echo reply",
}
DNS_PORT = 53
TRACEROUTE_PORT = 33434
UDP_PAYLOAD = b"gtmcluster path probe"

_ids = random.SystemRandom()


@dataclass(frozen=True, slots=True)
class Sample:
    """The outcome of one probe of one LDNS."""

    ok: bool
    rtt_us: int  # round trip in microseconds, at least 1 when ok (0 when not ok)
    hops: int  # measured hop count, 0 when unknown
    protocol: str  # the protocol that got the reply ("" when none did)
    reason: str  # "dns_dot: reply rcode REFUSED", "udp: port unreachable", "all protocols failed: ..."


def failed(reason: str) -> Sample:
    return Sample(False, 0, 0, "", reason)


def same_address(a: IPAddress | None, b: IPAddress) -> bool:
    return a is not None and a.version == b.version and a.packed == b.packed


# --------------------------------------------------------------------------- judging replies


def dns_query(name: str, rdtype: dns.rdatatype.RdataType, ids: random.Random) -> dns.message.Message:
    """A query for *name* / *rdtype* with RD off and a random ID."""
    query = dns.message.make_query(name, rdtype)
    query.flags &= ~dns.flags.RD
    query.id = ids.randrange(65536)
    return query


def dns_reply(query: dns.message.Message, datagram: bytes) -> Verdict | None:
    """Any response to *query* (same ID, opcode and question) counts, whatever its rcode;
    anything else is not a reply to it (None)."""
    response = parse_dns(datagram)
    if response is None or not query.is_response(response):
        return None
    return True, f"reply rcode {dns.rcode.to_text(response.rcode())}"


def error_text(error: QueuedError, ldns: IPAddress) -> str:
    """What the error says, and who said it when that was not the LDNS."""
    text = error.describe()
    if error.offender is not None and not same_address(error.offender, ldns):
        text += f" (from {error.offender})"
    return text


def dns_error(ldns: IPAddress) -> ErrorJudge:
    """For the DNS protocols an ICMP error is a failure: only a DNS response counts."""

    def judge(error: QueuedError) -> Verdict:
        return False, error_text(error, ldns)

    return judge


def udp_error(ldns: IPAddress) -> ErrorJudge:
    """For udp an ICMP error sent by the LDNS itself is a reply (port unreachable, usually);
    one from anyone else (a router) is a failure."""

    def judge(error: QueuedError) -> Verdict:
        if error.from_icmp and same_address(error.offender, ldns):
            return True, error.describe()
        if error.errno == errno.ECONNREFUSED and error.offender is None:
            # the connected socket reported it without details (no IP_RECVERR here)
            return True, "port unreachable"
        return False, error_text(error, ldns)

    return judge


def any_datagram(datagram: bytes) -> Verdict:
    return True, "reply"


# --------------------------------------------------------------------------- probing


def from_source(sockets: SocketFactory, source: IPAddress) -> SocketFactory:
    """Sockets bound to *source* (for its address family), so probes leave from the data
    center's own address rather than whatever the routing table picks."""
    family = socket.AF_INET6 if source.version == 6 else socket.AF_INET

    def make(fam: int, kind: int, proto: int = 0) -> Any:
        sock = sockets(fam, kind, proto)
        if fam == family:
            try:
                sock.bind((str(source), 0))
            except OSError:
                sock.close()
                raise
        return sock

    return make


class PathProber:
    """Measures the round trip from this node to LDNSes, by the first protocol that answers.

    Owns nothing between probes: each attempt opens its own socket and closes it with its
    verdict. The `IcmpPinger` is the node's; the prober uses it but does not close it.
    """

    def __init__(
        self,
        reactor: TimeFDSet,
        protocols: tuple[str, ...],
        timeout: float,
        pinger: IcmpPinger | None = None,
        udp_port: int = TRACEROUTE_PORT,
        *,
        dns_port: int = DNS_PORT,
        sockets: SocketFactory = socket.socket,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
        wall_ns: Callable[[], int] = time.time_ns,
        ids: random.Random = _ids,
        source: IPAddress | None = None,
    ) -> None:
        unknown = [p for p in protocols if p not in PROTOCOLS]
        if unknown or not protocols:
            raise ValueError(f"probe protocols must be some of {', '.join(PROTOCOLS)}, got {list(protocols)!r}")
        if not timeout > 0:
            raise ValueError(f"probe timeout must be positive, got {timeout!r}")
        for name, port in (("udp_port", udp_port), ("dns_port", dns_port)):
            if not 0 < port < 65536:
                raise ValueError(f"{name} must be a port number, got {port!r}")
        self._reactor = reactor
        self.protocols = tuple(protocols)
        self.timeout = timeout
        self._pinger = pinger
        self._udp_port = udp_port
        self._dns_port = dns_port
        self._sockets = from_source(sockets, source) if source is not None else sockets
        self._clocks = Clocks(monotonic_ns, wall_ns)
        self._ids = ids
        self._running: set[_Probe] = set()
        self._closed = False
        self._starters: dict[str, Callable[[IPAddress, Attempt, Measure], None]] = {
            "dns_dot": self._dns_dot,
            "dns_rev": self._dns_rev,
            "udp": self._udp,
            "tcp": self._tcp,
            "icmp": self._icmp,
        }

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def probe(self, ldns: IPAddress) -> Deferred[Sample]:
        """One sample of the path to *ldns*. Never errbacks (unless the caller cancels it:
        then CancelledError, after everything it opened is released). An IPv4-mapped IPv6
        address is probed as the IPv4 address it is."""
        if isinstance(ldns, ipaddress.IPv6Address) and ldns.ipv4_mapped is not None:
            ldns = ldns.ipv4_mapped
        run = _Probe(self, ldns)
        if self._closed:
            run.deliver(failed("prober closed"))
            return run.deferred
        self._running.add(run)
        run.next()
        return run.deferred

    def close(self) -> None:
        """End the probes still running (their samples say "prober closed"); later probes
        fail at once."""
        self._closed = True
        for run in list(self._running):
            run.stop("prober closed")

    # ---- for _Probe

    def _attempt(self, protocol: str, ldns: IPAddress) -> tuple[Attempt, Measure, Callable[[], None]]:
        clock = as_time(self._reactor)
        attempt = Attempt(clock, self.timeout, WAITING_FOR[protocol])
        measure = Measure()
        starter = self._starters[protocol]

        def start() -> None:
            try:
                starter(ldns, attempt, measure)
            except Exception as e:
                log.failure("path probe {protocol} to {ldns}", protocol=protocol, ldns=str(ldns))
                attempt.finish(False, f"internal error: {type(e).__name__}")

        return attempt, measure, start

    def _forget(self, run: _Probe) -> None:
        self._running.discard(run)

    # ---- the protocols

    def _dns_dot(self, ldns: IPAddress, attempt: Attempt, measure: Measure) -> None:
        self._dns(dns_query(".", dns.rdatatype.NS, self._ids), ldns, attempt, measure)

    def _dns_rev(self, ldns: IPAddress, attempt: Attempt, measure: Measure) -> None:
        self._dns(dns_query(pathwire.reverse_name(ldns), dns.rdatatype.PTR, self._ids), ldns, attempt, measure)

    def _dns(self, query: dns.message.Message, ldns: IPAddress, attempt: Attempt, measure: Measure) -> None:
        def on_reply(datagram: bytes) -> Verdict | None:
            return dns_reply(query, datagram)

        self._exchange(ldns, self._dns_port, query.to_wire(), attempt, measure, on_reply, dns_error(ldns))

    def _udp(self, ldns: IPAddress, attempt: Attempt, measure: Measure) -> None:
        self._exchange(ldns, self._udp_port, UDP_PAYLOAD, attempt, measure, any_datagram, udp_error(ldns))

    def _exchange(
        self,
        ldns: IPAddress,
        port: int,
        payload: bytes,
        attempt: Attempt,
        measure: Measure,
        on_reply: ReplyJudge,
        on_error: ErrorJudge,
    ) -> None:
        send_datagram(
            self._reactor, self._sockets, self._clocks, ldns, port, payload, attempt, measure, on_reply, on_error
        )

    def _tcp(self, ldns: IPAddress, attempt: Attempt, measure: Measure) -> None:
        connect_tcp(self._reactor, self._sockets, self._clocks, ldns, self._dns_port, attempt, measure)

    def _icmp(self, ldns: IPAddress, attempt: Attempt, measure: Measure) -> None:
        pinger = self._pinger
        if pinger is None:
            attempt.finish(False, NO_PINGER)
            return
        measure.mark_sent(self._clocks)
        echo = pinger.ping(Target(ldns, 0, f"LDNS {ldns}"), self.timeout)

        def answered(result: Result) -> None:
            measure.received_ns = self._clocks.monotonic_ns()
            attempt.finish(result.ok, result.reason)

        def lost(reason: Failure) -> None:
            if not reason.check(CancelledError):
                attempt.finish(False, f"echo failed: {reason.getErrorMessage()}")

        echo.addCallbacks(answered, lost)
        attempt.closing(echo.cancel)


class _Probe:
    """One probe of one LDNS: the protocols in order until one answers."""

    def __init__(self, prober: PathProber, ldns: IPAddress) -> None:
        self._prober = prober
        self._ldns = ldns
        self._index = 0
        self._failures: list[str] = []
        self._current: Attempt | None = None
        self._stopped: str | None = None
        self.deferred: Deferred[Sample] = Deferred(self._cancel)

    def next(self) -> None:
        """Start the next protocol, or give up when none is left."""
        protocols = self._prober.protocols
        if self._index >= len(protocols):
            self.deliver(failed("all protocols failed: " + "; ".join(self._failures)))
            return
        protocol = protocols[self._index]
        self._index += 1
        attempt, measure, start = self._prober._attempt(protocol, self._ldns)
        self._current = attempt
        attempt.deferred.addCallbacks(self._finished, self._cancelled, callbackArgs=(protocol, measure))
        start()

    def stop(self, reason: str) -> None:
        """End the probe now with a failed sample saying *reason*."""
        self._stopped = reason
        if self._current is not None:
            self._current.finish(False, reason)
        else:
            self.deliver(failed(reason))

    def deliver(self, sample: Sample) -> None:
        self._prober._forget(self)
        if not self.deferred.called:
            self.deferred.callback(sample)

    def _finished(self, result: Result, protocol: str, measure: Measure) -> None:
        self._current = None
        if self._stopped is not None:
            self.deliver(failed(self._stopped))
        elif result.ok:
            self.deliver(Sample(True, measure.rtt_us(), measure.hops(), protocol, f"{protocol}: {result.reason}"))
        else:
            self._failures.append(f"{protocol}: {result.reason}")
            self.next()

    def _cancelled(self, reason: Failure) -> None:
        reason.trap(CancelledError)
        self._current = None

    def _cancel(self, _: Deferred[Sample]) -> None:
        # The caller gave up: release everything; the Deferred then fails with CancelledError.
        self._stopped = "cancelled"
        self._prober._forget(self)
        if self._current is not None:
            self._current.deferred.cancel()
