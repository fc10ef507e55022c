"""The HTTP API's plumbing: the checks before a body is read, routing, JSON answers, errors.

A request is checked (`gtmcluster.api.guard`: Host, Origin, Content-Type, bearer token,
length) by `ApiChannel` as soon as its headers are in. A refused one is answered at once
(``Connection: close``) and its body, if any, is never read: what the client still sends is
dropped for at most `DRAIN_SECONDS`, then the connection is closed. An admitted body is
kept in memory, and a chunked one is cut at the limit (413). Only then does `Api` route it.

Every JSON answer, errors included, is ``application/json`` (``{"error": ...}`` with a
4xx status); a handler raises `ApiError` for bad input, and may answer later with a
Deferred (a reload reads the file over many reactor turns). Unexpected errors are logged and answered
500 without a traceback.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.x509.oid import NameOID
from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, resource, server
from twisted.web.iweb import IRequest

from gtmcluster.api import guard
from gtmcluster.api.guard import Policy, Refusal

log = Logger()

JSON = b"application/json"
#: seconds a refused request's client may go on sending (dropped) before the connection is
#: closed: time to finish sending a small body and read the answer, never to hold on
DRAIN_SECONDS = 2.0
#: status texts twisted.web does not know
_REASONS = {421: "Misdirected Request"}


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
class Stream:
    """An answer written over time (the log, followed): *start* takes the request, sets its
    headers, writes and finishes it when it will."""

    start: Callable[[Any], None]


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


class Api(resource.Resource):
    """Every path of the API, routed by method and path pattern; and the checks a request
    passes before its body is read (`admit`, called by `ApiChannel`)."""

    isLeaf = True

    def __init__(self, routes: list[Route], policy: Callable[[], Policy], refused: Counter[str] | None = None):
        super().__init__()
        self.routes = routes
        self.policy = policy
        #: requests refused by `admit`, by reason (see `guard.Refusal.reason`)
        self.refused: Counter[str] = refused if refused is not None else Counter()

    def admit(self, incoming: guard.Incoming) -> Refusal | None:
        """Why this request is refused, or None; counted by reason."""
        path = guard.path_of(incoming.target)
        public = any(r.public and r.method == incoming.method and r.match(path) is not None for r in self.routes)
        refusal = guard.check(incoming, self.policy_for(incoming), public)
        if refusal is not None:
            self.refused[refusal.reason] += 1
        return refusal

    def policy_for(self, incoming: guard.Incoming) -> Policy:
        """The policy, with the body limit of the route asked for when it takes more."""
        policy = self.policy()
        path = guard.path_of(incoming.target)
        for r in self.routes:
            if r.raw_body > policy.max_body and r.method == incoming.method and r.match(path) is not None:
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
            if route.raw_body:
                content = getattr(request, "content", None)
                raw = content.getvalue() if isinstance(content, io.BytesIO) else b""
                result = route.handler(args, parts, raw)
            else:
                result = route.handler(args, parts)
            if isinstance(result, Stream):
                result.start(request)
                return server.NOT_DONE_YET  # type: ignore[return-value]
            if isinstance(result, defer.Deferred):
                result.addCallbacks(
                    lambda value: self._finish(request, lambda: _answer(request, value)),
                    lambda failure: self._finish(request, lambda: _error(request, failure.value, method, path)),
                )
                return server.NOT_DONE_YET  # type: ignore[return-value]  # twisted.web: bytes or NOT_DONE_YET
            return _answer(request, result)
        except Exception as e:
            return _error(request, e, method, path)

    def _finish(self, request: IRequest, body: Callable[[], bytes]) -> None:
        """Write a late answer, unless the client has gone meanwhile."""
        if getattr(request, "_disconnected", False):
            return
        request.write(body())
        request.finish()


class ApiRequest(server.Request):
    """A request whose body is kept in memory, up to the policy's limit (a chunked body
    beyond it is cut: 413)."""

    #: set by ApiChannel once the request passed `Api.admit`
    admitted = False
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
    """An HTTP connection to the API that checks each request when its headers are in."""

    site: Site
    #: a request was refused: nothing more is read from this connection
    refused = False
    _drain: IDelayedCall | None = None

    def allHeadersReceived(self) -> None:
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
        request.admitted = True
        request.max_body = api.policy_for(incoming).max_body
        super().allHeadersReceived()

    def refuse(self, refusal: Refusal) -> None:
        """Answer *refusal* now and read nothing more: what the client still sends is
        dropped, and the connection closes once it stops sending or after DRAIN_SECONDS."""
        if self.refused:
            return
        self.refused = True
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
        if self._drain is not None and self._drain.active():
            self._drain.cancel()
        self._drain = None
        super().connectionLost(reason)


class Site(server.Site):
    """The API's site: its connections check requests early; no per-request access lines
    in the node's log."""

    protocol = ApiChannel  # type: ignore[assignment]
    requestFactory = ApiRequest

    def __init__(self, api: Api):
        super().__init__(api)
        self.api = api

    def log(self, request: Any) -> None:
        pass


def site(routes: list[Route], policy: Callable[[], Policy], refused: Counter[str] | None = None) -> Site:
    s = Site(Api(routes, policy, refused))
    s.noisy = False
    s.displayTracebacks = False
    return s
