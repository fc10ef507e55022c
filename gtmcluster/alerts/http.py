"""One attempt of a webhook delivery, with Twisted's HTTP client (`twisted.web.client.Agent`).

- The URL's host is resolved (a name: ``getaddrinfo`` in the reactor's thread pool), and
  every address it gives is checked against the refused ranges (`config.alerts.refusal`,
  under ``alerts.allow``); the attempt connects to the first address that passes, and to no
  other (so a name that resolves elsewhere at connect time cannot lead the node into a
  refused range). None passing fails the attempt, naming the addresses.
- ``https`` is TLS verified against the system's trusted CAs for the URL's host name
  (`optionsForClientTLS`); ``http`` is plain.
- No connection within ``alerts.connect_timeout`` fails the attempt, and so does the whole
  attempt (resolve, connect, send, the answer's head and body) passing ``alerts.timeout``.
- Of the answer's body at most `MAX_BODY` bytes are read (for the log), the rest left
  unread and the connection closed; no connection is kept for another attempt.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from twisted.internet import defer, protocol
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint, wrapClientTLS
from twisted.internet.interfaces import IConsumer, IStreamClientEndpoint
from twisted.internet.ssl import optionsForClientTLS
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgentEndpointFactory, IBodyProducer, IResponse
from zope.interface import implementer

from gtmcluster.config.addresses import IPAddress
from gtmcluster.config.alerts import Alerts, Webhook, refusal
from gtmcluster.runtime.reactors import Runtime

#: bytes of an answer's body read at most
MAX_BODY = 4096


class Refused(Exception):
    """The URL's host resolves only to addresses a webhook may not reach."""


class HTTPPoster:
    """Posts with an `Agent` over the reactor (`delivery.Poster`)."""

    def __init__(self, reactor: Any, settings: Callable[[], Alerts]):
        self.reactor = reactor
        #: the settings in use (a reload changes them)
        self.settings = settings
        self.runtime = Runtime.of(reactor)

    def post(self, webhook: Webhook, body: bytes, headers: dict[str, str]) -> defer.Deferred[int]:
        d = defer.ensureDeferred(self._post(webhook, body, headers))
        return d.addTimeout(self.settings().timeout, self.reactor, self._late)

    def _late(self, result: Any, timeout: float) -> Any:
        """The attempt was cancelled at its deadline (however its cancellation ended)."""
        if isinstance(result, Failure):
            raise defer.TimeoutError(f"no answer within alerts.timeout ({timeout:g}s)")
        return result

    async def _post(self, webhook: Webhook, body: bytes, headers: dict[str, str]) -> int:
        parts = urlsplit(webhook.url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        address = await self._address(host, port)
        agent = Agent.usingEndpointFactory(
            self.reactor,
            _Endpoints(self.reactor, address, host, self.settings().connect_timeout),
            HTTPConnectionPool(self.reactor, persistent=False),
        )
        sent = Headers({k.encode(): [v.encode()] for k, v in headers.items()})
        response: IResponse = await agent.request(b"POST", webhook.url.encode(), sent, _Body(body))
        await read_capped(response)
        return int(response.code)

    async def _address(self, host: str, port: int) -> IPAddress:
        allow = self.settings().allow
        try:
            found: list[IPAddress] = [ipaddress.ip_address(host)]
        except ValueError:
            infos = await self.runtime.in_thread(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
            found = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
        refused = []
        for address in found:
            why = refusal(address, allow)
            if why is None:
                return address
            refused.append(why)
        raise Refused(f"{host}: " + "; ".join(refused) if refused else f"{host} resolves to no address")


@implementer(IAgentEndpointFactory)
class _Endpoints:
    """Connects to the one address checked, TLS verified for the URL's host."""

    def __init__(self, reactor: Any, address: IPAddress, host: str, timeout: float):
        self.reactor = reactor
        self.address = address
        self.host = host
        self.timeout = timeout

    def endpointForURI(self, uri: Any) -> IStreamClientEndpoint:
        kind = TCP6ClientEndpoint if self.address.version == 6 else TCP4ClientEndpoint
        endpoint: IStreamClientEndpoint = kind(self.reactor, str(self.address), uri.port, timeout=self.timeout)
        if uri.scheme == b"https":
            endpoint = wrapClientTLS(optionsForClientTLS(self.host), endpoint)
        return endpoint


@implementer(IBodyProducer)
class _Body:
    """The request body, written at once."""

    def __init__(self, data: bytes):
        self.data = data
        self.length = len(data)

    def startProducing(self, consumer: IConsumer) -> defer.Deferred[None]:
        consumer.write(self.data)
        return defer.succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


def read_capped(response: IResponse, cap: int = MAX_BODY) -> defer.Deferred[bytes]:
    """The first *cap* bytes of *response*'s body; the rest is not read (the connection
    closes)."""
    reader = _Capped(cap)
    response.deliverBody(reader)
    return reader.done


class _Capped(protocol.Protocol):
    def __init__(self, cap: int):
        self.cap = cap
        self.got: list[bytes] = []
        self.size = 0
        self.done: defer.Deferred[bytes] = defer.Deferred(lambda _: self._stop())

    def dataReceived(self, data: bytes) -> None:
        if self.done.called:
            return
        room = self.cap - self.size
        self.got.append(data[:room])
        self.size += min(len(data), room)
        if len(data) >= room:
            self._stop()
            self.done.callback(b"".join(self.got))

    def _stop(self) -> None:
        stop = getattr(self.transport, "stopProducing", None)  # (a response's body transport has it)
        if stop is not None:
            stop()

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        # (the answer's status came already: a body cut short is what was read of it)
        if not self.done.called:
            self.done.callback(b"".join(self.got))
