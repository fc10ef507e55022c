"""IXFR from the journal of changes (RFC 1995), over TCP and UDP; refusals of verified
requests signed (RFC 8945 5.3); big transfers encoded a message at a time."""

from __future__ import annotations

import itertools
import random
import struct
from pathlib import Path
from typing import Any

import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.xfr
import dns.zone
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock, Cooperator

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.journal import MAX_VERSIONS, Journal, Record, difference, newer, records_of
from gtmcluster.dns.responder import Responder
from gtmcluster.dns.stream import DNSStreamFactory
from gtmcluster.dns.transfer import Outgoing, Transfers
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_SOA, TYPE_TXT, RRset, Zone
from gtmcluster.node import Node
from tests.support import configs
from tests.unit.test_server import connect, framed
from tests.unit.test_transfer import (
    KEY,
    RING,
    SECRET,
    WRONG_RING,
    Sync,
    read,
    records,
    request,
    sent,
    transfer_config,
)

ORIGIN = (b"example", b"test")


# --- the journal, on zones built directly -----------------------------------------------------


def soa(serial: int) -> RRset:
    fixed = struct.pack("!IIIII", serial, 3600, 600, 86400, 300)
    return RRset(ORIGIN, TYPE_SOA, 3600, (((b"ns1", *ORIGIN), (b"hostmaster", *ORIGIN), fixed),))


#: a version of a zone: (owner label, type) -> (TTL, RDATAs)
Version = dict[tuple[bytes, int], tuple[int, frozenset[bytes]]]


def zone_of(serial: int, version: Version) -> Zone:
    rrsets = [soa(serial)]
    for (label, rtype), (ttl, rdatas) in version.items():
        if rdatas:
            rrsets.append(RRset((label, *ORIGIN), rtype, ttl, tuple((r,) for r in sorted(rdatas))))
    return Zone(ORIGIN, rrsets)


VERSIONS = st.dictionaries(
    st.tuples(st.sampled_from([b"a", b"b", b"www", b"mail"]), st.sampled_from([TYPE_A, TYPE_TXT])),
    st.tuples(st.sampled_from([60, 300]), st.frozensets(st.sampled_from([b"\x01\x02\x03\x04", b"\x05\x06\x07\x08"]))),
    max_size=8,
)


def apply(records: set[Record], steps: Any) -> set[Record]:
    """*records* with the steps applied as a secondary does: each deletion must be there,
    each addition new."""
    out = set(records)
    for step in steps:
        assert set(step.deleted) <= out
        out -= set(step.deleted)
        assert not set(step.added) & out
        out |= set(step.added)
    return out


@given(st.lists(VERSIONS, min_size=2, max_size=8), st.integers(0, 2**32 - 1))
def test_the_chain_from_any_kept_version_gives_the_newest_zone(versions: list[Version], first: int) -> None:
    zones = [zone_of((first + i) % 2**32, v) for i, v in enumerate(versions)]  # (serials may wrap)
    journal = Journal()
    for old, new in itertools.pairwise(zones):
        journal = journal.after(old, new, limit=10**6)
        # (compared name by name, the same as the set difference of all records)
        assert difference(old, new) == (records_of(old) - records_of(new), records_of(new) - records_of(old))
    assert len(journal.steps) == len(zones) - 1
    newest = records_of(zones[-1])
    for i, zone in enumerate(zones[:-1]):
        steps = journal.chain_from((first + i) % 2**32)
        assert steps is not None and len(steps) == len(zones) - 1 - i
        assert apply(records_of(zone), steps) == newest
        assert steps[-1].new == zones[-1].soa
    assert journal.chain_from((first + len(zones) - 1) % 2**32) is None  # (the newest: nothing to send)


def test_only_the_last_versions_are_kept() -> None:
    zones = [zone_of(i, {(b"www", TYPE_A): (60, frozenset({bytes([10, 0, 0, i])}))}) for i in range(MAX_VERSIONS + 5)]
    journal = Journal()
    for old, new in itertools.pairwise(zones):
        journal = journal.after(old, new, limit=10**6)
    assert len(journal.steps) == MAX_VERSIONS
    assert journal.chain_from(3) is None and journal.chain_from(4) is not None  # (4 -> 5 ... 23 -> 24)


