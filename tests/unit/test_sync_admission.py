"""The peer port's caps on connections not yet proven to be a member's (`sync.admission`,
`sync.service.Gate`): per source and in all, a new source always gets in, the members' own
addresses are never crowded out, proven connections no longer count, and a member holds
at most `MAX_CHANNELS_PER_MEMBER` incoming connections.

The policy alone, exhaustively (hypothesis); then the real listener (`ListenerFactory`) in
the in-memory TLS cluster, with silent connections held open against it while a real
member connects."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import capturedLogs, formatEvent

from gtmcluster.api import metricfamilies
from gtmcluster.sync import admission, phases
from gtmcluster.sync.admission import Admission, Channels
from gtmcluster.sync.peer import PeerProtocol
from gtmcluster.sync.service import TURNED_AWAY_LOG_INTERVAL, TURNED_AWAY_SOURCES, Gate, ListenerFactory
from gtmcluster.sync.tls import server_options
from tests.support.cluster import MemoryCluster

TOTAL, PER_SOURCE = admission.MAX_UNPROVEN, admission.MAX_UNPROVEN_PER_SOURCE


class Conn:
    """A connection as the policy sees it: anything hashable."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def fill(policy: Admission[Conn], source: str, count: int, reserved: bool = False) -> list[Conn]:
    """Offer *count* connections from *source*; the ones taken."""
    taken = []
    for i in range(count):
        verdict = policy.consider(source, reserved)
        if verdict.admit:
            conn = Conn(f"{source}#{i}")
            policy.add(conn, source, reserved)
            taken.append(conn)
    return taken


# -- the policy ---------------------------------------------------------------------------------


def test_one_source_holds_at_most_its_share() -> None:
    policy: Admission[Conn] = Admission()
    assert len(fill(policy, "192.0.2.1", 100)) == PER_SOURCE
    verdict = policy.consider("192.0.2.1")
    assert not verdict.admit and "8 connections from its address" in verdict.why


def test_past_the_total_a_new_source_makes_way_for_itself_from_the_source_holding_most() -> None:
    """Eight sources fill every slot; a ninth still gets in, closing the oldest connection of
    a source holding the most; a source already holding as many as any other is turned away."""
    policy: Admission[Conn] = Admission()
    held = {f"198.51.100.{i}": fill(policy, f"198.51.100.{i}", PER_SOURCE) for i in range(TOTAL // PER_SOURCE)}
    assert policy.counted == TOTAL
    verdict = policy.consider("203.0.113.9")
    assert verdict.admit and verdict.evict is held["198.51.100.0"][0]
    policy.add(Conn("member"), "203.0.113.9")
    assert policy.counted == TOTAL and policy.of("198.51.100.0") == PER_SOURCE - 1
    # the source that lost one may take one back, from the next biggest source
    again = policy.consider("198.51.100.0")
    assert again.admit and again.evict is held["198.51.100.1"][0]
    policy.add(Conn("back"), "198.51.100.0")
    # a full source is turned away, never makes way for itself
    assert not policy.consider("198.51.100.2").admit


def test_reserved_addresses_are_not_counted_in_all_and_never_made_way_for() -> None:
    policy: Admission[Conn] = Admission(total=4, per_source=2)
    members = fill(policy, "192.0.2.10", 5, reserved=True)
    assert len(members) == 2 and policy.counted == 0  # its own per-source cap, nothing in all
    for i in range(10):
        fill(policy, f"198.51.100.{i}", 2)
    assert policy.counted == 4
    assert all(conn in policy._held for conn in members)


def test_released_connections_count_no_more() -> None:
    policy: Admission[Conn] = Admission(total=2, per_source=2)
    a, _ = fill(policy, "192.0.2.1", 2)
    assert policy.release(a) and not policy.release(a)
    assert policy.counted == 1 and policy.of("192.0.2.1") == 1
    assert policy.consider("192.0.2.1").admit


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "release"]), st.integers(0, 11), st.booleans()),
        max_size=200,
    )
)
def test_caps_always_hold_and_a_new_source_always_gets_in(ops: list[tuple[str, int, bool]]) -> None:
    """Whatever the sequence of connections and ends: no source holds more than its cap,
    the unreserved never more than the total, and a connection from a source that holds
    none is always taken."""
    policy: Admission[Conn] = Admission(total=6, per_source=2)
    live: list[Conn] = []
    for n, (op, source_index, reserved) in enumerate(ops):
        source = f"10.0.0.{source_index}"
        reserved = reserved and source_index == 0  # (one member address)
        if op == "release" and live:
            policy.release(live.pop(source_index % len(live)))
        else:
            fresh = policy.of(source) == 0
            verdict = policy.consider(source, reserved)
            if fresh:
                assert verdict.admit
            if verdict.admit:
                if verdict.evict is not None:
                    live.remove(verdict.evict)
                conn = Conn(f"{n}")
                policy.add(conn, source, reserved)
                live.append(conn)
        assert policy.counted <= 6
        assert all(policy.of(f"10.0.0.{i}") <= 2 for i in range(12))
        assert len(policy) == len(live)


