"""The TCP client table (`dns.tcpclients`): caps per DNS address and per source, who makes
way (sources as `gtmcluster.runtime.sources` makes them: test_sources.py);
``dns_server.tcp_max_per_source`` in the config; and what /metrics says of closed
connections and refused zone transfers."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransportWithDisconnection

from gtmcluster.api.metrics import metrics_steps
from gtmcluster.config.load import load
from gtmcluster.config.problems import ConfigError
from gtmcluster.dns.tcpclients import EVICTED, SOURCE_CAP, Clients
from gtmcluster.runtime import slices
from gtmcluster.service import Sockets, make_service
from tests.support import configs


def test_a_source_at_its_cap_closes_its_own_longest_idle() -> None:
    """Past max_per_source the source's own least recently active connection goes, on
    whichever address it is; others' connections and the address cap are untouched."""
    clients: Clients[str] = Clients(max_per_listener=10, max_per_source=2)
    assert clients.add("a1", "L1", "A") == []
    assert clients.add("b1", "L1", "B") == []
    assert clients.add("a2", "L2", "A") == []
    clients.touch("a1")  # a2 is now A's oldest
    assert clients.add("a3", "L1", "A") == [("a2", SOURCE_CAP)]
    assert sorted(clients) == ["a1", "a3", "b1"]
    assert (clients.held_by("A"), clients.on("L1"), clients.on("L2")) == (2, 3, 0)


def test_a_full_address_closes_its_longest_idle_when_all_hold_as_many() -> None:
    """Past max_per_listener, with every source holding one connection there, the one idle
    the longest on that address goes; never one on another address."""
    clients: Clients[str] = Clients(max_per_listener=2, max_per_source=10)
    clients.add("x", "L2", "X")
    clients.add("a", "L1", "A")
    clients.add("b", "L1", "B")
    clients.touch("a")
    assert clients.add("c", "L1", "C") == [("b", EVICTED)]
    assert "x" in clients and "b" not in clients and clients.on("L2") == 1


def test_a_full_address_takes_from_the_source_holding_the_most_there() -> None:
    """Past max_per_listener, the source holding the most connections on that address loses
    its own idle the longest there, however recently a lighter source's was active: many
    sources each within their cap do not close a client holding one connection."""
    clients: Clients[str] = Clients(max_per_listener=5, max_per_source=10)
    clients.add("light", "L", "N")  # idle the longest of all
    clients.add("h0", "L2", "H")  # (on another address: not counted on L)
    for i in range(1, 5):
        assert clients.add(f"h{i}", "L", "H") == []
    clients.touch("h1")  # H's on L, least recently active first: h2 h3 h4 h1
    assert clients.add("other", "L", "O") == [("h2", EVICTED)]  # H holds 4 there: its oldest
    for new, gone in (("h5", "h3"), ("h6", "h4"), ("h7", "h1")):
        assert clients.add(new, "L", "H") == [(gone, EVICTED)]
    assert sorted(clients) == ["h0", "h5", "h6", "h7", "light", "other"]
    clients.touch("h6")  # h5 h7 h6
    assert clients.add("p", "L", "P") == [("h5", EVICTED)]  # H still holds the most (3)
    assert clients.add("q", "L", "Q") == [("h7", EVICTED)]  # (2)
    # every source holds one on L now: the least recently active source's goes
    assert clients.add("r", "L", "R") == [("light", EVICTED)]
    assert sorted(clients) == ["h0", "h6", "other", "p", "q", "r"]


def test_a_source_at_its_cap_on_a_full_address_closes_only_its_own() -> None:
    """A source at its cap on a full address makes room from its own connections: the
    address cap then holds without closing another source's."""
    clients: Clients[str] = Clients(max_per_listener=3, max_per_source=2)
    clients.add("other", "L", "O")
    clients.add("a1", "L", "A")
    clients.add("a2", "L", "A")
    for i in range(3, 50):
        assert clients.add(f"a{i}", "L", "A") == [(f"a{i - 2}", SOURCE_CAP)]
    assert sorted(clients) == ["a48", "a49", "other"]


def test_removing_forgets_and_empties() -> None:
    """A closed connection is forgotten (twice is harmless), and a source or address with
    none left takes no room."""
    clients: Clients[str] = Clients(max_per_listener=5, max_per_source=5)
    clients.add("a", "L", "A")
    clients.remove("a")
    clients.remove("a")
    clients.touch("a")
    assert len(clients) == 0 and clients.on("L") == 0 and "a" not in clients
    assert clients._listeners == {} and clients._sources == {}


