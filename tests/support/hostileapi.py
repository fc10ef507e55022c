"""A hostile stand-in for a node's API: what a local process that took a member's API port
might answer the CLI (`gtmcluster status`, `logs`, ...).

`HostileServer` listens on loopback, reads each request's head and answers it with a
*script*: a function of the connection (`Peer`) that sends whatever it likes, slowly,
endlessly or wrongly. Every script ends by itself after `GIVE_UP` seconds or `MOST` bytes,
so that a client without limits (today's main) still gets an end and a test fails rather
than hangs.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from gtmcluster.cli.main import main
from gtmcluster.config.load import load
from gtmcluster.config.model import Member
from tests.support import configs

#: seconds a slow script goes on at most
GIVE_UP = 8.0
#: bytes an endless script sends at most
MOST = 64 * 1024 * 1024


class Peer:
    """One connection, for a script: `send` (False once the client has gone), `wait`
    (False once the server stops or the script has gone on for `GIVE_UP`), and `sent`."""

    def __init__(self, sock: socket.socket, stop: threading.Event, request: bytes):
        self.sock = sock
        self.stop = stop
        self.request = request
        self.sent = 0

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        self.sent += len(data)
        return True

    def wait(self, seconds: float) -> bool:
        return not self.stop.wait(seconds)


Script = Callable[[Peer], None]


class HostileServer:
    """Answers every request on 127.0.0.1:`port` with *script*, each connection in a thread
    of its own (after reading the request's head, unless not *reads_head*: a script that
    answers TLS with what it likes); `peers` are the connections so far."""

    def __init__(self, script: Script, reads_head: bool = True):
        self.script = script
        self.reads_head = reads_head
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port: int = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.peers: list[Peer] = []
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            sock.settimeout(GIVE_UP)
            request = b""
            try:
                while self.reads_head and b"\r\n\r\n" not in request and len(request) < 65536:
                    more = sock.recv(65536)
                    if not more:
                        return
                    request += more
            except OSError:
                return
            peer = Peer(sock, self.stop, request)
            self.peers.append(peer)
            self.script(peer)

    def close(self) -> None:
        self.stop.set()
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._accepting.join(GIVE_UP)
        for thread in self._threads:
            thread.join(GIVE_UP + 2)


@contextmanager
def hostile(script: Script, reads_head: bool = True) -> Iterator[HostileServer]:
    server = HostileServer(script, reads_head)
    try:
        yield server
    finally:
        server.close()


# -- scripts ---------------------------------------------------------------------------------


def head(status: int = 200, reason: str = "OK", headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}", "Connection: close", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def whole(body: bytes, status: int = 200, reason: str = "OK", kind: str = "application/json") -> bytes:
    return head(status, reason, {"Content-Type": kind, "Content-Length": str(len(body))}) + body


def answer(body: bytes | Any, status: int = 200, reason: str = "OK", kind: str = "application/json") -> Script:
    """A whole answer at once (*body*: bytes, or a value sent as JSON)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()

    def script(peer: Peer) -> None:
        peer.send(whole(data, status, reason, kind))

    return script


def trickle(data: bytes, every: float, after: int = 0) -> Script:
    """*data* one byte every *every* seconds (its first *after* bytes at once)."""

    def script(peer: Peer) -> None:
        if not peer.send(data[:after]):
            return
        waited = 0.0
        for n in range(after, len(data)):
            if waited >= GIVE_UP or not peer.wait(every) or not peer.send(data[n : n + 1]):
                return
            waited += every

    return script


def announced(length: int) -> Script:
    """A head announcing *length* bytes, then filler as fast as taken, up to `MOST`."""

    def script(peer: Peer) -> None:
        peer.send(head(headers={"Content-Type": "application/json", "Content-Length": str(length)}))
        filler = b" " * 65536
        while peer.sent < MOST and not peer.stop.is_set() and peer.send(filler):
            pass

    return script


