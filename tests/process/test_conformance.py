"""DNS conformance: our node against two reference authoritative servers, gdnsd and knotd.

The three serve one static zone (`ZONE`) on their own loopback addresses, and each gets
the same probes as raw bytes: every record type with and without EDNS, negative answers,
header flags, opcodes, EDNS versions, flags and options, truncation and TCP, malformed
packets, responses, ANY, zone transfers, UPDATE, NOTIFY and CH TXT version.bind. Their
replies are reduced to comparable fields (`tests/support/dnsview.py`) and compared field
by field: a difference to either reference fails, unless `DIFFERENCES` lists it with the
reason (and an entry that no longer differs fails too, so the table stays true). Each probe
also states what our reply must show whatever the references do (`Probe.expect`).

Our node is a real ``twistd gtm`` process; its UDP replies are asked twice, so the second
comes from the fast path's template and must be the same bytes as the first. `dnsviz`
then probes and checks the zone as served by our node.
"""

from __future__ import annotations

import concurrent.futures
import json
import struct
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dns.edns
import dns.flags
import dns.message
import dns.opcode
import dns.rdataclass
import dns.rdatatype
import pytest

from tests.conftest import require_tool
from tests.support import configs, dnsclient, dnsview, refservers
from tests.support.dnsview import View
from tests.support.nodeproc import RunningNode, running_node

pytestmark = [pytest.mark.process]

ORIGIN = "conform.test"
#: our node, gdnsd and knotd, each on its own address in this test's range, on port 53
#: (dnsviz asks the zone's name servers there)
OURS, GDNSD, KNOTD = "127.0.81.2", "127.0.81.3", "127.0.81.4"
PORT = 53
#: the zone's name servers as dnsviz is told them (both are our node)
NAME_SERVERS = f"ns1.{ORIGIN}={OURS},ns2.{ORIGIN}={OURS}"
SERVERS = ("gdnsd", "knotd")

#: TXT RRsets of about 800, 1150 and 2800 bytes: over 512; under 1232; over any UDP size
MEDIUM_TXT = [f"{i:02d}-" + "m" * 67 for i in range(9)]
LARGE_TXT = [f"{i:02d}-" + "l" * 67 for i in range(14)]
BIG_TXT = [f"{i:02d}-" + "b" * 77 for i in range(30)]

ZONE = (
    f"""\
$ORIGIN {ORIGIN}.
$TTL 3600
@        IN SOA ns1.{ORIGIN}. hostmaster.{ORIGIN}. 2026113001 3600 600 86400 300
@        IN NS    ns1
@        IN NS    ns2
@        IN MX    10 mail
@        IN TXT   "conformance zone"
ns1      IN A     {OURS}
ns2      IN A     {OURS}
mail     IN A     192.0.2.25
www      IN A     192.0.2.80
www      IN AAAA  2001:db8::80
www      IN TXT   "static text"
www      IN TYPE1000 \\# 4 01020304
alias    IN CNAME www
a.b      IN A     192.0.2.3
*.wild   IN A     192.0.2.99
sub      IN NS    ns.sub
ns.sub   IN A     192.0.2.53
"""
    + "".join(f'medium   IN TXT "{t}"\n' for t in MEDIUM_TXT)
    + "".join(f'large    IN TXT "{t}"\n' for t in LARGE_TXT)
    + "".join(f'big      IN TXT "{t}"\n' for t in BIG_TXT)
)

QID = 0x4242
HEADER = struct.Struct("!HHHHHH")


# --- the probes ----------------------------------------------------------------------------


def query(
    name: str,
    rdtype: str | int = "A",
    *,
    rdclass: str = "IN",
    edns: int | None = None,
    payload: int = 1232,
    options: list[dns.edns.Option] | None = None,
    ednsflags: int = 0,
    flags: int = 0,
    opcode: int = 0,
) -> bytes:
    """A query as wire bytes: no RD unless *flags* set it, EDNS when *edns* is a version."""
    msg = dns.message.make_query(
        name,
        dns.rdatatype.RdataType.make(rdtype),
        dns.rdataclass.RdataClass.make(rdclass),
        use_edns=-1 if edns is None else edns,
        payload=payload,
        options=options,
        ednsflags=ednsflags,
    )
    msg.id = QID
    msg.flags = flags | (opcode << 11)
    return msg.to_wire()


