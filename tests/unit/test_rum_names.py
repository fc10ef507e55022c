"""One-use names (`dns.rumnames`): ``<id>.rum.<zone>`` answered by the general path and the
fast path alike (twins), TTL 0, never kept nor decided; the LDNS that asked recorded as
``rumid/<id>`` (with a trusted client subnet, cut to its /24); a flood from one LDNS bounded
by its bucket, from many by the store's bound; a worker's ids carried to the node."""

from __future__ import annotations

import ipaddress
import random
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
from gtmcluster.dns import rumnames
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dnsdata import keys as dnskeys
from gtmcluster.fanout import feed
from gtmcluster.node import Node
from gtmcluster.proximity import clients
from gtmcluster.runtime.stats import QueryStats
from gtmcluster.state import keys
from tests.support import configs
from tests.support.twins import Twins, make_query

IDENT = "0123456789abcdefghij"
NAME = f"{IDENT}.rum.example.test"
TARGETS = {"DC1": "https://dc1.example.net/o", "DC2": "https://dc2.example.net/o"}


def rum_on(raw: dict[str, Any], **settings: Any) -> None:
    raw["rum"] = {"targets": TARGETS, **settings}
    raw["sync_group"]["members"][0]["rum"] = "192.0.2.10:8443"


@pytest.fixture
def twins(tmp_path: Path) -> Twins:
    return Twins(tmp_path, rum_on)


def parsed(reply: bytes | None) -> dns.message.Message:
    assert reply is not None
    return dns.message.from_wire(reply)


def held(node: Node, ident: str = IDENT) -> Any:
    record = node.store.get(keys.rum_id(ident))
    return None if record is None else record.value


def test_the_id_is_answered_with_the_listeners_address_ttl_0_and_recorded(twins: Twins) -> None:
    shapes: list[dict[str, Any]] = [{}, {"edns": True}, {"do": True}]
    for shape in shapes:
        reply = parsed(twins.ask(make_query(NAME.upper(), 1, **shape), "198.51.100.7"))  # (0x20: any case)
        assert reply.rcode() == dns.rcode.NOERROR and reply.flags & dns.flags.AA
        (rrset,) = reply.answer
        assert [r.address for r in rrset] == ["192.0.2.10"] and rrset.ttl == 0
        assert rrset.name.to_text() == NAME.upper() + "."
    for node in (twins.reference, twins.node):
        assert held(node) == {"ldns": "198.51.100.7", "ecs": ""}
        record = node.store.get(keys.rum_id(IDENT))
        assert record is not None and record.ttl == 120
    # the listener has no IPv6 address: AAAA is NODATA, with the SOA
    reply = parsed(twins.ask(make_query(NAME, 28), "198.51.100.7"))
    assert reply.rcode() == dns.rcode.NOERROR and not reply.answer and reply.authority[0].rdtype == dns.rdatatype.SOA


def test_one_use_names_are_never_kept_nor_decided(twins: Twins) -> None:
    kept = twins.node.responder.kept
    asked = 0
    real = twins.fast.responder.answer

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal asked
        asked += 1
        return real(*args, **kwargs)

    twins.fast.responder.answer = counted  # type: ignore[method-assign]
    query = make_query(NAME, 1)
    for _ in range(3):
        twins.ask(query, "198.51.100.7")
    assert asked == 3  # (the general path each time: nothing was kept to answer from)
    assert not kept.templates and not kept.static_hits and not kept.negatives and not kept.wide_hits
    assert twins.node.cache is not None and len(twins.node.cache) == 0
    assert twins.node.responder.answer(query, "198.51.100.7")[2] is False  # (not static)
    # an NXDOMAIN kept for the zone's apex does not answer a one-use name either
    twins.ask(make_query("nothing-here.example.test", 1), "198.51.100.7")
    assert kept.negatives
    reply = parsed(twins.ask(make_query("abcdefghij0123456789.rum.example.test", 1), "198.51.100.7"))
    assert reply.rcode() == dns.rcode.NOERROR and reply.answer


@pytest.mark.parametrize(
    "name",
    [
        "short.rum.example.test",  # (an id is 16 to 32 characters)
        "0123456789abcdef-hij.rum.example.test",  # (of a-z and 0-9 only)
        f"x.{IDENT}.rum.example.test",
        "rum.example.test",
    ],
)
def test_other_names_under_rum_are_answered_from_the_zone_as_before(twins: Twins, name: str) -> None:
    reply = parsed(twins.ask(make_query(name, 1), "198.51.100.7"))
    assert reply.rcode() == dns.rcode.NXDOMAIN
    assert twins.node.store.kinds().get("rumid") is None