def test_a_member_holds_at_most_four_proven_incoming_connections() -> None:
    channels: Channels[Conn] = Channels()
    conns = [Conn(f"c{i}") for i in range(6)]
    closed = [old for conn in conns for old in channels.add(conn, "gtm-b")]
    assert closed == conns[:2] and channels.of("gtm-b") == admission.MAX_CHANNELS_PER_MEMBER


# -- the turned-away line ---------------------------------------------------------------------


class Silent(Conn):
    """A connection that never finishes its handshake; `violation` closes it (noted)."""

    closed = 0

    def violation(self, why: str, logged: bool = True) -> None:
        Silent.closed += 1


def flood(gate: Gate, hosts: list[str]) -> int:
    """Offer one connection from each of *hosts*, holding those taken; the most entries the
    turned-away count held meanwhile."""
    most = 0
    for host in hosts:
        if gate.consider(host):
            gate.add(cast(PeerProtocol, Silent(host)), host)
        most = max(most, len(gate._untold))
    return most


def test_a_flood_from_many_sources_is_counted_in_a_bounded_table() -> None:
    """3,000 connections from as many IPv6 /64s, each making way for the next once the 64
    slots are held: the summary line counts the first TURNED_AWAY_SOURCES sources apart
    and the others together, so its table never holds more than that, and the line says
    how many came from further sources. (On main it held one entry per address: 2,936.)"""
    clock = Clock()
    gate = Gate(clock)
    with capturedLogs() as events:
        most = flood(gate, [f"2001:db8:{i:x}::{i % 7 + 1}" for i in range(3000)])
        clock.advance(TURNED_AWAY_LOG_INTERVAL)
    assert gate.made_way == 3000 - TOTAL and gate.turned_away == 0
    assert most == TURNED_AWAY_SOURCES
    (summary,) = [e for e in events if e.get("event") == "peer_turned_away"]
    assert summary["count"] == 3000 - TOTAL
    assert summary["sources"] == TURNED_AWAY_SOURCES and summary["counted"] == TURNED_AWAY_SOURCES
    assert summary["top"] == "2001:db8:40::/64"  # (the first that made way)
    assert summary["others"] == 3000 - TOTAL - TURNED_AWAY_SOURCES
    assert f"and {summary['others']} from further sources" in str(formatEvent(summary))
    assert gate._untold == {} and gate._untold_others == 0  # (a new interval begins empty)


def test_addresses_within_one_64_are_one_source_in_the_turned_away_line() -> None:
    """A host rotating through 100 addresses of its /64 gets 8 connections in, and the line
    about the rest names one source, its /64, not 91 addresses."""
    clock = Clock()
    gate = Gate(clock)
    with capturedLogs() as events:
        flood(gate, [f"2001:db8:1:2::{i + 1:x}" for i in range(100)])
        clock.advance(TURNED_AWAY_LOG_INTERVAL)
    assert gate.unproven.of("2001:db8:1:2::/64") == PER_SOURCE and gate.turned_away == 100 - PER_SOURCE
    first, summary = [e for e in events if e.get("event") == "peer_turned_away"]
    assert first["host"] == "2001:db8:1:2::9" and first["source"] == "2001:db8:1:2::/64"
    assert summary["sources"] == 1 and summary["top"] == "2001:db8:1:2::/64"
    assert summary["count"] == 100 - PER_SOURCE - 1 and summary["others"] == 0


# -- the listener, in memory --------------------------------------------------------------------


@pytest.fixture
def pair(tmp_path: Path) -> MemoryCluster:
    return MemoryCluster(["gtm-a", "gtm-b"], tmp_path / "certs")


