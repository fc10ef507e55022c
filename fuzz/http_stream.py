"""Fuzz target: the byte stream a server sends to the node's HTTP clients, as it arrives.

Where `load_body` hands a whole reply over at once, this one plays the server's side of a
connection: the reply (status line, headers, a body framed by length, by chunks or by the
close) arrives split at points the input chooses, to a load source's http monitor
(`probe.http`) or to a link's counters reader (`probe.httpcounters`), each with a cap the
input chooses. Input: byte 0 picks the reader (`READERS`), byte 1 seeds the split points,
byte 2 the cap (64 bytes to 16 KiB); the rest is what the server sends. The server closes
when it has sent everything (unless the reader closed first); a reader still waiting then
meets its deadline.

Invariants: every reading ends with a verdict (a `Result`; the counters reader: `Counters`
or its declared `CounterError`); never more than the cap is buffered; the connection is
closed (or aborted) by the end, and no timer is left; a success is an ``HTTP 200`` whose
figures are finite and in range (load figures 0..`MAX_FIGURE`, counters 0..2**64); a
failure carries no figures; the counters reader is free for its next reading; nothing
logs a traceback.
"""

from __future__ import annotations

import ipaddress
import math
import random
from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from fuzz.harness import Finding, no_tracebacks
from gtmcluster.config.loadsource import MAX_FIGURE
from gtmcluster.config.monitoring import HttpCheck, HttpCounterSource, LoadSource, Monitor, Sample
from gtmcluster.probe.base import Result, Target
from gtmcluster.probe.http import HttpProbe
from gtmcluster.probe.httpcounters import CounterError, HttpCounterReader
from gtmcluster.probe.kinds import make_check
from gtmcluster.probe.linkrate import COUNTER64, Counters

LOADS = (
    LoadSource(
        "prometheus",
        connections=(Sample("conns", (("proxy", "web"),)),),
        capacity=(Sample("limit"),),
        bytes=(Sample("bytes_total"),),
    ),
    LoadSource("haproxy", proxy="web", server="FRONTEND"),
    LoadSource("nginx", fixed_capacity=100),
    LoadSource("json"),
)
COUNTERS = (
    ("prometheus", LoadSource("prometheus"), (Sample("rx_bytes_total"),), (Sample("tx_bytes_total"),)),
    ("haproxy", LoadSource("haproxy", proxy="web", server="FRONTEND"), (), ()),
)
#: the readers byte 0 picks from: the load monitors, then the counters readers
READERS = len(LOADS) + len(COUNTERS)
TARGET = Target(ipaddress.ip_address("192.0.2.5"), 80, "virtual server vs")
TIMEOUT = 2.0


def _pieces(stream: bytes, seed: int) -> list[bytes]:
    """*stream* split at points *seed* chooses: single bytes, small and large pieces."""
    rng = random.Random(seed)
    out, at = [], 0
    while at < len(stream):
        size = rng.choice((1, 2, 7, 64, 1000, 1 << 16))
        out.append(stream[at : at + size])
        at += size
    return out


def _play(reactor: MemoryReactorClock, pieces: list[bytes], cap: int, outcome: list[Any]) -> StringTransport:
    """The server's side: connect, send *pieces* until the client closes, then close."""
    host, port, factory, _timeout, _bind = reactor.tcpClients[-1]
    protocol = factory.buildProtocol(IPv4Address("TCP", host, port))
    probe = getattr(protocol, "_wrappedProtocol", None)  # (the endpoint's wrapper around it)
    if protocol is None or not isinstance(probe, HttpProbe):
        raise Finding(f"the connection's protocol is {protocol!r}")
    transport = StringTransport()
    protocol.makeConnection(transport)
    for piece in pieces:
        if transport.disconnecting:
            break
        protocol.dataReceived(piece)
        if probe.buffered > cap:
            raise Finding(f"{probe.buffered} bytes buffered, over the cap of {cap}")
    if not outcome:
        protocol.connectionLost(Failure(ConnectionDone()))
    if not outcome:
        reactor.advance(TIMEOUT)
    if not outcome:
        raise Finding("the reading has no outcome after its deadline")
    if not transport.disconnecting:
        raise Finding("the reading ended with its connection open")
    if reactor.getDelayedCalls():
        raise Finding(f"timers left behind: {reactor.getDelayedCalls()!r}")
    return transport


def _monitor(load: LoadSource, pieces: list[bytes], cap: int) -> None:
    reactor = MemoryReactorClock()
    settings = HttpCheck(tls=False, path="/metrics", load=load, max_response_bytes=cap)
    check = make_check(Monitor("m", "http", 5.0, TIMEOUT, 1, 1, settings), reactor)
    for _ in range(2):  # (twice, a second apart: counters give rates)
        outcome: list[Any] = []
        check(TARGET).addBoth(outcome.append)
        _play(reactor, pieces, cap, outcome)
        result = outcome[0]
        if not isinstance(result, Result):
            raise Finding(f"the check ended with {result!r}, not a result")
        if result.ok and not result.reason.startswith("HTTP 200"):
            raise Finding(f"a load check succeeded without HTTP 200: {result.reason!r}")
        if not result.ok and result.data:
            raise Finding(f"a failed check carries figures: {result.data!r}")
        for name, value in (result.data or {}).items():
            if not (math.isfinite(value) and 0 <= value <= MAX_FIGURE):
                raise Finding(f"figure {name} is {value!r}")
        reactor.advance(1)


def _counters(which: int, pieces: list[bytes], cap: int) -> None:
    _, load, received, sent = COUNTERS[which]
    source = HttpCounterSource("http://192.0.2.7:9100/metrics", load, received, sent, cap)
    reactor = MemoryReactorClock()
    reader = HttpCounterReader(reactor, source, TIMEOUT)
    outcome: list[Any] = []
    reader.read().addBoth(outcome.append)
    _play(reactor, pieces, cap, outcome)
    got = outcome[0]
    if isinstance(got, Failure):
        if not got.check(CounterError) or not str(got.value):
            raise Finding(f"the reading failed with {got!r}, not a CounterError with a reason")
    elif not isinstance(got, Counters) or not all(0 <= n < COUNTER64 for n in (got.in_octets, got.out_octets)):
        raise Finding(f"the reading gave {got!r}")
    if reader.in_flight:
        raise Finding("the reader still counts a reading in flight")


def test_one_input(data: bytes) -> None:
    if len(data) < 3:
        return
    reader, seed, cap = data[0] % READERS, data[1], 64 + data[2] * 64
    pieces = _pieces(data[3:], seed)
    with no_tracebacks():
        if reader < len(LOADS):
            _monitor(LOADS[reader], pieces, cap)
        else:
            _counters(reader - len(LOADS), pieces, cap)
