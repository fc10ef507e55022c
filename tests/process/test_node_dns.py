"""One real node (``twistd -n gtm``) on a loopback address, asked with the real `dig`.

Every DNS semantic of the authoritative server is shown here the way an operator would see
it: header flags and rcodes, negative answers, record types, CNAME chains, wildcards,
referrals, EDNS0, truncation and the retry over TCP, EDNS Client Subnet, topology by the
asking address (``dig -b``), IPv6, TCP pipelining and the TCP idle timeout. Packets that dig
cannot send (malformed ones, responses, several questions) go out as raw bytes.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dns.edns
import pytest

from tests.support import configs, dnsclient, zones
from tests.support.dig import DigResult, dig
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

DNS_PORT = 5353
IDLE_TIMEOUT = 1.0
SOA_TEXT = "ns1.example.test. hostmaster.example.test. 1 3600 600 86400 300"
NEGATIVE_TTL = 300  # min(SOA TTL 3600, SOA MINIMUM 300), RFC 2308


@dataclass
class Node:
    """The node under test: its IPv4 listener, its IPv6 listener's port and its log."""

    proc: RunningNode
    port6: int

    @property
    def address(self) -> str:
        return self.proc.address

    @property
    def port(self) -> int:
        return self.proc.port

    @property
    def server(self) -> tuple[str, int]:
        return self.proc.server

    def dig(self, name: str, rdtype: str = "A", *args: str, source: str | None = None) -> DigResult:
        return dig(self.address, self.port, name, rdtype, *args, source=source)

    def dig6(self, name: str, rdtype: str = "A", *args: str) -> DigResult:
        return dig("::1", self.port6, name, rdtype, *args)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    address = loopback_address()
    port6 = 20000 + os.getpid() % 20000
    config = configs.base(address, DNS_PORT)
    config["sync_group"]["members"][0]["dns"].append(f"[::1]:{port6}")
    config["dns_server"]["tcp_idle_timeout"] = IDLE_TIMEOUT
    workdir: Path = tmp_path_factory.mktemp("node")
    path = configs.write(workdir, config, zone=zones.LARGE_ZONE)
    with running_node(path, "n1", address, DNS_PORT, workdir) as proc:
        yield Node(proc, port6)


def fields(record: str) -> tuple[str, int, str, str]:
    """(owner, ttl, type, rdata) of a record line as dig prints it."""
    owner, ttl, _cls, rtype, *rdata = record.split()
    return owner, int(ttl), rtype, " ".join(rdata)


def ecs_scope(result: DigResult) -> tuple[str, int]:
    """(source subnet, scope prefix) of the reply's CLIENT-SUBNET option, as dig shows it."""
    assert result.edns is not None, "the reply carries no OPT record"
    assert "CLIENT-SUBNET" in result.edns, f"the reply carries no client subnet option: {result.edns}"
    address, source, scope = str(result.edns["CLIENT-SUBNET"]).rsplit("/", 2)
    return f"{address}/{source}", int(scope)


def assert_soa_authority(result: DigResult) -> None:
    assert len(result.authority) == 1, result.authority
    assert fields(result.authority[0]) == ("example.test.", NEGATIVE_TTL, "SOA", SOA_TEXT)


# --- raw packets over UDP and TCP, for what dig cannot send ---------------------------


def udp_socket(node: Node) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3.0)
    s.connect(node.server)
    return s


def tcp_send(s: socket.socket, *messages: bytes) -> None:
    s.sendall(b"".join(struct.pack("!H", len(m)) + m for m in messages))


def assert_still_answers(s: socket.socket, tcp: bool = False) -> None:
    """The next reply on *s* answers a normal query sent now: nothing came in between."""
    wire = dnsclient.query("www.example.test", "A", qid=0x5151)
    if tcp:
        tcp_send(s, wire)
        reply = dnsclient.read_framed(s)
    else:
        s.send(wire)
        reply = s.recv(65535)
    msg = dnsclient.parse(reply)
    assert msg.id == 0x5151, "a reply to an earlier packet arrived first"
    assert dnsclient.addresses(msg) == ["192.0.2.80"]


# --- header flags and authoritative answers --------------------------------------------