def test_no_more_records_than_the_zone_has() -> None:
    many = {(bytes([97 + i]), TYPE_A): (60, frozenset({bytes([10, 0, 0, i])})) for i in range(10)}
    grown = {**many, (b"www", TYPE_A): (60, frozenset({b"\x0a\x00\x00\x63"}))}
    one = zone_of(1, many)
    two = zone_of(2, grown)  # one record added: kept
    three = zone_of(3, {k: (300, v[1]) for k, v in grown.items()})  # every TTL: 11 deleted, 11 added
    journal = Journal().after(one, two)
    assert [s.size for s in journal.steps] == [1]
    # 22 records changed in a zone of 12: the whole zone is cheaper, nothing is kept
    assert journal.after(two, three).steps == ()
    # the oldest steps make room for the newest
    four = zone_of(4, {**grown, (b"x", TYPE_A): (60, frozenset({b"\x01\x01\x01\x01"}))})
    bounded = Journal().after(one, two).after(two, four).bounded(limit=1)
    assert [(s.size, bounded.chain_from(2) is not None) for s in bounded.steps] == [(1, True)]


def test_a_change_without_a_newer_serial_empties_the_journal() -> None:
    one = zone_of(1, {(b"www", TYPE_A): (60, frozenset({b"\x01\x02\x03\x04"}))})
    two = zone_of(2, {(b"www", TYPE_A): (60, frozenset({b"\x05\x06\x07\x08"}))})
    journal = Journal().after(one, two)
    assert journal.chain_from(1) is not None
    same_serial = zone_of(2, {(b"mail", TYPE_A): (60, frozenset({b"\x05\x06\x07\x08"}))})
    assert journal.after(two, same_serial).steps == ()
    assert journal.after(two, zone_of(2, {(b"www", TYPE_A): (60, frozenset({b"\x05\x06\x07\x08"}))})) == journal
    assert journal.after(two, zone_of(1, {})).steps == ()  # (older: a secondary would not follow)


@given(st.integers(0, 2**32 - 1), st.integers(1, 2**31 - 1))
def test_serial_arithmetic_is_rfc_1982(serial: int, ahead: int) -> None:
    later = (serial + ahead) % 2**32
    assert newer(later, serial) and not newer(serial, later)
    assert not newer(serial, serial)
    far = (serial + 2**31) % 2**32
    assert not newer(far, serial) and not newer(serial, far)


# --- IXFR on the wire, read by dnspython's own IXFR client ------------------------------------

HOSTS = "".join(f"host{i} IN A 10.0.{i // 256}.{i % 256}\n" for i in range(40))
V1 = configs.ZONE + HOSTS
V2 = (
    V1.replace(" 1 3600 600", " 2 3600 600").replace("host3 IN A 10.0.0.3", "host3 IN A 10.9.9.3")
    + "new IN A 192.0.2.77\n"
)
V3 = V2.replace(" 2 3600 600", " 3 3600 600").replace("mail     IN A   192.0.2.25\n", "") + 'new IN TXT "three"\n'


def version(tmp_path: Path, text: str) -> Config:
    """The config with the zone file now holding *text* (as an operator edits it)."""
    (tmp_path / "example.test.zone").write_text(text)
    return transfer_config(tmp_path, zone=text)


def chain_of(tmp_path: Path, *texts: str, **transfer: Any) -> tuple[Transfers, Config]:
    """The transfers of the config after loading each zone text in turn (as reloads)."""
    transfers = None
    for text in texts:
        (tmp_path / "example.test.zone").write_text(text)
        config = transfer_config(tmp_path, zone=text, **transfer)
        transfers = Transfers(config.zones, config.transfers, transfers)
    assert transfers is not None
    return transfers, config


def zone_text(text: str) -> dns.zone.Zone:
    return dns.zone.from_text(text, "example.test.", relativize=False)


def follow(text: str, serial: int, wires: list[bytes], query: Any, udp: bool = False) -> dns.zone.Zone:
    """The zone a secondary at *text* holds once dnspython's IXFR client applied *wires*."""
    zone = zone_text(text)
    with dns.xfr.Inbound(zone, dns.rdatatype.IXFR, serial=serial, is_udp=udp) as inbound:
        done = False
        ctx = None
        for wire in wires:
            message = dns.message.from_wire(
                wire, keyring=RING, request_mac=query.mac, xfr=True, tsig_ctx=ctx, multi=True, one_rr_per_rrset=True
            )
            ctx = message.tsig_ctx
            done = inbound.process_message(message)
        assert done
    return zone


