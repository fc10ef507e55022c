"""Properties of static_persist (weighted rendezvous hashing of the client network).

Stability is what operators rely on: losing a member moves only its clients, adding one
moves clients only onto it, and every node computes the same ranking.
"""

from __future__ import annotations

import ipaddress
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.lb import methods
from gtmcluster.lb.context import Client, Rotations
from gtmcluster.lb.methods import Ranking
from tests.support.lbfakes import Cand, context, slot

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

member_names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=8)
members = st.lists(st.builds(Cand, member_names, st.integers(1, 5)), min_size=2, max_size=8, unique_by=lambda c: c.name)
v4 = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)
v6 = st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address)
addresses = st.lists(st.one_of(v4, v6), min_size=1, max_size=25)

PROPS = settings(max_examples=150)


def rank(cands: list[Cand], address: IPAddress, seed: int = 0, ipv4: int = 32, ipv6: int = 128) -> Ranking:
    ctx = context(Client.from_ldns(address), rng=random.Random(seed), rotations=Rotations())
    return methods.static_persist(cands, ctx, slot(ipv4=ipv4, ipv6=ipv6))


def choice(cands: list[Cand], address: IPAddress) -> str:
    return rank(cands, address).order[0].name


@PROPS
@given(members, addresses, st.data())
def test_removing_a_member_moves_only_its_clients(
    cands: list[Cand], clients: list[IPAddress], data: st.DataObject
) -> None:
    """Removing one member changes the choice only of clients that had it; they move to their second choice."""
    gone = data.draw(st.sampled_from(cands))
    rest = [c for c in cands if c is not gone]
    for address in clients:
        before = [c.name for c in rank(cands, address).order]
        after = choice(rest, address)
        if before[0] == gone.name:
            assert after == before[1]
        else:
            assert after == before[0]


@PROPS
@given(members, addresses, member_names, st.integers(1, 5))
def test_adding_a_member_moves_clients_only_onto_it(
    cands: list[Cand], clients: list[IPAddress], new_name: str, new_ratio: int
) -> None:
    """Adding a member moves a client, if at all, onto the new member."""
    if any(c.name == new_name for c in cands):
        new_name += "-new"
    grown = [*cands, Cand(new_name, new_ratio)]
    for address in clients:
        assert choice(grown, address) in (choice(cands, address), new_name)


@PROPS
@given(members, addresses, st.randoms(use_true_random=False), st.integers(0, 2**32))
def test_ranking_is_deterministic(
    cands: list[Cand], clients: list[IPAddress], shuffler: random.Random, seed: int
) -> None:
    """The same client and members give the same ranking and scores, whatever the RNG, the rotations
    or the order the members are listed in."""
    shuffled = list(cands)
    shuffler.shuffle(shuffled)
    for address in clients:
        first = rank(cands, address, seed=0)
        again = rank(cands, address, seed=seed)
        reordered = rank(shuffled, address, seed=seed)
        assert [c.name for c in again.order] == [c.name for c in first.order]
        assert again.scores == first.scores
        assert [c.name for c in reordered.order] == [c.name for c in first.order]


@PROPS
@given(members, st.one_of(v4, v6), st.integers(0, 2**128 - 1), st.integers(0, 128))
def test_clients_of_one_prefix_share_a_member(cands: list[Cand], address: IPAddress, noise: int, prefix: int) -> None:
    """Two addresses that agree on the configured prefix get the same ranking."""
    width = address.max_prefixlen
    prefix = min(prefix, width)
    host_bits = width - prefix
    other_int = (int(address) >> host_bits << host_bits) | (noise & ((1 << host_bits) - 1))
    other = type(address)(other_int)
    a = rank(cands, address, ipv4=prefix, ipv6=prefix)
    b = rank(cands, other, ipv4=prefix, ipv6=prefix)
    assert [c.name for c in a.order] == [c.name for c in b.order]
    assert a.scope == prefix


@PROPS
@given(members, addresses)
def test_ranking_holds_every_weighted_member_once(cands: list[Cand], clients: list[IPAddress]) -> None:
    """The ranking is a permutation of the members with a positive ratio."""
    for address in clients:
        assert sorted(c.name for c in rank(cands, address).order) == sorted(c.name for c in cands)
