"""Negative answers kept per closest encloser: names several labels below an existing name,
and queries with an EDNS client subnet, through the fast path, byte for byte the general
path's.

A flood of random names two or more labels deep has a new absent parent each query, and a
resolver that sends ECS sends it with every query: both must come from the one negative
answer kept for the closest encloser (`dns.negative`), which only names of the zone key.
Each test answers on twin nodes (the reference by the general path only), then turns the
fast node's general path off and asks new names: what the fast node answers, it answers from
what it kept.
"""

from __future__ import annotations

import random
import string
import struct
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.dns.negative import MAX_TAILS, suffixes_of_soas
from gtmcluster.dnsdata import keys
from tests.support.twins import Twins, make_query, wire_name


def wildcards(raw: dict[str, Any]) -> None:
    raw["pools"]["one"] = {"members": ["vs1"], "ttl": 20}
    raw["wideips"]["*.apps.example.test"] = {"pools": ["one"]}


@pytest.fixture
def pair(tmp_path: Path) -> Twins:
    return Twins(tmp_path, wildcards)


def label(rng: random.Random, size: int = 8) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits + "-") for _ in range(size))


def below(rng: random.Random, parent: str, depth: int) -> str:
    return ".".join([*(label(rng, rng.randint(1, 20)) for _ in range(depth)), parent])


#: client subnet options as resolvers send them (family, source prefix, address)
ECS = [
    (1, 24, bytes([203, 0, 113])),
    (1, 32, bytes([198, 51, 100, 7])),
    (1, 0, b""),
    (1, 20, bytes([10, 1, 0x30])),
    (2, 56, bytes.fromhex("20010db8aaaa01")),
    (2, 0, b""),
    (2, 128, bytes.fromhex("20010db8000000000000000000000001")),
]

#: the parents asked below, the type, and the closest encloser the answer is kept for
PARENTS = [
    ("example.test", 1, "example.test"),  # NXDOMAIN below the apex
    ("nothere.example.test", 28, "example.test"),  # below an absent name: the same encloser
    ("www.example.test", 16, "www.example.test"),
    ("c.example.test", 1, "c.example.test"),  # an empty non-terminal (a.b.c exists)
    ("b.c.example.test", 1, "b.c.example.test"),  # another
    ("ns1.example.test", 1, "ns1.example.test"),  # the SOA's MNAME, a name of the zone
    ("hostmaster.example.test", 1, "hostmaster.example.test"),  # the SOA's RNAME, absent
    ("apps.example.test", 16, "apps.example.test"),  # NODATA: below a wildcard wide IP
    ("wild.example.test", 16, "wild.example.test"),  # NODATA: below the zone's own wildcard
]


def options(*shapes: dict[str, Any]) -> list[dict[str, Any]]:
    """The EDNS keyword arguments of `make_query` to ask with, one dict a query."""
    return list(shapes)


EDNS: list[dict[str, Any]] = [{}, {"edns": True}, {"do": True}, {"edns": True, "payload": 512}]


@pytest.mark.parametrize("edns", EDNS)
@pytest.mark.parametrize(("parent", "qtype", "encloser"), PARENTS)
def test_names_at_any_depth_are_answered_from_the_encloser(
    pair: Twins, parent: str, qtype: int, encloser: str, edns: dict[str, Any]
) -> None:
    """The first name, three labels deep, keeps the answer for its closest encloser; names
    one to five labels deep below the same parent get it, each with its own question."""
    rng = random.Random(f"{parent}/{qtype}")
    pair.ask(make_query(below(rng, parent, 3), qtype, **edns))
    pair.general_path_off()
    for depth in (1, 2, 3, 4, 5):
        for _ in range(3):
            name = below(rng, parent, depth)
            pair.ask(make_query(name, qtype, qid=depth, rd=depth % 2 == 0, cd=depth % 3 == 0, **edns))
            pair.ask(make_query(name.upper(), qtype, qid=depth, **edns))
    kept = pair.node.kept
    assert [key[0] for key in kept.negatives] == [wire_name(encloser)]
    assert not kept.static_hits and not kept.templates
    assert pair.node.stats.queries == pair.reference.stats.queries