def silent_connections(cluster: MemoryCluster, node: str, sources: list[str], each: int) -> list[PeerProtocol]:
    """Open *each* connections to *node*'s listener from every one of *sources* that never
    send a byte; the ones the listener took."""
    factory = ListenerFactory(
        server_options(cluster.credentials[node]), cluster.replicators[node], cluster.gates[node], cluster.clock
    )
    taken = []
    for source in sources:
        for port in range(each):
            address = IPv4Address("TCP", source, 50000 + port)
            tls = factory.buildProtocol(address)
            if tls is None:
                continue
            tls.makeConnection(StringTransport(peerAddress=address))
            taken.append(cast(PeerProtocol, tls.wrappedProtocol))
    return taken


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_silent_connections_are_capped_and_a_member_still_gets_in(pair: MemoryCluster) -> None:
    """400 silent connections from 20 addresses: the listener holds 64 (at most 8 from one
    address) and turns the rest away at once, logging two lines, not 336; gtm-a, dialling
    from another address meanwhile, gets through TLS and Hello; the silent ones are closed
    at the handshake timeout. (On main all 400 were held.)"""
    attackers = [f"198.51.100.{i}" for i in range(20)]
    with capturedLogs() as events:
        held = silent_connections(pair, "gtm-b", attackers, 20)
        pair.clock.advance(TURNED_AWAY_LOG_INTERVAL)
    open_now = [p for p in held if p.phase != phases.CLOSED]
    assert len(open_now) <= TOTAL, len(open_now)
    gate = pair.gates["gtm-b"]
    assert all(gate.unproven.of(a) <= PER_SOURCE for a in attackers)
    assert gate.turned_away + gate.made_way >= 400 - TOTAL
    told = [e for e in events if e.get("event") == "peer_turned_away"]
    assert 1 <= len(told) <= 2, [e["log_format"] for e in told]
    exposed = {m.name: m.samples[0].value for m in metricfamilies.peer_port(gate)}
    assert exposed == {
        "gtm_peer_connections_turned_away": gate.turned_away,
        "gtm_peer_connections_made_way": gate.made_way,
    }
    assert gate.turned_away > 0

    pair.connect("gtm-a", "gtm-b", source="203.0.113.5")
    assert "gtm-a" in pair.replicators["gtm-b"].connected_names()
    assert gate.unproven.of("203.0.113.5") == 0  # proven: it counts no more

    pair.clock.advance(pair.replicators["gtm-b"].handshake_timeout)
    assert all(p.phase == phases.CLOSED for p in held)
    assert "gtm-a" in pair.replicators["gtm-b"].connected_names()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_member_dialling_from_its_own_address_is_never_crowded_out(pair: MemoryCluster) -> None:
    """With every slot held from more addresses than a new source could make way past, a
    connection from a member's configured peer address is still taken (not counted in all)."""
    pair.gates["gtm-b"] = Gate(pair.clock, reserved=["192.0.2.10"])
    silent_connections(pair, "gtm-b", [f"198.51.100.{i}" for i in range(TOTAL)], 1)
    assert pair.gates["gtm-b"].unproven.counted == TOTAL
    pair.connect("gtm-a", "gtm-b", source="192.0.2.10")
    assert "gtm-a" in pair.replicators["gtm-b"].connected_names()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_member_holds_at_most_four_incoming_connections_the_oldest_make_way(pair: MemoryCluster) -> None:
    """Six connections gtm-a dials to gtm-b: gtm-b keeps the newest four and closes the
    older two with the reason, and gtm-a stays connected."""
    with capturedLogs() as events:
        protos = [pair.connect("gtm-a", "gtm-b", source=f"192.0.2.{i}").server.wrappedProtocol for i in range(6)]
    assert [proto.phase for proto in protos] == [phases.CLOSED] * 2 + [phases.ESTABLISHED] * 4
    reasons = [e["reason"] for e in events if e.get("event") == "peer_refused"]
    assert reasons.count("replaced by a newer connection from gtm-a (at most 4 at once)") == 2, reasons
    assert pair.gates["gtm-b"].channels.of("gtm-a") == admission.MAX_CHANNELS_PER_MEMBER
    assert "gtm-a" in pair.replicators["gtm-b"].connected_names()
