"""The peers of bench/compare.py as the benchmark starts them, with the configs it writes
(bench/peers.py): gdnsd 3 with its geoip plugin on `nets`, PowerDNS 4.7 with a LUA record
(packet cache on and off) and the bare Python floor (bench/floor.py), each asked the benchmark's sanity questions:
static names, and the wide IP for ECS subnets in each region and outside them and from an
LDNS, each answered with the data center our node's topology gives (the floor: statically)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI
from tests.support.benchmod import bench_module
from tests.support.dig import dig
from tests.support.nodeproc import loopback_address

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

peers: Any = bench_module("peers")
lib: Any = bench_module("comparelib")
SOURCES = 2  # the sanity check's LDNS is the second dnsperf source, 127.0.200.2


@pytest.fixture(params=["gdnsd", "pdns", "pdns-nocache", "floor"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    key = request.param
    missing = peers.unavailable([key])
    if missing:  # (gdnsd and PowerDNS are test tools: in CI a missing one fails)
        message = f"{missing[key]}: make test installs it"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    endpoint = lib.Endpoint(loopback_address(), 5300)
    args = argparse.Namespace(python=sys.executable, addresses={key: endpoint})
    peers.write_files(tmp_path, [key], {key: endpoint}, 1, SOURCES)
    running = peers.make_servers(args, tmp_path, [key])[key]
    running.start(lib.query(lib.ORIGIN, "SOA"), timeout=30)
    try:
        yield running
    finally:
        running.stop()


def test_each_peer_answers_as_the_benchmark_expects(server: Any) -> None:
    problems = []
    for ask in peers.sanity_asks(SOURCES):
        reply = lib.ask(server.endpoint, ask.message, timeout=2.0, source=ask.source)
        problem = "no reply" if reply is None else ask.check(reply, server.key)
        if problem:
            problems.append(f"{ask.label}: {problem}")
    assert problems == [], "\n" + server.tail()


def test_dig_with_a_client_subnet(server: Any) -> None:
    """A real resolver's view: dig's +subnet in the south region (DC2), where the peer decides."""
    result = dig(server.endpoint.host, server.endpoint.port, lib.WIDEIP, "A", "+subnet=10.17.3.0/24")
    expected = ["198.51.100.2"] if peers.SPECS[server.key].wideip == "topology" else [a for _, _, a in lib.POOL]
    assert result.status == "NOERROR"
    assert sorted(result.answer_data()) == expected


def test_over_tcp_as_compare_transport_tcp_asks(server: Any) -> None:
    """--transport tcp's sanity ask: each peer answers `www A` over TCP, but the floor (UDP only,
    so left out over TCP) does not."""
    many: Any = bench_module("manyclients")
    problems = many.tcp_sanity({server.key: server})
    if server.key in many.UDP_ONLY:
        assert problems == [f"{server.label} www A over TCP: no reply"]
    else:
        assert problems == [], "\n" + server.tail()
