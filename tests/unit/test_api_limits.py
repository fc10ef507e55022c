"""What one client, and all together, may hold of the API (``api.limits``), on real
twisted.web connections (bytes in, bytes out, no socket) and a fake clock:

- connections are capped in all and per source; past a cap the least recently active
  connection that never showed the token is displaced, one that showed it never is, and a
  new one is refused (503) only when every one there showed the token;
- a connection has ``idle_timeout`` to send a whole request head (trickled bytes do not
  reset it), from its opening and after each answer;
- answers in progress are counted apart for clients with and without the token, in all and
  per source (503 beyond), so readers without the token never lock out an operator;
- a large answer and a file are written a slice at a time as the connection takes them,
  never whole into its buffer; a client that stops reading is cut after ``stall_timeout``;
- the config keys, checked (the pure counting in `gtmcluster.api.slots` and
  `gtmcluster.runtime.slots` too).
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.task import Clock

from gtmcluster.api import sending
from gtmcluster.api.connection import ApiChannel, site
from gtmcluster.api.guard import Policy
from gtmcluster.api.server import FileAnswer, Raw, Route
from gtmcluster.api.slots import Connections
from gtmcluster.config.load import load
from gtmcluster.config.model import ApiLimits
from gtmcluster.config.problems import ConfigError
from gtmcluster.runtime.slots import FROM_SOURCE, IN_ALL, Caps, Held, Slots
from tests.support import configs
from tests.unit.test_api_server import Transport, parse

TOKEN = "the-node-token-0123456789"
NODE = "127.0.0.11"
AUTH = f"Authorization: Bearer {TOKEN}"
BIG = bytes(range(256)) * 4096  # 1 MiB


class Window(Transport):
    """A connection whose client reads *window* bytes and then stops until `read` is
    called: the transport pauses its producer (the channel) when that much is unread, as a
    TCP transport does when its buffer is full."""

    def __init__(self, *args: Any, window: int = 2 * sending.SLICE):
        super().__init__(*args)
        self.window = window
        self.unread = 0
        self.paused = False

    def write(self, data: bytes) -> None:
        super().write(data)
        self.unread += len(data)
        if self.unread >= self.window and not self.paused and self.producer is not None:
            self.paused = True
            self.producer.pauseProducing()

    def writeSequence(self, data: Any) -> None:
        self.write(b"".join(data))

    def read(self) -> None:
        self.unread = 0
        if self.paused and self.producer is not None:
            self.paused = False
            self.producer.resumeProducing()


class Node:
    """An API with a few routes under *limits*, on fake connections and a fake clock."""

    def __init__(self, limits: ApiLimits, tmp_path: Path | None = None):
        self.clock = Clock()
        self.limits = limits
        self.waiting: list[defer.Deferred[Any]] = []
        self.file = tmp_path / "bundle.json" if tmp_path is not None else None
        if self.file is not None:
            self.file.write_bytes(BIG)

        def wait(a: Any, p: Any) -> defer.Deferred[Any]:
            d: defer.Deferred[Any] = defer.Deferred()
            self.waiting.append(d)
            return d

        def from_file(a: Any, p: Any) -> FileAnswer:
            assert self.file is not None
            return FileAnswer(b"application/octet-stream", self.file.open("rb"))

        routes = [
            Route("GET", "/api/v1/status", lambda a, p: {"ok": True}, role="viewer"),
            Route("GET", "/api/v1/wait", wait, role="viewer"),
            Route("GET", "/api/v1/big", lambda a, p: Raw(b"application/octet-stream", BIG), role="viewer"),
            Route("GET", "/api/v1/file", from_file, role="admin"),
        ]
        policy = Policy(TOKEN, False, frozenset(), ipaddress.ip_address(NODE))
        self.site = site(routes, lambda: policy, limits=lambda: self.limits)

    def connect(self, source: str = "127.0.0.9", window: int | None = None) -> tuple[ApiChannel, Window]:
        peer = (IPv6Address if ":" in source else IPv4Address)("TCP", source, 40000)
        channel = self.site.buildProtocol(peer)
        assert isinstance(channel, ApiChannel)
        channel.callLater = self.clock.callLater  # type: ignore[method-assign,assignment]
        transport = Window(IPv4Address("TCP", NODE, 8053), peer, window=window or 1 << 40)
        channel.makeConnection(transport)
        return channel, transport

    def get(self, path: str, *headers: str, source: str = "127.0.0.9", window: int | None = None) -> Window:
        channel, transport = self.connect(source, window)
        channel.dataReceived(request(path, *headers))
        return transport


def request(path: str, *headers: str, method: str = "GET") -> bytes:
    return ("\r\n".join([f"{method} {path} HTTP/1.1", f"Host: {NODE}:8053", *headers]) + "\r\n\r\n").encode()


def status(transport: Window) -> int:
    return parse(transport.value())[0]


# -- the counting ----------------------------------------------------------------------


def test_slots_count_in_all_and_per_source() -> None:
    slots = Slots()
    caps = Caps(3, 2)
    assert slots.take("a", caps) is None and slots.take("a", caps) is None
    assert slots.take("a", caps) == FROM_SOURCE
    assert slots.take("b", caps) is None
    assert slots.take("c", caps) == IN_ALL
    held = Held(slots, "a")
    held.release()
    held.release()  # once only
    assert slots.held == 2 and slots.take("c", caps) is None
    with pytest.raises(ValueError, match="holds no slot"):
        Slots().give_back("a")


def test_connections_displace_the_least_recently_active_without_the_token() -> None:
    table: Connections[str] = Connections()
    caps = Caps(4, 3)
    for name in ("a1", "a2", "a3"):
        assert table.admit(name, "a", caps) == (True, [])
    table.trust("a1")
    table.touch("a2")  # a3 is now the least recently active without the token
    assert table.admit("a4", "a", caps) == (True, ["a3"])
    assert table.admit("b1", "b", caps) == (True, [])
    assert table.admit("b2", "b", caps) == (True, ["a2"]), "past the cap in all: the oldest of all"
    table.trust("a4")
    table.trust("b1")
    table.trust("b2")
    assert table.admit("c1", "c", caps) == (False, []), "every one showed the token: refused"
    assert len(table) == 4 and table.trusted == 4
    table.remove("b2")
    assert table.admit("c1", "c", caps) == (True, [])
    table.remove("nothing")


# -- connections ---------------------------------------------------------------------------


def test_a_flood_of_connections_displaces_its_own_not_the_operator() -> None:
    """Past connections_per_source the least recently active connection without the token
    is closed (aborted); an operator's connection, which showed the token, stays and is
    answered; once every connection of the source showed it, a new one is refused 503."""
    node = Node(ApiLimits(connections=100, connections_per_source=3))
    operator, operator_transport = node.connect()
    operator.dataReceived(request("/api/v1/status", AUTH))
    assert status(operator_transport) == 200
    flood = [node.connect() for _ in range(5)]
    assert [t.aborted for _, t in flood] == [True, True, True, False, False]
    assert not operator_transport.aborted
    operator.dataReceived(request("/api/v1/status", AUTH))
    assert operator_transport.value().count(b"HTTP/1.1 200") == 2
    assert node.site.api.closed["displaced"] == 3
    for channel, _ in flood[3:]:
        channel.dataReceived(request("/api/v1/status", AUTH))
    _, refused = node.connect()
    code, headers, body = parse(refused.value())
    assert code == 503 and "from this address" in body["error"] and headers["connection"] == "close"
    assert node.site.api.refused["connections"] == 1
    _, other = node.connect(source="127.0.0.10")  # another source has room
    assert not other.aborted and other.value() == b""


def test_an_ipv6_host_rotating_addresses_in_its_64_meets_the_cap_per_source() -> None:
    """connections_per_source counts an IPv6 /64 as one source: a client opening each
    connection from another address of its /64 displaces its own oldest past the cap, and
    is refused 503 once all it holds showed the token; an address of another /64 has room.
    (On main each address was a source of its own: none was displaced.)"""
    node = Node(ApiLimits(connections=100, connections_per_source=3))
    flood = [node.connect(source=f"2001:db8:1:2::{i + 1:x}") for i in range(5)]
    assert [t.aborted for _, t in flood] == [True, True, False, False, False]
    assert node.site.connections.by_source == {"2001:db8:1:2::/64": 3}
    for channel, _ in flood[2:]:
        channel.dataReceived(request("/api/v1/status", AUTH))
    code, _, body = parse(node.connect(source="2001:db8:1:2:ffff::1")[1].value())
    assert code == 503 and "from this address" in body["error"]
    _, other = node.connect(source="2001:db8:1:3::1")
    assert not other.aborted and other.value() == b""


def test_connections_are_capped_in_all() -> None:
    node = Node(ApiLimits(connections=2, connections_per_source=2))
    first = node.connect(source="127.0.0.21")[1]
    node.connect(source="127.0.0.22")
    node.connect(source="127.0.0.23")
    assert first.aborted and len(node.site.connections) == 2


def test_a_connection_has_idle_timeout_to_send_a_request_head() -> None:
    """Silent, or trickling a head a byte at a time, a connection is closed idle_timeout
    after it opened; one that asks in time gets idle_timeout again after its answer."""
    node = Node(ApiLimits(idle_timeout=10))
    _, silent = node.connect()
    trickle, trickled = node.connect()
    for byte in request("/api/v1/status")[:30]:
        trickle.dataReceived(bytes([byte]))
        node.clock.advance(0.3)
    node.clock.advance(10 - 9)
    assert silent.disconnecting and trickled.disconnecting
    assert node.site.api.closed["idle"] == 2
    asking, transport = node.connect()
    node.clock.advance(9)
    asking.dataReceived(request("/api/v1/status"))
    node.clock.advance(9)
    assert status(transport) == 200 and not transport.disconnecting
    node.clock.advance(1)
    assert transport.disconnecting
    node.clock.advance(ApiLimits().stall_timeout)
    assert transport.aborted, "what it did not read is dropped after stall_timeout"


# -- answers in progress -------------------------------------------------------------------


def test_answers_without_the_token_are_counted_apart() -> None:
    """Readers without the token that hold answers_without_token answers in progress get 503
    for more (per source past answers_per_source first); an operator with the token is
    answered meanwhile; a slot comes back when its answer ends or its client goes."""
    node = Node(ApiLimits(answers=5, answers_without_token=3, answers_per_source=2))
    waiting = [node.get("/api/v1/wait", source=f"127.0.1.{i // 2}") for i in range(3)]
    assert [t.value() for t in waiting] == [b""] * 3
    busy = node.get("/api/v1/wait", source="127.0.1.9")
    code, _, body = parse(busy.value())
    assert code == 503 and "without the token" in body["error"] and "in all" in body["error"]
    assert status(node.get("/api/v1/status", AUTH)) == 200
    node.get("/api/v1/wait", AUTH)
    node.get("/api/v1/wait", AUTH)
    code, _, body = parse(node.get("/api/v1/wait", AUTH).value())
    assert code == 503 and "from this address" in body["error"]
    assert node.site.api.refused["busy"] == 2
    node.waiting[0].callback({"done": True})
    assert parse(waiting[0].value())[::2] == (200, {"done": True})
    assert status(node.get("/api/v1/status", source="127.0.1.9")) == 200


def test_answers_per_source_count_an_ipv6_64_as_one_source() -> None:
    """answers_per_source holds per IPv6 /64: a client asking from a new address of its
    /64 each time gets 503 past the cap; another /64 is answered. (On main every address
    had answers_per_source of its own.)"""
    node = Node(ApiLimits(answers=10, answers_without_token=10, answers_per_source=2))
    waiting = [node.get("/api/v1/wait", source=f"2001:db8:1:2::{i + 1:x}") for i in range(2)]
    assert [t.value() for t in waiting] == [b""] * 2
    code, _, body = parse(node.get("/api/v1/wait", source="2001:db8:1:2:abcd::1").value())
    assert code == 503 and "from this address" in body["error"]
    assert node.site.api.refused["busy"] == 1
    assert status(node.get("/api/v1/status", source="2001:db8:1:3::1")) == 200
    node.waiting[0].callback({"done": True})
    assert status(node.get("/api/v1/status", source="2001:db8:1:2::99")) == 200


def test_a_client_that_goes_gives_its_answer_slot_back() -> None:
    node = Node(ApiLimits(answers_without_token=1))
    channel, _ = node.connect()
    channel.dataReceived(request("/api/v1/wait"))
    assert status(node.get("/api/v1/status")) == 503
    channel.connectionLost(Exception("gone"))  # type: ignore[arg-type]
    assert status(node.get("/api/v1/status")) == 200
    assert len(node.site.connections) == 2


# -- large answers -------------------------------------------------------------------------


def body_of(raw: bytes) -> bytes:
    return raw.partition(b"\r\n\r\n")[2]


def test_a_large_answer_is_written_as_the_client_reads() -> None:
    """A 1 MiB answer goes into the connection a slice at a time, only while the client
    reads; whole and with its length in the end; its slot is held until the last slice."""
    node = Node(ApiLimits(answers_without_token=1))
    transport = node.get("/api/v1/big", window=sending.SLICE)
    assert len(body_of(transport.value())) <= 2 * sending.SLICE
    assert status(node.get("/api/v1/status")) == 503, "the answer is still in progress"
    for _ in range(len(BIG) // sending.SLICE + 1):
        transport.read()
    code, headers, body = parse(transport.value())
    assert code == 200 and body == BIG and headers["content-length"] == str(len(BIG))
    assert status(node.get("/api/v1/status")) == 200


def test_a_client_that_stops_reading_is_cut_after_stall_timeout() -> None:
    node = Node(ApiLimits(stall_timeout=30))
    transport = node.get("/api/v1/big", window=sending.SLICE)
    node.clock.advance(29)
    transport.read()  # it reads a little: the clock starts again when it stops
    node.clock.advance(29)
    assert not transport.aborted
    node.clock.advance(1)
    assert transport.aborted and node.site.api.closed["stalled"] == 1
    assert len(body_of(transport.value())) <= 3 * sending.SLICE


def test_a_file_is_read_as_it_is_sent_and_needs_the_token(tmp_path: Path) -> None:
    """A secret route's file: 401 without the token even on loopback; with it, read a slice
    at a time as the client reads (the rest of the file is never read while it does not),
    closed at the end; HEAD gives its length only."""
    node = Node(ApiLimits(), tmp_path)
    assert status(node.get("/api/v1/file")) == 401
    opened: list[Any] = []
    real_open = Path.open

    def spy(self: Path, *args: Any, **kwargs: Any) -> Any:
        f = real_open(self, *args, **kwargs)
        opened.append(f)
        return f

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "open", spy)
        transport = node.get("/api/v1/file", AUTH, window=sending.SLICE)
    assert opened[0].tell() <= 2 * sending.SLICE
    while not opened[0].closed:
        transport.read()
    code, headers, body = parse(transport.value())
    assert code == 200 and body == BIG and headers["content-length"] == str(len(BIG))
    assert parse(node.get("/api/v1/file", AUTH).value())[2] == BIG
    channel, transport = node.connect()
    channel.dataReceived(request("/api/v1/file", AUTH, method="HEAD"))
    top = transport.value().decode(errors="replace")
    assert top.startswith("HTTP/1.1 200") and f"Content-Length: {len(BIG)}" in top
    assert transport.value().endswith(b"\r\n\r\n")


# -- the config ------------------------------------------------------------------------------


def loaded(tmp_path: Path, limits: Any) -> Any:
    raw = configs.base()
    raw["api"] = {"limits": limits}
    return load(configs.write(tmp_path, raw))


def test_the_limits_are_read_with_their_defaults(tmp_path: Path) -> None:
    assert load(configs.write(tmp_path, configs.base())).api.limits == ApiLimits()
    limits = loaded(tmp_path, {"connections": 10, "answers_without_token": 0, "stall_timeout": 2.5}).api.limits
    assert (limits.connections, limits.answers_without_token, limits.stall_timeout) == (10, 0, 2.5)
    assert limits.followers == ApiLimits().followers


@pytest.mark.parametrize(
    ("limits", "problem"),
    [
        ({"connection": 5}, "api.limits.connection: unknown key (did you mean 'connections'?)"),
        ({"connections": 0}, "api.limits.connections: 0 is out of range (1 to 100000)"),
        ({"answers": 1.5}, "api.limits.answers: 1.5 is not a whole number (1 to 10000)"),
        ({"idle_timeout": "10"}, "api.limits.idle_timeout: must be a number from 1 to 3600, not a string"),
        ({"follow_without_token": -1}, "api.limits.follow_without_token: -1 is out of range (0 to 604800)"),
        ([1], "api.limits: must be a mapping"),
    ],
)
def test_bad_limits_are_refused(tmp_path: Path, limits: Any, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        loaded(tmp_path, limits)
    assert problem in str(caught.value), str(caught.value)


def test_reload_changes_the_limits_for_what_comes_next() -> None:
    node = Node(ApiLimits(answers_without_token=1))
    node.get("/api/v1/wait")
    assert status(node.get("/api/v1/status")) == 503
    node.limits = ApiLimits(answers_without_token=2)
    assert json.loads(body_of(node.get("/api/v1/status").value())) == {"ok": True}