def test_authoritative_answer_has_aa(node: Node) -> None:
    """An answer from a served zone is NOERROR with QR and AA set."""
    result = node.dig("www.example.test")
    assert result.status == "NOERROR"
    assert {"qr", "aa"} <= result.flags
    assert result.answer_data() == ["192.0.2.80"]


@pytest.mark.parametrize("name", ["nope.example.test", "below.www.example.test", "x.nope.example.test"])
def test_nxdomain_has_soa_in_authority_and_aa(node: Node, name: str) -> None:
    """A name that does not exist in the zone gets NXDOMAIN, AA, and the zone SOA (negative TTL)."""
    result = node.dig(name)
    assert result.status == "NXDOMAIN"
    assert "aa" in result.flags
    assert result.answer == []
    assert_soa_authority(result)


@pytest.mark.parametrize(("name", "rdtype"), [("www.example.test", "MX"), ("mail.example.test", "AAAA")])
def test_nodata_has_soa_in_authority_and_aa(node: Node, name: str, rdtype: str) -> None:
    """A name that exists without the asked type gets NOERROR, no answer, AA and the zone SOA."""
    result = node.dig(name, rdtype)
    assert result.status == "NOERROR"
    assert "aa" in result.flags
    assert result.answer == []
    assert_soa_authority(result)


@pytest.mark.parametrize("name", ["c.example.test", "b.c.example.test"])
def test_empty_non_terminal_is_nodata(node: Node, name: str) -> None:
    """A name with no records but with names below it (a.b.c exists) is NODATA, not NXDOMAIN."""
    result = node.dig(name)
    assert result.status == "NOERROR"
    assert "aa" in result.flags
    assert result.answer == []
    assert_soa_authority(result)


@pytest.mark.parametrize("name", ["www.other.test", "test", "ns2.other.test", "example.org"])
def test_names_outside_every_zone_are_refused_without_aa(node: Node, name: str) -> None:
    """A name outside every served zone (even the zone's parent) gets REFUSED, no AA, no records."""
    result = node.dig(name)
    assert result.status == "REFUSED"
    assert "aa" not in result.flags
    assert "qr" in result.flags
    assert result.answer == result.authority == []


@pytest.mark.parametrize(("option", "rd"), [("+rec", True), ("+norec", False)])
@pytest.mark.parametrize("name", ["www.example.test", "www.other.test"])
def test_rd_is_copied_and_ra_never_set(node: Node, option: str, rd: bool, name: str) -> None:
    """RD in the reply mirrors the query's RD; RA (recursion available) is never set."""
    result = node.dig(name, "A", option)
    assert ("rd" in result.flags) is rd
    assert "ra" not in result.flags


def test_query_name_case_is_preserved(node: Node) -> None:
    """The question comes back byte for byte (mixed case kept) while matching case-insensitively."""
    result = node.dig("WwW.Example.TEST")
    assert result.question == ["WwW.Example.TEST. IN A"]
    assert result.status == "NOERROR"
    assert "aa" in result.flags
    assert result.answer_data() == ["192.0.2.80"]


# --- record types ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rdtype", "rdata"),
    [
        ("example.test", "SOA", [SOA_TEXT]),
        ("example.test", "NS", ["ns1.example.test.", "ns2.other.test."]),
        ("www.example.test", "A", ["192.0.2.80"]),
        ("www6.example.test", "AAAA", ["2001:db8::80"]),
        ("alias.example.test", "CNAME", ["www.example.test."]),
        ("example.test", "MX", ["10 mail.example.test."]),
        ("www.example.test", "TXT", ['"static text"']),
        ("_sip._udp.example.test", "SRV", ["0 5 5060 www.example.test."]),
        ("rev.example.test", "PTR", ["www.example.test."]),
    ],
)
def test_static_record_types(node: Node, name: str, rdtype: str, rdata: list[str]) -> None:
    """Each record type of the zone file is answered with its data, the zone TTL and AA."""
    result = node.dig(name, rdtype)
    assert result.status == "NOERROR"
    assert "aa" in result.flags
    records = [fields(r) for r in result.answer]
    assert sorted(r[3] for r in records) == rdata
    assert {(r[0], r[1], r[2]) for r in records} == {(f"{name}.", 3600, rdtype)}


