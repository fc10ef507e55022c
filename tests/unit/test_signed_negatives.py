"""Signed NXDOMAIN from a kept answer per span of the NSEC chain (`dns.signednegative`):
a DO=1 query for a random name under a signed zone answered by the fast path, byte for byte
the general path's, valid, and kept per span (never per name).

The twin here is the same node's general path (`Responder.handle`), asked after the fast
path: both read the signatures the zone's signer keeps, so their bytes can be compared (two
nodes would sign apart). The general path's calls through the fast path are counted: after
one name per span, the fast path answers every other name of that span itself.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.dnssec
import dns.flags
import dns.message
import dns.name
import dns.node
import dns.rcode
import dns.rdataset
import dns.rdatatype
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtmcluster.config.load import load
from gtmcluster.dns import kept as kept_module
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.responder import Answered
from gtmcluster.dnsdata import keys
from gtmcluster.node import Node
from tests.support import configs
from tests.support.twins import make_query, wire_name

ORIGIN = dns.name.from_text("example.test")
ZONE_KEY = (b"example", b"test")
SOURCE = "192.0.2.200"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class Signed:
    """A node serving the signed test zone, its fast path, and a count of the general path's
    answers through it; the signers' clock is *clock*."""

    def __init__(self, tmp_path: Path, algorithm: int = 13):
        raw = configs.base()
        raw["pools"]["one"] = {"members": ["vs1"], "ttl": 20}
        raw["wideips"]["*.apps.example.test"] = {"pools": ["one"]}
        if not (tmp_path / "keys").exists():
            keys.keygen(tmp_path / "keys", "example.test", algorithm=algorithm)
        raw["zones"][0]["dnssec"] = {"keys": "keys"}
        self.clock = Clock()
        self.node = Node(load(configs.write(tmp_path, raw)), "n1", clock=self.clock, rng=random.Random(7))
        self.node.ready = True
        signing = self.node.responder.signing
        signing.clock = self.clock
        for signer in signing.signers.values():
            signer.clock = self.clock
        self.signer = signing.signers[ZONE_KEY]
        self.fast = FastPath(self.node.responder)
        self.general = 0
        self.reference = answer = self.node.responder.answer

        def counted(data: bytes, source: str, tcp: bool = False) -> Answered:
            self.general += 1
            return answer(data, source, tcp)

        self.node.responder.answer = counted  # type: ignore[method-assign]

    def ask(self, data: bytes) -> bytes:
        """The fast path's reply to *data*, checked against the general path's."""
        got = self.fast.handle(data, SOURCE)
        expected = self.reference(data, SOURCE)[0]
        assert got == expected, f"fast {got!r}\ngeneral {expected!r}"
        assert got is not None
        return got

    def validate(self, reply: bytes) -> dns.message.Message:
        """*reply* parsed, every RRset but the RRSIGs validated against its RRSIG."""
        msg = dns.message.from_wire(reply)
        ring: dict[dns.name.Name, dns.node.Node | dns.rdataset.Rdataset] = {ORIGIN: self.signer.dnskey}
        for section in (msg.answer, msg.authority):
            for rrset in section:
                if rrset.rdtype == dns.rdatatype.RRSIG:
                    continue
                sig = next(
                    r
                    for r in section
                    if r.rdtype == dns.rdatatype.RRSIG and r.covers == rrset.rdtype and r.name == rrset.name
                )
                dns.dnssec.validate(rrset, sig, ring, now=self.clock.now)
        return msg


@pytest.fixture
def signed(tmp_path: Path) -> Signed:
    return Signed(tmp_path)


def labels(seed: str) -> Iterator[str]:
    rng = random.Random(seed)
    while True:
        size = rng.choice((1, 2, 5, 10, 17, 30, 63))
        yield "".join(rng.choice(string.ascii_lowercase + string.digits + "-") for _ in range(size))


SHAPES: list[dict[str, Any]] = [
    {"do": True},
    {"do": True, "payload": 4096},
    {"do": True, "payload": 600},
    {"do": True, "cookie": True},
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("parent", "qtype"),
    [
        ("example.test", 1),  # below the apex: names in every span of the chain
        ("example.test", 16),
        ("example.test", 255),  # ANY
        ("www.example.test", 28),  # below an existing name
        ("c.example.test", 1),  # below an empty non-terminal (b.c is one too)
        ("nothere.example.test", 1),  # below a name that does not exist either
        ("hostmaster.example.test", 1),  # below a name in the SOA's RDATA
    ],
)
def test_random_names_are_answered_per_span_as_the_general_path(
    signed: Signed, parent: str, qtype: int, shape: dict[str, Any]
) -> None:
    names = labels(f"{parent}/{qtype}")
    denied = 0
    for i in range(300):
        name = f"{next(names)}.{parent}"
        if i % 3 == 1:
            name = name.upper()
        reply = signed.ask(make_query(name, qtype, qid=i, rd=i % 2 == 0, cd=i % 5 == 0, **shape))
        msg = signed.validate(reply) if i % 10 == 0 else dns.message.from_wire(reply)
        assert not msg.flags & dns.flags.TC
        denied += msg.rcode() == dns.rcode.NXDOMAIN  # (else a name of the zone: "c", "a.b.c")
    assert denied >= 290
    # the general path answered once per span at most (and per length that did not fit)
    spans = {s for k, v in signed.node.kept.signed_negatives.items() for s in v.spans}
    assert len(spans) <= signed.general <= len(spans) + 7
    assert signed.node.kept.signed_count == len(spans) <= len(signed.node.responder.signing.chains[ZONE_KEY])
    assert len(signed.node.kept.signed_negatives) == 1
    assert signed.signer.signed <= len(signed.node.responder.signing.chains[ZONE_KEY]) + 1  # (the chain and the SOA)


