"""Signed denial at a bounded cost (docs/dnssec.md, "Denial of existence"): NXDOMAIN proved
by the zone's NSEC chain (`dnssec.chain`), each NSEC signed once, so a flood of random names
signs nothing; the RRSIG over a negative answer's SOA carrying the zone's SOA TTL as its
Original TTL (RFC 4034 3.1.4); and the cap on the fresh signatures that are left
(`dnssec.budget`), past which a UDP query is answered with TC and TCP still signs."""

from __future__ import annotations

import random
from pathlib import Path

import dns.dnssec
import dns.flags
import dns.message
import dns.name
import dns.node
import dns.rcode
import dns.rdataset
import dns.rdatatype
import dns.rrset
import pytest

from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dnsdata import keys, names
from gtmcluster.dnssec.budget import FreshSignatures, OverBudget
from gtmcluster.dnssec.chain import Chain
from gtmcluster.node import Node
from tests.support import configs

ORIGIN = dns.name.from_text("example.test")
ZONE_KEY = (b"example", b"test")


def make_node(tmp_path: Path) -> Node:
    config = configs.base()
    if not (tmp_path / "keys").exists():
        keys.keygen(tmp_path / "keys", "example.test")
    config["zones"][0]["dnssec"] = {"keys": "keys"}
    return Node(load(configs.write(tmp_path, config)), "n1", clock=lambda: 1000.0, rng=random.Random(7))


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return make_node(tmp_path)


def query(name: str, rdtype: str = "A") -> bytes:
    q = dns.message.make_query(name, rdtype, want_dnssec=True, use_edns=0)
    q.flags &= ~dns.flags.RD
    return q.to_wire()


def ask(node: Node, name: str, rdtype: str = "A", tcp: bool = False) -> dns.message.Message:
    reply = node.responder.handle(query(name, rdtype), "192.0.2.200", tcp)
    assert reply is not None
    return dns.message.from_wire(reply)


def keyring(node: Node) -> dict[dns.name.Name, dns.node.Node | dns.rdataset.Rdataset]:
    return {ORIGIN: node.responder.signing.signers[ZONE_KEY].dnskey}


def validate_all(msg: dns.message.Message, node: Node) -> None:
    """Every RRset of *msg* but the RRSIGs validates against its RRSIG."""
    for section in (msg.answer, msg.authority):
        for rrset in section:
            if rrset.rdtype == dns.rdatatype.RRSIG:
                continue
            sig = next(
                r
                for r in section
                if r.rdtype == dns.rdatatype.RRSIG and r.covers == rrset.rdtype and r.name == rrset.name
            )
            dns.dnssec.validate(rrset, sig, keyring(node))


def covers(nsec: dns.rrset.RRset, name: dns.name.Name) -> bool:
    nxt: dns.name.Name = nsec[0].next
    owner: dns.name.Name = nsec.name
    if nxt == ORIGIN:  # the last NSEC of the chain
        return bool(owner < name)
    return bool(owner < name) and bool(name < nxt)


def bitmap(nsec: dns.rrset.RRset) -> set[str]:
    """The NSEC's types as text (its presentation form after the next name)."""
    return set(nsec[0].to_text().split()[1:])


def test_the_chain_holds_the_zone_names_in_canonical_order_and_not_below_a_cut(node: Node) -> None:
    zone = node.config.zones.by_origin[ZONE_KEY]
    chain = Chain(zone, node.responder.signing.wideip_types)
    owners = [dns.name.Name((*k, b"")) for k in chain.owners]
    assert owners == sorted(owners)  # dnspython compares names in canonical order
    texts = [n.to_text() for n in owners]
    assert texts[0] == "example.test." and "sub.example.test." in texts
    assert "ns.sub.example.test." not in texts  # glue: the child's
    assert "c.example.test." not in texts and "b.c.example.test." not in texts  # empty non-terminals
    # each NSEC's next name (its RDATA's start) is the following owner, the last one's the apex
    nexts = [n.to_wire() or b"" for n in [*owners[1:], ORIGIN]]
    rdatas = [chain.nsec(i).rdatas[0][0] for i in range(len(chain))]
    assert [r[: len(w)] for r, w in zip(rdatas, nexts, strict=True) if isinstance(r, bytes)] == nexts


