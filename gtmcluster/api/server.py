"""The HTTP API's plumbing: the checks before a body is read, routing, JSON answers, errors,
and what each client may hold.

A connection is counted when it opens (`gtmcluster.api.slots.Connections`, caps in
``api.limits``): past a cap it displaces the least recently active connection that never
showed the token, or is refused (503) when every one there did. It then has
``idle_timeout`` seconds to send a whole request head (and again after each answer), else
it is closed.

A request is checked (`gtmcluster.api.guard`: Host, Origin, Content-Type, bearer token,
length) by `ApiChannel` as soon as its headers are in. A refused one is answered at once
(``Connection: close``) and its body, if any, is never read: what the client still sends is
dropped for at most `DRAIN_SECONDS`, then the connection is closed. An admitted body is
kept in memory, and a chunked one is cut at the limit (413). Only then does `Api` route it,
once it has a slot for its answer (`Slots`: apart for clients with and without the token,
in all and per source; 503 beyond).

Every JSON answer, errors included, is ``application/json`` (``{"error": ...}`` with a
4xx status); a handler raises `ApiError` for bad input, and may answer later with a
Deferred (a reload reads the file over many reactor turns). Unexpected errors are logged and answered
500 without a traceback. A large answer, and one sent from a file (`FileAnswer`), is
written at the pace its client reads (`gtmcluster.api.sending`); its slot is held until its
last byte is handed to the connection, and a client that stops reading for
``stall_timeout`` seconds is cut.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from cryptography.x509.oid import NameOID
from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, resource, server
from twisted.web.iweb import IRequest

from gtmcluster.api import guard, sending
from gtmcluster.api.guard import Policy, Refusal
from gtmcluster.api.slots import Caps, Connections, Held, Slots
from gtmcluster.config.model import ApiLimits

log = Logger()

JSON = b"application/json"
#: seconds a refused request's client may go on sending (dropped) before the connection is
#: closed: time to finish sending a small body and read the answer, never to hold on
DRAIN_SECONDS = 2.0
#: status texts twisted.web does not know
_REASONS = {421: "Misdirected Request", 431: "Request Header Fields Too Large"}
#: what a connection over a cap is told
BUSY_CONNECTIONS = "too many connections to this node's API{where}; try again shortly"


class ApiError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Raw:
    """A non-JSON answer (the dashboard page, Prometheus text)."""

    content_type: bytes
    body: bytes


@dataclass(frozen=True)
class FileAnswer:
    """An answer read from an open file as it is sent (a config bundle): the file is
    closed once sent, or when the client goes."""

    content_type: bytes
    file: BinaryIO


@dataclass(frozen=True)
class Stream:
    """An answer written over time (the node's log): *start* takes the request, sets its
    headers, writes and finishes it when it will; it may raise `ApiError` before writing.
    *lasting*: it may stay open (a follower), under slots of its own, so it gives back its
    answer slot once started."""

    start: Callable[[Any], None]
    lasting: bool = False


#: a handler gets the query arguments and the path's named parts
Handler = Callable[..., Any]


@dataclass(frozen=True)
class Route:
    method: str  # GET or POST
    pattern: str  # a regular expression for the whole path, with named groups
    handler: Handler
    params: tuple[str, ...] = ()  # query parameters it accepts
    #: served without the token even where reads need one: the dashboard page holds no
    #: data (it asks the API with the token from its #token=... fragment)
    public: bool = False
    #: needs the token on every address, reads too: config text and what names its files
    secret: bool = False
    #: text fields a POST's JSON object body may give (passed with the query arguments,
    #: with "caller": who the connection is, see `caller`); empty: the body is not read
    body: tuple[str, ...] = ()
    #: the body is taken whole, up to this many bytes (over the policy's limit: a config
    #: bundle), and passed to the handler as a third argument; 0: not so
    raw_body: int = 0

    def match(self, path: str) -> dict[str, str] | None:
        m = re.fullmatch(self.pattern, path)
        return None if m is None else m.groupdict()


def _dumps(body: Any) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _json(request: IRequest, code: int, body: Any) -> bytes:
    request.setResponseCode(code)
    request.setHeader(b"content-type", JSON)
    request.setHeader(b"cache-control", b"no-store")
    return _dumps(body)


def query_args(request: IRequest) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw_key, values in (request.args or {}).items():
        key = raw_key.decode(errors="replace")
        if len(values) != 1:
            raise ApiError(400, f"give {key!r} once")
        out[key] = values[0].decode(errors="replace")
    return out


def body_fields(request: IRequest, fields: tuple[str, ...]) -> dict[str, str]:
    """The text *fields* of a request's JSON object body (none when it is empty)."""
    content = getattr(request, "content", None)
    raw = content.getvalue() if isinstance(content, io.BytesIO) else b""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body is not a JSON object")
    out = {}
    for key, value in body.items():
        if key not in fields:
            raise ApiError(400, f"unknown field {key!r} (fields: {', '.join(fields)})")
        if not isinstance(value, str):
            raise ApiError(400, f"{key!r} must be text")
        out[key] = value
    return out


def token_shown(request: IRequest) -> bool:
    """Whether the request carried the API's token (valid), needed or not."""
    return bool(getattr(request, "token_shown", False))


def source_of(request: IRequest) -> str:
    """The address the request's connection came from."""
    channel = getattr(request, "channel", None)
    if isinstance(channel, ApiChannel):
        return channel.source
    address = request.getClientAddress()
    return str(getattr(address, "host", ""))


def caller(request: IRequest) -> str:
    """Who the API's client is, as far as the connection proves it: the common name of its
    TLS client certificate, when it gave one; else "" (it holds the token, nothing more)."""
    transport = getattr(getattr(request, "channel", None), "transport", None)
    get_certificate = getattr(transport, "getPeerCertificate", None)
    if get_certificate is None:
        return ""
    try:
        certificate = get_certificate()
        if certificate is None:
            return ""
        names = certificate.to_cryptography().subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except Exception:  # not a TLS connection (yet): no certificate
        return ""
    name = names[0].value if names else ""
    return name if isinstance(name, str) else ""


def _answer(request: IRequest, result: Any) -> bytes:
    if isinstance(result, Raw):
        request.setHeader(b"content-type", result.content_type)
        request.setHeader(b"cache-control", b"no-store")
        return result.body
    return _json(request, 200, result)


def _error(request: IRequest, e: BaseException, method: str, path: str) -> bytes:
    if isinstance(e, ApiError):
        return _json(request, e.code, {"error": e.message})
    log.failure("the API failed on {method} {path}", Failure(e), method=method, path=path)
    return _json(request, 500, {"error": "internal error (see the node's log)"})


def _limits() -> ApiLimits:
    return ApiLimits()


class Api(resource.Resource):
    """Every path of the API, routed by method and path pattern; the checks a request
    passes before its body is read (`admit`, called by `ApiChannel`); the answers in
    progress, by kind of client and source (`answers`)."""

    isLeaf = True

    def __init__(
        self,
        routes: list[Route],
        policy: Callable[[], Policy],
        refused: Counter[str] | None = None,
        limits: Callable[[], ApiLimits] = _limits,
        closed: Counter[str] | None = None,
    ):
        super().__init__()
        self.routes = routes
        self.policy = policy
        self.limits = limits
        #: requests refused by `admit` or for want of a slot, by reason (see
        #: `guard.Refusal.reason`; "busy": no slot for the answer)
        self.refused: Counter[str] = refused if refused is not None else Counter()
        #: connections (and followers) the node closed, by why: displaced, idle, stalled,
        #: follow_time
        self.closed: Counter[str] = closed if closed is not None else Counter()
        #: answers in progress to clients that showed the token (True) and that did not
        self.answers = {True: Slots(), False: Slots()}

    def _routes_for(self, method: str, path: str) -> list[Route]:
        asked = "GET" if method == "HEAD" else method
        return [r for r in self.routes if r.method == asked and r.match(path) is not None]

    def admit(self, incoming: guard.Incoming) -> Refusal | None:
        """Why this request is refused, or None; counted by reason."""
        matching = self._routes_for(incoming.method, guard.path_of(incoming.target))
        public = any(r.public for r in matching)
        secret = any(r.secret for r in matching)
        refusal = guard.check(incoming, self.policy_for(incoming), public, secret)
        if refusal is not None:
            self.refused[refusal.reason] += 1
        return refusal

    def policy_for(self, incoming: guard.Incoming) -> Policy:
        """The policy, with the body limit of the route asked for when it takes more."""
        policy = self.policy()
        for r in self._routes_for(incoming.method, guard.path_of(incoming.target)):
            if r.raw_body > policy.max_body:
                return dataclasses.replace(policy, max_body=r.raw_body)
        return policy

    def render(self, request: IRequest) -> bytes:
        method = request.method.decode(errors="replace") if request.method else "?"
        path = guard.path_of((request.path or b"/").decode(errors="replace"))
        try:
            if not getattr(request, "admitted", False):
                # only requests that came through ApiChannel's checks are answered
                raise RuntimeError("a request reached the API without its checks")
            if method == "HEAD":
                method = "GET"
            found = [(r, parts) for r in self.routes if (parts := r.match(path)) is not None]
            if not found:
                raise ApiError(404, f"no such resource: {path}")
            allowed = sorted({r.method for r, _ in found})
            matching = [(r, parts) for r, parts in found if r.method == method]
            if not matching:
                request.setHeader(b"allow", ", ".join(allowed).encode())
                raise ApiError(405, f"{method} is not allowed here (allowed: {', '.join(allowed)})")
            route, parts = matching[0]
            args = query_args(request)
            unknown = sorted(set(args) - set(route.params))
            if unknown:
                known = ", ".join(route.params) or "none"
                raise ApiError(400, f"unknown parameter {unknown[0]!r} (parameters: {known})")
            if route.body:
                args.update(body_fields(request, route.body))
                args["caller"] = caller(request)
            held = self._hold(request)
            if route.raw_body:
                content = getattr(request, "content", None)
                raw = content.getvalue() if isinstance(content, io.BytesIO) else b""
                result = route.handler(args, parts, raw)
            else:
                result = route.handler(args, parts)
            if isinstance(result, Stream):
                result.start(request)
                if result.lasting:
                    held.release()
                return server.NOT_DONE_YET  # type: ignore[return-value]
            if isinstance(result, defer.Deferred):
                result.addCallbacks(
                    lambda value: self._late(request, lambda: self._result(request, value)),
                    lambda failure: self._late(request, lambda: _error(request, failure.value, method, path)),
                )
                return server.NOT_DONE_YET  # type: ignore[return-value]  # twisted.web: bytes or NOT_DONE_YET
            return self._result(request, result)
        except Exception as e:
            return _error(request, e, method, path)

    def _hold(self, request: IRequest) -> Held:
        """A slot for this request's answer, given back when it is finished or its client
        goes; ApiError 503 when its kind of client holds every one (in all or from its
        address)."""
        shown = token_shown(request)
        limits = self.limits()
        total = limits.answers if shown else limits.answers_without_token
        source = source_of(request)
        slots = self.answers[shown]
        why = slots.take(source, Caps(total, limits.answers_per_source))
        if why is not None:
            self.refused["busy"] += 1
            kind = "with the token" if shown else "without the token"
            raise ApiError(503, f"busy: as many answers {kind} as this node gives at once are in progress {why}")
        held = Held(slots, source)
        finished: Any = request
        finished.notifyFinish().addBoth(lambda _: held.release())
        return held

    def _result(self, request: IRequest, result: Any) -> bytes:
        """*result*'s body when it is small (twisted.web writes it); else NOT_DONE_YET, a
        `Sender` writing it."""
        if isinstance(result, FileAnswer):
            return self._send_file(request, result)
        body = _answer(request, result)
        if len(body) <= sending.SLICE or request.method == b"HEAD":
            return body
        request.setHeader(b"content-length", str(len(body)).encode())
        self._sender(request, io.BytesIO(body).read).start()
        return server.NOT_DONE_YET  # type: ignore[return-value]  # twisted.web: bytes or NOT_DONE_YET

    def _send_file(self, request: IRequest, answer: FileAnswer) -> bytes:
        request.setHeader(b"content-type", answer.content_type)
        request.setHeader(b"cache-control", b"no-store")
        try:
            size = os.fstat(answer.file.fileno()).st_size
        except OSError:
            answer.file.close()
            raise
        request.setHeader(b"content-length", str(size).encode())
        if request.method == b"HEAD":
            answer.file.close()
            request.write(b"")
            request.finish()
        else:
            self._sender(request, answer.file.read, answer.file.close).start()
        return server.NOT_DONE_YET  # type: ignore[return-value]

    def _sender(self, request: IRequest, read: Callable[[int], bytes], done: Callable[[], None] = lambda: None) -> Any:
        channel: Any = getattr(request, "channel", None)
        call_later = channel.callLater if channel is not None else None
        assert call_later is not None, "an answer is sent on a connection"

        def stalled() -> None:
            self.closed["stalled"] += 1

        return sending.Sender(request, read, call_later, self.limits().stall_timeout, stalled, done)

    def _late(self, request: IRequest, body: Callable[[], bytes]) -> None:
        """Write a late answer, unless the client has gone meanwhile."""
        if getattr(request, "_disconnected", False):
            return
        method = request.method.decode(errors="replace") if request.method else "?"
        try:
            data = body()
        except Exception as e:
            data = _error(request, e, method, (request.path or b"/").decode(errors="replace"))
        if not isinstance(data, bytes):  # NOT_DONE_YET: a Sender writes it
            return
        request.setHeader(b"content-length", str(len(data)).encode())
        request.write(data)
        request.finish()


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
    #: the address it came from
    source = ""
    _drain: IDelayedCall | None = None
    _deadline: IDelayedCall | None = None

    def connectionMade(self) -> None:
        super().connectionMade()
        transport: Any = self.transport
        self.source = str(getattr(transport.getPeer(), "host", ""))
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
        body = _dumps({"error": refusal.message})
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

    def __init__(self, api: Api, reactor: Any = None):
        super().__init__(api, reactor=reactor)
        self.api = api
        self.connections: Connections[ApiChannel] = Connections()

    def log(self, request: Any) -> None:
        pass


def site(
    routes: list[Route],
    policy: Callable[[], Policy],
    refused: Counter[str] | None = None,
    limits: Callable[[], ApiLimits] = _limits,
    reactor: Any = None,
    closed: Counter[str] | None = None,
) -> Site:
    """The API of *routes* under *policy* and *limits* (each asked again for every
    connection and request: a reload changes them); *refused* and *closed*: where refusals
    and closings are counted; *reactor*: its timers' (the global one when None)."""
    s = Site(Api(routes, policy, refused, limits, closed), reactor)
    s.noisy = False
    s.displayTracebacks = False
    return s