def raw(flags: int = 0, qd: int = 1, an: int = 0, ns: int = 0, ar: int = 0, body: bytes = b"") -> bytes:
    return HEADER.pack(QID, flags, qd, an, ns, ar) + body


def qname(name: str) -> bytes:
    return b"".join(bytes([len(label)]) + label.encode() for label in name.split(".") if label) + b"\0"


def question(name: str, rdtype: int = 1) -> bytes:
    return qname(name) + struct.pack("!HH", rdtype, 1)


def opt(options: bytes = b"", payload: int = 1232, ttl: int = 0) -> bytes:
    return b"\0" + struct.pack("!HHIH", 41, payload, ttl, len(options)) + options


def option(code: int, data: bytes = b"") -> dns.edns.Option:
    return dns.edns.GenericOption(dns.edns.OptionType.make(code), data)


#: fields that say whether and how a malformed packet was refused (its sections may differ)
ERROR_FIELDS = ("reply", "id", "opcode", "rcode", "qr")


class AnyOf(tuple[object, ...]):
    """An expectation met by any of these values."""


def any_of(*values: object) -> AnyOf:
    return AnyOf(values)


@dataclass(frozen=True)
class Probe:
    name: str
    packet: bytes
    tcp: bool = False
    #: fields compared with the references
    fields: tuple[str, ...] = dnsview.COMPARED
    #: what our reply must show: a value, `any_of(...)` values, or a predicate
    expect: Mapping[str, object] = field(default_factory=dict)


def www(rdtype: str) -> str:
    return f"www.{ORIGIN}" if rdtype not in ("SOA", "NS", "MX") else ORIGIN


AUTHORITATIVE = {"rcode": "NOERROR", "aa": True, "qr": True, "ra": False, "tc": False}
NEGATIVE_SOA = {f"{ORIGIN}. 300 in soa ns1.{ORIGIN}. hostmaster.{ORIGIN}. 2026113001 3600 600 86400 300"}


def has_answer(answer: frozenset[str]) -> bool:
    return bool(answer)


PROBES: list[Probe] = []
for _t in ("SOA", "NS", "A", "AAAA", "MX", "TXT", "TYPE1000"):
    PROBES.append(Probe(_t, query(www(_t), _t), expect=AUTHORITATIVE | {"answer": has_answer, "edns": None}))
    PROBES.append(
        Probe(f"{_t} +edns", query(www(_t), _t, edns=0), expect=AUTHORITATIVE | {"answer": has_answer, "edns": 0})
    )