@pytest.mark.parametrize(
    ("name", "encloser"),
    [
        ("nope.example.test", "example.test"),
        ("ZZZ.example.test", "example.test"),  # after the last name: the chain's last NSEC
        ("x.c.example.test", "c.example.test"),  # below an empty non-terminal
        ("deep.x.gslb.example.test", "gslb.example.test"),  # below a wide IP
        ("a.www.example.test", "www.example.test"),
        ("0.example.test", "example.test"),
    ],
)
def test_nxdomain_is_proved_by_chain_nsecs_that_validate(node: Node, name: str, encloser: str) -> None:
    msg = ask(node, name)
    assert msg.rcode() == dns.rcode.NXDOMAIN and not msg.answer and msg.flags & dns.flags.AA
    validate_all(msg, node)
    nsecs = [r for r in msg.authority if r.rdtype == dns.rdatatype.NSEC]
    qname = dns.name.from_text(name)
    wildcard = dns.name.from_text("*." + encloser)
    assert any(covers(n, qname) for n in nsecs), nsecs
    assert any(covers(n, wildcard) for n in nsecs), nsecs
    assert 1 <= len(nsecs) <= 2
    assert all(n.ttl == 300 for n in nsecs)  # the negative TTL (RFC 9077)


def test_the_chain_lists_the_types_that_may_be_at_a_name(node: Node) -> None:
    # the NSEC covering gslb0 is gslb's: the wide IP's types, though AAAA has no answer now
    msg = ask(node, "gslb0.example.test")
    nsec = next(r for r in msg.authority if r.rdtype == dns.rdatatype.NSEC and r.name.to_text() == "gslb.example.test.")
    assert bitmap(nsec) == {"A", "AAAA", "RRSIG", "NSEC"}
    apex = next(r for r in ask(node, "!.example.test").authority if r.rdtype == dns.rdatatype.NSEC)
    assert apex.name == ORIGIN and {"SOA", "NS", "MX", "DNSKEY"} <= bitmap(apex)
    # a delegation's NSEC: NS, no DS, and no SOA (so no validator takes it for names below)
    after_sub = next(r for r in ask(node, "sub0.example.test").authority if r.rdtype == dns.rdatatype.NSEC)
    assert after_sub.name.to_text() == "sub.example.test." and bitmap(after_sub) == {"NS", "RRSIG", "NSEC"}


def test_a_flood_of_random_names_signs_nothing_and_keeps_nothing_per_name(node: Node) -> None:
    signer = node.responder.signing.signers[ZONE_KEY]
    ask(node, "warm.example.test")
    made, kept = signer.signed, len(signer)
    chain = node.responder.signing.chains[ZONE_KEY]
    rng = random.Random(3)

    def flood() -> dns.message.Message:
        for _ in range(500):
            label = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789-") for _ in range(rng.randint(1, 20)))
            msg = ask(node, f"{label}.example.test")
            assert msg.rcode() == dns.rcode.NXDOMAIN
        return msg

    flood()
    assert signer.signed - made <= len(chain)  # at most each NSEC of the chain, once
    assert len(signer) - kept <= len(chain)
    made, kept = signer.signed, len(signer)
    validate_all(flood(), node)
    assert (signer.signed, len(signer)) == (made, kept)


def test_the_soa_rrsig_of_a_negative_answer_carries_the_zone_ttl(node: Node) -> None:
    """RFC 4034 3.1.4: the Original TTL is the SOA RRset's TTL in the zone (3600); the SOA
    and its RRSIG are written with the negative TTL (min(SOA TTL, MINIMUM) = 300)."""
    for name, rdtype in [("nope.example.test", "A"), ("www.example.test", "AAAA"), ("c.example.test", "A")]:
        msg = ask(node, name, rdtype)
        soa = next(r for r in msg.authority if r.rdtype == dns.rdatatype.SOA)
        sig = next(r for r in msg.authority if r.rdtype == dns.rdatatype.RRSIG and r.covers == dns.rdatatype.SOA)
        assert soa.ttl == 300 and sig.ttl == 300
        assert [rd.original_ttl for rd in sig] == [3600]
        dns.dnssec.validate(soa, sig, keyring(node))  # (over the SOA with its Original TTL)
    apex = ask(node, "example.test", "SOA")  # the SOA as an answer: 3600, the same signature
    answer_sig = next(r for r in apex.answer if r.rdtype == dns.rdatatype.RRSIG)
    assert apex.answer[0].ttl == 3600 and answer_sig[0] == sig[0]


