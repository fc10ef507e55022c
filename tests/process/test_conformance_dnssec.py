"""DNSSEC conformance: our node's online signing against knotd's own (``mod-onlinesign``).

Both serve the conformance zone (`tests/support/conformance.py`) signed as they answer: our
node with `zones[].dnssec` (an ECDSA P-256 CSK), knotd with a policy of one ECDSA P-256 key.
Each gets the same DO=1 queries — a signed positive answer, a CNAME, a wildcard, the apex
SOA and DNSKEY, NXDOMAIN, NODATA, an empty non-terminal, a referral to an unsigned child, DS
at the cut — over UDP and TCP, and their replies are reduced to their DNSSEC shape
(`tests/support/signedview.py`: rcode, flags, which RRsets each section holds and which are
signed, each NSEC and its type bitmap) and compared field by field. A difference fails
unless `DIFFERENCES` lists it with the reason (and a listed difference that is gone fails
too). Each probe also states what our reply must show (`EXPECT`), whatever knotd does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from gtmcluster.dnsdata import keys
from tests.conftest import require_tool
from tests.support import configs, dnsview, refservers, signedview
from tests.support.conformance import ORIGIN, PORT, ZONE, query
from tests.support.dnsview import View
from tests.support.nodeproc import running_node

pytestmark = [pytest.mark.process]

#: our node and knotd, signing online, on addresses of their own (not the unsigned test's)
OURS, KNOTD = "127.0.81.5", "127.0.81.6"
DO = 0x8000


@dataclass(frozen=True)
class Probe:
    name: str
    qname: str
    rdtype: str
    #: what our reply's shape must show: {field: value}
    expect: dict[str, object]


def signed(*rrsets: str) -> frozenset[str]:
    """Each "owner TYPE" and the RRSIG over it."""
    out = set()
    for rrset in rrsets:
        owner, rdtype = rrset.split()
        out |= {f"{owner}.{ORIGIN}. {rdtype}", f"{owner}.{ORIGIN}. RRSIG {rdtype}"}
    return frozenset(s.replace("@.", "") for s in out)


def nsec(owner: str, types: str) -> frozenset[str]:
    return frozenset({f"{owner}.{ORIGIN}. {types}".replace("@.", "")})


NEGATIVE = signed("@ SOA")
#: RFC 4034 3.1.4: the SOA's RRSIG has the zone's SOA TTL as its Original TTL; the SOA has the negative TTL
SOA_ORIGINAL_TTL = frozenset({f"{ORIGIN}. RRSIG SOA original 3600, SOA ttl 300"})
PROBES = [
    Probe("positive answer", f"www.{ORIGIN}", "A", {"rcode": "NOERROR", "aa": True, "answer": signed("www A")}),
    Probe("CNAME", f"alias.{ORIGIN}", "A", {"answer": signed("alias CNAME", "www A")}),
    Probe("wildcard", f"x.wild.{ORIGIN}", "A", {"answer": signed("x.wild A")}),
    Probe("SOA", ORIGIN, "SOA", {"answer": signed("@ SOA")}),
    Probe("DNSKEY", ORIGIN, "DNSKEY", {"rcode": "NOERROR", "aa": True, "answer": signed("@ DNSKEY")}),
    Probe(
        "NXDOMAIN",
        f"nope.{ORIGIN}",
        "A",
        {
            "rcode": "NXDOMAIN",
            # the zone's NSEC chain: the NSEC covering nope, and the apex's covering *.conform.test
            "authority": NEGATIVE | signed("medium NSEC", "@ NSEC"),
            "nsec_next": frozenset({f"ns1.{ORIGIN}.", f"alias.{ORIGIN}."}),
            "original_ttl": SOA_ORIGINAL_TTL,
        },
    ),
    Probe(
        "NODATA",
        f"mail.{ORIGIN}",
        "AAAA",
        {
            "rcode": "NOERROR",
            "authority": NEGATIVE | signed("mail NSEC"),
            "nsec": nsec("mail", "A RRSIG NSEC"),
            "original_ttl": SOA_ORIGINAL_TTL,
        },
    ),
    Probe("NODATA at the apex", ORIGIN, "AAAA", {"nsec": nsec("@", "NS SOA MX TXT RRSIG NSEC DNSKEY")}),
    Probe("empty non-terminal", f"b.{ORIGIN}", "A", {"rcode": "NOERROR", "nsec": nsec("b", "RRSIG NSEC")}),
    Probe("wildcard NODATA", f"x.wild.{ORIGIN}", "AAAA", {"nsec": nsec("x.wild", "A RRSIG NSEC")}),
    Probe(
        "referral to an unsigned child",
        f"www.sub.{ORIGIN}",
        "A",
        {"aa": False, "nsec": nsec("sub", "NS RRSIG NSEC"), "additional": frozenset({f"ns.sub.{ORIGIN}. A"})},
    ),
    Probe("DS at a delegation", f"sub.{ORIGIN}", "DS", {"rcode": "NOERROR", "nsec": nsec("sub", "NS RRSIG NSEC")}),
]

#: (probe, field) -> why our shape differs there from knotd's. For NODATA both deny by one
#: NSEC at the name asked whose next name is ``\000.NAME`` (signed with the SOA, rcode
#: NOERROR) and differ in the NSEC's type bitmap only; NXDOMAIN differs (below)
_CHAIN = (
    "knotd's mod-onlinesign gives 'black lies': a name that does not exist is denied as a name that exists "
    "without the type asked, by an NSEC at the name (NOERROR; a fresh signature for every name asked); we "
    "deny it from the zone's NSEC chain, signed once (docs/dnssec.md): NXDOMAIN with the NSEC covering the "
    "name and the one covering the wildcard at its closest encloser, so a flood of random names signs nothing"
)
DIFFERENCES: dict[tuple[str, str], str] = {
    ("NXDOMAIN", "rcode"): _CHAIN,
    ("NXDOMAIN", "authority"): _CHAIN,
    ("NXDOMAIN", "nsec"): _CHAIN,
    ("NXDOMAIN", "nsec_next"): _CHAIN,
    ("NODATA at the apex", "nsec"): "knotd adds its nsec-bitmap types (A, AAAA) that are not there, less the type "
    "asked, to the types the name has; we list the types the name has",
    ("empty non-terminal", "nsec"): "knotd lists AAAA (its nsec-bitmap default less the type asked) at a name "
    "that has no record; we list no type (RRSIG and NSEC only), which is the truth of an empty non-terminal",
    ("DS at a delegation", "nsec"): "both prove there is no DS at the cut (NS set, DS not: the child is "
    "unsigned, RFC 4035 5.2); knotd's bitmap also claims A and AAAA at the cut, which the parent does not have",
}

for _probe in (
    "NXDOMAIN",
    "NODATA",
    "NODATA at the apex",
    "empty non-terminal",
    "wildcard NODATA",
    "DS at a delegation",
):
    DIFFERENCES[(_probe, "rrsig_ttl")] = (
        "in a negative answer the SOA has the negative TTL (min(TTL, MINIMUM) = 300, RFC 2308 3); knotd gives "
        "its RRSIG the SOA record's own TTL (3600), where RFC 4034 3 has an RRSIG's TTL equal its RRset's: "
        "a resolver caches the signature longer than the record; ours is 300 too (both have the Original TTL "
        "3600, the SOA's TTL in the zone, RFC 4034 3.1.4)"
    )
del _probe


@dataclass
class Shapes:
    ours: dict[str, View]
    knotd: dict[str, View]


def ask(server: tuple[str, int], probe: Probe, tcp: bool) -> View:
    packet = query(probe.qname, probe.rdtype, edns=0, ednsflags=DO)
    exchange = dnsview.tcp_exchange if tcp else dnsview.udp_exchange
    return signedview.shape(exchange(packet, server))


CASES = [(p, tcp) for p in PROBES for tcp in (False, True)]
CASE_IDS = [f"{p.name}{' (TCP)' if tcp else ''}" for p, tcp in CASES]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shapes]:
    require_tool("knotd", "knot")
    ours_dir = tmp_path_factory.mktemp("ours-signed")
    knotd_dir = tmp_path_factory.mktemp("knotd-signed")
    keys.keygen(ours_dir / "keys", ORIGIN)
    raw_config = configs.base(OURS, PORT)
    del raw_config["wideips"]
    raw_config["zones"] = [{"origin": ORIGIN, "file": f"{ORIGIN}.zone", "dnssec": {"keys": "keys"}}]
    (ours_dir / f"{ORIGIN}.zone").write_text(ZONE)
    config = configs.write(ours_dir, raw_config)
    knotd_cmd = refservers.knotd_files(knotd_dir, ORIGIN, ZONE, KNOTD, PORT, online_signing=True)
    with (
        running_node(config, "n1", OURS, PORT, ours_dir) as node,
        refservers.running("knotd", knotd_cmd, KNOTD, PORT, ORIGIN, knotd_dir) as knotd,
    ):
        names = [f"{p.name}{' (TCP)' if tcp else ''}" for p, tcp in CASES]
        yield Shapes(
            {name: ask(node.server, p, tcp) for name, (p, tcp) in zip(names, CASES, strict=True)},
            {name: ask(knotd.server, p, tcp) for name, (p, tcp) in zip(names, CASES, strict=True)},
        )
        assert knotd.proc.poll() is None, f"knotd died during the probes:\n{knotd.output_text()}"
        assert "Traceback" not in node.log_text()


@pytest.mark.parametrize(("probe", "tcp"), CASES, ids=CASE_IDS)
def test_the_signed_shape_matches_knotds_online_signing(shapes: Shapes, probe: Probe, tcp: bool) -> None:
    name = f"{probe.name}{' (TCP)' if tcp else ''}"
    found = dnsview.differences(shapes.ours[name], shapes.knotd[name], signedview.COMPARED)
    listed = {f for (p, f) in DIFFERENCES if p == probe.name}
    problems = [
        f"knotd differs in {f}: ours {sorted(o) if isinstance(o, frozenset) else o!r}, "
        f"knotd {sorted(t) if isinstance(t, frozenset) else t!r}"
        for f, (o, t) in found.items()
        if f not in listed
    ]
    problems += [f"listed difference ({probe.name!r}, {f!r}) is gone: remove it" for f in listed - found.keys()]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("probe", "tcp"), CASES, ids=CASE_IDS)
def test_our_signed_reply_is_what_the_rfcs_ask(shapes: Shapes, probe: Probe, tcp: bool) -> None:
    ours = shapes.ours[f"{probe.name}{' (TCP)' if tcp else ''}"]
    assert ours["do"] is True and ours["ad"] is False and ours["tc"] is False
    assert ours["rrsig_ttl"] == frozenset()  # each RRSIG has its RRset's TTL (RFC 4034 3)
    for key, wanted in probe.expect.items():
        assert ours[key] == wanted, f"{key}: {ours[key]!r}, expected {wanted!r}"
    # every RRset of the zone's own data in the answer is signed (glue and a child's NS are not)
    for rrset in ours["answer"]:
        if " RRSIG " not in rrset:
            owner, rdtype = rrset.split()
            assert f"{owner} RRSIG {rdtype}" in ours["answer"], rrset
