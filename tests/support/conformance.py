"""The zone and the probe list of the DNS conformance test (`tests/process/test_conformance.py`).

`ZONE` is served alike by our node, gdnsd and knotd. Each `Probe` is a packet as raw bytes
(built with dnspython where it is a normal query, by hand where it is malformed on purpose),
the fields of the reply compared with the reference servers, and what our reply must show
whatever they do. Every UDP probe but those about UDP sizes has a TCP twin.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

import dns.edns
import dns.message
import dns.rdataclass
import dns.rdatatype

from tests.support import dnsview

ORIGIN = "conform.test"
#: our node, gdnsd and knotd, each on its own address in this test's range
OURS, GDNSD, KNOTD = "127.0.81.2", "127.0.81.3", "127.0.81.4"
PORT = 5353
#: the zone's name servers as dnsviz is told them (both are our node)
NAME_SERVERS = f"ns1.{ORIGIN}={OURS}:{PORT},ns2.{ORIGIN}={OURS}:{PORT}"
SERVERS = ("gdnsd", "knotd")
#: our node's dns_server.version, its answer to CH TXT version.bind (unset, it refuses)
VERSION = "gtmcluster conformance"

#: a delegation (deep) has 14 name servers with glue: more than 512 bytes hold
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
    + "".join(
        f"deep     IN NS    ns{i}.deep\nns{i}.deep IN A 192.0.2.{i}\nns{i}.deep IN AAAA 2001:db8::{i}\n"
        for i in range(14)
    )
    + "dangling IN CNAME nothere\n"
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
    Probe(
        "query ID 0",
        HEADER.pack(0, 0, 1, 0, 0, 0) + question(f"www.{ORIGIN}"),
        expect={"rcode": "NOERROR", "id": "same"},
    ),
    Probe(
        "DO bit on NXDOMAIN",
        query(f"nope.{ORIGIN}", edns=0, ednsflags=0x8000),
        expect={"rcode": "NXDOMAIN", "do": True},
    ),
    Probe(
        "padding option", query(f"www.{ORIGIN}", edns=0, options=[option(12, bytes(32))]), expect={"rcode": "NOERROR"}
    ),
    Probe(
        "EDNS version 1 with an unknown option",
        query(f"www.{ORIGIN}", edns=1, options=[option(65001, b"x")]),
        expect={"rcode": "BADVERS"},
    ),
    Probe(
        "trailing bytes",
        raw(body=question(f"www.{ORIGIN}") + b"\0\1"),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "OPT not at the root",
        raw(ar=1, body=question(f"www.{ORIGIN}") + b"\x01x" + opt()),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "OPT in the authority section",
        raw(ns=1, body=question(f"www.{ORIGIN}") + opt()),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "EDNS option longer than the OPT",
        raw(ar=1, body=question(f"www.{ORIGIN}") + opt(struct.pack("!HH", 65001, 40) + b"ab")),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "client subnet with host bits",
        raw(ar=1, body=question(f"www.{ORIGIN}") + opt(struct.pack("!HHHBB", 8, 7, 1, 23, 0) + bytes([198, 51, 101]))),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "client subnet family 3",
        raw(ar=1, body=question(f"www.{ORIGIN}") + opt(struct.pack("!HHHBB", 8, 5, 3, 8, 0) + bytes([10]))),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "two client subnet options",
        query(f"www.{ORIGIN}", edns=0, options=[dns.edns.ECSOption("198.51.100.0", 24)] * 2),
        fields=ERROR_FIELDS,
        expect={"rcode": any_of("FORMERR", None)},
    ),
    Probe(
        "referral with glue over 512 B",
        query(f"www.deep.{ORIGIN}"),
        expect={"rcode": "NOERROR", "aa": False, "tc": True, "size": lambda size: size <= 512},
    ),
    Probe(
        "referral with glue, whole over TCP",
        query(f"www.deep.{ORIGIN}"),
        tcp=True,
        expect={"rcode": "NOERROR", "aa": False, "tc": False, "additional": lambda glue: len(glue) == 28},
    ),
    Probe(
        "CNAME to a missing name",
        query(f"dangling.{ORIGIN}"),
        expect={"rcode": "NXDOMAIN", "aa": True, "answer": has_answer, "authority": NEGATIVE_SOA},
    ),
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
    Probe(
        "payload below 512",
        query(f"medium.{ORIGIN}", "TXT", edns=0, payload=100),
        expect={"tc": True, "answer": frozenset(), "size": lambda size: size <= 512},
    ),
    Probe("800 B without EDNS", query(f"medium.{ORIGIN}", "TXT"), expect={"tc": True, "answer": frozenset()}),
    Probe(
        "800 B +bufsize=512",
        query(f"medium.{ORIGIN}", "TXT", edns=0, payload=512),
        expect={"tc": True, "answer": frozenset(), "size": lambda size: size <= 512},
    ),
    Probe(
        "800 B +bufsize=1232",
        query(f"medium.{ORIGIN}", "TXT", edns=0),
        expect={"tc": False, "answer": lambda answer: len(answer) == len(MEDIUM_TXT)},
    ),
    Probe(
        "1150 B +bufsize=4096",
        query(f"large.{ORIGIN}", "TXT", edns=0, payload=4096),
        expect={"tc": False, "answer": lambda answer: len(answer) == len(LARGE_TXT), "size": lambda size: size <= 1232},
    ),
    Probe(
        "2800 B +bufsize=4096",
        query(f"big.{ORIGIN}", "TXT", edns=0, payload=4096),
        expect={"tc": True, "answer": frozenset(), "size": lambda size: size <= 1232},
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
        expect={"rcode": "NOERROR", "aa": False, "answer": {f'version.bind. 0 ch txt "{VERSION}"'}},
    ),
    Probe("CH TXT hostname.bind", query("hostname.bind", "TXT", rdclass="CH"), expect={"rcode": "REFUSED"}),
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
_UDP_ONLY = (
    "QR=1",
    "referral with glue over 512 B",
    "payload below 512",
    "800 B",
    "1150 B",
    "2800 B +bufsize",
    "2800 B without",
    "IXFR over UDP",
)
#: every other UDP probe is sent over TCP too: the same answer, without size limits
PROBES += [
    Probe(f"{p.name} (TCP)", p.packet, tcp=True, fields=p.fields, expect=p.expect)
    for p in list(PROBES)
    if not p.tcp and not p.name.startswith(_UDP_ONLY)
]


def base_name(probe: str) -> str:
    """The probe a TCP twin was made from (the differences listed for it hold for both)."""
    return probe.removesuffix(" (TCP)")