def chunked(piece: bytes = b"0," * 32768, start: bytes = b"[", most: int = MOST) -> Script:
    """A chunked body that never ends (up to *most*: then it ends as JSON, ``0]``)."""

    def script(peer: Peer) -> None:
        peer.send(head(headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"}))
        peer.send(b"%x\r\n%s\r\n" % (len(start), start))
        frame = b"%x\r\n%s\r\n" % (len(piece), piece)
        while peer.sent < most and not peer.stop.is_set():
            if not peer.send(frame):
                return
        peer.send(b"2\r\n0]\r\n0\r\n\r\n")

    return script


def until_closed(piece: bytes = b" " * 65536, most: int = MOST) -> Script:
    """A body of neither length nor chunks: filler until the connection closes (`MOST`)."""

    def script(peer: Peer) -> None:
        peer.send(head(headers={"Content-Type": "application/x-ndjson"}))
        while peer.sent < most and not peer.stop.is_set():
            if not peer.send(piece):
                return

    return script


def flood(size: int = 60_000) -> Script:
    """An NDJSON answer of endless distinct log lines of *size* bytes each, as fast as taken
    (for `GIVE_UP` seconds)."""

    def script(peer: Peer) -> None:
        peer.send(head(headers={"Content-Type": "application/x-ndjson"}))
        end = time.monotonic() + GIVE_UP
        n = 0
        while time.monotonic() < end and not peer.stop.is_set():
            batch = []
            for _ in range(16):
                n += 1
                minute, second, micro = n // 60_000_000 % 60, n // 1_000_000 % 60, n % 1_000_000
                batch.append(
                    b'{"time":"2026-12-01T15:%02d:%02d.%06dZ","node":"n1","level":"info","system":"t",'
                    b'"event":"e","message":"%s"}\n' % (minute, second, micro, b"x" * size)
                )
            if not peer.send(b"".join(batch)):
                return

    return script


def lines(rows: list[bytes], every: float = 0.0, then_wait: float = 0.0) -> Script:
    """An NDJSON answer of *rows* (each with its newline added), *every* seconds apart, then
    held open *then_wait* seconds."""

    def script(peer: Peer) -> None:
        peer.send(head(headers={"Content-Type": "application/x-ndjson"}))
        for row in rows:
            if (every and not peer.wait(every)) or not peer.send(row + b"\n"):
                return
        if then_wait:
            peer.wait(then_wait)

    return script


# -- what a node answers, and the CLI around it ---------------------------------------------

#: the deadline of a request in these tests, seconds
DEADLINE = 1.5
#: the cap on a JSON answer in these tests, bytes
CAP = 1024 * 1024
#: how long past a deadline a command may take to say so
SLACK = 1.0


def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deadlines and caps small enough for a test (set with ``raising=False``, so that on a
    checkout without them a test fails for what it checks, not in its setup)."""
    from gtmcluster.cli import logs, nodeapi

    monkeypatch.setattr(nodeapi, "DEADLINE", DEADLINE, raising=False)
    monkeypatch.setattr(nodeapi, "MAX_JSON", CAP, raising=False)
    monkeypatch.setattr(logs, "READ_DEADLINE", DEADLINE, raising=False)
    monkeypatch.setattr(logs, "READ_TIMEOUT", DEADLINE)
    monkeypatch.setattr(logs, "RETRY", (0.2,))


#: C0 and C1 controls but the newline: never printed as they are
CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
#: a window title, a screen clear and a C1 CSI (bold), each a node could put in its texts
ESCAPES = "\x1b]0;owned\x07", "\x1b[2J", "\x9b1m"
SHOWN = "\\x1b]0;owned\\x07", "\\x1b[2J", "\\x9b1m"

#: a status answer as a node gives it (the fields `gtmcluster status` reads, and some more)
STATUS: dict[str, Any] = {
    "node": "n1",
    "datacenter": "DC1",
    "config_digest": "5c3a34aa0f2d5db4",
    "ready": True,
    "bundle": None,
    "dnssec_keys": {},
    "admin": [],
    "state": {"digest": "3-aaaa", "digest_by_protocol": {"1": "3-aaaa"}, "records": 3},
    "peers": [
        {
            "name": "n2",
            "connected": True,
            "counted": True,
            "silent_for": None,
            "last_contact_ago": 0.5,
            "config_digest": "5c3a34aa0f2d5db4",
            "config_matches": True,
            "synced": True,
        }
    ],
    "health": {
        "virtual_servers": {
            "vs1": {"available": True, "serving": True, "health": "up", "admin": "enabled", "held": False, "reason": ""}
        },
        "links": {},
    },
}


ADMIN = {"level": "vs", "name": "vs1", "state": "disabled", "by": "x", "reason": "", "at": 1.0, "node": "n1"}
BUNDLE = {"generation": 1, "digest": "d", "held_generation": 2, "held_digest": "e"}
RENDERED: dict[str, tuple[list[str], Any]] = {
    "explain": (
        ["explain", "gslb.example.test", "--ldns", "192.0.2.1"],
        {
            "wideip": "gslb.example.test",
            "name": "gslb.example.test",
            "type": "A",
            "client": {"ldns": "192.0.2.1", "subnet": None, "keys": "the LDNS address"},
            "action": "answer",
            "answer": ["10.0.1.1"],
            "pool": "p",
            "members": [f"vs1{ESCAPES[1]}"],
            "method": "topology",
            "ttl": 30,
            "scope": 0,
            "probe_requested": False,
            "trace": [{"text": f"pool p {ESCAPES[0]}", "datacenters": [{"text": f"DC1 rtt {ESCAPES[2]}"}]}],
            "admin": [],
            "unhealthy": [{"virtual_server": "vs2", "health": "down", "reason": f"web {ESCAPES[2]}"}],
        },
    ),
    "ldns": (
        ["ldns"],
        {
            "ldns": [
                {
                    "address": f"192.0.2.1{ESCAPES[0]}",
                    "ttl": 10,
                    "probe_protocol": "dns",
                    "paths": [
                        {"datacenter": f"DC1{ESCAPES[1]}", "rtt_us": 100, "hops": 0, "completion_rate": f"{ESCAPES[2]}"}
                    ],
                }
            ],
            "truncated": False,
        },
    ),
    "stats": (
        ["stats"],
        {
            "wideips": {
                f"www{ESCAPES[0]}": {
                    "requests": 1,
                    "types": {"A": 1},
                    "answered": 1,
                    "persistence_hits": 0,
                    "fallbacks": 0,
                    "returned_to_dns": 0,
                    "dropped": 0,
                    "rcodes": {},
                    "slots": {f"preferred{ESCAPES[1]}": 1},
                    "methods": {f"rr{ESCAPES[2]}": 1},
                }
            },
            "pools": {},
        },
    ),
    "disable": (
        ["disable", "virtual-server", "vs1"],
        {
            "target": "virtual-server",
            "name": "vs1",
            "admin": "disabled",
            "by": f"eve{ESCAPES[0]}",
            "why": f"{ESCAPES[1]}",
            "at": 1.0,
            "node": "n1",
            "virtual_server": "vs1",
            "available": False,
            "reason": f"{ESCAPES[2]}",
            "released_hold": False,
        },
    ),
}


def config_at(tmp_path: Path, port: int, tls: bool = False) -> Path:
    config = configs.base("127.0.0.1")
    config["sync_group"]["members"][0]["api"] = f"127.0.0.1:{port}"
    if tls:
        config["api"] = {"tls": True}
    return configs.write(tmp_path, config)


def member_at(tmp_path: Path, port: int) -> Member:
    return load(config_at(tmp_path, port)).sync_group.members[0]


def url(port: int, path: str) -> str:
    return f"http://127.0.0.1:{port}{path}"


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, float]:
    """Run `gtmcluster ARGS`: its exit status, stdout, stderr and how long it took."""
    start = time.monotonic()
    code = main(args)
    took = time.monotonic() - start
    out, err = capsys.readouterr()
    return code, out, err, took


def assert_escaped(text: str) -> None:
    assert not CONTROLS.search(text), repr(text)
    for shown in SHOWN:
        assert shown in text, (shown, text)


#: any JSON value, small: what a hostile answer puts where the CLI expects something else
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def places(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path to every value inside *value*."""
    out = [at]
    if isinstance(value, dict):
        for key, inner in value.items():
            out.extend(places(inner, (*at, key)))
    elif isinstance(value, list):
        for n, inner in enumerate(value):
            out.extend(places(inner, (*at, n)))
    return out


@st.composite
def mutated(draw: st.DrawFn, base: Any) -> Any:
    """*base* with one to three values replaced by any JSON, or dict entries dropped."""
    value = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(places(value)))
        if not path:
            return draw(JSON)
        held = value
        for key in path[:-1]:
            held = held[key]
        if isinstance(held, dict) and draw(st.booleans()):
            del held[path[-1]]
        else:
            held[path[-1]] = draw(JSON)
    return value