def test_apex_ns_answer_carries_in_zone_glue(node: Node) -> None:
    """NS answers at the apex list the address of the in-zone name server in additional."""
    result = node.dig("example.test", "NS")
    assert "ns1.example.test. 3600 IN A 192.0.2.1" in result.additional


def test_cname_chain_is_followed_inside_the_zone(node: Node) -> None:
    """A CNAME chain (chain -> alias -> www) is answered in order, ending with the address."""
    result = node.dig("chain.example.test")
    assert result.status == "NOERROR"
    assert "aa" in result.flags
    assert [fields(r) for r in result.answer] == [
        ("chain.example.test.", 3600, "CNAME", "alias.example.test."),
        ("alias.example.test.", 3600, "CNAME", "www.example.test."),
        ("www.example.test.", 3600, "A", "192.0.2.80"),
    ]


def test_cname_leaving_the_zones_ends_the_answer(node: Node) -> None:
    """A CNAME to a name we do not serve is answered with the CNAME alone (NOERROR, AA)."""
    result = node.dig("outside.example.test")
    assert result.status == "NOERROR"
    assert "aa" in result.flags
    assert [fields(r) for r in result.answer] == [
        ("outside.example.test.", 3600, "CNAME", "www.elsewhere.test."),
    ]


def test_cname_loop_terminates(node: Node) -> None:
    """A CNAME loop (loop1 <-> loop2) is answered with each CNAME once, not followed forever."""
    result = node.dig("loop1.example.test")
    assert result.status == "NOERROR"
    assert [fields(r)[2:] for r in result.answer] == [
        ("CNAME", "loop2.example.test."),
        ("CNAME", "loop1.example.test."),
    ]


def test_cname_to_missing_name_is_nxdomain_with_the_cname(node: Node) -> None:
    """A CNAME to a missing in-zone name: NXDOMAIN for the target (RFC 6604), CNAME kept, SOA."""
    result = node.dig("dangling.example.test")
    assert result.status == "NXDOMAIN"
    assert "aa" in result.flags
    assert [fields(r)[2:] for r in result.answer] == [("CNAME", "nothere.example.test.")]
    assert_soa_authority(result)


def test_cname_into_a_wide_ip_is_load_balanced(node: Node) -> None:
    """A CNAME to a wide IP ends in the load-balanced address for the asking resolver."""
    result = node.dig("wip.example.test", source="127.0.2.1")
    assert [fields(r)[2:] for r in result.answer] == [("CNAME", "gslb.example.test."), ("A", "10.0.2.1")]


@pytest.mark.parametrize("name", ["foo.wild.example.test", "a.b.wild.example.test"])
def test_wildcard_synthesizes_the_asked_name(node: Node, name: str) -> None:
    """A name below *.wild is answered from the wildcard, with the asked name as owner and AA."""
    result = node.dig(name)
    assert result.status == "NOERROR"
    assert "aa" in result.flags
    assert [fields(r) for r in result.answer] == [(f"{name}.", 3600, "A", "192.0.2.99")]


def test_wildcard_without_the_type_is_nodata(node: Node) -> None:
    """A wildcard-matched name asked for a type the wildcard lacks is NODATA with the SOA."""
    result = node.dig("foo.wild.example.test", "AAAA")
    assert result.status == "NOERROR"
    assert result.answer == []
    assert_soa_authority(result)


@pytest.mark.parametrize(
    ("name", "rdtype"),
    [("www.sub.example.test", "A"), ("sub.example.test", "NS"), ("ns.sub.example.test", "A")],
)
def test_delegation_gives_a_referral(node: Node, name: str, rdtype: str) -> None:
    """At or below a zone cut: a referral (no AA, no answer, the cut's NS, glue in additional)."""
    result = node.dig(name, rdtype)
    assert result.status == "NOERROR"
    assert "aa" not in result.flags
    assert result.answer == []
    assert result.authority == ["sub.example.test. 3600 IN NS ns.sub.example.test."]
    assert "ns.sub.example.test. 3600 IN A 192.0.2.53" in result.additional


# --- opcodes and malformed packets -----------------------------------------------------


