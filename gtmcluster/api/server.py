"""The HTTP API's plumbing: routing, bearer-token checks, JSON answers and errors.

Every JSON answer, errors included, is ``application/json`` (``{"error": ...}`` with a
4xx status); a handler raises `ApiError` for bad input, and may answer later with a
Deferred (a reload reads the file in a thread). A POST needs the bearer token when
one is configured; when the API listens beyond loopback (or ``api.token_for_reads`` is
set), every request does, but for the dashboard page itself. Unexpected
errors are logged and answered 500 without a traceback.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import resource, server
from twisted.web.iweb import IRequest

log = Logger()

JSON = b"application/json"
MAX_BODY = 64 * 1024


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


#: a handler gets the query arguments and the path's named parts
Handler = Callable[[Mapping[str, str], Mapping[str, str]], Any]


@dataclass(frozen=True)
class Route:
    method: str  # GET or POST
    pattern: str  # a regular expression for the whole path, with named groups
    handler: Handler
    params: tuple[str, ...] = ()  # query parameters it accepts
    #: served without the token even where reads need one: the dashboard page holds no
    #: data (it asks the API with the token from its #token=... fragment)
    public: bool = False

    def match(self, path: str) -> dict[str, str] | None:
        m = re.fullmatch(self.pattern, path)
        return None if m is None else m.groupdict()


def _json(request: IRequest, code: int, body: Any) -> bytes:
    request.setResponseCode(code)
    request.setHeader(b"content-type", JSON)
    request.setHeader(b"cache-control", b"no-store")
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def query_args(request: IRequest) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw_key, values in (request.args or {}).items():
        key = raw_key.decode(errors="replace")
        if len(values) != 1:
            raise ApiError(400, f"give {key!r} once")
        out[key] = values[0].decode(errors="replace")
    return out


def _answer(request: IRequest, result: Any) -> bytes:
    if isinstance(result, Raw):
        request.setHeader(b"content-type", result.content_type)
        request.setHeader(b"cache-control", b"no-store")
        return result.body
    return _json(request, 200, result)


def _error(request: IRequest, e: BaseException, method: str, path: str) -> bytes:
    if isinstance(e, ApiError):
        if e.code == 401:
            request.setHeader(b"www-authenticate", b'Bearer realm="gtmcluster"')
        return _json(request, e.code, {"error": e.message})
    log.failure("the API failed on {method} {path}", Failure(e), method=method, path=path)
    return _json(request, 500, {"error": "internal error (see the node's log)"})


class Api(resource.Resource):
    """Every path of the API, routed by method and path pattern."""

    isLeaf = True

    def __init__(self, routes: list[Route], token: Callable[[], str | None], token_everywhere: Callable[[], bool]):
        super().__init__()
        self.routes = routes
        self.token = token
        self.token_everywhere = token_everywhere

    def render(self, request: IRequest) -> bytes:
        method = request.method.decode(errors="replace") if request.method else "?"
        path = (request.path or b"/").decode(errors="replace")
        if path != "/":
            path = path.rstrip("/")
        try:
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
            if not route.public:
                self._authorize(request, method)
            args = query_args(request)
            unknown = sorted(set(args) - set(route.params))
            if unknown:
                known = ", ".join(route.params) or "none"
                raise ApiError(400, f"unknown parameter {unknown[0]!r} (parameters: {known})")
            if method == "POST":
                content = request.content.read(MAX_BODY + 1) if request.content else b""
                if len(content) > MAX_BODY:
                    raise ApiError(413, "request body too large")
            result = route.handler(args, parts)
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

    def _authorize(self, request: IRequest, method: str) -> None:
        token = self.token()
        if token is None or (method != "POST" and not self.token_everywhere()):
            return
        header = request.getHeader(b"authorization") or b""
        given = header[7:] if header[:7].lower() == b"bearer " else b""
        if not given:
            raise ApiError(401, "this needs the API's bearer token (Authorization: Bearer TOKEN)")
        if not hmac.compare_digest(given, token.encode()):
            raise ApiError(403, "wrong bearer token")


class Site(server.Site):
    """A site that keeps per-request access lines out of the node's log."""

    def log(self, request: Any) -> None:
        pass


def site(routes: list[Route], token: Callable[[], str | None], token_everywhere: Callable[[], bool]) -> server.Site:
    s = Site(Api(routes, token, token_everywhere))
    s.noisy = False
    s.displayTracebacks = False
    return s
