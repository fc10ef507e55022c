"""Query parsing and response writing on the wire."""

from __future__ import annotations

import struct

import dns.edns
import dns.flags
import dns.message
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.dns import wire
from gtmcluster.dns.wire import Section
from gtmcluster.dnsdata.zone import RRset
from tests.support import dnsclient


def header(qid: int = 7, flags: int = 0, qd: int = 1, an: int = 0, ns: int = 0, ar: int = 0) -> bytes:
    return struct.pack("!HHHHHH", qid, flags, qd, an, ns, ar)


QUESTION = b"\x03www\x07Example\x04test\x00\x00\x01\x00\x01"
OPT_ROOT = b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00"  # OPT, udp 1232, no flags


def opt(options: bytes = b"", version: int = 0, do: bool = False, size: int = 1232) -> bytes:
    ttl = (version << 16) | (0x8000 if do else 0)
    return b"\x00" + struct.pack("!HHIH", 41, size, ttl, len(options)) + options


def ecs_option(family: int, source: int, scope: int, address: bytes) -> bytes:
    data = struct.pack("!HBB", family, source, scope) + address
    return struct.pack("!HH", 8, len(data)) + data


def test_parses_question_keeping_case_and_raw_bytes() -> None:
    """The question is parsed into labels in their original case and kept as raw bytes."""
    q = wire.parse_query(header(flags=wire.RD) + QUESTION)
    assert q.id == 7
    assert q.qname == (b"www", b"Example", b"test")
    assert (q.qtype, q.qclass) == (1, 1)
    assert q.question == QUESTION
    assert q.flags & wire.RD
    assert q.edns is None


def test_parses_edns_payload_version_and_do() -> None:
    """OPT gives the payload size (at least 512), the version and the DO bit."""
    q = wire.parse_query(header(ar=1) + QUESTION + opt(version=1, do=True, size=4096))
    assert q.edns is not None
    assert (q.edns.udp_size, q.edns.version, q.edns.do) == (4096, 1, True)
    small = wire.parse_query(header(ar=1) + QUESTION + opt(size=100))
    assert small.edns is not None and small.edns.udp_size == 512


def test_parses_client_subnet_and_ignores_unknown_options() -> None:
    """An ECS option is decoded; options we do not know are skipped."""
    options = struct.pack("!HH", 65001, 2) + b"\xab\xcd" + ecs_option(1, 24, 0, b"\xc6\x33\x64")
    q = wire.parse_query(header(ar=1) + QUESTION + opt(options))
    assert q.edns is not None and q.edns.ecs is not None
    assert str(q.edns.ecs.network) == "198.51.100.0/24"
    assert q.edns.ecs.option(20)[-4:] == b"\x14\xc6\x33\x64"  # scope 20, address as sent


@pytest.mark.parametrize(
    "packet",
    [
        b"",
        b"\x00\x01\x02",
        header()[:11],
        header(flags=wire.QR) + QUESTION,  # a response
    ],
)
def test_drops_runts_and_responses(packet: bytes) -> None:
    """Packets too short for a header, and responses (QR=1), get no reply at all."""
    with pytest.raises(wire.Drop):
        wire.parse_query(packet)


@pytest.mark.parametrize(
    ("packet", "rcode"),
    [
        (header(qd=0), wire.FORMERR),
        (header(qd=2) + QUESTION + QUESTION, wire.FORMERR),
        (header(an=1) + QUESTION, wire.FORMERR),
        (header(ns=1) + QUESTION, wire.FORMERR),
        (header() + QUESTION[:-2], wire.FORMERR),  # truncated question
        (header() + b"\x40" + b"a" * 64 + b"\x00\x00\x01\x00\x01", wire.FORMERR),  # 64-octet label
        (
            header()
            + b"\x3f"
            + b"a" * 63
            + b"\x3f"
            + b"b" * 63
            + b"\x3f"
            + b"c" * 63
            + b"\x3f"
            + b"d" * 63
            + b"\x00\x00\x01\x00\x01",
            wire.FORMERR,
        ),  # 257-octet name
        (header() + b"\xc0\x0c\x00\x01\x00\x01", wire.FORMERR),  # compression in the question
        (header() + b"\x03www", wire.FORMERR),  # name runs off the end
        (header(ar=2) + QUESTION + OPT_ROOT + b"\x00\x00" + OPT_ROOT, wire.FORMERR),  # two OPT
        (header(ar=1) + QUESTION + b"\x01a\x00" + OPT_ROOT[1:], wire.FORMERR),  # OPT not at root
        (header(ar=1) + QUESTION + OPT_ROOT[:5], wire.FORMERR),  # truncated OPT
        (header(ar=1) + QUESTION + opt(ecs_option(1, 24, 8, b"\xc6\x33\x64")), wire.FORMERR),  # scope set
        (header(ar=1) + QUESTION + opt(ecs_option(1, 20, 0, b"\xc6\x33\x64")), wire.FORMERR),  # bits past /20
        (header(ar=1) + QUESTION + opt(ecs_option(1, 24, 0, b"\xc6\x33")), wire.FORMERR),  # short address
        (header(ar=1) + QUESTION + opt(ecs_option(3, 8, 0, b"\x01")), wire.FORMERR),  # unknown family
        (header(ar=1) + QUESTION + opt(ecs_option(1, 33, 0, b"\x01" * 5)), wire.FORMERR),  # prefix > 32
        (header(ar=1) + QUESTION + opt(struct.pack("!HH", 10, 9) + b"x"), wire.FORMERR),  # option overruns
        (header() + QUESTION + b"\x00", wire.FORMERR),  # trailing garbage
        (header(flags=2 << wire.OPCODE_SHIFT) + QUESTION, wire.NOTIMP),  # STATUS
        (header(flags=5 << wire.OPCODE_SHIFT, qd=1, ns=1) + QUESTION + b"junk", wire.NOTIMP),  # UPDATE
    ],
)
def test_malformed_queries_get_an_error_rcode(packet: bytes, rcode: int) -> None:
    """Each malformed query maps to its rcode; the error carries the ID for the reply."""
    with pytest.raises(wire.QueryError) as caught:
        wire.parse_query(packet)
    assert caught.value.rcode == rcode
    assert caught.value.query_id == 7