PROBES += [
    Probe(
        "NXDOMAIN",
        query(f"nope.{ORIGIN}"),
        expect={"rcode": "NXDOMAIN", "aa": True, "answer": frozenset(), "authority": NEGATIVE_SOA},
    ),
    Probe(
        "NXDOMAIN +edns",
        query(f"nope.{ORIGIN}", edns=0),
        expect={"rcode": "NXDOMAIN", "aa": True, "authority": NEGATIVE_SOA, "edns": 0},
    ),
    Probe(
        "NODATA",
        query(f"mail.{ORIGIN}", "AAAA"),
        expect=AUTHORITATIVE | {"answer": frozenset(), "authority": NEGATIVE_SOA},
    ),
    Probe(
        "NODATA TYPE1000", query(f"mail.{ORIGIN}", "TYPE1000"), expect={"rcode": "NOERROR", "authority": NEGATIVE_SOA}
    ),
    Probe("empty non-terminal", query(f"b.{ORIGIN}"), expect={"rcode": "NOERROR", "authority": NEGATIVE_SOA}),
    Probe("CNAME", query(f"alias.{ORIGIN}"), expect=AUTHORITATIVE | {"answer": has_answer}),
    Probe("referral", query(f"www.sub.{ORIGIN}"), expect={"rcode": "NOERROR", "aa": False}),
    Probe("wildcard", query(f"x.wild.{ORIGIN}"), expect=AUTHORITATIVE | {"answer": has_answer}),
    Probe("wildcard NODATA", query(f"x.wild.{ORIGIN}", "AAAA"), expect={"rcode": "NOERROR", "authority": NEGATIVE_SOA}),
    Probe("DS at a delegation", query(f"sub.{ORIGIN}", "DS"), expect={"rcode": "NOERROR", "aa": True}),
    Probe("DNSKEY (unsigned zone)", query(ORIGIN, "DNSKEY", edns=0, ednsflags=0x8000), expect={"rcode": "NOERROR"}),
    Probe("TC set in the query", query(f"www.{ORIGIN}", flags=0x0200), expect={"rcode": "NOERROR", "tc": False}),
    Probe("class ANY", query(f"www.{ORIGIN}", rdclass="ANY"), expect={}),
    Probe("QTYPE OPT", query(f"www.{ORIGIN}", "OPT"), expect={"rcode": any_of("FORMERR", "NOERROR")}),
    Probe("QTYPE MAILB", query(f"www.{ORIGIN}", "MAILB"), expect={}),
    Probe("QTYPE 0", query(f"www.{ORIGIN}", 0), expect={}),
    Probe("EDNS payload 0", query(f"www.{ORIGIN}", edns=0, payload=0), expect={"rcode": "NOERROR"}),
    Probe(
        "two OPT records",
        raw(ar=2, body=question(f"www.{ORIGIN}") + opt() + opt()),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe("IXFR over UDP", query(ORIGIN, "IXFR"), expect={"rcode": any_of("REFUSED", "NOTIMP")}),
    Probe("out of zone", query("www.other.test"), expect={"rcode": "REFUSED", "aa": False, "answer": frozenset()}),
    Probe("parent of the zone", query("test", "SOA"), expect={"rcode": "REFUSED", "aa": False}),
    Probe("RD copied", query(f"www.{ORIGIN}", flags=0x0100), expect={"rd": True, "ra": False}),
    Probe("CD copied", query(f"www.{ORIGIN}", flags=0x0010), expect={"cd": True}),
    Probe("Z bit not echoed", query(f"www.{ORIGIN}", flags=0x0040), expect={"z": False, "rcode": "NOERROR"}),
    Probe("AD in query", query(f"www.{ORIGIN}", flags=0x0020), expect={"ad": False}),
    Probe("case preserved", query("WwW.CoNfOrM.TeSt"), expect={"question": ("WwW.CoNfOrM.TeSt. IN A",)}),
    Probe("opcode 15", query(f"www.{ORIGIN}", opcode=15), expect={"rcode": "NOTIMP", "qr": True, "opcode": 15}),
    Probe(
        "opcode 15 +edns",
        query(f"www.{ORIGIN}", opcode=15, edns=0),
        expect={"rcode": "NOTIMP", "qr": True, "edns": 0},
    ),
    Probe(
        "EDNS version 1",
        query(f"www.{ORIGIN}", edns=1),
        expect={"rcode": "BADVERS", "edns": 0, "answer": frozenset(), "aa": False},
    ),
    Probe(
        "unknown EDNS option",
        query(f"www.{ORIGIN}", edns=0, options=[option(65001, b"\xab\xcd")]),
        expect={"rcode": "NOERROR", "options": ()},
    ),
    Probe(
        "unknown EDNS flag",
        query(f"www.{ORIGIN}", edns=0, ednsflags=0x4000),
        expect={"rcode": "NOERROR", "edns_flags": 0},
    ),
    Probe("DO bit", query(f"www.{ORIGIN}", edns=0, ednsflags=0x8000), expect={"do": True, "rcode": "NOERROR"}),
    Probe("NSID", query(f"www.{ORIGIN}", edns=0, options=[option(3)]), expect={"rcode": "NOERROR", "options": ()}),
    Probe(
        "cookie",
        query(f"www.{ORIGIN}", edns=0, options=[option(10, bytes(range(8)))]),
        expect={"rcode": "NOERROR"},
    ),
    Probe("expire", query(f"www.{ORIGIN}", edns=0, options=[option(9)]), expect={"rcode": "NOERROR", "options": ()}),
    Probe(
        "client subnet",
        query(f"www.{ORIGIN}", edns=0, options=[dns.edns.ECSOption("198.51.100.0", 24)]),
        expect={"rcode": "NOERROR", "options": (8,)},
    ),
    Probe("payload below 512", query(f"medium.{ORIGIN}", "TXT", edns=0, payload=100), expect={"tc": True}),
    Probe("800 B without EDNS", query(f"medium.{ORIGIN}", "TXT"), expect={"tc": True, "answer": frozenset()}),
    Probe("800 B +bufsize=512", query(f"medium.{ORIGIN}", "TXT", edns=0, payload=512), expect={"tc": True}),
    Probe("800 B +bufsize=1232", query(f"medium.{ORIGIN}", "TXT", edns=0), expect={"tc": False}),
    Probe("1150 B +bufsize=4096", query(f"large.{ORIGIN}", "TXT", edns=0, payload=4096), expect={"tc": False}),
    Probe(
        "2800 B +bufsize=4096",
        query(f"big.{ORIGIN}", "TXT", edns=0, payload=4096),
        expect={"tc": True, "size": lambda size: size <= 1232},
    ),
    Probe("2800 B without EDNS", query(f"big.{ORIGIN}", "TXT"), expect={"tc": True, "size": lambda size: size <= 512}),
    Probe(
        "2800 B over TCP",
        query(f"big.{ORIGIN}", "TXT"),
        tcp=True,
        expect={"tc": False, "answer": lambda answer: len(answer) == len(BIG_TXT)},
    ),
    Probe("ANY", query(f"www.{ORIGIN}", "ANY"), expect={"rcode": "NOERROR", "answer": lambda answer: len(answer) == 1}),
    Probe("AXFR over TCP", query(ORIGIN, "AXFR"), tcp=True, expect={"rcode": any_of("REFUSED", "NOTIMP")}),
    Probe("IXFR", query(ORIGIN, "IXFR"), tcp=True, expect={"rcode": any_of("REFUSED", "NOTIMP")}),
    Probe("UPDATE", query(ORIGIN, "SOA", opcode=5), expect={"rcode": any_of("REFUSED", "NOTIMP"), "qr": True}),
    Probe("NOTIFY", query(ORIGIN, "SOA", opcode=4, flags=0x0400), expect={"rcode": any_of("REFUSED", "NOTIMP")}),
    Probe(
        "CH TXT version.bind",
        query("version.bind", "TXT", rdclass="CH"),
        expect={"rcode": "REFUSED", "answer": frozenset()},
    ),
    # malformed packets: FORMERR or no reply, never a crash
    Probe("QDCOUNT 0", raw(qd=0), fields=ERROR_FIELDS, expect={"rcode": any_of("FORMERR", None)}),
    Probe(
        "QDCOUNT 2",
        raw(qd=2, body=question(f"www.{ORIGIN}") + question(f"mail.{ORIGIN}")),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "truncated question",
        raw(body=question(f"www.{ORIGIN}")[:-3]),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "64-octet label",
        raw(body=b"\x40" + b"a" * 64 + qname(ORIGIN) + b"\0\1\0\1"),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "name over 255 octets",
        raw(body=(b"\x3f" + b"a" * 63) * 4 + qname(ORIGIN) + b"\0\1\0\1"),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "compression loop",
        raw(body=b"\xc0\x0c\0\1\0\1"),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "ANCOUNT 1",
        raw(an=1, body=question(f"www.{ORIGIN}") + b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes(4)),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe("QR=1", raw(flags=0x8000, body=question(f"www.{ORIGIN}")), fields=ERROR_FIELDS, expect={"reply": False}),
]
del _t

#: probes about UDP sizes, and responses, have no TCP twin
_UDP_ONLY = ("QR=1", "payload below 512", "800 B", "1150 B", "2800 B +bufsize", "2800 B without", "IXFR over UDP")
#: every other UDP probe is sent over TCP too: the same answer, without size limits
PROBES += [
    Probe(f"{p.name} (TCP)", p.packet, tcp=True, fields=p.fields, expect=p.expect)
    for p in list(PROBES)
    if not p.tcp and not p.name.startswith(_UDP_ONLY)
]


def base_name(probe: str) -> str:
    """The probe a TCP twin was made from (the differences listed for it hold for both)."""
    return probe.removesuffix(" (TCP)")


# --- what may differ, and why ------------------------------------------------------------------

#: (probe, server, field) -> why our reply differs there from that reference server; probe
#: "*" is every probe with an OPT in both replies
DIFFERENCES: dict[tuple[str, str, str], str] = {
    ("*", "gdnsd", "payload"): "gdnsd advertises 1024 in its OPT (it sends up to 1232); we say 1232, the size we send",
    ("*", "gdnsd", "keepalive"): "gdnsd announces its TCP idle timeout (edns-tcp-keepalive, RFC 7828) on TCP "
    "replies unasked; we send the option to no one (our timeout: dns_server.tcp_idle_timeout)",
    ("SOA", "gdnsd", "answer"): "gdnsd gives the SOA record the negative TTL (MINIMUM, 300) everywhere; "
    "we and knotd give it its own TTL (3600) and use min(TTL, MINIMUM) in negative answers (RFC 2308 5)",
    ("SOA +edns", "gdnsd", "answer"): "as for SOA",
    ("NS", "gdnsd", "additional"): "gdnsd leaves the name servers' addresses out; we and knotd add in-zone glue "
    "(RFC 1034 4.3.2 additional section processing)",
    ("NS +edns", "gdnsd", "additional"): "as for NS",
    ("MX", "knotd", "additional"): "knotd adds the mail exchanger's address; we add additional records only for NS "
    "(optional, RFC 1034 4.3.2; minimal responses)",
    ("MX +edns", "knotd", "additional"): "as for MX",
    ("CNAME", "gdnsd", "answer"): "gdnsd does not follow CNAMEs inside the zone (its experimental_no_chain default); "
    "we and knotd follow the chain (RFC 1034 4.3.2 step 3a)",
    ("DS at a delegation", "gdnsd", "aa"): "gdnsd answers DS at a zone cut with a referral; we and knotd answer from "
    "the parent side, authoritatively (RFC 4035 3.1.4.1)",
    ("DS at a delegation", "gdnsd", "authority"): "as for aa",
    ("DS at a delegation", "gdnsd", "additional"): "as for aa",
    ("CD copied", "gdnsd", "cd"): "the name server side MUST copy CD into the response (RFC 4035 3.2.2), as BIND "
    "does; gdnsd and knotd clear it",
    ("CD copied", "knotd", "cd"): "as for gdnsd",
    ("NSID", "knotd", "options"): "knotd sends its host name as NSID by default; we do not identify the node (NSID "
    "is optional, RFC 5001)",
    ("cookie", "gdnsd", "options"): "gdnsd implements server cookies; we ignore the option (RFC 7873 5.2.1 allows "
    "a server without cookie support to do so)",
    ("expire", "knotd", "options"): "knotd reports the zone's expire timer; we transfer no zones, and EXPIRE is "
    "only for zone transfer peers (RFC 7314)",
    ("client subnet", "knotd", "options"): "knotd ignores ECS; we echo it with scope 0 for static data, as gdnsd does "
    "(RFC 7871 7.2.1)",
    ("ANY", "gdnsd", "answer"): "both answer minimally (RFC 8482): gdnsd with a synthesized HINFO, we and knotd "
    "with one RRset that exists",
    ("QTYPE OPT", "gdnsd", "rcode"): "OPT is a pseudo-type that cannot be asked for (RFC 6891 6.1.1): we say "
    "FORMERR, as BIND does; gdnsd and knotd answer NODATA",
    ("QTYPE OPT", "gdnsd", "aa"): "as for rcode",
    ("QTYPE OPT", "gdnsd", "authority"): "as for rcode",
    ("QTYPE OPT", "knotd", "rcode"): "as for gdnsd",
    ("QTYPE OPT", "knotd", "aa"): "as for gdnsd",
    ("QTYPE OPT", "knotd", "authority"): "as for gdnsd",
    ("QTYPE MAILB", "knotd", "rcode"): "MAILB/MAILA are obsolete QTYPEs (RFC 2505): NOTIMP, as gdnsd and BIND say; "
    "knotd answers NODATA",
    ("QTYPE MAILB", "knotd", "aa"): "as for rcode",
    ("QTYPE MAILB", "knotd", "authority"): "as for rcode",
    ("QTYPE 0", "knotd", "rcode"): "type 0 is reserved, not a meta-type: NODATA, as gdnsd answers; knotd NOTIMP",
    ("QTYPE 0", "knotd", "aa"): "as for rcode",
    ("QTYPE 0", "knotd", "authority"): "as for rcode",
}
for _probe in ("AXFR over TCP", "IXFR", "IXFR over UDP"):
    DIFFERENCES[(_probe, "gdnsd", "rcode")] = "we serve no zone transfers and say REFUSED (RFC 5936); gdnsd NOTIMP"
    DIFFERENCES[(_probe, "knotd", "rcode")] = "we say REFUSED; knotd NOTAUTH (its transfer ACL)"
for _probe in ("UPDATE", "NOTIFY"):
    DIFFERENCES[(_probe, "knotd", "rcode")] = (
        "we implement no UPDATE or NOTIFY: NOTIMP, as gdnsd; knotd NOTAUTH (its ACL)"
    )
for _server, _string in (("gdnsd", "gdnsd/3"), ("knotd", "Knot DNS 3.2.6")):
    for _field in ("rcode", "answer"):
        DIFFERENCES[("CH TXT version.bind", _server, _field)] = (
            f"{_server} says {_string!r}; we refuse CH queries, so the node does not tell what it runs"
        )
for _probe in ("QDCOUNT 2", "truncated question", "64-octet label", "name over 255 octets", "compression loop"):
    DIFFERENCES[(_probe, "knotd", "reply")] = "knotd drops malformed queries silently; we say FORMERR, as gdnsd"
for _server in SERVERS:
    DIFFERENCES[("ANCOUNT 1", _server, "rcode")] = (
        f"{_server} ignores the answer section; a query with records in it is malformed: FORMERR"
    )


# --- running the servers -------------------------------------------------------------------


@dataclass
class Replies:
    """Every probe's reply from every server, as views (ours twice over UDP)."""

    views: dict[str, dict[str, View]]
    repeats: dict[str, tuple[bytes | None, bytes | None]]
    node: RunningNode


def ask(server: tuple[str, int], probe: Probe) -> bytes | None:
    if probe.tcp:
        return dnsview.tcp_exchange(probe.packet, server)
    return dnsview.udp_exchange(probe.packet, server)


def ask_all(server: tuple[str, int]) -> dict[str, bytes | None]:
    return {p.name: ask(server, p) for p in PROBES}


@pytest.fixture(scope="module")
def replies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replies]:
    require_tool("gdnsd", "gdnsd")
    require_tool("knotd", "knot")
    ours_dir = tmp_path_factory.mktemp("ours")
    gdnsd_dir = tmp_path_factory.mktemp("gdnsd")
    knotd_dir = tmp_path_factory.mktemp("knotd")
    raw_config = configs.base(OURS, PORT)
    del raw_config["wideips"]
    raw_config["zones"] = [{"origin": ORIGIN, "file": f"{ORIGIN}.zone"}]
    (ours_dir / f"{ORIGIN}.zone").write_text(ZONE)
    config = configs.write(ours_dir, raw_config)
    gdnsd_cmd = refservers.gdnsd_files(gdnsd_dir, ORIGIN, ZONE, GDNSD, PORT)
    knotd_cmd = refservers.knotd_files(knotd_dir, ORIGIN, ZONE, KNOTD, PORT)
    with (
        running_node(config, "n1", OURS, PORT, ours_dir) as node,
        refservers.running("gdnsd", gdnsd_cmd, GDNSD, PORT, ORIGIN, gdnsd_dir) as gdnsd,
        refservers.running("knotd", knotd_cmd, KNOTD, PORT, ORIGIN, knotd_dir) as knotd,
        concurrent.futures.ThreadPoolExecutor(3) as pool,
    ):
        # the three servers are asked at once (each probe in turn on each)
        jobs = {
            "ours": pool.submit(ask_all, node.server),
            "gdnsd": pool.submit(ask_all, gdnsd.server),
            "knotd": pool.submit(ask_all, knotd.server),
        }
        got = {name: job.result() for name, job in jobs.items()}
        again = {p.name: ask(node.server, p) for p in PROBES if not p.tcp}
        views = {p.name: {server: dnsview.view(p.packet, got[server][p.name]) for server in jobs} for p in PROBES}
        yield Replies(views, {name: (got["ours"][name], again[name]) for name in again}, node)
        for ref in (gdnsd, knotd):
            assert ref.proc.poll() is None, f"{ref.name} died during the probes:\n{ref.output_text()}"


PROBE_IDS = [p.name for p in PROBES]


@pytest.mark.parametrize("probe", PROBES, ids=PROBE_IDS)
def test_reply_matches_the_reference_servers(replies: Replies, probe: Probe) -> None:
    """Our reply equals gdnsd's and knotd's in every compared field, except the listed
    differences; and every listed difference is still there."""
    views = replies.views[probe.name]
    problems = []
    for server in SERVERS:
        found = dnsview.differences(views["ours"], views[server], probe.fields)
        listed = {f for (p, s, f) in DIFFERENCES if p == base_name(probe.name) and s == server}
        for p, s, f in DIFFERENCES:
            if p == "*" and s == server and f in found and views["ours"]["edns"] is not None:
                del found[f]
        for f, (ours, theirs) in found.items():
            if f not in listed:
                problems.append(f"{server} differs in {f}: ours {ours!r}, {server} {theirs!r}")
        for f in listed - found.keys():
            problems.append(f"listed difference ({probe.name!r}, {server!r}, {f!r}) is gone: remove it")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("probe", PROBES, ids=PROBE_IDS)
def test_our_reply_is_what_the_rfcs_ask(replies: Replies, probe: Probe) -> None:
    """Our reply shows what the probe expects (the RFCs' answer, whatever the references do)."""
    ours = replies.views[probe.name]["ours"]
    for key, wanted in probe.expect.items():
        value = ours[key]
        if isinstance(wanted, AnyOf):
            assert value in wanted, f"{key}: {value!r}, expected one of {wanted!r}"
        elif callable(wanted):
            assert wanted(value), f"{key}: {value!r} is not as expected"
        else:
            assert value == wanted, f"{key}: {value!r}, expected {wanted!r}"


@pytest.mark.parametrize("probe", [p for p in PROBES if not p.tcp], ids=[p.name for p in PROBES if not p.tcp])
def test_udp_reply_is_the_same_bytes_when_asked_again(replies: Replies, probe: Probe) -> None:
    """Asked twice, our node sends the same bytes: the second reply (from the fast path's
    template where the query qualifies) is the general path's first."""
    first, second = replies.repeats[probe.name]
    assert first == second


def test_every_listed_difference_for_all_probes_shows(replies: Replies) -> None:
    """Each difference listed for every probe ("*") is seen in at least one reply."""
    for p, server, f in DIFFERENCES:
        if p == "*":
            seen = [
                name
                for name, views in replies.views.items()
                if f in dnsview.differences(views["ours"], views[server], dnsview.COMPARED)
            ]
            assert seen, f"listed difference ({p!r}, {server!r}, {f!r}) is gone: remove it"


def test_no_traceback_in_our_log(replies: Replies) -> None:
    """No probe made our node log a traceback, and it still answers."""
    assert "Traceback" not in replies.node.log_text()
    reply = dnsclient.parse(dnsclient.udp(query(f"www.{ORIGIN}"), replies.node.server))
    assert dnsclient.addresses(reply) == ["192.0.2.80"]


# --- dnsviz over the zone as our node serves it ----------------------------------------------

#: dnsviz warnings that may show, with the reason (any other warning, and any error, fails)
DNSVIZ_WARNINGS: dict[str, str] = {}


def findings(report: object, kind: str) -> Iterator[dict[str, Any]]:
    """Every entry of every *kind* ("errors" or "warnings") list anywhere in dnsviz's report."""
    if isinstance(report, dict):
        for key, value in report.items():
            if key == kind and isinstance(value, list):
                yield from value
            else:
                yield from findings(value, kind)
    elif isinstance(report, list):
        for item in report:
            yield from findings(item, kind)


def test_dnsviz_finds_no_errors_in_the_served_zone(replies: Replies, tmp_path: Path) -> None:
    """dnsviz, probing our node as the zone's authoritative server (every check it makes of
    a server: EDNS versions, flags and options, TCP, truncation, negative answers), reports
    no error, and only the listed warnings."""
    require_tool("dnsviz", "dnsviz")
    probed = tmp_path / "probe.json"
    run = subprocess.run(
        ["dnsviz", "probe", "-A", "-x", f"{ORIGIN}+:{NAME_SERVERS}", "-o", str(probed), ORIGIN],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    grok = subprocess.run(
        ["dnsviz", "grok", "-r", str(probed)], capture_output=True, text=True, timeout=120, check=False
    )
    assert grok.returncode == 0, grok.stdout + grok.stderr
    report = json.loads(grok.stdout)
    errors = list(findings(report, "errors"))
    assert not errors, json.dumps(errors, indent=1)
    unexplained = [w for w in findings(report, "warnings") if w.get("code") not in DNSVIZ_WARNINGS]
    assert not unexplained, json.dumps(unexplained, indent=1)
