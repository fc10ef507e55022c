"""The API's plumbing on a real twisted.web connection (bytes in, bytes out, no socket): a
request is checked when its headers are in, and a refused one is answered at once without
its body being read; a chunked body is cut at the limit; admitted requests are routed, answer
later (a Deferred) and fail as JSON; nothing reaches a handler around the checks."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.test.requesthelper import DummyRequest

from gtmcluster.api.connection import DRAIN_SECONDS, ApiChannel, site
from gtmcluster.api.guard import Policy
from gtmcluster.api.server import ApiError, Raw, Route

TOKEN = "the-node-token-0123456789"
NODE = "127.0.0.11"


class Transport(StringTransport):
    """A TCP-like transport that records a half close (`loseWriteConnection`)."""

    write_closed = False
    aborted = False

    def loseWriteConnection(self) -> None:
        self.write_closed = True

    def abortConnection(self) -> None:
        self.aborted = True


class Node:
    """An API of three routes on a fake connection; records what its handlers were asked."""

    def __init__(self, token_for_reads: bool = False, later: Any = None):
        self.calls: list[str] = []
        self.clock = Clock()
        self.later = later

        def status(a: Any, p: Any) -> Any:
            self.calls.append("status")
            return {"ok": True}

        def disable(a: Any, p: Any) -> Any:
            self.calls.append(f"disable {p['name']}")
            return {"disabled": p["name"]}

        def reload(a: Any, p: Any) -> Any:
            self.calls.append("reload")
            return self.later if self.later is not None else {"reloaded": True}

        routes = [
            Route("GET", "/", lambda a, p: Raw(b"text/html", b"<html>page</html>"), role="anyone"),
            Route("GET", "/api/v1/status", status, role="viewer"),
            Route("POST", r"/api/v1/virtual-servers/(?P<name>[^/]+)/disable", disable, role="operator"),
            Route("POST", "/api/v1/reload", reload, role="admin"),
        ]
        policy = Policy(TOKEN, token_for_reads, frozenset({"gtm1.example.com"}), ipaddress.ip_address(NODE))
        self.site = site(routes, lambda: policy)

    def connect(self) -> tuple[ApiChannel, Transport]:
        channel = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.9", 40000))
        assert isinstance(channel, ApiChannel)
        channel.callLater = self.clock.callLater  # type: ignore[method-assign,assignment]
        transport = Transport(IPv4Address("TCP", NODE, 8053), IPv4Address("TCP", "127.0.0.9", 40000))
        channel.makeConnection(transport)
        return channel, transport

    def ask(self, head: bytes, body: bytes = b"") -> tuple[int, dict[str, str], Any, Transport]:
        channel, transport = self.connect()
        channel.dataReceived(head + body)
        return (*parse(transport.value()), transport)


def head(method: str, path: str, *headers: str, host: str = f"{NODE}:8053") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def post(path: str, *headers: str, length: int = 2, token: str | None = TOKEN, host: str = f"{NODE}:8053") -> bytes:
    given = [f"Content-Length: {length}", *headers]
    if token is not None:
        given.append(f"Authorization: Bearer {token}")
    return head("POST", path, *given, host=host)


JSON_TYPE = "Content-Type: application/json"


def parse(raw: bytes) -> tuple[int, dict[str, str], Any]:
    """Status, headers and body (JSON parsed) of the first response in *raw*."""
    top, _, rest = raw.partition(b"\r\n\r\n")
    lines = top.decode().split("\r\n")
    code = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            body, rest = body + rest[:size], rest[size + 2 :]
    else:
        body = rest[: int(headers.get("content-length", len(rest)))]
    return code, headers, json.loads(body) if "json" in headers.get("content-type", "") else body


def test_a_page_of_another_site_cannot_write() -> None:
    """The simple request any web page can make without a preflight (text/plain, with its
    Origin) is refused, with or without the token; so is the same without an Origin and
    without the token. No handler is called."""
    node = Node()
    cross_site = ("Origin: http://evil.example", "Content-Type: text/plain")
    for path in ("/api/v1/virtual-servers/vs-b/disable", "/api/v1/reload"):
        for token in (None, TOKEN):
            code, _, body, _ = node.ask(post(path, *cross_site, token=token), b"{}")
            assert code == 403 and "cross-origin" in body["error"]
        code, headers, body, _ = node.ask(post(path, JSON_TYPE, token=None), b"{}")
        assert code == 401 and "api.token" in body["error"] and "api-token" in body["error"]
        assert headers["www-authenticate"] == 'Bearer realm="gtmcluster"'
        assert node.ask(post(path, "Content-Type: text/plain"), b"{}")[0] == 415
    assert node.calls == []
    own = f"Origin: http://{NODE}:8053"
    code, _, body, _ = node.ask(post("/api/v1/virtual-servers/vs-b/disable", JSON_TYPE, own), b"{}")
    assert (code, body) == (200, {"disabled": "vs-b"})
    assert node.calls == ["disable vs-b"]


def test_a_rebound_name_reads_nothing() -> None:
    """With the token configured, reads on loopback need none, but only under a name of the
    node: Host attacker.example is 421 (a rebound page gets no state); localhost and a name
    of api.names are fine."""
    node = Node()
    code, headers, body, transport = node.ask(head("GET", "/api/v1/status", host="attacker.example:8053"))
    assert code == 421 and "api.names" in body["error"] and headers["connection"] == "close"
    assert transport.write_closed
    for host in ("localhost:8053", "gtm1.example.com:8053", f"{NODE}:8053"):
        assert node.ask(head("GET", "/api/v1/status", host=host))[:3:2] == (200, {"ok": True})
    assert node.calls == ["status"] * 3


def test_a_refused_body_is_never_read() -> None:
    """A 300 MB POST without the token is answered 401 as soon as its headers are in, then
    the connection is half closed and what the client still sends is dropped, not stored
    or parsed (nor a following request); it is closed after DRAIN_SECONDS. With the token,
    the same length is 413. An `Expect: 100-continue` client is not told to send."""
    node = Node()
    channel, transport = node.connect()
    channel.dataReceived(post("/api/v1/reload", JSON_TYPE, "Expect: 100-continue", length=300_000_000, token=None))
    code, headers, _ = parse(transport.value())
    assert code == 401 and headers["connection"] == "close" and b"100 Continue" not in transport.value()
    assert transport.write_closed and channel.refused
    answered = transport.value()
    channel.dataReceived(b"x" * 1_000_000)
    channel.dataReceived(b"\r\n\r\n" + head("GET", "/api/v1/status"))
    assert transport.value() == answered and node.calls == []
    request = channel.requests[-1]
    assert request.content is None, "no place was made for the body"
    assert not transport.aborted
    node.clock.advance(DRAIN_SECONDS)
    assert transport.aborted

    code, _, body, _ = node.ask(post("/api/v1/reload", JSON_TYPE, length=300_000_000))
    assert code == 413 and "65536 bytes" in body["error"]
    assert node.calls == []


def test_a_chunked_body_is_cut_at_the_limit() -> None:
    """A chunked body is taken while it stays under 64 KiB; past that the request is
    answered 413 and nothing more is read."""
    node = Node()
    chunk = b"%x\r\n%s\r\n" % (4096, b" " * 4096)
    chunked = post("/api/v1/reload", JSON_TYPE, "Transfer-Encoding: chunked").replace(b"Content-Length: 2\r\n", b"")
    code, _, body, _ = node.ask(chunked, chunk * 2 + b"0\r\n\r\n")
    assert (code, body) == (200, {"reloaded": True})

    channel, transport = node.connect()
    channel.dataReceived(chunked)
    for _ in range(16):
        channel.dataReceived(chunk)
    assert transport.value() == b"", "64 KiB is still taken"
    channel.dataReceived(chunk)
    code, _, body = parse(transport.value())
    assert code == 413 and transport.write_closed
    channel.dataReceived(chunk * 10 + b"0\r\n\r\n")
    assert parse(transport.value())[0] == 413 and node.calls == ["reload"]


def test_reads_need_the_token_where_configured_but_the_page() -> None:
    """Where reads need the token, the dashboard page is served without it and every other
    read is 401 without it, 403 with a wrong one."""
    node = Node(token_for_reads=True)
    code, _, body, _ = node.ask(head("GET", "/"))
    assert (code, body) == (200, b"<html>page</html>")
    assert node.ask(head("GET", "/api/v1/status"))[0] == 401
    assert node.ask(head("GET", "/api/v1/status", "Authorization: Bearer wrong-0123456789abcdef"))[0] == 403
    assert node.ask(head("GET", "/api/v1/status", f"Authorization: Bearer {TOKEN}"))[2] == {"ok": True}


def test_late_answers_and_late_errors() -> None:
    """A handler's Deferred answers when it fires; an ApiError it fails with is that status
    as JSON; any other failure is a 500 that tells no more."""
    from twisted.internet import defer

    later: defer.Deferred[Any] = defer.Deferred()
    node = Node(later=later)
    channel, transport = node.connect()
    channel.dataReceived(post("/api/v1/reload", JSON_TYPE) + b"{}")
    assert transport.value() == b""
    later.errback(ApiError(422, "refused: bad key"))
    assert parse(transport.value())[::2] == (422, {"error": "refused: bad key"})

    node.later = defer.Deferred()
    channel, transport = node.connect()
    channel.dataReceived(post("/api/v1/reload", JSON_TYPE) + b"{}")
    node.later.errback(RuntimeError("a bug"))
    assert parse(transport.value())[::2] == (500, {"error": "internal error (see the node's log)"})


def test_unknown_paths_and_methods() -> None:
    node = Node()
    assert node.ask(head("GET", "/api/v1/nothing"))[0] == 404
    code, headers, _, _ = node.ask(head("GET", "/api/v1/reload"))
    assert code == 405 and headers["allow"] == "POST"


def test_nothing_is_answered_around_the_checks() -> None:
    """A request that did not come through ApiChannel (so was never checked) gets a 500,
    never its handler."""
    node = Node()
    request = DummyRequest([b"api", b"v1", b"status"])
    request.path = b"/api/v1/status"  # type: ignore[attr-defined]
    body = node.site.api.render(request)  # type: ignore[arg-type]
    assert request.responseCode == 500 and b"internal error" in body
    assert node.calls == []
