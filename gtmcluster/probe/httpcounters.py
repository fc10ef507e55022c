"""A link's traffic counters read over HTTP(S): a `probe.linkrate.TrafficReader` for
``traffic: {http: {...}}`` (`config.monitoring.HttpCounterSource`).

Routers and hosts export interface counters to Prometheus (node_exporter's
``node_network_receive_bytes_total{device="eth0"}``, an SNMP exporter's ``ifHCInOctets``),
and a load balancer in front of the link counts them too (HAProxy's stats CSV, ``bin`` and
``bout`` of a frontend). Each reading is one GET made by the http check's reader
(`probe.http`), so it has the same cap and deadline as a load source's: at most the
source's `max_response_bytes` of response read (4 MiB unless set), the whole exchange
(connecting, headers, body) within its `timeout`, and the connection closed, or aborted,
before the reading's Deferred fires: a status other than 200 ends the reading at its
status line, a page over the cap or not whole is an error, never figures. A reader makes
one request at a time: a `read` while the last is still in flight fails at once (the
poller skips such rounds too). The page is read by `probe.loadread` as the load sources'
bodies are: two octet counters, received and sent, for `probe.linkrate.CounterRate` to
turn into rates.
"""

from __future__ import annotations

import ipaddress
import math
import urllib.parse
from collections.abc import Mapping
from typing import Any

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gtmcluster.config.monitoring import HttpCheck, HttpCounterSource
from gtmcluster.probe import loadread
from gtmcluster.probe.base import Result, Target
from gtmcluster.probe.http import HttpChecker
from gtmcluster.probe.linkrate import COUNTER64, Counters
from gtmcluster.runtime.reactors import TimeFDSetTCP


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


def request_of(source: HttpCounterSource) -> tuple[HttpCheck, Target]:
    """The check (GET, 200 wanted, at most `max_response_bytes` read) and target of a
    counters page (its url http or https, its host an IP address: `config.links` made sure)."""
    url = source.url
    parts = urllib.parse.urlsplit(url)
    tls = parts.scheme == "https"
    address = ipaddress.ip_address(parts.hostname or "")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.netloc.rpartition("@")[2]
    settings = HttpCheck(
        tls=tls, path=path, host=host, expect_status=(200,), max_response_bytes=source.max_response_bytes
    )
    return settings, Target(address, parts.port or (443 if tls else 80), f"counters {url}")


class HttpCounterReader:
    """Reads a link's counters from a page over HTTP(S) (a `TrafficReader`), one request
    at a time."""

    def __init__(self, reactor: TimeFDSetTCP, source: HttpCounterSource, timeout: float):
        self.reactor = reactor
        self.source = source
        self.timeout = timeout
        settings, self._target = request_of(source)
        self._check = HttpChecker(settings, reactor, timeout, figures=self._figures)
        self._in_flight: Deferred[Result] | None = None

    def describe(self) -> str:
        return str(self.source)

    @property
    def in_flight(self) -> bool:
        """A reading is under way (its connection open)."""
        return self._in_flight is not None

    def read(self) -> Deferred[Counters]:
        if self._in_flight is not None:
            return defer.fail(CounterError("the last reading is still in flight"))
        d = self._in_flight = self._check(self._target)  # (fires within the timeout, closed)
        d.addBoth(self._landed)
        return d.addCallback(_counters).addErrback(_reason)

    def _landed(self, outcome: Any) -> Any:
        self._in_flight = None
        return outcome

    def _figures(self, body: bytes) -> Mapping[str, float]:
        try:
            counters = octets(body, self.source)
        except CounterError as e:
            raise loadread.Unreadable(str(e)) from None
        # (exact: each counter came from a float, read from the page)
        return {"received": float(counters.in_octets), "sent": float(counters.out_octets)}


def _counters(result: Result) -> Counters:
    if not result.ok or result.data is None:
        raise CounterError(result.reason)
    return Counters(int(result.data["received"]), int(result.data["sent"]))


def _reason(failure: Failure) -> Failure:
    """A failure with a reason a log line can hold (a cancelled reading)."""
    if failure.check(CounterError):
        return failure
    if failure.check(defer.CancelledError):
        return Failure(CounterError("the reading was cancelled"))
    return Failure(CounterError(failure.getErrorMessage() or type(failure.value).__name__))
