"""GET /api/v1/logs on a real twisted.web connection (bytes in, bytes out, no socket), a
fake clock, and the file reads run inline: lines= and since= pick from the node's log
files; follow=1 keeps the answer open and writes each new line once (none lost between the
files and the live lines), an empty line after a silence, drops lines (and says how many)
while the connection is full, and stops following when the client goes; reads need the
token where reads do; bad values are 400."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from twisted.internet import defer
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.task import Clock
from twisted.logger import LogLevel, LogPublisher

from gtmcluster.api import logs, sending
from gtmcluster.api.connection import ApiChannel, site
from gtmcluster.api.guard import Policy
from gtmcluster.api.server import Route
from gtmcluster.config.model import ApiLimits
from gtmcluster.nodelog import record
from gtmcluster.nodelog.writer import NodeLog
from tests.unit.test_api_limits import Window

TOKEN = "the-node-token-0123456789"
NODE = "127.0.0.11"
T0 = 1_800_000_000.0


class Node:
    """A node's log and its API's logs route, on fake connections."""

    def __init__(
        self, tmp_path: Path, token_for_reads: bool = False, limits: ApiLimits | None = None, max_bytes: int = 600
    ):
        self.clock = Clock()
        self.clock.advance(T0)
        self.publisher = LogPublisher()
        self.log = NodeLog(tmp_path, "n1", self.clock.seconds, self.publisher, max_bytes=max_bytes, keep=3)
        self.log.startService()
        self.limits = limits or ApiLimits()
        self.logs = logs.Logs(self.log, self.clock, defer.maybeDeferred, lambda: self.limits)
        policy = Policy(TOKEN, token_for_reads, frozenset(), ipaddress.ip_address(NODE))
        self.site = site(
            [Route("GET", "/api/v1/logs", self.logs, ("since", "lines", "follow"), role="viewer")],
            lambda: policy,
            limits=lambda: self.limits,
            closed=self.logs.closed,
        )

    def emit(self, n: int, when: float | None = None) -> None:
        self.publisher(
            {
                "log_time": self.clock.seconds() if when is None else when,
                "log_level": LogLevel.info,
                "log_namespace": "test",
                "log_format": "line {n:03d}",
                "n": n,
            }
        )

    def get(
        self, query: str, *headers: str, method: str = "GET", source: str = "127.0.0.9", window: int = 1 << 40
    ) -> tuple[ApiChannel, Window]:
        peer = (IPv6Address if ":" in source else IPv4Address)("TCP", source, 40000)
        channel = self.site.buildProtocol(peer)
        assert isinstance(channel, ApiChannel)
        channel.callLater = self.clock.callLater  # type: ignore[method-assign,assignment]
        transport = Window(IPv4Address("TCP", NODE, 8053), peer, window=window)
        channel.makeConnection(transport)
        lines = [f"{method} /api/v1/logs{query} HTTP/1.1", f"Host: {NODE}:8053", *headers]
        channel.dataReceived(("\r\n".join(lines) + "\r\n\r\n").encode())
        return channel, transport


def response(raw: bytes) -> tuple[int, dict[str, str], bytes, bool]:
    """Status, headers, the chunked body so far, and whether it ended."""
    top, _, rest = raw.partition(b"\r\n\r\n")
    head = top.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
    if headers.get("transfer-encoding") != "chunked":
        return int(head[0].split()[1]), headers, rest[: int(headers.get("content-length", len(rest)))], True
    body = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return int(head[0].split()[1]), headers, body, True
        body, rest = body + rest[:size], rest[size + 2 :]
    return int(head[0].split()[1]), headers, body, False


def numbers(body: bytes) -> list[int]:
    out = []
    for line in body.decode().split("\n"):
        if line:
            fields = json.loads(line)
            out.append(int(fields["message"].split()[-1]) if fields["message"].startswith("line") else -1)
    return out


def test_lines_and_since_pick_from_the_files(tmp_path: Path) -> None:
    """lines=N: the last N (across rotated files); since=: those at or after the time; the
    default is the last 100; each is one of the node's JSON lines."""
    node = Node(tmp_path)
    for i in range(20):
        node.emit(i, T0 + i)
    assert len(list(tmp_path.iterdir())) > 1  # rotated
    code, headers, body, ended = response(node.get("?lines=12")[1].value())
    assert (code, ended) == (200, True) and headers["content-type"] == "application/x-ndjson"
    assert numbers(body) == list(range(8, 20))
    since = record.iso_time(T0 + 17).replace(".000000Z", "Z")
    assert numbers(response(node.get(f"?since={since}")[1].value())[2]) == [17, 18, 19]
    assert numbers(response(node.get(f"?since={since}&lines=1")[1].value())[2]) == [19]
    assert len(numbers(response(node.get("")[1].value())[2])) >= 9  # all kept (3 rotated files)


