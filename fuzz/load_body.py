"""Fuzz target: a load source's reply, from the bytes on the socket to the figures.

The input's first byte picks the source (0 prometheus, 1 haproxy, 2 nginx, 3 json); the
rest is what the server sent, fed to an http check with that ``load`` (its status line,
headers, plain or chunked body), twice, one reactor second apart, so counters give rates.

Invariants: each check ends with a verdict; a check that succeeds says ``HTTP 200`` and its
figures are finite and non-negative; a failure carries no figures; no exception escapes and
no traceback is logged.
"""

from __future__ import annotations

import ipaddress
import math

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from fuzz.harness import Finding, no_tracebacks
from gtmcluster.config.monitoring import HttpCheck, LoadSource, Monitor, Sample
from gtmcluster.probe.base import Check, Result, Target
from gtmcluster.probe.kinds import make_check

SOURCES = (
    LoadSource(
        "prometheus",
        connections=(Sample("conns", (("proxy", "web"),)),),
        capacity=(Sample("limit"),),
        bytes=(Sample("bytes_total"),),
        packets=(Sample("packets"),),
    ),
    LoadSource("haproxy", proxy="web", server="FRONTEND"),
    LoadSource("nginx", fixed_capacity=100),
    LoadSource("json"),
)
TARGET = Target(ipaddress.ip_address("192.0.2.5"), 80, "virtual server vs")


def _check_once(check: Check, reactor: MemoryReactorClock, reply: bytes) -> Result:
    out: list[object] = []
    check(TARGET).addBoth(out.append)
    host, port, factory, _timeout, _bind = reactor.tcpClients[-1]
    protocol = factory.buildProtocol(IPv4Address("TCP", host, port))
    if protocol is None:
        raise Finding("no protocol for the connection")
    protocol.makeConnection(StringTransport())
    protocol.dataReceived(reply)
    protocol.connectionLost(Failure(ConnectionDone()))
    if not out:
        reactor.advance(10)  # past the timeout
    if not out or not isinstance(out[0], Result):
        raise Finding(f"the check ended without a verdict: {out!r}")
    return out[0]


def test_one_input(data: bytes) -> None:
    if not data:
        return
    source = SOURCES[data[0] % len(SOURCES)]
    reply = data[1:]
    reactor = MemoryReactorClock()
    settings = HttpCheck(tls=False, path="/", load=source, max_response_bytes=65536)
    check = make_check(Monitor("m", "http", 5.0, 2.0, 1, 1, settings), reactor)
    with no_tracebacks():
        for _ in range(2):
            result = _check_once(check, reactor, reply)
            if result.ok and not result.reason.startswith("HTTP 200"):
                raise Finding(f"a load check succeeded without HTTP 200: {result.reason!r}")
            if not result.ok and result.data:
                raise Finding(f"a failed check carries figures: {result.data!r}")
            for name, value in (result.data or {}).items():
                if not (math.isfinite(value) and value >= 0):
                    raise Finding(f"figure {name} is {value!r}")
            reactor.advance(1)
