"""The HTTP API: JSON resources under /api/v1 (read-only for now), served by twisted.web.

Every answer is JSON, errors included (``{"error": ...}`` with a 4xx status).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from twisted.web import resource, server
from twisted.web.iweb import IRequest

JSON = b"application/json"


def _send(request: IRequest, code: int, body: Any) -> bytes:
    request.setResponseCode(code)
    request.setHeader(b"content-type", JSON)
    request.setHeader(b"cache-control", b"no-store")
    return json.dumps(body, indent=1, sort_keys=True).encode() + b"\n"


class JSONResource(resource.Resource):
    """GET returns what *render_json* builds."""

    isLeaf = True

    def __init__(self, build: Callable[[], Any]):
        super().__init__()
        self.build = build

    def render_GET(self, request: IRequest) -> bytes:
        return _send(request, 200, self.build())

    def render(self, request: IRequest) -> bytes:
        method = request.method.decode(errors="replace") if request.method else "?"
        if method not in ("GET", "HEAD"):
            request.setHeader(b"allow", b"GET, HEAD")
            return _send(request, 405, {"error": f"{method} is not allowed here"})
        return bytes(super().render(request))


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


def site(routes: dict[str, Callable[[], Any]]) -> server.Site:
    root = Root({path: JSONResource(build) for path, build in routes.items()})
    s = Site(root)
    s.noisy = False
    s.displayTracebacks = False
    return s
