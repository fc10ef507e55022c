"""The API's connections: counted when they open, given deadlines, and each request checked
before its body is read.

A connection is counted when it opens (`gtmcluster.api.slots.Connections`, caps in
``api.limits``): past a cap it displaces the least recently active connection that never
showed the token, or is refused (503) when every one there did. It then has
``idle_timeout`` seconds to send a whole request head (and again after each answer), else
it is closed.

A request is checked (`gtmcluster.api.guard`: Host, Origin, Content-Type, bearer token,
length) by `ApiChannel` as soon as its headers are in. A refused one is answered at once
(``Connection: close``) and its body, if any, is never read: what the client still sends is
dropped for at most `DRAIN_SECONDS`, then the connection is closed. An admitted body is
kept in memory, and a chunked one is cut at the limit (413). Only then does `Api` route it.
What twisted.web refuses itself (a line over 16 KiB, a malformed header) is answered as
JSON too.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure
from twisted.web import http, server

from gtmcluster.api import guard, sending
from gtmcluster.api.guard import Policy, Refusal
from gtmcluster.api.server import Api, Route, default_limits, dumps
from gtmcluster.api.slots import Connections
from gtmcluster.config.model import ApiLimits
from gtmcluster.runtime.slots import Caps
from gtmcluster.runtime.sources import source_of

#: seconds a refused request's client may go on sending (dropped) before the connection is
#: closed: time to finish sending a small body and read the answer, never to hold on
DRAIN_SECONDS = 2.0
#: status texts twisted.web does not know
_REASONS = {421: "Misdirected Request", 431: "Request Header Fields Too Large"}
#: what a connection over a cap is told
BUSY_CONNECTIONS = "too many connections to this node's API{where}; try again shortly"


class ApiRequest(server.Request):
    """A request whose body is kept in memory, up to the policy's limit (a chunked body
    beyond it is cut: 413)."""

    #: set by ApiChannel once the request passed `Api.admit`
    admitted = False
    #: it showed the API's token (valid), whether or not its route needed it
    token_shown = False
    max_body = guard.MAX_BODY
    _received = 0
    _body: io.BytesIO

    def gotLength(self, length: int | None) -> None:
        self.content = self._body = io.BytesIO()
        self._received = 0

    def handleContentChunk(self, data: bytes) -> None:
        channel = self.channel
        if not isinstance(channel, ApiChannel) or channel.refused:
            return
        self._received += len(data)
        if self._received > self.max_body:
            channel.refuse(Refusal(413, "too_large", f"the request body is over {self.max_body} bytes"))
            return
        self._body.write(data)


class ApiChannel(http.HTTPChannel):
    """An HTTP connection to the API: counted among the connections (or refused) when it
    opens, given `ApiLimits.idle_timeout` to send each request head, and checking each
    request when its headers are in."""

    site: Site
    #: a request was refused: nothing more is read from this connection
    refused = False
    #: the source it came from (`sources.source_of`: an IPv4 address, an IPv6 /64), which
    #: every per-source cap counts
    source = ""
    _drain: IDelayedCall | None = None
    _deadline: IDelayedCall | None = None

    def connectionMade(self) -> None:
        super().connectionMade()
        transport: Any = self.transport
        self.source = source_of(str(getattr(transport.getPeer(), "host", "")))
        api = self.site.api
        limits = api.limits()
        # (twisted.web's own, in whole seconds: between reads of a request body)
        self.timeOut = max(1, round(limits.idle_timeout))
        self.setTimeout(self.timeOut)
        caps = Caps(limits.connections, limits.connections_per_source)
        admitted, displaced = self.site.connections.admit(self, self.source, caps)
        for other in displaced:
            api.closed["displaced"] += 1
            sending.abort(other.transport)
        if not admitted:
            api.refused["connections"] += 1
            where = " from this address" if self.site.connections.by_source[self.source] >= caps.per_source else ""
            self.refuse(Refusal(503, "connections", BUSY_CONNECTIONS.format(where=where)))
            return
        self._expect_head()

    def _expect_head(self) -> None:
        """Start the time the client has to send a whole request head."""
        self._stop_deadline()
        self._deadline = self.callLater(self.site.api.limits().idle_timeout, self._idle)

    def _stop_deadline(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def timeoutConnection(self) -> None:
        """twisted.web's own idle timeout (a request body that stopped coming)."""
        self._idle()

    def _idle(self) -> None:
        """No whole request head in time: close (what is still unsent may go for
        `ApiLimits.stall_timeout` more, then the connection is aborted)."""
        self._stop_deadline()
        self.setTimeout(None)
        if self._drain is not None:  # closing already
            return
        self.site.api.closed["idle"] += 1
        transport: Any = self.transport
        self.refused = True  # read nothing more
        self.loseConnection()
        self._drain = self.callLater(self.site.api.limits().stall_timeout, lambda: sending.abort(transport))

    def requestDone(self, request: Any) -> None:
        # (before twisted.web reads a pipelined request it kept: its head stops the clock)
        if not self.refused:
            self._expect_head()
        super().requestDone(request)

    def allHeadersReceived(self) -> None:
        self._stop_deadline()
        request = self.requests[-1]
        headers = request.requestHeaders

        def values(name: bytes) -> list[str]:
            return [v.decode("latin-1") for v in headers.getRawHeaders(name, [])]

        # (HTTPChannel keeps the request line in these until the body is in)
        method: bytes = self._command
        target: bytes = self._path
        transport: Any = self.transport
        incoming = guard.Incoming(
            method=method.decode("latin-1"),
            target=target.decode("latin-1"),
            hosts=values(b"host"),
            local=str(getattr(transport.getHost(), "host", "")),
            length=self.length,
            secure=self.isSecure(),
            origin=values(b"origin"),
            fetch_site=values(b"sec-fetch-site"),
            content_type=values(b"content-type"),
            authorization=values(b"authorization"),
        )
        api = self.site.api
        refusal = api.admit(incoming)
        if refusal is not None:
            self.refuse(refusal)
            return
        policy = api.policy_for(incoming)
        request.admitted = True
        request.max_body = policy.max_body
        connections = self.site.connections
        connections.touch(self)
        if guard.shows_token(incoming, policy):
            request.token_shown = True
            connections.trust(self)
        super().allHeadersReceived()

    def refuse(self, refusal: Refusal) -> None:
        """Answer *refusal* now and read nothing more: what the client still sends is
        dropped, and the connection closes once it stops sending or after DRAIN_SECONDS."""
        if self.refused:
            return
        self.refused = True
        self._stop_deadline()
        self.setRawMode()
        body = dumps({"error": refusal.message})
        head = [
            f"HTTP/1.1 {refusal.code} {_REASONS.get(refusal.code) or http.RESPONSES[refusal.code].decode()}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-store",
            "Connection: close",
        ]
        if refusal.code == 401:
            head.append('WWW-Authenticate: Bearer realm="gtmcluster"')
        transport: Any = self.transport
        transport.write("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        self.setTimeout(None)
        if self.isSecure():
            # Under TLS a half close would reach past TLS to the TCP connection, and TLS
            # closes only once this channel stops being the transport's producer: it sends
            # its close alert now, and the connection ends when the client answers it or
            # after DRAIN_SECONDS
            transport.unregisterProducer()
            transport.loseConnection()
            self._drain = self.callLater(DRAIN_SECONDS, transport.abortConnection)
            return
        close_writing = getattr(transport, "loseWriteConnection", None)
        if close_writing is not None:
            close_writing()
            self._drain = self.callLater(DRAIN_SECONDS, transport.abortConnection)
        else:
            transport.loseConnection()

    def lineLengthExceeded(self, line: bytes) -> None:
        """A request line or header over 16 KiB (twisted.web's limit): 414 or 431, as JSON."""
        if getattr(self, "_HTTPChannel__first_line", 1):
            self.refuse(Refusal(414, "bad_request", "the request line is over 16 KiB"))
        else:
            self.refuse(Refusal(431, "bad_request", "a request header is over 16 KiB"))

    def _respondToBadRequestAndDisconnect(self) -> None:
        """twisted.web's answer to a malformed request (a header without a colon, too many
        headers, a bad length), as JSON."""
        self.refuse(Refusal(400, "bad_request", "a malformed request (its line, a header or its length)"))

    def lineReceived(self, line: bytes) -> None:
        if not self.refused:
            super().lineReceived(line)

    def rawDataReceived(self, data: bytes) -> None:
        if not self.refused:
            super().rawDataReceived(data)

    def allContentReceived(self) -> None:
        if not self.refused:
            super().allContentReceived()

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        self._stop_deadline()
        if self._drain is not None and self._drain.active():
            self._drain.cancel()
        self._drain = None
        self.site.connections.remove(self)
        super().connectionLost(reason)


class Site(server.Site):
    """The API's site: its connections check requests early and are counted
    (`connections`); no per-request access lines in the node's log."""

    protocol = ApiChannel  # type: ignore[assignment]
    requestFactory = ApiRequest

    def __init__(self, api: Api, reactor: IReactorTime | None = None):
        super().__init__(api, reactor=reactor)
        self.api = api
        self.connections: Connections[ApiChannel] = Connections()

    def log(self, request: Any) -> None:
        pass


def site(
    routes: list[Route],
    policy: Callable[[], Policy],
    refused: Counter[str] | None = None,
    limits: Callable[[], ApiLimits] = default_limits,
    reactor: IReactorTime | None = None,
    closed: Counter[str] | None = None,
) -> Site:
    """The API of *routes* under *policy* and *limits* (each asked again for every
    connection and request: a reload changes them); *refused* and *closed*: where refusals
    and closings are counted; *reactor*: its timers' (the global one when None)."""
    s = Site(Api(routes, policy, refused, limits, closed), reactor)
    s.noisy = False
    s.displayTracebacks = False
    return s