@pytest.mark.parametrize("first_with_ecs", [True, False])
@pytest.mark.parametrize("edns", [{}, {"do": True}, {"payload": 512}, {"payload": 4096}])
def test_a_client_subnet_is_echoed_on_the_kept_negative(
    pair: Twins, first_with_ecs: bool, edns: dict[str, Any]
) -> None:
    """Made from an answer with or without a client subnet, the kept negative answers every
    option shape (RFC 7871 7.2.1: family, source prefix and address as sent, scope 0), from
    a resolver whose subnet is used and from one whose is not, at every depth."""
    rng = random.Random(11)
    for parent, qtype, _ in PARENTS:
        first = {"ecs": ECS[0]} if first_with_ecs else {"edns": True}
        pair.ask(make_query(below(rng, parent, 2), qtype, **first, **edns))
    pair.general_path_off()
    for parent, qtype, _ in PARENTS:
        for ecs in ECS:
            for depth in (1, 2, 4):
                for source in ("127.0.0.1", "192.0.2.200"):
                    name = below(rng, parent, depth)
                    pair.ask(make_query(name, qtype, qid=depth, rd=True, ecs=ecs, **edns), source)
            pair.ask(make_query(below(rng, parent, 1), qtype, ecs=ecs, cookie=True, **edns))
    assert len(pair.node.kept.negatives) == len(PARENTS)
    assert pair.node.stats.queries == pair.reference.stats.queries


def with_scope(query: bytes, scope: int) -> bytes:
    """*query* (with a client subnet as the last option) with its scope prefix set."""
    ecs = query.rindex(b"\x00\x08")  # (the option's code)
    return query[: ecs + 7] + bytes([scope]) + query[ecs + 8 :]


def test_a_malformed_client_subnet_goes_to_the_general_path(pair: Twins) -> None:
    """FORMERR as the general path answers it, though the answer is kept for the encloser."""
    rng = random.Random(13)
    pair.ask(make_query(below(rng, "example.test", 1), ecs=ECS[0]))
    kept = dict(pair.node.kept.negatives)
    queries = [
        make_query(below(rng, "example.test", 2), ecs=(1, 23, bytes([203, 0, 113]))),  # a bit beyond /23
        make_query(below(rng, "example.test", 2), ecs=(1, 24, bytes([203, 0, 113, 0]))),  # too long
        make_query(below(rng, "example.test", 2), ecs=(1, 24, bytes([203, 0]))),  # too short
        make_query(below(rng, "example.test", 2), ecs=(1, 33, bytes(5))),  # past /32
        make_query(below(rng, "example.test", 2), ecs=(2, 129, bytes(17))),
        make_query(below(rng, "example.test", 2), ecs=(3, 0, b"")),  # no such family
        make_query(below(rng, "example.test", 2), ecs=(0x101, 0, b"")),
        with_scope(make_query(below(rng, "example.test", 2), ecs=ECS[0]), 24),  # a scope in a query
        make_query(below(rng, "example.test", 2), ecs=(1, 24, bytes([203, 0, 113])))[:-1],  # cut
    ]
    for query in queries:
        reply = pair.ask(query)
        assert reply is None or reply[3] & 0xF != 3
    assert pair.node.kept.negatives == kept


def test_names_below_a_wildcard_a_cut_or_an_existing_name_are_not_negative(pair: Twins) -> None:
    """With answers kept for every encloser on the way, a name a zone wildcard or a wildcard
    wide IP answers, a name below a delegation, and names that exist get their own answers."""
    rng = random.Random(17)
    for parent in ("example.test", "wild.example.test", "apps.example.test", "c.example.test", "b.c.example.test"):
        for qtype in (1, 16, 28):
            pair.ask(make_query(below(rng, parent, 2), qtype))
            pair.ask(make_query(below(rng, parent, 2), qtype, ecs=ECS[0]))
    assert len(pair.node.kept.negatives) >= 10
    for depth in (1, 2, 3, 5):
        for source in ("127.0.1.9", "127.0.2.9"):
            for edns in options({}, {"ecs": ECS[0]}, {"ecs": ECS[4]}):
                reply = pair.ask(make_query(below(rng, "wild.example.test", depth), **edns), source)
                assert reply is not None and reply[3] & 0xF == 0 and reply[7] == 1  # (the wildcard's A)
                reply = pair.ask(make_query(below(rng, "apps.example.test", depth), **edns), source)
                assert reply is not None and reply[3] & 0xF == 0 and reply[7] >= 1  # (the wide IP's)
                reply = pair.ask(make_query(below(rng, "sub.example.test", depth), **edns), source)
                assert reply is not None and reply[3] & 0xF == 0 and reply[9] == 1  # (a referral)
    for name in (
        "a.b.c.example.test",
        "b.c.example.test",
        "c.example.test",
        "ns.sub.example.test",
        "x.a.b.c.example.test",
    ):
        for qtype in (1, 16):
            for edns in options({}, {"ecs": ECS[0]}):
                pair.ask(make_query(name, qtype, **edns))
                pair.ask(make_query(name.upper(), qtype, **edns))


def name_of(size: int) -> str:
    """A name below example.test of *size* bytes in wire form, in labels of at most 9 letters."""
    labels, remaining = [], size - len(wire_name("example.test"))
    while remaining:
        chunk = 5 if remaining == 11 else min(10, remaining)
        labels.append("q" * (chunk - 1))
        remaining -= chunk
    return ".".join([*labels, "example.test"])