def test_a_flood_costs_the_general_path_once_per_span_and_signs_nothing(signed: Signed) -> None:
    names = (label for label in labels("flood") if len(label) >= 5)  # (none of the zone's names)
    chain_size = 0
    for round_ in range(2):
        general, made = signed.general, signed.signer.signed
        for i in range(1000):
            signed.fast.handle(make_query(f"{next(names)}.example.test", 1, qid=i, do=True), SOURCE)
        chain_size = len(signed.node.responder.signing.chains[ZONE_KEY])
        if round_ == 0:  # a span first asked: the general path, which signs its NSEC once
            assert signed.general - general <= chain_size and signed.signer.signed - made <= chain_size + 1
        else:  # every span kept: nothing more
            assert (signed.general, signed.signer.signed) == (general, made)
    assert signed.node.kept.signed_count <= chain_size
    kept = signed.node.kept.signed_negatives.values()
    assert sum(len(n.tails) for s in kept for n in s.spans.values()) <= 5 * chain_size  # (5 lengths)


@pytest.mark.parametrize(
    ("name", "qtype"),
    [
        ("www.example.test", 28),  # NODATA: a compact NSEC at the name
        ("gslb.example.test", 28),  # NODATA at a wide IP
        ("c.example.test", 1),  # an empty non-terminal
        ("x.apps.example.test", 16),  # below a wildcard wide IP, a type it does not answer
        ("www.example.test", 1),
        ("x.wild.example.test", 1),  # a wildcard answer
        ("example.test", 6),
        ("hostmaster.example.test", 1),
        ("ns1.example.test", 16),
    ],
)
@pytest.mark.parametrize("shape", SHAPES)
def test_names_that_exist_are_never_answered_from_a_span(
    signed: Signed, name: str, qtype: int, shape: dict[str, Any]
) -> None:
    """After the spans around them are kept, NODATA, answers and the names a negative answer
    points into still get the general path's reply."""
    for label in ("a", "hos", "hostmasterz", "ns0", "ns2", "vv", "x", "wwx", "xyz"):
        for parent in ("example.test", "apps.example.test", "c.example.test"):
            signed.ask(make_query(f"{label}.{parent}", qtype, **shape))
    general = signed.general
    for i in range(3):
        reply = signed.ask(make_query(name if i else name.upper(), qtype, qid=i, **shape))
        signed.validate(reply)
    assert signed.general == general + 3


@pytest.mark.parametrize("margin", [0, 1, 10])
def test_a_reply_that_does_not_fit_gets_tc_as_the_general_path_gives_it(signed: Signed, margin: int) -> None:
    base = "zz" + "x" * 20  # (its reply is over 512 bytes: a payload below is taken as 512)
    size = len(signed.ask(make_query(f"{base}.example.test", 1, do=True)))
    payload = size + margin  # (a name longer than the base by more than the margin does not fit)
    signed.ask(make_query(f"{base}.example.test", 1, do=True, payload=payload))
    general = signed.general
    for extra in range(0, 30):
        name = base + "y" * extra + ".example.test"
        reply = signed.ask(make_query(name, 1, qid=extra, do=True, payload=payload))
        msg = dns.message.from_wire(reply)
        assert len(reply) <= payload
        assert bool(msg.flags & dns.flags.TC) is (extra > margin)
        if extra <= margin:
            signed.validate(reply)
    assert signed.general == general + 30 - (margin + 1)  # (the truncated ones: the general path's)
    # and 512: a short name fits, a long one is truncated, as the general path does
    truncated = []
    for i, name in enumerate(("zz0", "zz1", "zz" + "y" * 40, "ab", "ab" + "y" * 40)):
        reply = signed.ask(make_query(f"{name}.example.test", 1, qid=i, do=True, payload=512))
        assert len(reply) <= 512
        truncated.append(bool(dns.message.from_wire(reply).flags & dns.flags.TC))
    assert truncated == [False, False, True, True, True]