def test_without_rum_a_one_use_name_is_nxdomain(tmp_path: Path) -> None:
    plain = Twins(tmp_path)
    assert parsed(plain.ask(make_query(NAME, 1))).rcode() == dns.rcode.NXDOMAIN
    assert plain.node.store.kinds().get("rumid") is None


def test_a_trusted_client_subnet_is_recorded_cut_to_its_24_an_untrusted_one_not(twins: Twins) -> None:
    ecs = (1, 32, bytes([10, 1, 2, 3]))
    twins.ask(make_query(NAME, 1, ecs=ecs), "127.0.0.1")  # (loopback is ecs_trusted in the tests)
    assert held(twins.node) == {"ldns": "127.0.0.1", "ecs": "10.1.2.0_24"}
    other = "abcdefghij0123456789"
    twins.ask(make_query(f"{other}.rum.example.test", 1, ecs=(1, 16, bytes([10, 9]))), "127.0.0.1")
    assert held(twins.node, other) == {"ldns": "127.0.0.1", "ecs": "10.9.0.0_16"}
    third = "abcdefghij0123456780"
    twins.ask(make_query(f"{third}.rum.example.test", 1, ecs=ecs), "198.51.100.7")
    assert held(twins.node, third) == {"ldns": "198.51.100.7", "ecs": ""}


def test_rum_answer_and_any(tmp_path: Path) -> None:
    pair = Twins(tmp_path, lambda raw: rum_on(raw, answer=["203.0.113.5", "2001:db8::5"]))
    assert [r.address for r in parsed(pair.ask(make_query(NAME, 1))).answer[0]] == ["203.0.113.5"]
    assert [r.address for r in parsed(pair.ask(make_query(NAME, 28))).answer[0]] == ["2001:db8::5"]
    (rrset,) = parsed(pair.ask(make_query(NAME, 255))).answer
    assert rrset.rdtype == dns.rdatatype.A
    assert not parsed(pair.ask(make_query(NAME, 16))).answer  # (TXT: NODATA)


def test_rum_zone_and_every_wide_ip_zone_have_one_use_names(tmp_path: Path) -> None:
    """(the snippet may be asked for any wide IP's zone: ``snippet.js?zone=``)"""
    pair = Twins(tmp_path, lambda raw: rum_on(raw, zone="sub2.example.test"))
    for name in (f"{IDENT}.rum.sub2.example.test", NAME):
        reply = parsed(pair.ask(make_query(name, 1), "198.51.100.7"))
        assert reply.rcode() == dns.rcode.NOERROR and reply.answer[0].ttl == 0
    # (under a name of the zone that is no zone of its own: from the zone, as before)
    assert parsed(pair.ask(make_query(f"{IDENT}.rum.www.example.test", 1))).rcode() == dns.rcode.NXDOMAIN


def test_a_second_ask_writes_nothing_new_nor_once_the_id_is_spent(twins: Twins) -> None:
    node = twins.node
    twins.ask(make_query(NAME, 1), "198.51.100.7")
    first = node.store.raw(keys.rum_id(IDENT))
    twins.ask(make_query(NAME, 28), "198.51.100.7")  # (the same LDNS asks AAAA too)
    assert node.store.raw(keys.rum_id(IDENT)) is first
    node.store.put(keys.rum_id(IDENT), None, 120)  # (a beacon spent it: `proximity.rumjoin`)
    twins.ask(make_query(NAME, 1), "198.51.100.7")
    assert held(node) is None


def test_a_flood_from_one_ldns_is_answered_but_recorded_within_its_bucket(twins: Twins) -> None:
    node, stats = twins.node, twins.node.stats
    rng = random.Random(3)
    idents = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(20)) for _ in range(300)]
    for i, ident in enumerate(idents):
        source = f"198.51.100.{i % 250}"  # (one /24)
        reply = parsed(twins.fast.handle(make_query(f"{ident}.rum.example.test", 1), source))
        assert reply.rcode() == dns.rcode.NOERROR and reply.answer
    assert node.store.kinds()["rumid"] == rumnames.IDS_BURST
    assert (stats.rum_ids_recorded, stats.rum_ids_rate) == (rumnames.IDS_BURST, 300 - rumnames.IDS_BURST)
    twins.clock.now += 1.0  # (a second later: the rate's worth more)
    for ident in idents[:50]:
        twins.fast.handle(make_query(f"x{ident}.rum.example.test", 1), "198.51.100.1")
    assert node.store.kinds()["rumid"] == rumnames.IDS_BURST + rumnames.IDS_PER_SECOND
    # another /24 has its own bucket
    twins.fast.handle(make_query(f"{IDENT}.rum.example.test", 1), "198.51.101.1")
    assert held(node) == {"ldns": "198.51.101.1", "ecs": ""}