@pytest.mark.parametrize(("opcode", "shown"), [("1", "IQUERY"), ("2", "STATUS"), ("4", "NOTIFY"), ("5", "UPDATE")])
def test_other_opcodes_get_notimp_with_qr(node: Node, opcode: str, shown: str) -> None:
    """Any opcode but QUERY is answered NOTIMP, as a response (QR=1) with the same opcode."""
    result = node.dig("www.example.test", "A", f"+opcode={opcode}")
    assert result.status == "NOTIMP"
    assert result.raw["opcode"] == shown
    assert "qr" in result.flags
    assert "aa" not in result.flags
    assert result.answer == []


def test_notimp_reply_to_an_edns_query_carries_opt(node: Node) -> None:
    """A NOTIMP reply to a query with a valid OPT record carries an OPT record too (RFC 6891
    6.1.1: responders MUST include OPT when the request had one), so dig does not take the
    server for one without EDNS."""
    result = node.dig("www.example.test", "A", "+opcode=status")
    assert result.status == "NOTIMP"
    assert result.edns is not None, "NOTIMP reply to an EDNS query has no OPT record"
    assert result.edns["version"] == 0


def test_multi_question_query_gets_formerr(node: Node) -> None:
    """A query with two questions is answered FORMERR (QR=1, same id, RD copied)."""
    packet = (
        zones.header(0x2A2A, zones.RD, qd=2) + zones.question("www.example.test") + zones.question("mail.example.test")
    )
    with udp_socket(node) as s:
        s.send(packet)
        qid, flags, rcode, _counts = zones.unpack_header(s.recv(65535))
        assert (qid, rcode) == (0x2A2A, 1)
        assert flags & zones.QR
        assert flags & zones.RD
        assert_still_answers(s)


_VALID = zones.header(0x1D1D) + zones.question("www.example.test")
MALFORMED = {
    "truncated question": _VALID[:20],
    "no question": zones.header(0x1D1D, qd=0),
    "compression pointer in the question": zones.header(0x1D1D) + b"\xc0\x0c" + struct.pack("!HH", 1, 1),
    "extended label type": zones.header(0x1D1D) + b"\x41www\x00" + struct.pack("!HH", 1, 1),
    "name longer than 255 octets": zones.header(0x1D1D) + (b"\x3f" + b"a" * 63) * 5 + b"\0\0\1\0\1",
    "trailing bytes": _VALID + b"\x00\x01",
    "answer count in a query": zones.header(0x1D1D, an=1) + zones.question("www.example.test"),
    "additional count without records": zones.header(0x1D1D, ar=1) + zones.question("www.example.test"),
    "EDNS option longer than OPT": zones.header(0x1D1D, ar=1)
    + zones.question("www.example.test")
    + zones.opt(struct.pack("!HH", 65001, 40) + b"ab"),
    "two OPT records": zones.header(0x1D1D, ar=2) + zones.question("www.example.test") + zones.opt() + zones.opt(),
    "client subnet with host bits": zones.header(0x1D1D, ar=1)
    + zones.question("www.example.test")
    + zones.opt(struct.pack("!HHHBB", 8, 7, 1, 23, 0) + bytes([198, 51, 101])),
}