def test_notimp_keeps_the_question_when_it_parses() -> None:
    """A NOTIMP reply can echo the question of a non-QUERY opcode."""
    with pytest.raises(wire.QueryError) as caught:
        wire.parse_query(header(flags=4 << wire.OPCODE_SHIFT) + QUESTION)
    assert caught.value.question == QUESTION


def check_outcome(data: bytes) -> None:
    """parse_query either returns a query consistent with the bytes or raises Drop/QueryError."""
    try:
        q = wire.parse_query(data)
    except wire.Drop:
        assert len(data) < 12 or data[2] & 0x80
    except wire.QueryError as e:
        assert e.rcode in (wire.FORMERR, wire.NOTIMP)
        assert e.query_id == int.from_bytes(data[:2], "big")
    else:
        assert q.question == data[12 : 12 + len(q.question)]
        assert all(1 <= len(label) <= 63 for label in q.qname)
        assert sum(len(label) + 1 for label in q.qname) + 1 <= 255


@given(st.binary(max_size=600))
def test_any_bytes_parse_or_raise_a_declared_error(data: bytes) -> None:
    """Whatever arrives, parsing returns a sane query or raises Drop/QueryError, nothing else."""
    check_outcome(data)


@given(st.binary(min_size=12, max_size=300))
def test_any_bytes_after_a_valid_header_and_question(tail: bytes) -> None:
    """Random additional sections never escape as other exceptions."""
    check_outcome(header(ar=tail[0] % 4) + QUESTION + tail[1:])


def a_rrset(owner: tuple[bytes, ...], n: int, ttl: int = 60) -> RRset:
    return RRset(owner, 1, ttl, tuple((bytes([10, 0, i // 256, i % 256]),) for i in range(n)))


def test_response_compresses_owner_names_against_the_question() -> None:
    """An answer owned by the query name costs a 2-byte pointer, and reads back correctly."""
    owner = (b"www", b"example", b"test")
    out = wire.write_response(
        7,
        wire.QR | wire.AA,
        0,
        QUESTION,
        (b"www", b"Example", b"test"),
        [Section([(a_rrset(owner, 1), None)])],
        None,
        512,
    )
    assert out[12 + len(QUESTION) : 12 + len(QUESTION) + 2] == b"\xc0\x0c"
    msg = dns.message.from_wire(out)
    assert msg.flags & dns.flags.AA
    assert dnsclient.answers(msg) == ["www.Example.test. A 10.0.0.0"]


def test_response_drops_whole_rrsets_and_sets_tc() -> None:
    """RRsets that do not fit are left out whole, with TC set; the OPT still fits."""
    owner = (b"www", b"example", b"test")
    first, big = (
        a_rrset(owner, 2),
        RRset((b"mail", b"example", b"test"), 1, 60, tuple((b"\x0a\x00\x00\x01",) for _ in range(60))),
    )
    option = wire.opt_record(1232, 0, False, b"")
    out = wire.write_response(7, wire.QR, 0, QUESTION, owner, [Section([(first, None), (big, None)])], option, 512)
    assert len(out) <= 512
    msg = dns.message.from_wire(out)
    assert msg.flags & dns.flags.TC
    assert len(msg.answer) == 1 and len(msg.answer[0]) == 2
    assert msg.edns == 0


def test_optional_section_overflow_does_not_set_tc() -> None:
    """Additional records that are only a courtesy are dropped silently."""
    owner = (b"www", b"example", b"test")
    glue = RRset((b"ns", b"example", b"test"), 1, 60, tuple((bytes([10, 0, 0, i]),) for i in range(60)))
    out = wire.write_response(
        7,
        wire.QR,
        0,
        QUESTION,
        owner,
        [Section([(a_rrset(owner, 1), None)]), Section([]), Section([(glue, None)], required=False)],
        None,
        512,
    )
    msg = dns.message.from_wire(out)
    assert not msg.flags & dns.flags.TC
    assert len(msg.answer) == 1 and not msg.additional


def test_extended_rcode_goes_into_opt() -> None:
    """BADVERS (16) is 0 in the header and 1 in the OPT's extended rcode, version 0."""
    out = wire.write_response(
        7, wire.QR, wire.BADVERS, QUESTION, (b"www",), [], wire.opt_record(1232, 1, False, b""), 512
    )
    msg = dns.message.from_wire(out)
    assert msg.rcode() == 16
    assert msg.edns == 0
