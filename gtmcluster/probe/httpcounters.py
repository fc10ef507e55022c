"""A link's traffic counters read over HTTP(S): a `probe.linkrate.TrafficReader` for
``traffic: {http: {...}}`` (`config.model.HttpCounterSource`).

Routers and hosts export interface counters to Prometheus (node_exporter's
``node_network_receive_bytes_total{device="eth0"}``, an SNMP exporter's ``ifHCInOctets``),
and a load balancer in front of the link counts them too (HAProxy's stats CSV, ``bin`` and
``bout`` of a frontend). Each reading is one GET (Twisted's `Agent`, no connection kept),
its body capped at `MAX_BODY`, read by `probe.loadread` as the load sources' bodies are:
two octet counters, received and sent, for `probe.linkrate.CounterRate` to turn into rates.
"""

from __future__ import annotations

import math
from typing import Any

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.web.client import Agent, BrowserLikePolicyForHTTPS, HTTPConnectionPool, ResponseDone
from twisted.web.http_headers import Headers
from twisted.web.iweb import UNKNOWN_LENGTH, IResponse

from gtmcluster.config.monitoring import HttpCounterSource
from gtmcluster.probe import loadread
from gtmcluster.probe.linkrate import COUNTER64, Counters

#: the largest page read (an exporter of a big router is a few hundred kilobytes)
MAX_BODY = 4 * 1024 * 1024


class CounterError(Exception):
    """The page could not be fetched, or gives no counters; the message says why."""


def octets(body: bytes, source: HttpCounterSource) -> Counters:
    """The received and sent octet counters *source* names in *body*; raises `CounterError`."""
    try:
        if source.load.format == "prometheus":
            sums = loadread.prometheus_sums(body, {"received": source.received, "sent": source.sent})
            received, sent = sums["received"], sums["sent"]
        else:
            row = loadread.haproxy_row(body, source.load.proxy, source.load.server)
            received, sent = loadread.count_of(row["bin"], "bin"), loadread.count_of(row["bout"], "bout")
    except loadread.Unreadable as e:
        raise CounterError(str(e)) from None
    return Counters(_counter("received", received), _counter("sent", sent))


def _counter(what: str, value: float) -> int:
    if not math.isfinite(value) or not 0 <= value < COUNTER64:
        raise CounterError(f"{what} octets {value:g} is not a 64-bit counter")
    return int(value)


class _Capped(Protocol):
    """Collects a response body of at most `MAX_BODY` bytes."""

    def __init__(self, done: Deferred[bytes]):
        self.done = done
        self.parts: list[bytes] = []
        self.size = 0

    def dataReceived(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > MAX_BODY:
            self.parts = []
            if self.transport is not None:
                self.transport.stopProducing()  # type: ignore[attr-defined]
            if not self.done.called:
                self.done.errback(CounterError(f"the page is over {MAX_BODY:,} bytes"))
            return
        self.parts.append(data)

    def connectionLost(self, reason: Failure = Failure(ResponseDone())) -> None:  # noqa: B008
        if self.done.called:
            return
        if reason.check(ResponseDone):
            self.done.callback(b"".join(self.parts))
        else:
            self.done.errback(CounterError(f"the page was cut off: {reason.getErrorMessage()}"))


class HttpCounterReader:
    """Reads a link's counters from a page over HTTP(S) (a `TrafficReader`)."""

    def __init__(self, reactor: Any, source: HttpCounterSource, timeout: float):
        self.reactor = reactor
        self.source = source
        self.timeout = timeout
        self.agent = Agent(
            reactor,
            BrowserLikePolicyForHTTPS(),  # (https: the system's trusted CAs)
            connectTimeout=timeout,
            pool=HTTPConnectionPool(reactor, persistent=False),
        )

    def describe(self) -> str:
        return str(self.source)

    def read(self) -> Deferred[Counters]:
        d = Deferred.fromCoroutine(self._read())
        d.addTimeout(self.timeout, self.reactor)
        return d.addErrback(_reason)

    async def _read(self) -> Counters:
        headers = Headers({b"User-Agent": [b"gtmcluster link traffic"]})
        response = await self.agent.request(b"GET", self.source.url.encode(), headers)
        return octets(await self._body(response), self.source)

    def _body(self, response: IResponse) -> Deferred[bytes]:
        if response.code != 200:
            response.deliverBody(Protocol())  # (read and dropped, so the connection ends)
            raise CounterError(f"HTTP {response.code} {response.phrase.decode('latin-1', 'replace')}")
        if response.length is not UNKNOWN_LENGTH and response.length > MAX_BODY:
            response.deliverBody(Protocol())
            raise CounterError(f"the page is {response.length:,} bytes, over {MAX_BODY:,}")
        done: Deferred[bytes] = Deferred()
        response.deliverBody(_Capped(done))
        return done


def _reason(failure: Failure) -> Failure:
    """A failure with a reason a log line can hold (a timeout, a refused connection)."""
    if failure.check(CounterError):
        return failure
    if failure.check(defer.TimeoutError, defer.CancelledError):
        return Failure(CounterError("no answer in time"))
    return Failure(CounterError(failure.getErrorMessage() or type(failure.value).__name__))