@pytest.mark.parametrize("packet", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_query_gets_formerr_and_server_keeps_answering(node: Node, packet: bytes) -> None:
    """A malformed query gets FORMERR (QR=1, its id) and the server answers the next query."""
    with udp_socket(node) as s:
        s.send(packet)
        qid, flags, rcode, _counts = zones.unpack_header(s.recv(65535))
        assert (qid, rcode) == (0x1D1D, 1)
        assert flags & zones.QR
        assert_still_answers(s)
    assert "Traceback" not in node.proc.log_text()


NO_REPLY = {
    "a response (QR=1)": zones.header(0x0E0E, zones.QR) + zones.question("www.example.test"),
    "a response with an answer count": zones.header(0x0E0E, zones.QR | 0x0400, an=1) + zones.question("x.test"),
    "shorter than a header": b"\x0e\x0e\x01",
    "empty datagram": b"",
}


@pytest.mark.parametrize("packet", NO_REPLY.values(), ids=NO_REPLY.keys())
def test_responses_and_runts_get_no_reply(node: Node, packet: bytes) -> None:
    """A packet that is itself a response, or shorter than a header, gets no reply at all."""
    with udp_socket(node) as s:
        s.send(packet)
        assert_still_answers(s)  # the first datagram back answers the query sent after it


def test_malformed_query_over_tcp_gets_formerr_on_a_connection_that_stays_usable(node: Node) -> None:
    """Over TCP a malformed query gets FORMERR and the same connection answers the next query."""
    with socket.create_connection(node.server, timeout=3) as s:
        tcp_send(s, MALFORMED["trailing bytes"])
        qid, flags, rcode, _counts = zones.unpack_header(dnsclient.read_framed(s))
        assert (qid, rcode) == (0x1D1D, 1)
        assert flags & zones.QR
        tcp_send(s, NO_REPLY["a response (QR=1)"])
        assert_still_answers(s, tcp=True)


# --- EDNS0 -------------------------------------------------------------------------------


def test_opt_is_echoed_with_version_0_and_our_payload_size(node: Node) -> None:
    """An EDNS query gets an OPT record back: version 0, our UDP payload size 1232."""
    result = node.dig("www.example.test", "A", "+bufsize=4096")
    assert result.edns is not None
    assert result.edns["version"] == 0
    assert result.edns["udp"] == 1232


def test_no_opt_without_edns(node: Node) -> None:
    """A query without EDNS gets a reply without an OPT record."""
    result = node.dig("www.example.test", "A", "+noedns")
    assert result.edns is None
    assert result.answer_data() == ["192.0.2.80"]


def test_do_bit_is_copied(node: Node) -> None:
    """The DO bit of the query's OPT is copied into the reply's OPT (RFC 3225)."""
    result = node.dig("www.example.test", "A", "+dnssec")
    assert result.edns is not None
    assert "do" in str(result.edns.get("flags") or "").split()


def test_edns_version_1_gets_badvers_with_opt_version_0(node: Node) -> None:
    """EDNS version 1 is answered BADVERS, with an OPT of version 0 and no answer records."""
    result = node.dig("www.example.test", "A", "+edns=1", "+noednsneg")
    assert result.status == "BADVERS"
    assert result.edns is not None
    assert result.edns["version"] == 0
    assert result.answer == []
    assert "aa" not in result.flags


def test_unknown_edns_option_is_ignored_and_not_echoed(node: Node) -> None:
    """An unknown EDNS option does not change the answer and is not copied into the reply."""
    result = node.dig("www.example.test", "A", "+ednsopt=65001:abcd", "+nocookie")
    assert result.status == "NOERROR"
    assert result.answer_data() == ["192.0.2.80"]
    assert result.edns is not None
    assert set(result.edns) <= {"version", "flags", "udp"}, result.edns
    raw = dnsclient.parse(
        dnsclient.udp(dnsclient.query("www.example.test", edns=0, options=[_unknown_option()]), node.server)
    )
    assert raw.edns == 0
    assert list(raw.options) == []


def _unknown_option() -> dns.edns.Option:
    return dns.edns.GenericOption(dns.edns.OptionType.make(65001), b"\xab\xcd")


# --- truncation and TCP ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "kept"),
    [
        ("medium.example.test", ("+noedns",), []),
        ("medium.example.test", ("+bufsize=512",), []),
        ("big.example.test", ("+noedns",), []),
        ("big.example.test", ("+bufsize=512",), []),
        ("big.example.test", ("+bufsize=4096",), []),  # our own limit is 1232
        ("bigalias.example.test", ("+noedns",), [("CNAME", "big.example.test.")]),
    ],
)
def test_large_udp_answer_is_truncated_to_whole_rrsets(
    node: Node, name: str, args: tuple[str, ...], kept: list[tuple[str, str]]
) -> None:
    """An answer larger than the UDP limit (512 without EDNS, else min(bufsize, 1232)) comes
    back over UDP with TC set, carrying only the RRsets that fit whole."""
    result = node.dig(name, "TXT", *args, "+ignore")
    assert result.protocol == "UDP"
    assert "tc" in result.flags
    assert result.status == "NOERROR"
    assert [fields(r)[2:] for r in result.answer] == kept


def test_advertised_udp_size_is_honoured(node: Node) -> None:
    """An 800-byte answer fits a 1232-byte EDNS payload: whole over UDP, no TC."""
    result = node.dig("medium.example.test", "TXT", "+bufsize=1232", "+ignore")
    assert result.protocol == "UDP"
    assert "tc" not in result.flags
    assert sorted(r.strip('"') for r in result.answer_data()) == zones.MEDIUM_TXT