@pytest.mark.parametrize("serial", [1, 2])
def test_ixfr_from_a_kept_serial_is_the_difference(tmp_path: Path, serial: int) -> None:
    transfers, _ = chain_of(tmp_path, V1, V2, V3)
    query = request("IXFR", serial=serial)
    wires = Sync(transfers).answer(query.to_wire(), "127.0.0.1", tcp=True) or []
    got = records(read(wires, query))
    # incremental: our SOA, the old one (serial 1 has two steps), ...; far fewer than the zone
    assert got[0] == got[1] == got[-1] == ("example.test.", "SOA") and len(got) < 20
    assert follow(V1 if serial == 1 else V2, serial, wires, query) == zone_text(V3)


def test_ixfr_from_an_unknown_serial_is_the_whole_zone(tmp_path: Path) -> None:
    transfers, _ = chain_of(tmp_path, V1, V2, V3)
    for serial in (0,):  # (never served)
        query = request("IXFR", serial=serial)
        got = records(read(Sync(transfers).answer(query.to_wire(), "127.0.0.1", tcp=True) or [], query))
        assert len(got) == 19 + 40 + 1 + 1 and got[1] != ("example.test.", "SOA")
    after_restart, _ = chain_of(tmp_path, V3)
    query = request("IXFR", serial=2)
    assert len(records(read(Sync(after_restart).answer(query.to_wire(), "127.0.0.1", True) or [], query))) == 61


def test_a_node_keeps_the_journal_across_reloads(tmp_path: Path) -> None:
    node = Node(version(tmp_path, V1), "n1", clock=lambda: 0.0, rng=random.Random(1))
    node.reload(version(tmp_path, V2))
    assert node.responder.transfers is not None
    (step,) = node.responder.transfers.journals[ORIGIN].steps
    assert len(step.deleted) == 1 and len(step.added) == 2  # host3 changed, new added
    query = request("IXFR", serial=1)
    replies = sent(node.responder.handle_stream(query.to_wire(), "127.0.0.1"))
    assert follow(V1, 1, replies, query) == zone_text(V2)


# --- IXFR over UDP (RFC 1995 2) ---------------------------------------------------------------


def _no_wideips(*args: Any) -> Any:
    raise AssertionError("no wide IP is asked here")


def udp_responder(transfers: Transfers, config: Config) -> Responder:
    return Responder(config.zones, {}, _no_wideips, transfers=transfers)


def test_udp_ixfr_that_fits_is_the_difference(tmp_path: Path) -> None:
    transfers, config = chain_of(tmp_path, V1, V2, V3)
    query = request("IXFR", serial=1)
    query.use_edns(0, payload=1232)
    reply = udp_responder(transfers, config).handle(query.to_wire(), "127.0.0.1")
    assert reply is not None and len(reply) <= 1232
    assert follow(V1, 1, [reply], query, udp=True) == zone_text(V3)


def test_udp_ixfr_that_does_not_fit_or_is_current_is_our_soa_alone(tmp_path: Path) -> None:
    big = V2.replace(" 2 3600 600", " 3 3600 600") + "".join(f'txt{i} IN TXT "{"x" * 60}"\n' for i in range(30))
    transfers, config = chain_of(tmp_path, V1, V2, big)
    responder = udp_responder(transfers, config)
    for serial in (1, 3, 0):  # too big for 512 bytes; current; unknown
        query = request("IXFR", serial=serial)
        reply = responder.handle(query.to_wire(), "127.0.0.1")
        assert reply is not None and len(reply) <= 512
        message = dns.message.from_wire(reply, keyring=RING, request_mac=query.mac)
        assert message.had_tsig and [r.to_text().split()[2] for rrset in message.answer for r in rrset] == ["3"]
        if serial != 3:  # dnspython's client takes it as "ask again over TCP"
            with pytest.raises(dns.xfr.UseTCP):
                follow(V1, serial, [reply], query, udp=True)


def test_udp_ixfr_from_outside_allow_and_axfr_over_udp_are_refused(tmp_path: Path) -> None:
    transfers, config = chain_of(tmp_path, V1, V2)
    responder = udp_responder(transfers, config)
    for qtype, source in (("IXFR", "192.0.2.9"), ("AXFR", "127.0.0.1")):
        query = request(qtype, serial=1)
        reply = responder.handle(query.to_wire(), source)
        assert reply is not None
        assert dns.message.from_wire(reply, keyring=RING, request_mac=query.mac).rcode() == dns.rcode.REFUSED


