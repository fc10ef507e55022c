"""One webhook attempt with Twisted's Agent, on a memory reactor with a clock: the resolved
address checked against the refused ranges at send time (and only a checked address
connected to), the connect and total deadlines, the answer's body read capped."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.python.failure import Failure

from gtmcluster.alerts.http import MAX_BODY, HTTPPoster, Refused, _Capped
from gtmcluster.config.alerts import Alerts, Webhook


def hook(url: str) -> Webhook:
    return Webhook(url, Path("/nowhere"), b"0123456789abcdef-secret")


def failure_of(d: defer.Deferred[int]) -> BaseException:
    failures: list[BaseException] = []

    def keep(failure: Failure) -> None:
        failures.append(failure.value or Exception("no value"))

    d.addErrback(keep)
    assert failures, "the attempt did not fail"
    return failures[0]


def test_a_name_resolving_into_a_refused_range_is_refused_at_send_time() -> None:
    """``localhost`` passes no config check as a name would (it resolves elsewhere at send
    time): the check on what it resolves to refuses it, and nothing is connected to."""
    reactor = MemoryReactorClock()
    poster = HTTPPoster(reactor, Alerts)
    error = failure_of(poster.post(hook("http://localhost:9/hook"), b"{}", {}))
    assert isinstance(error, Refused) and "special-purpose" in str(error)
    assert reactor.tcpClients == []


def test_the_checked_address_is_the_one_connected_to() -> None:
    reactor = MemoryReactorClock()
    settings = Alerts(allow=(ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")), connect_timeout=2)
    poster = HTTPPoster(reactor, lambda: settings)
    poster.post(hook("http://localhost:8099/hook"), b"{}", {})
    host, port, _, timeout, _ = reactor.tcpClients[0]
    assert (host, port, timeout) in (("127.0.0.1", 8099, 2), ("::1", 8099, 2))


def test_no_answer_within_the_timeout_fails_the_attempt() -> None:
    reactor = MemoryReactorClock()
    poster = HTTPPoster(reactor, lambda: Alerts(timeout=3, connect_timeout=1))
    d = poster.post(hook("http://93.184.216.34/hook"), b"{}", {})
    assert len(reactor.tcpClients) == 1  # connecting (never answered, in memory)
    reactor.advance(2.9)
    assert not d.called
    reactor.advance(0.2)
    error = failure_of(d)
    assert isinstance(error, defer.TimeoutError) and "alerts.timeout" in str(error)


@pytest.mark.parametrize("size", [10, MAX_BODY, 10 * MAX_BODY])
def test_the_answers_body_is_read_capped(size: int) -> None:
    reader = _Capped(MAX_BODY)
    transport = StringTransport()
    reader.makeConnection(transport)
    got: list[bytes] = []
    reader.done.addCallback(got.append)
    for _ in range(0, size, 1000):
        reader.dataReceived(b"x" * 1000)
    reader.connectionLost()
    assert len(got) == 1 and len(got[0]) == min(-(-size // 1000) * 1000, MAX_BODY)
    assert transport.producerState == ("stopped" if size >= MAX_BODY else "producing")


def test_https_is_tls_verified_for_the_urls_host() -> None:
    """An https URL connects through TLS (`optionsForClientTLS` for the URL's host: the
    certificate checked against it and the system's CAs); http connects plain."""
    reactor = MemoryReactorClock()
    poster = HTTPPoster(reactor, Alerts)
    poster.post(hook("https://93.184.216.34/hook"), b"{}", {})
    poster.post(hook("http://93.184.216.34/hook"), b"{}", {})
    # (the endpoints' wrapping factories: Twisted's own, read through their attributes)
    tls_factory, plain_factory = (getattr(client[2], "_wrappedFactory", None) for client in reactor.tcpClients)
    assert isinstance(tls_factory, TLSMemoryBIOFactory)
    assert not isinstance(plain_factory, TLSMemoryBIOFactory)