@pytest.mark.parametrize("args", [("+noedns",), ("+bufsize=512",), ()])
def test_dig_retries_truncated_answer_over_tcp_and_gets_it_whole(node: Node, args: tuple[str, ...]) -> None:
    """dig, seeing TC, asks again over TCP and gets the whole RRset there."""
    result = node.dig("big.example.test", "TXT", *args)
    assert result.protocol == "TCP"
    assert "tc" not in result.flags
    assert "aa" in result.flags
    assert sorted(r.strip('"') for r in result.answer_data()) == zones.BIG_TXT


def test_tcp_query_gets_the_whole_large_answer(node: Node) -> None:
    """Over TCP (dig +tcp) a 2.8 kB answer comes whole, without TC."""
    result = node.dig("bigalias.example.test", "TXT", "+tcp")
    assert result.protocol == "TCP"
    assert "tc" not in result.flags
    assert result.types() == ["CNAME"] + ["TXT"] * len(zones.BIG_TXT)


def test_several_queries_on_one_tcp_connection_are_answered_in_order(node: Node) -> None:
    """Queries pipelined on one TCP connection are each answered, in the order sent."""
    asked = [("www.example.test", 101), ("mail.example.test", 102), ("ns1.example.test", 103)]
    with socket.create_connection(node.server, timeout=3) as s:
        tcp_send(s, *(dnsclient.query(name, "A", qid=qid) for name, qid in asked))
        replies = [dnsclient.parse(dnsclient.read_framed(s)) for _ in asked]
    assert [(m.id, dnsclient.addresses(m)) for m in replies] == [
        (101, ["192.0.2.80"]),
        (102, ["192.0.2.25"]),
        (103, ["192.0.2.1"]),
    ]


