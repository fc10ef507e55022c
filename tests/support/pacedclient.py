"""A DNS client that asks at a steady pace, whatever the server does, and keeps every answer.

`PacedClient` sends one UDP query every `period` seconds (20 ms) to a server, from its own
socket, without waiting for answers (so a server that stands still meets as many queries as
one that answers), cycling through a list of names. A second thread reads the answers. A
query unanswered after `timeout` (2 s) is lost. Each query's fate is kept as a `Query`: when
it was sent, its latency (None when lost) and the addresses answered; `figures` sums up a
window of them.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.support import dnsclient


@dataclass
class Query:
    name: str
    sent: float  # time.monotonic() when sent
    latency: float | None = None  # seconds; None: no answer (yet, or lost)
    addresses: tuple[str, ...] = ()
    rcode: int | None = None


@dataclass
class Figures:
    """A window of queries: how many were lost, how slow the answers were."""

    sent: int
    answered: int
    lost: int
    slowest: float  # seconds: the slowest answer (lost queries are counted apart)
    over_100ms: int  # answers that took longer than 100 ms
    p50: float
    p99: float
    longest_gap: float = 0.0  # the longest stretch of seconds between two answers

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "answered": self.answered,
            "lost": self.lost,
            # no answer at all: no latency to speak of
            "slowest_ms": round(self.slowest * 1000, 1) if self.answered else None,
            "over_100ms": self.over_100ms,
            "p50_ms": round(self.p50 * 1000, 2) if self.answered else None,
            "p99_ms": round(self.p99 * 1000, 2) if self.answered else None,
            "longest_gap_ms": round(self.longest_gap * 1000, 1) if self.answered > 1 else None,
        }


@dataclass
class PacedClient:
    server: tuple[str, int]
    names: list[str]
    source: str | None = None
    period: float = 0.02
    timeout: float = 2.0
    queries: list[Query] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((self.source or "0.0.0.0", 0))
        self._sock.settimeout(0.1)
        self._lock = threading.Lock()
        self._waiting: dict[int, Query] = {}
        self._halt = threading.Event()
        self._threads = [
            threading.Thread(target=self._send, name="paced sender", daemon=True),
            threading.Thread(target=self._receive, name="paced receiver", daemon=True),
        ]

    def start(self) -> PacedClient:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop sending, wait for the answers still due, and close."""
        self._halt.set()
        self._threads[0].join(timeout=5)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._waiting:
                    break
            time.sleep(0.02)
        self._threads[1].join(timeout=self.timeout + 1)
        self._sock.close()

    def _send(self) -> None:
        n = 0
        start = time.monotonic()
        while not self._halt.is_set():
            qid = n % 65536
            name = self.names[n % len(self.names)]
            query = Query(name, time.monotonic())
            with self._lock:
                self._waiting[qid] = query
                self.queries.append(query)
            with contextlib.suppress(OSError):
                self._sock.sendto(dnsclient.query(name, "A", qid=qid), self.server)
            n += 1
            # the next query at its time on the grid, however late this one went out
            delay = start + n * self.period - time.monotonic()
            if delay > 0:
                self._halt.wait(delay)

    def _receive(self) -> None:
        while not (self._halt.is_set() and not self._waiting):
            try:
                data = self._sock.recv(65535)
            except TimeoutError:
                self._expire()
                continue
            except OSError:
                return
            now = time.monotonic()
            try:
                reply = dnsclient.parse(data)
            except Exception:
                continue
            with self._lock:
                query = self._waiting.pop(reply.id, None)
            if query is not None and now - query.sent <= self.timeout:
                query.latency = now - query.sent
                query.addresses = tuple(dnsclient.addresses(reply))
                query.rcode = reply.rcode()
            self._expire()

    def _expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            for qid in [q for q, query in self._waiting.items() if now - query.sent > self.timeout]:
                del self._waiting[qid]

    def window(self, start: float = float("-inf"), end: float = float("inf")) -> list[Query]:
        """The queries sent in [start, end) (time.monotonic() times)."""
        with self._lock:
            return [q for q in self.queries if start <= q.sent < end]

    def figures(self, start: float = float("-inf"), end: float = float("inf")) -> Figures:
        """Figures of the queries sent in [start, end) whose fate is known."""
        now = time.monotonic()
        done = [q for q in self.window(start, end) if q.latency is not None or now - q.sent > self.timeout]
        latencies = sorted(q.latency for q in done if q.latency is not None)
        lost = sum(1 for q in done if q.latency is None)
        answered_at = sorted(q.sent + q.latency for q in done if q.latency is not None)
        gaps = [b - a for a, b in itertools.pairwise(answered_at)]
        return Figures(
            sent=len(done),
            answered=len(latencies),
            lost=lost,
            slowest=latencies[-1] if latencies else 0.0,
            over_100ms=sum(1 for x in latencies if x > 0.1),
            p50=percentile(latencies, 50),
            p99=percentile(latencies, 99),
            longest_gap=max(gaps, default=0.0),
        )


def percentile(ordered: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (0.0 when empty)."""
    if not ordered:
        return 0.0
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]