def test_the_buckets_table_is_bounded() -> None:
    now = [0.0]
    limiter = rumnames.IdLimiter(lambda: now[0], rate=1, burst=1, size=3)
    addresses = [ipaddress.ip_address(f"10.0.{i}.1") for i in range(5)]
    assert all(limiter.take(a) for a in addresses)
    assert len(limiter) == 3
    assert not limiter.take(addresses[4])  # (remembered: its token is spent)
    assert limiter.take(addresses[0])  # (forgotten: a full bucket again)
    assert limiter.take(ipaddress.ip_address("2001:db8:1:2::1"))
    assert not limiter.take(ipaddress.ip_address("2001:db8:1:3::1"))  # (the same /48)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sources=st.lists(st.integers(0, 2**24 - 1), min_size=1, max_size=120), bound=st.integers(1, 40))
def test_a_flood_from_many_ldnses_is_bounded_by_the_store(tmp_path: Path, sources: list[int], bound: int) -> None:
    raw = configs.base()
    rum_on(raw, max_pending_ids=bound)
    node = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: 1000.0, rng=random.Random(1))
    fast = FastPath(node.responder)
    for i, n in enumerate(sources):
        source = str(ipaddress.ip_address(0x0B000000 + (n << 8)))  # (11.x.y.0: a /24 each)
        reply = fast.handle(make_query(f"{i:020d}.rum.example.test", 1), source)
        assert reply is not None
    assert node.store.kinds().get("rumid", 0) == min(bound, len(sources))  # (one member: the bound)
    assert len(node.rum_limiter) <= rumnames.MAX_PREFIXES


def test_the_ids_pattern_is_the_proximity_one() -> None:
    assert rumnames.ID.pattern.decode() == clients.ID.pattern


def test_a_workers_ids_reach_the_node(tmp_path: Path) -> None:
    raw = configs.base()
    rum_on(raw)
    config = load(configs.write(tmp_path, raw))
    node = Node(config, "n1", clock=lambda: 1000.0)
    worker = Node(config, "n1", clock=lambda: 1000.0)
    sent: list[bytes] = []
    worker.rum_delegate = lambda *seen: sent.append(feed.rum_id_ops(*seen))
    FastPath(worker.responder).handle(make_query(NAME, 1), "198.51.100.7")
    assert worker.store.kinds().get("rumid") is None  # (the worker writes nothing itself)
    counts = QueryStats()
    feed.add_counts(counts, feed.take_counts(worker.stats))
    assert counts.rum_ids_recorded == 1 and worker.stats.rum_ids_recorded == 0
    (ops,) = sent
    for op in feed.read_ops(ops, 1000.0):
        assert isinstance(op, feed.RumId)
        node.record_rum_id(*op)
    assert held(node) == {"ldns": "198.51.100.7", "ecs": ""}
    # what a worker sends is checked again by the node
    node.record_rum_id("NOT-AN-ID", "198.51.100.7", "")
    node.record_rum_id("abcdefghij0123456789", "not an address", "")
    node.record_rum_id("abcdefghij0123456789", "198.51.100.7", "10.1.2.0_99")
    assert node.store.kinds()["rumid"] == 1


@pytest.mark.parametrize("qtype", [1, 28])
def test_in_a_signed_zone_the_answer_and_its_nodata_are_signed_alike_on_both_paths(tmp_path: Path, qtype: int) -> None:
    raw = configs.base()
    rum_on(raw)
    dnskeys.keygen(tmp_path / "keys", "example.test", algorithm=13)
    raw["zones"][0]["dnssec"] = {"keys": "keys"}
    now = [1_800_000_000.0]
    node = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: now[0], rng=random.Random(7))
    signing = node.responder.signing
    signing.clock = lambda: now[0]
    for signer in signing.signers.values():
        signer.clock = lambda: now[0]
    fast = FastPath(node.responder)
    query = make_query(NAME, qtype, do=True)
    got = fast.handle(query, "198.51.100.7")
    assert got == node.responder.handle(query, "198.51.100.7")  # (the same node: the same signatures)
    reply = parsed(got)
    assert reply.rcode() == dns.rcode.NOERROR and reply.flags & dns.flags.AA
    section = reply.answer if qtype == 1 else reply.authority
    ring: dict[dns.name.Name, dns.node.Node | dns.rdataset.Rdataset] = {
        dns.name.from_text("example.test"): signing.signers[(b"example", b"test")].dnskey
    }
    signed = [r for r in section if r.rdtype != dns.rdatatype.RRSIG]
    assert signed and (qtype != 1 or signed[0].ttl == 0)
    for rrset in signed:
        sig = next(r for r in section if r.rdtype == dns.rdatatype.RRSIG and r.covers == rrset.rdtype)
        dns.dnssec.validate(rrset, sig, ring, now=now[0])
    assert held(node) == {"ldns": "198.51.100.7", "ecs": ""}