def test_dig_keepopen_reuses_one_tcp_connection(node: Node) -> None:
    """dig +tcp +keepopen sends several queries over one connection; each gets its answer."""
    out = subprocess.run(
        ["dig", f"@{node.address}", "-p", str(node.port), "+tcp", "+keepopen", "+norec", "+short",
         "www.example.test", "A", "mail.example.test", "A"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert out.stdout.split() == ["192.0.2.80", "192.0.2.25"], out.stdout + out.stderr


def test_idle_tcp_connection_is_closed_after_the_idle_timeout(node: Node) -> None:
    """A TCP client that sends nothing is disconnected by the server after tcp_idle_timeout."""
    bound = IDLE_TIMEOUT + 4.0
    with socket.create_connection(node.server, timeout=bound) as s:
        start = time.monotonic()
        try:
            data = s.recv(1)
        except ConnectionResetError:
            data = b""
        except TimeoutError:
            pytest.fail(f"the server kept an idle TCP connection open for {bound} s")
        elapsed = time.monotonic() - start
    assert data == b""
    assert IDLE_TIMEOUT * 0.5 <= elapsed < bound


# --- EDNS Client Subnet -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("subnet", "address"), [("198.51.100.0/24", "10.0.1.1"), ("203.0.113.0/24", "10.0.2.1")]
)  # fmt: skip
def test_client_subnet_decides_the_answer_and_reply_has_scope(node: Node, subnet: str, address: str) -> None:
    """With ECS the client subnet (not the asking 127.0.0.1) picks the data center; the reply
    echoes the subnet with the scope of the matching /24 region."""
    result = node.dig("gslb.example.test", "A", f"+subnet={subnet}", source="127.0.0.1")
    assert result.answer_data() == [address]
    assert ecs_scope(result) == (subnet, 24)


REGION_NETWORKS = {
    "10.0.1.1": [ipaddress.ip_network("198.51.100.0/24"), ipaddress.ip_network("127.0.1.0/24")],
    "10.0.2.1": [ipaddress.ip_network("203.0.113.0/24"), ipaddress.ip_network("127.0.2.0/24")],
}


@pytest.mark.parametrize(
    ("subnet", "address"),
    [
        ("198.51.100.7/32", "10.0.1.1"),
        ("203.0.113.128/25", "10.0.2.1"),
        ("198.51.0.0/16", "10.0.3.1"),  # holds r1's 198.51.100.0/24: a /16 scope would be wrong
        ("10.9.8.0/24", "10.0.3.1"),
    ],
)
def test_client_subnet_scope_covers_only_clients_with_the_same_answer(node: Node, subnet: str, address: str) -> None:
    """The scope block (the subnet cut to the scope prefix) that a resolver may cache the answer
    for holds no client that would get another data center: inside the region for DC1/DC2,
    clear of every region for DC3 (RFC 7871 7.2.1: scope may be longer than the source)."""
    result = node.dig("gslb.example.test", "A", f"+subnet={subnet}", source="127.0.0.1")
    assert result.answer_data() == [address]
    echoed, scope = ecs_scope(result)
    assert echoed == subnet
    block = ipaddress.ip_network(f"{subnet.partition('/')[0]}/{scope}", strict=False)
    if address in REGION_NETWORKS:
        assert any(block.subnet_of(net) for net in REGION_NETWORKS[address]), block  # type: ignore[arg-type]
    else:
        others = [net for nets in REGION_NETWORKS.values() for net in nets]
        assert not any(block.overlaps(net) for net in others), block


def test_client_subnet_zero_length_falls_back_to_the_source_address(node: Node) -> None:
    """ECS 0.0.0.0/0 (client opted out) answers by the resolver's own address, with scope 0."""
    result = node.dig("gslb.example.test", "A", "+subnet=0.0.0.0/0", source="127.0.2.1")
    assert result.answer_data() == ["10.0.2.1"]
    assert ecs_scope(result) == ("0.0.0.0/0", 0)


def test_client_subnet_on_a_static_name_has_scope_0(node: Node) -> None:
    """A static answer does not depend on the client subnet: the reply's scope is 0."""
    result = node.dig("www.example.test", "A", "+subnet=198.51.100.0/24")
    assert result.answer_data() == ["192.0.2.80"]
    assert ecs_scope(result) == ("198.51.100.0/24", 0)


def test_no_client_subnet_in_reply_without_one_in_query(node: Node) -> None:
    """A wide IP reply carries no client subnet option when the query had none."""
    result = node.dig("gslb.example.test", "A")
    assert result.edns is not None
    assert "CLIENT-SUBNET" not in result.edns


# --- topology by the asking address ---------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "address"), [("127.0.1.1", "10.0.1.1"), ("127.0.2.1", "10.0.2.1"), ("127.0.0.1", "10.0.3.1")]
)
@pytest.mark.parametrize("transport", ["+notcp", "+tcp"])
def test_wide_ip_answer_depends_on_the_asking_address(node: Node, source: str, address: str, transport: str) -> None:
    """Resolvers in region r1, r2 and elsewhere get DC1's, DC2's and DC3's address (UDP and TCP)."""
    result = node.dig("gslb.example.test", "A", transport, source=source)
    assert result.status == "NOERROR"
    assert "aa" in result.flags
    assert [fields(r) for r in result.answer] == [("gslb.example.test.", 30, "A", address)]


@pytest.mark.parametrize(("source", "address"), [("127.0.1.1", "2001:db8:1::1"), ("127.0.2.1", "2001:db8:2::1")])
def test_aaaa_wide_ip_answers_from_ipv6_members(node: Node, source: str, address: str) -> None:
    """AAAA for the wide IP is answered from the IPv6 pool, by topology, with that pool's TTL."""
    result = node.dig("gslb.example.test", "AAAA", source=source)
    assert "aa" in result.flags
    assert [fields(r) for r in result.answer] == [("gslb.example.test.", 60, "AAAA", address)]


# --- IPv6 listener -----------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["+notcp", "+tcp"])
def test_ipv6_listener_answers(node: Node, transport: str) -> None:
    """The node answers on its [::1] address over UDP and TCP, like on IPv4."""
    result = node.dig6("www.example.test", "A", transport)
    assert result.protocol == ("TCP" if transport == "+tcp" else "UDP")
    assert "aa" in result.flags
    assert result.answer_data() == ["192.0.2.80"]


def test_ipv6_client_subnet_picks_the_data_center(node: Node) -> None:
    """Over IPv6 an IPv6 client subnet in region r1 gets DC1's IPv6 address, scope /48."""
    result = node.dig6("gslb.example.test", "AAAA", "+subnet=2001:db8:aaaa::/48")
    assert result.answer_data() == ["2001:db8:1::1"]
    assert ecs_scope(result) == ("2001:db8:aaaa::/48", 48)