# --- refusals of verified requests are signed (RFC 8945 5.3) ----------------------------------


@pytest.mark.parametrize(
    ("name", "source", "tcp"),
    [
        ("example.test", "192.0.2.1", True),
        ("www.example.test", "127.0.0.1", True),
        ("example.test", "127.0.0.1", False),
    ],
)
def test_a_verified_request_refused_gets_a_signed_refusal(tmp_path: Path, name: str, source: str, tcp: bool) -> None:
    config = transfer_config(tmp_path)
    transfers = Sync(Transfers(config.zones, config.transfers))
    query = request(name=name)
    (wire,) = transfers.answer(query.to_wire(), source, tcp) or []
    # dnspython verifies the reply's MAC over the request's (raises if missing or wrong)
    reply = dns.message.from_wire(wire, keyring=RING, request_mac=query.mac)
    assert reply.rcode() == dns.rcode.REFUSED and reply.had_tsig and reply.keyname == dns.name.from_text(KEY)
    # an unsigned request refused the same way gets an unsigned refusal
    (plain,) = transfers.answer(request(name=name, ring=None).to_wire(), source, tcp) or []
    assert dns.message.from_wire(plain).tsig is None


# --- big transfers a message at a time ---------------------------------------------------------

BIG = configs.ZONE + "".join(f"host{i} IN A 10.{i // 65536}.{i // 256 % 256}.{i % 256}\n" for i in range(6000))


def stepper() -> tuple[Clock, Cooperator]:
    """A cooperator doing one iteration per tick of a fake clock (as the reactor's does a
    few ms' worth per turn)."""
    clock = Clock()
    return clock, Cooperator(
        terminationPredicateFactory=lambda: lambda: True, scheduler=lambda f: clock.callLater(1, f)
    )


def test_a_big_transfer_is_made_a_message_per_turn_and_kept(tmp_path: Path) -> None:
    config = transfer_config(tmp_path, zone=BIG)
    clock, cooperator = stepper()
    transfers = Transfers(config.zones, config.transfers, cooperate=cooperator.cooperate)
    first, second = request(), request()
    outgoing = [transfers.answer(q.to_wire(), "127.0.0.1", True) for q in (first, second)]
    pending = [o.start() for o in outgoing if isinstance(o, Outgoing)]
    assert len(pending) == 2 and all(isinstance(p, Deferred) for p in pending)
    got: list[list[bytes]] = []
    for p in pending:
        assert isinstance(p, Deferred)
        p.addCallback(lambda messages: got.append(list(messages)))
    turns = 0
    while not got:
        clock.advance(1)
        turns += 1
    # one message made per turn (the reactor runs in between); both requests share it
    assert len(got) == 2 and turns >= len(got[0]) > 3
    for wires, query in zip(got, (first, second), strict=True):
        assert len(records(read(wires, query))) == 19 + 6000 + 1
    # made once: the next transfer is answered at once
    third = request()
    again = sent(transfers.answer(third.to_wire(), "127.0.0.1", True))
    assert len(records(read(again, third))) == 19 + 6000 + 1


def test_a_connection_waits_for_its_transfer_while_others_are_answered(tmp_path: Path) -> None:
    """The AXFR and a query pipelined after it come back in order, once the transfer is
    made; a query on another connection meanwhile is answered at once."""
    config = transfer_config(tmp_path, zone=BIG)
    clock, cooperator = stepper()
    transfers = Transfers(config.zones, config.transfers, cooperate=cooperator.cooperate)
    responder = Responder(config.zones, {}, _no_wideips, transfers=transfers)
    factory = DNSStreamFactory(responder, Clock(), 10, 100)
    axfr = request()
    www = dns.message.make_query("www.example.test", "A")
    proto, transport = connect(factory, "127.0.0.1")
    proto.dataReceived(framed(axfr.to_wire()) + framed(www.to_wire()))
    assert transport.value() == b"" and transport.producerState == "paused"
    other, other_transport = connect(factory, "127.0.0.2")
    other.dataReceived(framed(www.to_wire()))
    assert dns.message.from_wire(other_transport.value()[2:]).answer[0][0].to_text() == "192.0.2.80"
    while not transport.value():
        clock.advance(1)
    data = transport.value()
    wires = []
    while data:
        (n,) = struct.unpack("!H", data[:2])
        wires.append(data[2 : 2 + n])
        data = data[2 + n :]
    transfer, last = wires[:-1], dns.message.from_wire(wires[-1])
    assert len(records(read(transfer, axfr))) == 19 + 6000 + 1
    assert last.id == www.id and last.answer[0][0].to_text() == "192.0.2.80"
    assert transport.producerState == "producing"


