"""The dns check in memory: the query it sends, which replies count, and its verdicts."""

from __future__ import annotations

import random
from ipaddress import ip_address

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from gtmcluster.config.monitoring import DnsCheck
from gtmcluster.probe.base import Result, Target
from gtmcluster.probe.dnscheck import DnsChecker
from gtmcluster.probe.kinds import make_check
from tests.support.probeservers import FakeDatagramPort, UdpMemoryReactor, monitor, result_of, still_running

VS = Target(ip_address("192.0.2.53"), 53, "virtual server dns")
WWW = DnsCheck("www.example.com", dns.rdatatype.A, dns.rcode.NOERROR)


@pytest.fixture
def reactor() -> UdpMemoryReactor:
    return UdpMemoryReactor()


def sent_query(port: FakeDatagramPort) -> dns.message.Message:
    assert len(port.written) == 1
    return dns.message.from_wire(port.written[0])


def answer(port: FakeDatagramPort, *addresses: str, rcode: int = dns.rcode.NOERROR) -> dns.message.Message:
    """The response a server would send to the query on *port*."""
    query = sent_query(port)
    response = dns.message.make_response(query)
    response.set_rcode(dns.rcode.Rcode.make(rcode))
    q = query.question[0]
    for a in addresses:
        rdtype = dns.rdatatype.AAAA if ":" in a else dns.rdatatype.A
        response.answer.append(dns.rrset.from_text(q.name, 60, "IN", rdtype, a))
    return response


def test_query_has_the_question_and_no_recursion(reactor: UdpMemoryReactor) -> None:
    """The query asks the configured name and type, with RD off, to the target's port 53."""
    make_check(monitor(DnsCheck("www.example.com", dns.rdatatype.AAAA)), reactor)(VS)
    port = reactor.udp[0]
    assert port.connected_to == ("192.0.2.53", 53)
    query = sent_query(port)
    assert query.question[0].to_text() == "www.example.com. IN AAAA"
    assert not query.flags & dns.flags.RD


def test_ids_come_from_the_injected_random_source(reactor: UdpMemoryReactor) -> None:
    """Each query takes a fresh ID from the checker's random source."""
    check = DnsChecker(WWW, reactor, 2.0, ids=random.Random(7))
    check(VS)
    check(VS)
    expected = random.Random(7)
    assert [sent_query(p).id for p in reactor.udp] == [expected.randrange(65536), expected.randrange(65536)]


def test_good_answer(reactor: UdpMemoryReactor) -> None:
    """A matching response with the expected rcode is a success named by the rcode; the
    socket is closed and no timer remains."""
    d = make_check(monitor(WWW), reactor)(VS)
    port = reactor.udp[0]
    reactor.advance(0.01)
    port.reply(answer(port, "192.0.2.10").to_wire())
    assert result_of(d) == Result(True, "NOERROR", 0.01)
    assert port.stopped
    assert reactor.getDelayedCalls() == []


def test_wrong_id_is_ignored_then_times_out(reactor: UdpMemoryReactor) -> None:
    """A response with another ID is not an answer to this query: ignored, and without a
    matching one the check times out, saying it saw none that matched."""
    d = make_check(monitor(WWW, timeout=1.0), reactor)(VS)
    port = reactor.udp[0]
    response = answer(port, "192.0.2.10")
    response.id ^= 0x5A5A
    port.reply(response.to_wire())
    assert still_running(d)
    reactor.advance(1.0)
    assert result_of(d) == Result(False, "no matching reply within 1s", 1.0)
    assert port.stopped
    assert reactor.getDelayedCalls() == []


def test_other_question_and_garbage_are_ignored(reactor: UdpMemoryReactor) -> None:
    """A response for another question, a query (QR off) and bytes that are not DNS are all
    ignored; the right response after them still counts."""
    d = make_check(monitor(WWW), reactor)(VS)
    port = reactor.udp[0]
    query = sent_query(port)
    other = dns.message.make_query("mail.example.com", "A")
    other.id = query.id
    port.reply(dns.message.make_response(other).to_wire())
    port.reply(query.to_wire())
    port.reply(b"\x00\x01garbage")
    assert still_running(d)
    port.reply(answer(port).to_wire())
    assert result_of(d) == Result(True, "NOERROR", 0.0)


def test_rcode_mismatch(reactor: UdpMemoryReactor) -> None:
    """Another rcode than expected fails, naming both."""
    d = make_check(monitor(WWW), reactor)(VS)
    port = reactor.udp[0]
    port.reply(answer(port, rcode=dns.rcode.NXDOMAIN).to_wire())
    assert result_of(d) == Result(False, "rcode NXDOMAIN, expected NOERROR", 0.0)


def test_expected_nxdomain(reactor: UdpMemoryReactor) -> None:
    """expect_rcode may be an error rcode: NXDOMAIN is then the success."""
    d = make_check(monitor(DnsCheck("nothing.example.com", expect_rcode=dns.rcode.NXDOMAIN)), reactor)(VS)
    port = reactor.udp[0]
    port.reply(answer(port, rcode=dns.rcode.NXDOMAIN).to_wire())
    assert result_of(d) == Result(True, "NXDOMAIN", 0.0)


@pytest.mark.parametrize(
    ("addresses", "ok", "reason"),
    [
        (("192.0.2.9", "192.0.2.10"), True, "NOERROR with 192.0.2.10"),
        (("192.0.2.9",), False, "NOERROR but answer lacks 192.0.2.10"),
        ((), False, "NOERROR but answer lacks 192.0.2.10"),
    ],
)
def test_expected_address(reactor: UdpMemoryReactor, addresses: tuple[str, ...], ok: bool, reason: str) -> None:
    """With expect_address, that address must be among the answer's A/AAAA records."""
    settings = DnsCheck("www.example.com", dns.rdatatype.A, dns.rcode.NOERROR, ip_address("192.0.2.10"))
    d = make_check(monitor(settings), reactor)(VS)
    port = reactor.udp[0]
    port.reply(answer(port, *addresses).to_wire())
    assert result_of(d) == Result(ok, reason, 0.0)


def test_expected_ipv6_address(reactor: UdpMemoryReactor) -> None:
    """An expected IPv6 address is compared as an address, not as text."""
    settings = DnsCheck("www.example.com", dns.rdatatype.AAAA, dns.rcode.NOERROR, ip_address("2001:db8::10"))
    d = make_check(monitor(settings), reactor)(VS)
    port = reactor.udp[0]
    port.reply(answer(port, "2001:0db8:0:0::0010").to_wire())
    assert result_of(d).ok


def test_truncated_response_is_judged_by_rcode(reactor: UdpMemoryReactor) -> None:
    """A truncated (TC) response, even one cut inside a record, is judged on its header: the
    rcode matches, so the check succeeds (no retry over TCP)."""
    d = make_check(monitor(WWW), reactor)(VS)
    port = reactor.udp[0]
    response = answer(port, "192.0.2.10", "192.0.2.11")
    response.flags |= dns.flags.TC
    wire = response.to_wire()
    port.reply(wire[:-3])
    assert result_of(d) == Result(True, "NOERROR", 0.0)


def test_port_unreachable(reactor: UdpMemoryReactor) -> None:
    """No DNS server on the port: "port unreachable" at once."""
    d = make_check(monitor(WWW), reactor)(VS)
    reactor.udp[0].protocol.connectionRefused()
    assert result_of(d) == Result(False, "port unreachable", 0.0)