def test_names_at_the_size_limit(pair: Twins) -> None:
    """Names of many labels up to 255 bytes in wire form come from the kept answer, with a
    client subnet too and within 512 bytes; a longer one is FORMERR, the general path's."""
    for edns in options({}, {"edns": True, "payload": 512}, {"ecs": ECS[6], "payload": 512}):
        pair.ask(make_query("x.y.example.test", **edns))
    pair.general_path_off()
    for size in (250, 253, 254, 255):
        name = name_of(size)
        assert len(wire_name(name)) == size
        for edns in options({}, {"edns": True, "payload": 512}, {"ecs": ECS[6], "payload": 512}):
            pair.ask(make_query(name, **edns))
            pair.ask(make_query(name.upper(), **edns))
    del pair.fast.responder.answer  # (the general path back)
    too_long = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 50]) + ".example.test"
    assert len(wire_name(too_long)) == 257
    for edns in options({}, {"ecs": ECS[0]}):
        reply = pair.ask(make_query(too_long, **edns))
        assert reply is not None and reply[3] & 0xF == 1


def test_only_names_of_the_zone_key_what_is_kept(pair: Twins) -> None:
    """A flood of random names at every depth, of several types, with and without a client
    subnet, keeps one answer per (name of the zone, type, EDNS class): its keys are names
    the zone holds (or the SOA's names), never a name the client chose."""
    rng = random.Random(19)
    parents = [parent for parent, _, _ in PARENTS] + ["x.nothere.example.test", "deep.example.test"]
    for _ in range(400):
        edns = rng.choice(options({}, {"edns": True}, {"do": True}, {"ecs": rng.choice(ECS)}))
        pair.ask(make_query(below(rng, rng.choice(parents), rng.randint(1, 5)), rng.choice([1, 16, 28]), **edns))
    zone = next(iter(pair.node.responder.zones))
    held = {wire_name(".".join(label.decode() for label in name)) for name in zone.nodes}
    held |= {wire_name(".".join(label.decode() for label in name)) for name in zone.empty_non_terminals}
    enclosers = {key[0] for key in pair.node.kept.negatives}
    assert enclosers <= held | suffixes_of_soas([zone])
    assert len(pair.node.kept.negatives) <= len(enclosers) * 3 * 3


def signed(raw: dict[str, Any]) -> None:
    raw["zones"][0]["dnssec"] = {"keys": "keys"}


def test_a_signed_zones_do1_denial_is_never_kept(tmp_path: Path) -> None:
    """DO=1 below a signed zone: the denial carries NSEC records and signatures for the name
    asked, so every such query is the general path's; DO=0 there comes from the kept
    answer, as without DNSSEC."""
    keys.keygen(tmp_path / "keys", "example.test")
    pair = Twins(tmp_path, signed)
    general = pair.fast.responder.answer
    asked: list[bytes] = []

    def counted(data: bytes, source: str, tcp: bool = False) -> Any:
        asked.append(data)
        return general(data, source, tcp)

    pair.fast.responder.answer = counted  # type: ignore[method-assign]
    rng = random.Random(23)
    for parent in ("example.test", "www.example.test", "c.example.test"):
        for depth in (1, 2, 3):
            for edns in options({"do": True}, {"do": True, "ecs": ECS[0]}):
                before = len(asked)  # (the signatures' expiry is jittered: no twin to compare)
                reply = pair.fast.handle(make_query(below(rng, parent, depth), 1, **edns), "127.0.0.1")
                assert len(asked) == before + 1 and reply is not None and struct.unpack("!H", reply[8:10])[0] > 1
    assert not pair.node.kept.negatives
    for edns in options({}, {"edns": True}, {"ecs": ECS[0]}):
        pair.ask(make_query(below(rng, "example.test", 2), 1, **edns))
    del pair.fast.responder.answer
    pair.general_path_off()
    for depth in (1, 2, 3):
        for edns in options({}, {"edns": True}, {"ecs": ECS[4]}):
            pair.ask(make_query(below(rng, "example.test", depth), 1, **edns))
    assert {key[2] for key in pair.node.kept.negatives} == {0, 1}


def test_the_tails_kept_per_name_length_are_bounded(pair: Twins) -> None:
    """Names of every length: each answer is the general path's, and one kept answer holds
    at most `MAX_TAILS` tails (then it starts again)."""
    pair.ask(make_query("x.example.test", 1))
    pair.general_path_off()
    for _ in range(2):
        for size in range(1, 64):
            pair.ask(make_query(f"{'z' * size}.{'y' * (64 - size)}.example.test", 1))
            pair.ask(make_query(f"{'z' * size}.example.test", 1))
            (negative,) = pair.node.kept.negatives.values()
            assert len(negative.tails) <= MAX_TAILS
