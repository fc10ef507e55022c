"""The responder in memory: DNS semantics, EDNS, ECS scope, wide IP answers, robustness."""

from __future__ import annotations

import random
import struct
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.logger import capturedLogs

from gtmcluster.config.load import load
from gtmcluster.dns import wire
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.node import Node
from tests.support import configs
from tests.support.dnsclient import addresses, answers, ecs_option, parse, query

BIG_TXT = "".join(f'big IN TXT "{"x" * 200} {i}"\n' for i in range(12))


def make_node(tmp_path: Path, mutate: Callable[[dict[str, Any]], None] | None = None, zone: str = configs.ZONE) -> Node:
    config = configs.base()
    if mutate:
        mutate(config)
    return Node(load(configs.write(tmp_path, config, zone)), "n1", clock=lambda: 1000.0, rng=random.Random(7))


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return make_node(tmp_path, zone=configs.ZONE + BIG_TXT)


def handle(node: Node, wire_query: bytes, source: str = "127.0.0.1", tcp: bool = False) -> bytes | None:
    """The node's reply as its transports get it: UDP through the fast path (which answers
    what it has kept and passes the rest on), TCP from the responder."""
    if tcp:
        return node.responder.handle(wire_query, source, tcp=True)
    fast = _fast_paths.get(node)
    if fast is None or fast.responder is not node.responder:
        fast = _fast_paths[node] = FastPath(node.responder)
    return fast.handle(wire_query, source)


_fast_paths: weakref.WeakKeyDictionary[Node, FastPath] = weakref.WeakKeyDictionary()


def ask(node: Node, wire_query: bytes, source: str = "127.0.0.1", tcp: bool = False) -> dns.message.Message:
    reply = handle(node, wire_query, source, tcp=tcp)
    assert reply is not None
    return parse(reply)


def test_wide_ip_answers_by_topology_of_the_source(node: Node) -> None:
    """The LDNS address decides through topology; the answer is authoritative with the pool TTL."""
    assert addresses(ask(node, query("gslb.example.test"), "127.0.1.9")) == ["10.0.1.1"]
    assert addresses(ask(node, query("gslb.example.test"), "127.0.2.9")) == ["10.0.2.1"]
    msg = ask(node, query("gslb.example.test"), "192.0.2.200")
    assert addresses(msg) == ["10.0.3.1"]
    assert msg.flags & dns.flags.AA
    assert msg.answer[0].ttl == 30


def test_ipv4_mapped_sources_count_as_ipv4(node: Node) -> None:
    """A query arriving on a dual-stack socket as ::ffff:a.b.c.d is matched as a.b.c.d."""
    assert addresses(ask(node, query("gslb.example.test"), "::ffff:127.0.2.9")) == ["10.0.2.1"]


def test_aaaa_wide_ip_uses_ipv6_members(node: Node) -> None:
    """AAAA queries are answered from the IPv6 pool with its own TTL."""
    msg = ask(node, query("gslb.example.test", "AAAA"), "127.0.1.9")
    assert addresses(msg) == ["2001:db8:1::1"]
    assert msg.answer[0].ttl == 60


def test_ecs_subnet_drives_topology_and_reports_its_scope(node: Node) -> None:
    """With ECS, the client subnet (not the LDNS) is matched; the scope is the region's /24."""
    msg = ask(node, query("gslb.example.test", ecs="203.0.113.0/24"), "127.0.1.9")
    assert addresses(msg) == ["10.0.2.1"]
    option = ecs_option(msg)
    assert option is not None
    assert (option.address, option.srclen, option.scopelen) == ("203.0.113.0", 24, 24)


def test_ecs_scope_outside_every_region_is_where_it_diverges(node: Node) -> None:
    """A client in no region gets the fallback answer, valid for the prefix that contains no region."""
    msg = ask(node, query("gslb.example.test", ecs="192.0.2.0/24"))
    assert addresses(msg) == ["10.0.3.1"]
    option = ecs_option(msg)
    assert option is not None and 0 < option.scopelen <= 24