def test_lowered_caps_apply_to_the_next_connection() -> None:
    """Caps lowered in place (a reload) leave open connections; the next one to come closes
    as many of its source's (then its address's) as the new caps need."""
    clients: Clients[str] = Clients(max_per_listener=10, max_per_source=10)
    for i in range(6):
        clients.add(f"a{i}", "L", "A")
    clients.max_per_source = 3
    clients.max_per_listener = 2
    closed = clients.add("a6", "L", "A")
    assert closed == [("a0", SOURCE_CAP), ("a1", SOURCE_CAP), ("a2", SOURCE_CAP), ("a3", SOURCE_CAP), ("a4", EVICTED)]
    assert sorted(clients) == ["a5", "a6"]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 6),
    st.lists(
        st.tuples(st.sampled_from("aanrt"), st.integers(0, 2), st.integers(0, 4), st.integers(0, 40)), max_size=80
    ),
)
def test_the_caps_always_hold_and_only_the_heaviest_makes_way(
    per_listener: int, per_source: int, steps: list[tuple[str, int, int, int]]
) -> None:
    """Any sequence of opens, touches, removals and reloads: after each open no address and
    no source is over its cap; a connection closed for a source's cap is that source's
    least recently active; one closed for an address's cap was on that address, of a
    source holding the most there, and its least recently active there."""
    clients: Clients[int] = Clients(per_listener, per_source)
    where: dict[int, tuple[str, str]] = {}  # connection -> (listener, source), oldest activity first
    rng = random.Random(0)
    for n, (op, listener_i, source_i, pick) in enumerate(steps):
        listener, source = f"L{listener_i}", f"S{source_i}"
        if op == "a":
            closed = clients.add(n, listener, source)
            where[n] = (listener, source)
            for victim, why in closed:
                assert victim != n
                if why == SOURCE_CAP:
                    assert victim == next(c for c, w in where.items() if w[1] == source)
                else:
                    assert why == EVICTED and where[victim][0] == listener
                    here = [w[1] for w in where.values() if w[0] == listener]
                    assert here.count(where[victim][1]) == max(here.count(s) for s in here)
                    assert victim == next(c for c, w in where.items() if w == where[victim])
                del where[victim]
            assert clients.held_by(source) <= clients.max_per_source
            assert clients.on(listener) <= clients.max_per_listener
        elif op == "n" and where:
            touched = list(where)[pick % len(where)]
            clients.touch(touched)
            where[touched] = where.pop(touched)
        elif op == "r" and where:
            gone = list(where)[pick % len(where)]
            clients.remove(gone)
            del where[gone]
        elif op == "t":
            clients.max_per_source, clients.max_per_listener = rng.randint(1, 6), rng.randint(1, 6)
        assert sorted(clients) == sorted(where)
        for name, address in clients._listeners.items():
            counts = [w[1] for w in where.values() if w[0] == name]
            assert address.size == len(counts) and address.most == max(counts.count(s) for s in counts)


# -- the config ----------------------------------------------------------------------------


def _load(tmp_path: Path, dns_server: dict[str, Any]) -> Any:
    raw = configs.base()
    raw["dns_server"] = dns_server
    return load(configs.write(tmp_path, raw))


def _problems(tmp_path: Path, dns_server: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, dns_server)
    return [f"{'.'.join(str(k) for k in p.path)}: {p.message}" for p in caught.value.problems]


def test_tcp_max_per_source_defaults_to_64_within_tcp_max_clients(tmp_path: Path) -> None:
    assert _load(tmp_path, {}).dns_server.tcp_max_per_source == 64
    assert _load(tmp_path, {"tcp_max_clients": 20}).dns_server.tcp_max_per_source == 20
    assert _load(tmp_path, {"tcp_max_per_source": 500}).dns_server.tcp_max_per_source == 500


@pytest.mark.parametrize(
    ("dns_server", "problem"),
    [
        ({"tcp_max_per_source": 0}, "dns_server.tcp_max_per_source: 0 is out of range (1 to 1000000)"),
        ({"tcp_max_per_source": 2.5}, "dns_server.tcp_max_per_source: 2.5 is not a whole number (1 to 1000000)"),
        (
            {"tcp_max_per_source": "64"},
            "dns_server.tcp_max_per_source: must be a whole number from 1 to 1000000, not a string",
        ),
        (
            {"tcp_max_clients": 100, "tcp_max_per_source": 101},
            "dns_server.tcp_max_per_source: 101 is more than tcp_max_clients (100)",
        ),
        (
            {"tcp_max_per_souce": 10},
            "dns_server.tcp_max_per_souce: unknown key",
        ),
    ],
)
def test_tcp_max_per_source_is_validated(tmp_path: Path, dns_server: dict[str, Any], problem: str) -> None:
    problems = _problems(tmp_path, dns_server)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


# -- metrics -------------------------------------------------------------------------------


def test_metrics_count_connections_closed_for_the_source_cap_and_refused_transfers(tmp_path: Path) -> None:
    """/metrics: ``gtm_dns_tcp_closed_total{reason="source_cap"}`` counts connections closed
    for their source's cap (its help names every reason, ``stalled`` too), and
    ``gtm_dns_transfers_refused_total{cap=...}`` the zone transfers refused by each
    ``dns_server.transfer`` cap."""
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["dns_server"] = {"tcp_max_per_source": 2, "transfer": {"max_in_flight": 2, "max_per_source": 1}}
    top = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    assert top.dns is not None
    tcp = top.dns.tcp
    for _ in range(5):  # one source, five connections: three closed for its cap
        peer = IPv4Address("TCP", "192.0.2.66", 40000)
        proto = tcp.buildProtocol(peer)
        transport = StringTransportWithDisconnection(peerAddress=peer)
        transport.protocol = proto
        proto.makeConnection(transport)
    slots = tcp.slots
    assert slots.take("192.0.2.1") is not None
    assert slots.take("192.0.2.1") is None  # refused: max_per_source 1
    assert slots.take("192.0.2.2") is not None
    assert slots.take("192.0.2.3") is None  # refused: max_in_flight 2
    text = slices.whole(metrics_steps(top)).body.decode()
    assert 'gtm_dns_tcp_closed_total{reason="source_cap"} 3.0' in text
    assert "gtm_dns_tcp_connections 2.0" in text
    help_line = next(line for line in text.splitlines() if line.startswith("# HELP gtm_dns_tcp_closed_total"))
    for reason in ("idle", "partial", "evicted", "source_cap", "stalled"):
        assert reason in help_line, help_line
    assert 'gtm_dns_transfers_refused_total{cap="max_in_flight"} 1.0' in text
    assert 'gtm_dns_transfers_refused_total{cap="max_per_source"} 1.0' in text