def test_bad_values_are_400_and_reads_need_the_token_where_reads_do(tmp_path: Path) -> None:
    node = Node(tmp_path, token_for_reads=True)
    for query, problem in (
        ("?since=yesterday", "since: not a time"),
        ("?lines=-1", "lines: must be 0 to"),
        ("?lines=x", "lines: not a number"),
        ("?lines=%C2%B2", "lines: not a number"),
        ("?lines=%D9%A3", "lines: not a number"),
        ("?lines=99999999999999999999", "lines: not a number"),
        ("?since=0001-01-01T00:00:00%2B01:00", "since: not a time"),
        ("?follow=maybe", "follow: give 1 or 0"),
    ):
        code, _, body, _ = response(node.get(query, f"Authorization: Bearer {TOKEN}")[1].value())
        assert code == 400 and problem in json.loads(body)["error"], body
    assert response(node.get("?lines=1")[1].value())[0] == 401
    assert response(node.get("?lines=1", "Authorization: Bearer wrong")[1].value())[0] == 403
    assert response(node.get("?lines=1", f"Authorization: Bearer {TOKEN}")[1].value())[0] == 200


def test_follow_streams_new_lines_once_and_beats_when_quiet(tmp_path: Path) -> None:
    """follow=1: the recent lines, then each new one as it is logged, exactly once; an empty
    line after HEARTBEAT seconds of silence only; the answer stays open."""
    node = Node(tmp_path)
    for i in range(3):
        node.emit(i)
    _channel, transport = node.get("?follow=1&lines=2")
    node.emit(3)
    node.emit(4)
    code, _, body, ended = response(transport.value())
    assert (code, ended) == (200, False)
    assert numbers(body) == [1, 2, 3, 4]
    node.clock.advance(logs.HEARTBEAT)  # lines were sent in this period: no heartbeat
    assert response(transport.value())[2] == body
    node.clock.advance(logs.HEARTBEAT)
    assert response(transport.value())[2] == body + b"\n"
    assert len(node.logs.followers) == 1


def test_a_follower_that_goes_away_is_forgotten(tmp_path: Path) -> None:
    node = Node(tmp_path)
    channel, _transport = node.get("?follow=1")
    assert len(node.log.listeners) == 1 and len(node.logs.followers) == 1
    channel.connectionLost(Exception("gone"))  # type: ignore[arg-type]
    assert node.log.listeners == [] and node.logs.followers == set()
    node.emit(1)  # nothing written to a closed connection
    node.clock.advance(logs.HEARTBEAT * 2)


def test_a_slow_reader_has_lines_dropped_and_is_told(tmp_path: Path) -> None:
    """While the connection's buffer is full (producer paused) new lines are not kept; once
    it drains the reader first gets one warn line saying how many were left out."""
    node = Node(tmp_path)
    channel, transport = node.get("?follow=1&lines=0")
    node.emit(1)
    stream = next(iter(node.logs.followers))
    channel.pauseProducing()  # what the transport does when its buffer is full
    assert stream.paused
    for i in range(2, 1002):
        node.emit(i)
    channel.resumeProducing()
    node.emit(1002)
    body = response(transport.value())[2]
    assert numbers(body) == [1, -1, 1002]
    dropped = json.loads(body.decode().split("\n")[1])
    assert dropped["level"] == "warn" and dropped["message"] == "1000 lines not sent: this reader was too slow"


def test_followers_without_the_token_never_lock_out_the_operator(tmp_path: Path) -> None:
    """Readers without the token may follow followers_without_token at once (503 beyond,
    and per source past followers_per_source first); an operator with the token still
    follows, up to followers; reads without follow still work; a slot comes back when its
    follower goes."""
    node = Node(tmp_path, limits=ApiLimits(followers=3, followers_without_token=4, followers_per_source=2))
    held = [node.get("?follow=1", source=f"127.0.2.{i // 2}") for i in range(4)]
    assert all(response(t.value())[0] == 200 for _, t in held)
    code, _, body, _ = response(node.get("?follow=1", source="127.0.2.9")[1].value())
    assert code == 503 and "without the token" in json.loads(body)["error"] and "in all" in json.loads(body)["error"]
    code, _, body, _ = response(node.get("?follow=1", f"Authorization: Bearer {TOKEN}")[1].value())
    assert code == 200
    node.get("?follow=1", f"Authorization: Bearer {TOKEN}")
    code, _, body, _ = response(node.get("?follow=1", f"Authorization: Bearer {TOKEN}")[1].value())
    assert code == 503 and "from this address" in json.loads(body)["error"]
    assert response(node.get("?lines=1")[1].value())[0] == 200
    assert len(node.logs.followers) == 6
    held[0][0].connectionLost(Exception("gone"))  # type: ignore[arg-type]
    assert response(node.get("?follow=1", source="127.0.2.9")[1].value())[0] == 200


