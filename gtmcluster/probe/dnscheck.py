"""The ``dns`` check: one question over UDP; the rcode (and optionally an address) decide.

The query has RD off and a random ID. A datagram whose ID, opcode or question do not match
the query, or that does not parse, is ignored (a late or spoofed answer must not decide); a
matching one is judged: the rcode must be `DnsCheck.expect_rcode` and, with
`expect_address`, that address must be among the answer's A/AAAA records. A truncated (TC)
response is judged like any other; there is no retry over TCP.
"""

from __future__ import annotations

import ipaddress
import random

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
from twisted.internet.defer import Deferred

from gtmcluster.config.monitoring import DnsCheck
from gtmcluster.probe.attempt import Attempt
from gtmcluster.probe.base import Result, Target
from gtmcluster.probe.udp import Verdict, exchange
from gtmcluster.runtime.reactors import TimeUDP, as_time

#: query IDs must not be guessable by an off-path spoofer
_ids = random.SystemRandom()


def parse(datagram: bytes) -> dns.message.Message | None:
    """The message in *datagram*; for a truncated one that does not parse whole, its header
    and question; None for garbage."""
    try:
        return dns.message.from_wire(datagram)
    except (dns.exception.DNSException, ValueError, UnicodeError):
        pass
    if len(datagram) >= 4 and datagram[2] & 0x02:  # TC
        try:
            return dns.message.from_wire(datagram, question_only=True)
        except (dns.exception.DNSException, ValueError, UnicodeError):
            return None
    return None


def addresses(response: dns.message.Message) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The A and AAAA addresses in the answer section."""
    out: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for rrset in response.answer:
        if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            for rdata in rrset:
                out.add(ipaddress.ip_address(rdata.address))
    return out


def judge(settings: DnsCheck, query: dns.message.Message, datagram: bytes) -> Verdict | None:
    """The verdict on *datagram* as the response to *query*, None when it is not one."""
    response = parse(datagram)
    if response is None or not query.is_response(response):
        return None
    rcode = response.rcode()
    if rcode != settings.expect_rcode:
        expected = dns.rcode.to_text(dns.rcode.Rcode.make(settings.expect_rcode))
        return False, f"rcode {dns.rcode.to_text(rcode)}, expected {expected}"
    text = dns.rcode.to_text(rcode)
    if settings.expect_address is None:
        return True, text
    if settings.expect_address in addresses(response):
        return True, f"{text} with {settings.expect_address}"
    truncated = " (truncated)" if response.flags & dns.flags.TC else ""
    return False, f"{text} but answer lacks {settings.expect_address}{truncated}"


class DnsChecker:
    """``check(target)`` for a dns monitor."""

    def __init__(
        self, settings: DnsCheck, reactor: TimeUDP, timeout: float, port: int | None = None, ids: random.Random = _ids
    ) -> None:
        self._settings = settings
        self._reactor = reactor
        self._timeout = timeout
        self._port = port
        self._ids = ids

    def query(self) -> dns.message.Message:
        """A fresh query (new ID) for the configured question."""
        s = self._settings
        query = dns.message.make_query(s.query_name, dns.rdatatype.RdataType.make(s.query_type))
        query.flags &= ~dns.flags.RD
        query.id = self._ids.randrange(65536)
        return query

    def __call__(self, target: Target) -> Deferred[Result]:
        clock = as_time(self._reactor)
        attempt = Attempt(clock, self._timeout)
        query = self.query()
        port = self._port or target.port
        exchange(
            self._reactor, target.address, port, query.to_wire(), lambda d: judge(self._settings, query, d), attempt
        )
        return attempt.deferred
