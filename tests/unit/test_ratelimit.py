"""Response rate limiting: token buckets per client prefix, slip, exemptions, a bounded
table; and how the UDP fast path and TCP use it. The clock is a fake one throughout."""

from __future__ import annotations

import ipaddress
import random
import struct
from pathlib import Path

import dns.flags
import dns.message
import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransportWithDisconnection

from gtmcluster.config.dnsserver import RateLimit
from gtmcluster.config.load import load
from gtmcluster.dns import ratelimit
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.ratelimit import ANSWER, DROP, SLIP, RateLimiter, truncated
from gtmcluster.dns.stream import DNSStreamFactory
from gtmcluster.node import Node
from gtmcluster.runtime.stats import QueryStats
from tests.support import configs
from tests.support.dnsclient import addresses, query


def limiter(clock: Clock, **settings: object) -> RateLimiter:
    return RateLimiter(RateLimit(**settings), clock.seconds, QueryStats())  # type: ignore[arg-type]


def verdicts(rl: RateLimiter, source: str, n: int) -> list[int]:
    return [rl.check(source) for _ in range(n)]


def test_a_prefix_gets_its_rate_then_is_limited() -> None:
    """With 5 per second and a 1 s window, five answers, then none until tokens come back
    (one every 0.2 s)."""
    clock = Clock()
    rl = limiter(clock, responses_per_second=5, window=1, slip=0)
    assert verdicts(rl, "192.0.2.1", 6) == [ANSWER] * 5 + [DROP]
    clock.advance(0.2)
    assert verdicts(rl, "192.0.2.1", 2) == [ANSWER, DROP]
    clock.advance(1.0)
    assert verdicts(rl, "192.0.2.1", 6) == [ANSWER] * 5 + [DROP]


def test_the_burst_is_rate_times_window() -> None:
    """A prefix quiet for a window may send rate x window at once; no more."""
    clock = Clock()
    rl = limiter(clock, responses_per_second=5, window=3, slip=0)
    assert verdicts(rl, "192.0.2.1", 16) == [ANSWER] * 15 + [DROP]
    clock.advance(100)  # the bucket is full again, not fuller
    assert verdicts(rl, "192.0.2.1", 16) == [ANSWER] * 15 + [DROP]


def test_limited_queries_cost_no_tokens() -> None:
    """A prefix flooding far over its rate still gets the rate each second (no debt)."""
    clock = Clock()
    rl = limiter(clock, responses_per_second=10, window=1, slip=0)
    answered = []
    for _ in range(5):
        answered.append(verdicts(rl, "192.0.2.1", 1000).count(ANSWER))
        clock.advance(1.0)
    assert answered == [10] * 5
    assert rl.stats.rate_dropped == 5 * 990


@pytest.mark.parametrize(
    ("slip", "expected"),
    [
        (0, [DROP] * 6),
        (1, [SLIP] * 6),
        (2, [DROP, SLIP] * 3),
        (3, [DROP, DROP, SLIP] * 2),
    ],
)
def test_every_slip_th_limited_query_is_truncated(slip: int, expected: list[int]) -> None:
    """Of a prefix's limited queries, the slip-th, 2 x slip-th, ... are answered truncated,
    the rest dropped; slip 0 drops all of them."""
    clock = Clock()
    rl = limiter(clock, responses_per_second=1, window=1, slip=slip)
    assert rl.check("192.0.2.1") == ANSWER
    assert verdicts(rl, "192.0.2.1", 6) == expected
    assert rl.stats.rate_slipped == expected.count(SLIP)
    assert rl.stats.rate_dropped == expected.count(DROP)


def test_slip_counts_per_prefix() -> None:
    """Each prefix counts its own limited queries for slip."""
    clock = Clock()
    rl = limiter(clock, responses_per_second=1, window=1, slip=2)
    for source in ("192.0.2.1", "198.51.100.1"):
        rl.check(source)
    assert rl.check("192.0.2.1") == DROP
    assert rl.check("198.51.100.1") == DROP
    assert rl.check("192.0.2.1") == SLIP


@pytest.mark.parametrize(
    ("settings", "same", "other"),
    [
        ({}, ["192.0.2.1", "192.0.2.254", "::ffff:192.0.2.9"], ["192.0.3.1", "::c000:201"]),
        (
            {},
            ["2001:db8:0:ff::1", "2001:db8:0:1:2:3:4:5", "2001:db8:0:aa::2%lo"],
            ["2001:db8:0:100::1", "2001:db8:1::1"],
        ),
        ({"ipv4_prefix": 32}, ["192.0.2.1"], ["192.0.2.2"]),
        ({"ipv4_prefix": 16}, ["192.0.2.1", "192.0.200.7"], ["192.1.2.1"]),
        ({"ipv6_prefix": 64}, ["2001:db8::1", "2001:db8::ffff:1"], ["2001:db8:0:1::1"]),
    ],
)
def test_clients_share_the_bucket_of_their_prefix(settings: dict[str, int], same: list[str], other: list[str]) -> None:
    """Addresses in one prefix (/24 and /56 by default; IPv4-mapped IPv6 as IPv4) drain
    one bucket; addresses outside it have their own."""
    clock = Clock()
    rl = limiter(clock, responses_per_second=2, window=1, slip=0, **settings)
    assert len({rl.key(s) for s in same}) == 1
    assert rl.key(same[0]) not in {rl.key(s) for s in other}
    assert [rl.check(same[i % len(same)]) for i in range(3)] == [ANSWER, ANSWER, DROP]
    for source in other:
        assert rl.check(source) == ANSWER


