"""The API's plumbing without a node: the token rules (the dashboard page is public even
where reads need the token), answers that come later (a Deferred), errors as JSON."""

from __future__ import annotations

import io
import json
from typing import Any, cast

from twisted.internet import defer
from twisted.web.iweb import IRequest
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from gtmcluster.api.server import Api, ApiError, Raw, Route

TOKEN = "s3cret-token"


def request(path: str, method: str = "GET", token: str | None = None) -> DummyRequest:
    r = DummyRequest([p.encode() for p in path.strip("/").split("/")] if path != "/" else [])
    r.method = method.encode()
    r.path = path.encode()  # type: ignore[attr-defined]
    r.content = io.BytesIO(b"")  # type: ignore[attr-defined]
    if token is not None:
        r.requestHeaders.addRawHeader(b"authorization", b"Bearer " + token.encode())
    return r


def started(api: Api, r: DummyRequest) -> Any:
    """What `Api.render` returns: the body, or NOT_DONE_YET for a late answer."""
    return api.render(cast(IRequest, r))


def render(api: Api, r: DummyRequest) -> tuple[int, Any]:
    body = started(api, r)
    if body is NOT_DONE_YET:
        assert r.finished, "the late answer was not written"
        body = b"".join(r.written)
    kind = r.responseHeaders.getRawHeaders(b"content-type", [b""])[0]
    return r.responseCode or 200, json.loads(body) if kind == b"application/json" else body


def api(token_everywhere: bool, later: defer.Deferred[Any] | None = None) -> Api:
    routes = [
        Route("GET", "/", lambda a, p: Raw(b"text/html", b"<html>page</html>"), public=True),
        Route("GET", "/api/v1/status", lambda a, p: {"ok": True}),
        Route("POST", "/api/v1/reload", lambda a, p: later),
    ]
    return Api(routes, lambda: TOKEN, lambda: token_everywhere)


def test_page_is_public_where_every_read_needs_the_token() -> None:
    everywhere = api(True)
    assert render(everywhere, request("/")) == (200, b"<html>page</html>")
    code, body = render(everywhere, request("/api/v1/status"))
    assert code == 401 and "bearer token" in body["error"]
    assert render(everywhere, request("/api/v1/status", token="wrong"))[0] == 403
    assert render(everywhere, request("/api/v1/status", token=TOKEN)) == (200, {"ok": True})


def test_on_loopback_only_posts_need_the_token() -> None:
    loopback = api(False, defer.succeed({"reloaded": True}))
    assert render(loopback, request("/api/v1/status")) == (200, {"ok": True})
    assert render(loopback, request("/api/v1/reload", "POST"))[0] == 401
    assert render(loopback, request("/api/v1/reload", "POST", TOKEN)) == (200, {"reloaded": True})


def test_late_answers_and_late_errors() -> None:
    later: defer.Deferred[Any] = defer.Deferred()
    r = request("/api/v1/reload", "POST", TOKEN)
    assert started(api(False, later), r) is NOT_DONE_YET
    assert not r.finished
    later.errback(ApiError(422, "refused: bad key"))
    assert r.responseCode == 422
    assert json.loads(b"".join(r.written)) == {"error": "refused: bad key"}

    broken: defer.Deferred[Any] = defer.Deferred()
    r = request("/api/v1/reload", "POST", TOKEN)
    assert started(api(False, broken), r) is NOT_DONE_YET
    broken.errback(RuntimeError("a bug"))
    assert r.responseCode == 500
    assert json.loads(b"".join(r.written)) == {"error": "internal error (see the node's log)"}