def test_one_kept_answer_serves_every_size_limit(signed: Signed) -> None:
    """The client's size is checked per query, not kept in the key (as `dns.negative`'s):
    the answer kept at one payload serves another that it fits, and one it does not fit
    goes to the general path (TC) and keeps nothing."""
    size = len(signed.ask(make_query("abc.example.test", 1, do=True, payload=4096)))
    general = signed.general
    for i, payload in enumerate((4096, 1232, size + 1, size)):
        signed.validate(signed.ask(make_query("abd.example.test", 1, qid=i, do=True, payload=payload)))
    assert signed.general == general and len(signed.node.kept.signed_negatives) == 1
    reply = signed.ask(make_query("abd.example.test", 1, do=True, payload=size - 1))
    assert dns.message.from_wire(reply).flags & dns.flags.TC and signed.general == general + 1
    assert signed.node.kept.signed_count == 1


def test_a_name_over_255_bytes_below_a_kept_parent_gets_formerr(signed: Signed) -> None:
    """A label that makes the name too long (FORMERR, the general path's) is never answered
    from the span its parent's shorter names are kept for."""
    parent = f"{'p' * 63}.{'q' * 63}.{'r' * 60}.example.test"  # (203 bytes in wire form)
    signed.ask(make_query(f"short.{parent}", 1, do=True))
    general = signed.general
    signed.validate(signed.ask(make_query(f"other.{parent}", 1, do=True)))
    assert signed.general == general  # kept for the parent
    reply = signed.ask(make_query(f"{'s' * 60}.{parent}", 1, do=True))
    assert reply[3] & 0xF == dns.rcode.FORMERR and signed.general == general + 1


def test_a_signature_due_for_renewal_ends_the_kept_answer(signed: Signed) -> None:
    data = make_query("first.example.test", 1, do=True)
    before = signed.validate(signed.ask(data))
    general = signed.general
    signed.ask(make_query("fish.example.test", 1, do=True))
    assert signed.general == general  # the same span: kept
    spans = next(iter(signed.node.kept.signed_negatives.values()))
    renew_at = min(n.renew_at for n in spans.spans.values())
    expirations = [rd.expiration for r in before.authority if r.rdtype == dns.rdatatype.RRSIG for rd in r]
    assert renew_at == min(expirations) - signed.signer.refresh
    signed.clock.now = renew_at  # (the signer makes them anew from now on)
    made = signed.signer.signed
    after = signed.validate(signed.ask(make_query("fist.example.test", 1, do=True)))
    assert signed.general == general + 1 and signed.signer.signed > made
    renewed = [rd.expiration for r in after.authority if r.rdtype == dns.rdatatype.RRSIG for rd in r]
    assert min(renewed) > min(expirations)
    general = signed.general
    signed.validate(signed.ask(make_query("fit.example.test", 1, do=True)))
    assert signed.general == general  # kept again, with the new signatures


def test_the_kept_answers_are_capped(signed: Signed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept_module, "MAX_SIGNED_NEGATIVES", 3)
    for label in ("a", "hz", "mz", "nz", "rz", "wz", "zz"):
        signed.ask(make_query(f"{label}.example.test", 1, do=True))
        assert signed.node.kept.signed_count <= 3


def test_ed25519_and_a_do0_query_of_a_signed_zone(tmp_path: Path) -> None:
    signed = Signed(tmp_path, algorithm=15)
    for i, name in enumerate(("a.example.test", "b.example.test", "zzz.example.test", "zzzz.example.test")):
        signed.validate(signed.ask(make_query(name, 1, qid=i, do=True)))
        plain = dns.message.from_wire(signed.ask(make_query(name, 1, qid=i, edns=True)))
        assert plain.rcode() == dns.rcode.NXDOMAIN and len(plain.authority) == 1  # (the SOA, unsigned)


@given(
    labels=st.lists(
        st.text(alphabet=string.ascii_letters + string.digits + "-_*", min_size=1, max_size=63), min_size=1, max_size=3
    ),
    parent=st.sampled_from(
        [
            "example.test",
            "www.example.test",
            "c.example.test",
            "b.c.example.test",
            "apps.example.test",
            "wild.example.test",
            "sub.example.test",
            "hostmaster.example.test",
            "gslb.example.test",
        ]
    ),
    qtype=st.sampled_from([1, 2, 6, 16, 28, 43, 46, 47, 255]),
    shape=st.sampled_from([*SHAPES, {"do": True, "payload": 512}, {"do": True, "payload": 1400}]),
)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_name_gets_the_general_paths_reply(
    signed: Signed, labels: list[str], parent: str, qtype: int, shape: dict[str, Any]
) -> None:
    """Whatever is kept by then (the node lives through the examples): names of the zone,
    wildcards, referrals, NSEC and RRSIG asked for, any depth, case and size."""
    name = ".".join([*labels, parent])
    if len(wire_name(name)) <= 255:
        signed.ask(make_query(name, qtype, **shape))
