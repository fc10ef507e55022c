"""The HTTP API: JSON resources under /api/v1, served by twisted.web.

Every answer is JSON, errors included (``{"error": ...}`` with a 4xx status); a handler
raises `ApiError` for bad input. Unexpected errors are logged and answered with 500,
without a traceback to the client.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from twisted.logger import Logger
from twisted.web import resource, server
from twisted.web.iweb import IRequest

log = Logger()

JSON = b"application/json"

#: a handler gets the query arguments (each name once; repeated names are refused)
Handler = Callable[[Mapping[str, str]], Any]


class ApiError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _send(request: IRequest, code: int, body: Any) -> bytes:
    request.setResponseCode(code)
    request.setHeader(b"content-type", JSON)
    request.setHeader(b"cache-control", b"no-store")
    return json.dumps(body, indent=1, sort_keys=True).encode() + b"\n"


def query_args(request: IRequest) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw_key, values in (request.args or {}).items():
        key = raw_key.decode(errors="replace")
        if len(values) != 1:
            raise ApiError(400, f"give {key!r} once")
        out[key] = values[0].decode(errors="replace")
    return out


class JSONResource(resource.Resource):
    """GET returns what the handler builds from the query arguments."""

    isLeaf = True

    def __init__(self, handler: Handler, allowed: tuple[str, ...] = ()):
        super().__init__()
        self.handler = handler
        self.allowed = allowed

    def render(self, request: IRequest) -> bytes:
        method = request.method.decode(errors="replace") if request.method else "?"
        if method not in ("GET", "HEAD"):
            request.setHeader(b"allow", b"GET, HEAD")
            return _send(request, 405, {"error": f"{method} is not allowed here"})
        try:
            args = query_args(request)
            unknown = sorted(set(args) - set(self.allowed))
            if unknown:
                known = ", ".join(self.allowed) or "none"
                raise ApiError(400, f"unknown parameter {unknown[0]!r} (parameters: {known})")
            return _send(request, 200, self.handler(args))
        except ApiError as e:
            return _send(request, e.code, {"error": e.message})
        except Exception:
            log.failure("the API failed on {path}", path=(request.path or b"").decode(errors="replace"))
            return _send(request, 500, {"error": "internal error (see the node's log)"})


class NotFound(resource.Resource):
    isLeaf = True

    def render(self, request: IRequest) -> bytes:
        path = request.path.decode(errors="replace") if request.path else "?"
        return _send(request, 404, {"error": f"no such resource: {path}"})


class Root(resource.Resource):
    def __init__(self, routes: dict[str, resource.Resource]):
        super().__init__()
        self.routes = routes

    def getChild(self, path: bytes, request: IRequest) -> resource.Resource:
        full = (request.path or b"").decode(errors="replace").rstrip("/")
        return self.routes.get(full, NotFound())


class Site(server.Site):
    """A site that keeps per-request access lines out of the node's log."""

    def log(self, request: Any) -> None:
        pass


def site(routes: dict[str, tuple[Handler, tuple[str, ...]]]) -> server.Site:
    """*routes*: path -> (handler, allowed query parameters)."""
    root = Root({path: JSONResource(handler, allowed) for path, (handler, allowed) in routes.items()})
    s = Site(root)
    s.noisy = False
    s.displayTracebacks = False
    return s