def test_ecs_source_zero_uses_the_ldns_with_scope_zero(node: Node) -> None:
    """ECS /0 means "no client information": the LDNS decides and the scope is 0."""
    msg = ask(node, query("gslb.example.test", ecs="0.0.0.0/0"), "127.0.2.9")
    assert addresses(msg) == ["10.0.2.1"]
    option = ecs_option(msg)
    assert option is not None and option.scopelen == 0


def test_static_answers_carry_scope_zero(node: Node) -> None:
    """Answers that do not depend on the client say so with scope 0."""
    option = ecs_option(ask(node, query("www.example.test", ecs="198.51.100.0/24")))
    assert option is not None and option.scopelen == 0


def test_round_robin_decisions_have_scope_zero(tmp_path: Path) -> None:
    """A decision that ignores the client address is valid for everyone (scope 0)."""

    def rr(config: dict[str, Any]) -> None:
        config["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}

    node = make_node(tmp_path, rr)
    option = ecs_option(ask(node, query("gslb.example.test", ecs="198.51.100.0/24")))
    assert option is not None and option.scopelen == 0


def test_persistence_scope_is_the_persistence_prefix(tmp_path: Path) -> None:
    """With LDNS persistence the answer holds for the persistence prefix."""

    def persist(config: dict[str, Any]) -> None:
        config["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}
        config["wideips"]["gslb.example.test"]["persistence"] = {"ttl": 600, "ipv4_prefix": 20}

    node = make_node(tmp_path, persist)
    first = ask(node, query("gslb.example.test", ecs="198.51.100.0/24"))
    option = ecs_option(first)
    assert option is not None and option.scopelen == 20
    again = ask(node, query("gslb.example.test", ecs="198.51.96.0/24"))  # same /20
    assert addresses(again) == addresses(first)


def test_cname_into_a_wide_ip_is_followed(tmp_path: Path) -> None:
    """A static CNAME pointing at a wide IP gets the CNAME plus the load-balanced address."""
    node = make_node(tmp_path, zone=configs.ZONE + "web IN CNAME gslb\n")
    msg = ask(node, query("web.example.test"), "127.0.1.9")
    assert answers(msg) == ["web.example.test. CNAME gslb.example.test.", "gslb.example.test. A 10.0.1.1"]


def test_other_types_at_a_wide_ip_come_from_the_zone(tmp_path: Path) -> None:
    """TXT at a wide IP name is static data; a type with no data is NODATA, not NXDOMAIN."""
    node = make_node(tmp_path, zone=configs.ZONE + 'gslb IN TXT "hello"\n')
    assert answers(ask(node, query("gslb.example.test", "TXT"))) == ['gslb.example.test. TXT "hello"']
    nodata = ask(node, query("gslb.example.test", "MX"))
    assert nodata.rcode() == dns.rcode.NOERROR and not nodata.answer
    assert nodata.authority[0].rdtype == 6


@pytest.mark.parametrize(
    ("method", "expected"),
    [("return_to_dns", ["192.0.2.80"]), ("fallback_ip", ["192.0.2.7"])],
)
def test_return_to_dns_and_fallback_ip(tmp_path: Path, method: str, expected: list[str]) -> None:
    """return_to_dns answers from the static zone; fallback_ip with the pool's fallback address."""

    def chain(config: dict[str, Any]) -> None:
        config["wideips"]["www.example.test"] = {"pools": ["p"]}
        config["pools"]["p"]["load_balancing"] = {"preferred": method}
        config["pools"]["p"]["fallback_ip"] = "192.0.2.7"

    node = make_node(tmp_path, chain)
    assert addresses(ask(node, query("www.example.test"))) == expected


def test_return_to_dns_without_static_data_is_nodata(tmp_path: Path) -> None:
    """A wide IP name exists even with no static records: falling back gives NODATA."""

    def chain(config: dict[str, Any]) -> None:
        config["pools"]["p"]["load_balancing"] = {"preferred": "return_to_dns"}

    msg = ask(make_node(tmp_path, chain), query("gslb.example.test"))
    assert msg.rcode() == dns.rcode.NOERROR and not msg.answer and msg.flags & dns.flags.AA


def test_drop_packet_sends_nothing(tmp_path: Path) -> None:
    """drop_packet means no reply at all."""

    def chain(config: dict[str, Any]) -> None:
        config["pools"]["p"]["load_balancing"] = {"preferred": "drop_packet"}

    assert handle(make_node(tmp_path, chain), query("gslb.example.test"), "127.0.0.1") is None


def test_udp_truncation_without_edns_and_full_answer_over_tcp(node: Node) -> None:
    """Over 512 bytes without EDNS: TC and no partial RRset; TCP carries everything."""
    raw = handle(node, query("big.example.test", "TXT"), "127.0.0.1")
    assert raw is not None and len(raw) <= 512
    msg = parse(raw)
    assert msg.flags & dns.flags.TC and not msg.answer
    full = ask(node, query("big.example.test", "TXT"), tcp=True)
    assert not full.flags & dns.flags.TC
    assert sum(len(r) for r in full.answer) == 12


def test_udp_payload_is_the_smaller_of_client_and_server(node: Node) -> None:
    """EDNS raises the UDP limit to the client's size, capped at udp_payload_size (1232)."""
    fits = handle(node, query("big.example.test", "TXT", edns=0, payload=4096), "127.0.0.1")
    assert fits is not None and len(fits) <= 1232 and parse(fits).flags & dns.flags.TC
    small = handle(node, query("big.example.test", "TXT", edns=0, payload=512), "127.0.0.1")
    assert small is not None and len(small) <= 512


@pytest.mark.parametrize(
    ("name", "rdtype", "rcode"),
    [
        ("example.net", "A", dns.rcode.REFUSED),
        ("example.test", "AXFR", dns.rcode.REFUSED),
        ("example.test", "IXFR", dns.rcode.REFUSED),
        ("example.test", "OPT", dns.rcode.FORMERR),
        ("example.test", "MAILB", dns.rcode.NOTIMP),
    ],
)
def test_refused_and_unsupported_types(node: Node, name: str, rdtype: str, rcode: int) -> None:
    """Out-of-zone names and zone transfers are refused, without AA."""
    msg = ask(node, query(name, rdtype))
    assert msg.rcode() == rcode
    assert not msg.flags & dns.flags.AA


def test_chaos_class_is_refused(node: Node) -> None:
    """CH TXT version.bind is refused: we do not say what we run."""
    q = dns.message.make_query("version.bind", "TXT", "CH")
    assert ask(node, q.to_wire()).rcode() == dns.rcode.REFUSED


@pytest.mark.parametrize("tcp", [False, True])
def test_version_bind_answers_the_configured_string(tmp_path: Path, tcp: bool) -> None:
    """With dns_server.version set, CH TXT version.bind and version.server get that string:
    class CH, TTL 0, not authoritative, the name in the asked case; other CH questions
    are still refused."""
    node = make_node(tmp_path, lambda c: c.update(dns_server={"version": "gtmcluster 0.1"}))
    for name in ("version.bind", "VERSION.Server"):
        msg = ask(node, dns.message.make_query(name, "TXT", "CH").to_wire(), tcp=tcp)
        assert msg.rcode() == dns.rcode.NOERROR
        assert not msg.flags & dns.flags.AA
        assert [rrset.to_text() for rrset in msg.answer] == [f'{name}. 0 CH TXT "gtmcluster 0.1"']
    for name, rdtype in (("hostname.bind", "TXT"), ("version.bind", "A"), ("version.bind.example.test", "TXT")):
        msg = ask(node, dns.message.make_query(name, rdtype, "CH").to_wire(), tcp=tcp)
        assert msg.rcode() == dns.rcode.REFUSED, (name, rdtype)


def test_any_gets_one_rrset(node: Node) -> None:
    """ANY is answered minimally (RFC 8482): one RRset."""
    msg = ask(node, query("www.example.test", "ANY"))
    assert len(msg.answer) == 1


def test_badvers_for_edns_version_one(node: Node) -> None:
    """EDNS version 1 gets BADVERS with an OPT of version 0 and no answer."""
    msg = ask(node, query("www.example.test", edns=1))
    assert msg.rcode() == dns.rcode.BADVERS
    assert msg.edns == 0 and not msg.answer


def test_flags_copied_and_cleared(node: Node) -> None:
    """RD and CD are copied, RA and AD stay clear, Z is not echoed."""
    q = dns.message.make_query("www.example.test", "A")
    q.flags |= dns.flags.CD | dns.flags.AD | 0x0040  # RD is on by default; 0x40 is Z
    msg = ask(node, q.to_wire())
    assert msg.flags & dns.flags.RD and msg.flags & dns.flags.CD
    assert not msg.flags & (dns.flags.RA | dns.flags.AD | 0x0040)


def test_do_bit_is_echoed(node: Node) -> None:
    """The DO bit of the query's OPT comes back (RFC 3225)."""
    q = dns.message.make_query("www.example.test", "A", want_dnssec=True)
    assert ask(node, q.to_wire()).ednsflags & dns.flags.DO


def test_internal_errors_answer_servfail_and_are_logged(tmp_path: Path) -> None:
    """A bug in deciding never escapes the responder: SERVFAIL, and a logged failure."""
    node = make_node(tmp_path)

    def broken(*_: object) -> Any:
        raise RuntimeError("boom")

    node.responder.decide = broken
    with capturedLogs() as events:
        msg = ask(node, query("gslb.example.test"))
    assert msg.rcode() == dns.rcode.SERVFAIL
    assert any("boom" in str(e.get("log_failure", "")) for e in events)
    assert addresses(ask(node, query("www.example.test"))) == ["192.0.2.80"]  # still answering


def test_formerr_reply_keeps_the_id(node: Node) -> None:
    """A malformed query gets FORMERR with its ID, QR set."""
    reply = handle(node, struct.pack("!HHHHHH", 0xBEEF, 0, 2, 0, 0, 0), "127.0.0.1")
    assert reply is not None
    qid, flags = struct.unpack("!HH", reply[:4])
    assert qid == 0xBEEF and flags & wire.QR and flags & 0xF == wire.FORMERR


@settings(max_examples=300)
@given(data=st.binary(max_size=700), tcp=st.booleans())
def test_any_packet_gets_a_sane_reply_or_none(tmp_path_factory: pytest.TempPathFactory, data: bytes, tcp: bool) -> None:
    """Whatever the bytes: no exception; a reply has QR=1, the query's ID, and fits the limit."""
    node = _fuzz_node(tmp_path_factory)
    reply = handle(node, data, "127.0.0.1", tcp=tcp)
    if reply is None:
        return
    assert len(reply) >= 12
    assert reply[:2] == data[:2]
    assert reply[2] & 0x80
    assert len(reply) <= (65535 if tcp else 1232)


@settings(max_examples=300)
@given(qtype=st.integers(0, 65535), name=st.sampled_from(["gslb", "www", "big", "nope", "x.wild", "a.sub", "alias"]))
def test_every_type_at_every_name_is_answered(tmp_path_factory: pytest.TempPathFactory, qtype: int, name: str) -> None:
    """Any QTYPE at any kind of name yields a well-formed reply with a known rcode."""
    node = _fuzz_node(tmp_path_factory)
    reply = handle(node, query(f"{name}.example.test", qtype), "127.0.0.1")
    assert reply is not None
    msg = parse(reply)
    assert msg.rcode() in (0, 1, 3, 4, 5)


_FUZZ: dict[str, Node] = {}


def _fuzz_node(factory: pytest.TempPathFactory) -> Node:
    if "node" not in _FUZZ:
        _FUZZ["node"] = make_node(factory.mktemp("fuzz"), zone=configs.ZONE + BIG_TXT)
    return _FUZZ["node"]