def test_an_existing_name_is_not_denied_by_the_chain(node: Node) -> None:
    zone = node.config.zones.by_origin[ZONE_KEY]
    chain = Chain(zone, {})
    for name in ["www.example.test", "c.example.test", "x.wild.example.test", "gslb.example.test"]:
        assert chain.nxdomain(names.key(tuple(dns.name.from_text(name).labels[:-1]))) is None


def test_past_the_cap_fresh_signatures_over_udp_get_tc_and_tcp_still_signs(node: Node) -> None:
    now = [0.0]
    node.responder.signing.fresh = FreshSignatures(lambda: now[0], rate=10, burst=5)
    # a wildcard answer is signed at the name asked: a fresh signature per name
    for i in range(5):
        msg = ask(node, f"w{i}.wild.example.test")
        assert msg.answer and not msg.flags & dns.flags.TC
    over = ask(node, "w5.wild.example.test")
    assert over.flags & dns.flags.TC and over.rcode() == dns.rcode.NOERROR
    assert not over.answer and not over.authority and over.edns == 0 and over.ednsflags & dns.flags.DO
    again = ask(node, "w5.wild.example.test", tcp=True)  # the resolver asks again over TCP
    assert not again.flags & dns.flags.TC
    validate_all(again, node)
    assert ask(node, "w0.wild.example.test").answer  # a kept signature costs nothing
    nx = ask(node, "nope.example.test")  # the chain's signatures are not capped
    assert nx.rcode() == dns.rcode.NXDOMAIN and not nx.flags & dns.flags.TC
    now[0] = 0.5  # five more a half second later
    assert all(ask(node, f"v{i}.wild.example.test").answer for i in range(5))
    assert ask(node, "v5.wild.example.test").flags & dns.flags.TC
    assert node.responder.signing.fresh.refused == 2


def test_the_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    now = [0.0]
    bucket = FreshSignatures(lambda: now[0], rate=2, burst=3)
    for _ in range(3):
        bucket.spend()
    with pytest.raises(OverBudget):
        bucket.spend()
    now[0] = 100.0
    for _ in range(3):
        bucket.spend()
    with pytest.raises(OverBudget):
        bucket.spend()
    now[0] = 100.5
    bucket.spend()
    assert bucket.refused == 2


def test_a_reload_keeps_the_chain_signatures(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    signer = node.responder.signing.signers[ZONE_KEY]
    ask(node, "nope.example.test")
    made = signer.signed
    config = configs.base()
    config["zones"][0]["dnssec"] = {"keys": "keys"}
    fresh = node.responder.signing.fresh
    node.reload(load(configs.write(tmp_path, config)))
    assert node.responder.signing.fresh is fresh  # the cap goes on across a reload
    validate_all(ask(node, "NOPE.example.test"), node)  # (a new chain: the same NSECs)
    assert signer.signed == made


def test_the_fast_path_gives_the_general_paths_nxdomain(node: Node) -> None:
    fast = FastPath(node.responder)
    data = query("nope.example.test")
    assert fast.handle(data, "192.0.2.200") == node.responder.handle(data, "192.0.2.200")


def test_names_another_served_zone_owns_are_left_out(node: Node) -> None:
    zone = node.config.zones.by_origin[ZONE_KEY]
    child = (b"www", b"example", b"test")  # (as if www.example.test were a zone we serve too)
    chain = Chain(zone, {}, owns=lambda key: key[-3:] != child)
    assert child not in chain.owners and len(chain) == len(Chain(zone, {})) - 1