def test_followers_per_source_count_an_ipv6_64_as_one_source(tmp_path: Path) -> None:
    """followers_per_source holds per IPv6 /64: a reader following from a new address of
    its /64 each time gets 503 past the cap; another /64 follows. (On main every address had
    followers_per_source of its own.)"""
    node = Node(tmp_path, limits=ApiLimits(followers_without_token=8, followers_per_source=2))
    held = [node.get("?follow=1", source=f"2001:db8:1:2::{i + 1:x}") for i in range(2)]
    assert all(response(t.value())[0] == 200 for _, t in held)
    code, _, body, _ = response(node.get("?follow=1", source="2001:db8:1:2:beef::1")[1].value())
    assert code == 503 and "from this address" in json.loads(body)["error"]
    assert response(node.get("?follow=1", source="2001:db8:1:3::1")[1].value())[0] == 200


def test_a_follower_that_reads_nothing_is_cut(tmp_path: Path) -> None:
    """A follower whose connection stays paused for stall_timeout seconds (its client reads
    nothing) is cut, and its slot comes back; one that reads again in time stays."""
    node = Node(tmp_path, limits=ApiLimits(stall_timeout=30, followers_without_token=1))
    channel, transport = node.get("?follow=1&lines=0")
    other, _ = node.get("?follow=1&lines=0", f"Authorization: Bearer {TOKEN}")
    channel.pauseProducing()
    other.pauseProducing()
    node.clock.advance(29)
    other.resumeProducing()
    node.clock.advance(1)
    assert transport.aborted and node.logs.closed["stalled"] == 1
    channel.connectionLost(Exception("aborted"))  # type: ignore[arg-type]
    assert len(node.logs.followers) == 1
    assert response(node.get("?follow=1")[1].value())[0] == 200


def test_a_follower_without_the_token_ends_after_its_time(tmp_path: Path) -> None:
    """Without the token a follower's answer ends after follow_without_token seconds, with
    a warn line saying so (heartbeats do not keep it); with the token it goes on."""
    node = Node(tmp_path, limits=ApiLimits(follow_without_token=60))
    _, reader = node.get("?follow=1&lines=0")
    _, operator = node.get("?follow=1&lines=0", f"Authorization: Bearer {TOKEN}")
    for _ in range(4):
        node.clock.advance(logs.HEARTBEAT)
    code, _, body, ended = response(reader.value())
    assert code == 200 and ended
    last = json.loads(body.decode().strip().split("\n")[-1])
    assert last["level"] == "warn" and "without the API token follows for 60 s at most" in last["message"]
    assert response(operator.value())[3] is False
    assert node.logs.closed["follow_time"] == 1 and len(node.logs.followers) == 1


def test_lines_from_the_files_are_bounded_and_sent_as_read(tmp_path: Path) -> None:
    """The lines from the files are at most MAX_ANSWER_BYTES (the newest, after a warn line
    saying older ones were left out), written a slice at a time as the client reads."""
    node = Node(tmp_path, max_bytes=10 * 1024 * 1024)
    for i in range(3000):
        node.publisher(
            {"log_time": T0 + i, "log_level": LogLevel.info, "log_namespace": "test", "log_format": "x" * 1000}
        )
    _, transport = node.get("?lines=10000", window=sending.SLICE)
    assert len(transport.value()) <= 2 * sending.SLICE
    while response(transport.value())[3] is False:
        transport.read()
    body = response(transport.value())[2]
    assert len(body) <= logs.MAX_ANSWER_BYTES + 1000
    lines = body.decode().strip().split("\n")
    assert "older lines not sent" in json.loads(lines[0])["message"]
    assert json.loads(lines[-1])["time"] == record.iso_time(T0 + 2999)
    assert len(lines) == 1 + logs.MAX_ANSWER_BYTES // (len(lines[-1]) + 1)


def test_head_answers_at_once_even_when_asked_to_follow(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.emit(1)
    _, transport = node.get("?follow=1", method="HEAD")
    head, _, body = transport.value().decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200") and "application/x-ndjson" in head
    assert "line 001" not in body
    assert node.logs.followers == set() and node.log.listeners == []