def test_ipv4_and_ipv6_keys_never_collide() -> None:
    """0.0.0.x and ::x are different clients."""
    rl = limiter(Clock(), responses_per_second=1)
    assert rl.key("0.0.0.5") != rl.key("::5")


def test_exempt_networks_are_never_limited() -> None:
    """A client in an exempt network is answered past the rate; its neighbours are not."""
    clock = Clock()
    rl = limiter(
        clock,
        responses_per_second=2,
        window=1,
        slip=0,
        ipv4_prefix=32,
        exempt=(ipaddress.ip_network("192.0.2.7/32"), ipaddress.ip_network("2001:db8::/32")),
    )
    assert verdicts(rl, "192.0.2.7", 100) == [ANSWER] * 100
    assert verdicts(rl, "::ffff:192.0.2.7", 3) == [ANSWER] * 3
    assert verdicts(rl, "2001:db8::1", 10) == [ANSWER] * 10
    assert verdicts(rl, "192.0.2.8", 3) == [ANSWER, ANSWER, DROP]


def test_a_full_table_forgets_idle_prefixes_first() -> None:
    """When the table is full, prefixes idle for a window go first (their bucket is full
    again, so forgetting them changes nothing): a prefix flooding now stays limited."""
    clock = Clock()
    rl = limiter(clock, responses_per_second=1, window=2, slip=0, table_size=1000, ipv4_prefix=32)
    for i in range(900):
        rl.check(str(ipaddress.IPv4Address(0x0A000000 + i)))  # 10.0.x.y, then quiet
    clock.advance(5)
    assert verdicts(rl, "192.0.2.1", 3) == [ANSWER, ANSWER, DROP]
    for i in range(99):
        rl.check(str(ipaddress.IPv4Address(0x0B000000 + i)))
    assert len(rl) == 1000
    rl.check("198.51.100.1")  # one more: the table makes room
    assert len(rl) == 101
    assert rl.check("192.0.2.1") == DROP


def test_a_full_table_of_busy_prefixes_evicts_the_oldest() -> None:
    """When no prefix is idle, the oldest entries go (they start again with a full bucket):
    memory stays bounded even under a spray of spoofed sources."""
    clock = Clock()
    rl = limiter(clock, responses_per_second=1, window=60, slip=0, table_size=1000, ipv4_prefix=32)
    sources = [str(ipaddress.IPv4Address(0x0A000000 + i)) for i in range(5000)]
    for source in sources:
        rl.check(source)
        assert len(rl) <= 1000
    assert rl.key(sources[-1]) in rl._table
    assert rl.key(sources[0]) not in rl._table


def test_update_keeps_the_table_when_the_settings_stay() -> None:
    """A reload with the same settings keeps the buckets; other settings start afresh; 0 is off."""
    clock = Clock()
    stats = QueryStats()
    settings = RateLimit(responses_per_second=1)
    rl = ratelimit.make(settings, clock.seconds, stats)
    assert rl is not None
    assert ratelimit.update(rl, RateLimit(responses_per_second=1), clock.seconds, stats) is rl
    other = ratelimit.update(rl, RateLimit(responses_per_second=2), clock.seconds, stats)
    assert other is not None and other is not rl and other.rate == 2
    assert ratelimit.update(rl, RateLimit(), clock.seconds, stats) is None
    assert ratelimit.make(RateLimit(), clock.seconds, stats) is None


# -- the slip reply ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wire",
    [
        query("www.example.test"),
        query("WWW.Example.test", "TXT", rd=True),
        query("www.example.test", edns=0, payload=4096),
        query("gslb.example.test", "AAAA", edns=0, ecs="198.51.100.0/24"),
    ],
)
def test_the_slip_reply_is_truncated_empty_and_no_larger_than_the_query(wire: bytes) -> None:
    """TC and QR set, the question as asked, no records; an OPT (our size, DO kept) when the
    query had one; never more bytes than the query."""
    reply = truncated(wire, 1232)
    assert reply is not None
    assert len(reply) <= len(wire)
    q = dns.message.from_wire(wire)
    msg = dns.message.from_wire(reply)
    assert msg.id == q.id
    assert msg.flags & dns.flags.QR and msg.flags & dns.flags.TC
    assert (msg.flags & dns.flags.RD) == (q.flags & dns.flags.RD)
    assert msg.question == q.question
    assert not msg.answer and not msg.authority and not msg.additional
    assert msg.rcode() == 0
    assert (msg.edns >= 0) == (q.edns >= 0)
    if q.edns >= 0:
        assert msg.payload == 1232