@settings(deadline=None, max_examples=20)
@given(st.integers(0, 29))
def test_ixfr_of_a_change_is_sent_whatever_its_size(tmp_path_factory: pytest.TempPathFactory, changed: int) -> None:
    """A change of any size up to the zone's own (59 records: 29 changed are 58) is kept
    and sent incrementally."""
    tmp_path = tmp_path_factory.mktemp("sizes")
    v2 = V1.replace(" 1 3600 600", " 2 3600 600")
    for i in range(changed):
        v2 = v2.replace(f"host{i} IN A 10.0.0.{i}\n", f"host{i} IN A 10.8.0.{i}\n")
    transfers, _ = chain_of(tmp_path, V1, v2)
    query = request("IXFR", serial=1)
    wires = Sync(transfers).answer(query.to_wire(), "127.0.0.1", tcp=True) or []
    assert len(records(read(wires, query))) == 4 + 2 * changed
    assert follow(V1, 1, wires, query) == zone_text(v2)


def test_a_zone_without_transfer_refuses_a_verified_request_signed(tmp_path: Path) -> None:
    """other.test has no ``transfer``; a request for it signed with example.test's key is
    refused with a signed REFUSED; unsigned or badly signed, the responder refuses it as
    before (unsigned)."""
    config = configs.base()
    config["tsig_keys"] = {KEY: {"secret": SECRET}}
    config["zones"][0]["transfer"] = {"allow": ["127.0.0.0/8"], "tsig": KEY}
    config["zones"].append({"origin": "other.test", "file": "other.test.zone"})
    (tmp_path / "other.test.zone").write_text("@ IN SOA ns h 1 3600 600 86400 300\n  IN NS ns\nns IN A 192.0.2.5\n")
    loaded = load(configs.write(tmp_path, config))
    transfers = Transfers(loaded.zones, loaded.transfers)
    responder = Responder(loaded.zones, {}, _no_wideips, transfers=transfers)
    query = request(name="other.test")
    (wire,) = Sync(transfers).answer(query.to_wire(), "127.0.0.1", True) or []
    reply = dns.message.from_wire(wire, keyring=RING, request_mac=query.mac)
    assert reply.rcode() == dns.rcode.REFUSED and reply.had_tsig
    for unverified in (request(name="other.test", ring=WRONG_RING), request(name="other.test", ring=None)):
        assert Sync(transfers).answer(unverified.to_wire(), "127.0.0.1", True) is None
        refused = responder.handle_stream(unverified.to_wire(), "127.0.0.1")
        assert isinstance(refused, list)
        plain = dns.message.from_wire(refused[0], keyring=False)
        assert plain.rcode() == dns.rcode.REFUSED and plain.tsig is None


@pytest.fixture(scope="module")
def udp_entry(tmp_path_factory: pytest.TempPathFactory) -> FastPath:
    transfers, config = chain_of(tmp_path_factory.mktemp("udp"), V1, V2)
    return FastPath(udp_responder(transfers, config))


def test_udp_ixfr_through_the_fast_path(udp_entry: FastPath) -> None:
    """The UDP entry (the fast path, then the responder) hands IXFR to the transfers, and
    never keeps the reply as a template: asked again, it is made again (a new signature)."""
    for _ in range(2):
        query = request("IXFR", serial=1)
        reply = udp_entry.handle(query.to_wire(), "127.0.0.1")
        assert reply is not None
        assert follow(V1, 1, [reply], query, udp=True) == zone_text(V2)


@given(st.data())
def test_damaged_udp_ixfr_requests_never_raise(udp_entry: FastPath, data: Any) -> None:
    wire = bytearray(request("IXFR", serial=1).to_wire())
    for _ in range(data.draw(st.integers(1, 4))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    reply = udp_entry.handle(bytes(wire[: data.draw(st.integers(12, len(wire)))]), "127.0.0.1")
    assert reply is None or (isinstance(reply, bytes) and len(reply) <= 512)
