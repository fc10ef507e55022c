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
from typing import Any

from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import LogLevel, LogPublisher

from gtmcluster.api import logs
from gtmcluster.api.guard import Policy
from gtmcluster.api.server import ApiChannel, Route, site
from gtmcluster.nodelog import record
from gtmcluster.nodelog.writer import NodeLog

TOKEN = "the-node-token-0123456789"
NODE = "127.0.0.11"
T0 = 1_800_000_000.0


class Node:
    """A node's log and its API's logs route, on fake connections."""

    def __init__(self, tmp_path: Path, token_for_reads: bool = False):
        self.clock = Clock()
        self.clock.advance(T0)
        self.publisher = LogPublisher()
        self.log = NodeLog(tmp_path, "n1", self.clock.seconds, self.publisher, max_bytes=600, keep=3)
        self.log.startService()
        self.logs = logs.Logs(self.log, self.clock, defer.maybeDeferred)
        policy = Policy(TOKEN, token_for_reads, frozenset(), ipaddress.ip_address(NODE))
        self.site = site([Route("GET", "/api/v1/logs", self.logs, ("since", "lines", "follow"))], lambda: policy)

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

    def get(self, query: str, *headers: str, method: str = "GET") -> tuple[ApiChannel, StringTransport]:
        channel = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.9", 40000))
        assert isinstance(channel, ApiChannel)
        transport = StringTransport(IPv4Address("TCP", NODE, 8053), IPv4Address("TCP", "127.0.0.9", 40000))
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


def test_followers_are_bounded(tmp_path: Path) -> None:
    node = Node(tmp_path)
    held: list[Any] = [node.get("?follow=1") for _ in range(logs.MAX_FOLLOWERS)]
    code, _, body, _ = response(node.get("?follow=1")[1].value())
    assert code == 503 and "try again later" in json.loads(body)["error"]
    assert response(node.get("?lines=1")[1].value())[0] == 200  # reads without follow still work
    assert len(held) == logs.MAX_FOLLOWERS


def test_head_answers_at_once_even_when_asked_to_follow(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.emit(1)
    _, transport = node.get("?follow=1", method="HEAD")
    head, _, body = transport.value().decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200") and "application/x-ndjson" in head
    assert "line 001" not in body
    assert node.logs.followers == set() and node.log.listeners == []