def test_the_slip_reply_keeps_the_do_bit() -> None:
    wire = dns.message.make_query("www.example.test", "A", want_dnssec=True).to_wire()
    msg = dns.message.from_wire(truncated(wire, 1232) or b"")
    assert msg.ednsflags & dns.flags.DO


@pytest.mark.parametrize(
    "wire",
    [
        b"",
        b"\x00" * 11,
        bytes.fromhex("1234 8000 0001 0000 0000 0000 0377777700 0001 0001"),  # a response
        bytes.fromhex("1234 2800 0001 0000 0000 0000 0377777700 0001 0001"),  # opcode 5
        bytes.fromhex("1234 0000 0002 0000 0000 0000 0377777700 0001 0001"),  # two questions
        bytes.fromhex("1234 0000 0001 0000 0000 0000 03777777"),  # cut in the name
        bytes.fromhex("1234 0000 0001 0000 0000 0000 c00c 0001 0001 00"),  # a pointer
    ],
)
def test_no_slip_reply_to_what_is_not_a_plain_query(wire: bytes) -> None:
    """A limited client gets nothing for malformed queries, responses and other opcodes."""
    assert truncated(wire, 1232) is None


# -- in the answer path ----------------------------------------------------------------------


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(load(configs.write(tmp_path, configs.base())), "n1", clock=lambda: 0.0, rng=random.Random(1))


def test_the_fast_path_limits_udp_answers(node: Node) -> None:
    """Past the rate, UDP queries from the prefix get slips and silence, counted in the
    node's stats; another prefix is answered in full meanwhile."""
    clock = Clock()
    rl = RateLimiter(RateLimit(responses_per_second=3, window=1, slip=2), clock.seconds, node.stats)
    fast = FastPath(node.responder, rl)
    replies = [fast.handle(query("www.example.test", qid=i), "192.0.2.1") for i in range(7)]
    assert all(r is not None and dns.message.from_wire(r).answer for r in replies[:3])
    assert replies[3] is None and replies[5] is None
    for r in (replies[4], replies[6]):
        assert r is not None
        msg = dns.message.from_wire(r)
        assert msg.flags & dns.flags.TC and not msg.answer
    other = fast.handle(query("gslb.example.test"), "198.51.100.1")
    assert other is not None and addresses(dns.message.from_wire(other)) == ["10.0.1.1"]
    assert (node.stats.rate_dropped, node.stats.rate_slipped) == (2, 2)
    answered = sum(node.stats.queries.values())
    assert answered == 4  # limited queries are not counted as answered


def test_malformed_queries_count_against_the_rate_too(node: Node) -> None:
    """Whatever would be answered (FORMERR included) takes a token, so junk cannot be
    reflected past the limit either."""
    clock = Clock()
    rl = RateLimiter(RateLimit(responses_per_second=2, window=1, slip=0), clock.seconds, node.stats)
    fast = FastPath(node.responder, rl)
    junk = bytes.fromhex("1234 0000 0002 0000 0000 0000 0377777700 0001 0001")  # QDCOUNT 2: FORMERR
    got = [fast.handle(junk, "192.0.2.1") for _ in range(3)]
    assert got[0] is not None and got[1] is not None and got[2] is None


def test_tcp_is_never_limited(node: Node) -> None:
    """A prefix limited over UDP is answered over TCP (its address is real there)."""
    clock = Clock()
    rl = RateLimiter(RateLimit(responses_per_second=1, window=1, slip=0), clock.seconds, node.stats)
    fast = FastPath(node.responder, rl)
    fast.handle(query("www.example.test"), "192.0.2.1")
    assert fast.handle(query("www.example.test"), "192.0.2.1") is None
    factory = DNSStreamFactory(node.responder, clock, 10, 100)
    proto = factory.buildProtocol(IPv4Address("TCP", "192.0.2.1", 40000))
    transport = StringTransportWithDisconnection(peerAddress=IPv4Address("TCP", "192.0.2.1", 40000))
    transport.protocol = proto
    proto.makeConnection(transport)
    for i in range(20):
        wire = query("www.example.test", qid=i)
        proto.dataReceived(struct.pack("!H", len(wire)) + wire)
    data = transport.value()
    count = 0
    while data:
        (n,) = struct.unpack("!H", data[:2])
        assert dns.message.from_wire(data[2 : 2 + n]).answer
        data = data[2 + n :]
        count += 1
    assert count == 20
