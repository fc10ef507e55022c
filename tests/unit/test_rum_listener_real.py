"""The public RUM listener over real TCP on loopback, with the real reactor (in a process of
its own, `tests.support.rumserve`) and a real HTTP client (the standard library's): a beacon
kept (204), refused for its body (400), its size (413), its rate (429) and its source (403),
an unknown route (404), and only the kept one reaching `keep`; a client dribbling its
headers is cut at the read deadline."""

from __future__ import annotations

import http.client
import json
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.process

GOOD = {"samples": {"dc1": 20.5, "dc2": 120}, "id": "abcdefghij0123456789"}


@dataclass
class Served:
    port: int
    kept: Path

    def ask(self, method: str, path: str, body: bytes | None = None, source: str = "127.0.0.1") -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5, source_address=(source, 0))
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "text/plain"})
            answer = conn.getresponse()
            data = answer.read()
            return answer.status, json.loads(data) if data and "json" in answer.getheader("content-type", "") else data
        finally:
            conn.close()

    def kept_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.kept.read_text().splitlines()] if self.kept.exists() else []


def serve(tmp_path: Path, **settings: Any) -> Iterator[Served]:
    kept = tmp_path / "kept.jsonl"
    settings.setdefault("targets", {"dc1": "http://127.0.0.1:1/o", "dc2": "http://127.0.0.1:2/o"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.rumserve", json.dumps(settings), str(kept)],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "the listener did not start in 30 s"
        yield Served(json.loads(proc.stdout.readline())["port"], kept)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    yield from serve(tmp_path, allow=["127.0.0.1/32"], per_second=0.001, burst=8, max_body=512, read_timeout=1.0)


def test_answers_and_what_reaches_keep(served: Served) -> None:
    good = json.dumps(GOOD).encode()
    assert served.ask("POST", "/rum/v1/beacon", good) == (204, b"")
    assert served.kept_lines() == [{"subnet": "127.0.0.0/24", "samples": {"dc1": 20.5, "dc2": 120.0}, "id": GOOD["id"]}]
    status, body = served.ask("POST", "/rum/v1/beacon", b'{"samples": {"dc1": Infinity}}')
    assert (status, body["error"]) == (400, "malformed")
    status, body = served.ask("POST", "/rum/v1/beacon", b'{"samples": {"dc7": 1}}')
    assert (status, body["error"]) == (400, "unknown_dc")
    status, body = served.ask("POST", "/rum/v1/beacon", b"x" * 600)
    assert (status, body["error"]) == (413, "too_large")
    status, body = served.ask("POST", "/rum/v1/beacon", good, source="127.0.0.2")
    assert (status, body["error"]) == (403, "refused_source")
    status, body = served.ask("GET", "/api/v1/status")
    assert (status, body["error"]) == (404, "not_found")
    assert served.ask("GET", "/rum/v1/object?r=1") == (200, b"gtmcluster rum\n")
    statuses = [served.ask("POST", "/rum/v1/beacon", good)[0] for _ in range(6)]
    assert statuses == [204, 204, 204, 204, 429, 429]  # (8 in the burst: 4 spent above)
    assert len(served.kept_lines()) == 5


def test_a_header_dribble_is_cut_at_the_read_deadline(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as s:
        s.sendall(b"POST /rum/v1/beacon HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        closed_after = None
        for _ in range(40):
            try:
                s.sendall(b"X")
                ready, _, _ = select.select([s], [], [], 0.25)
                if ready and s.recv(1024) == b"":
                    closed_after = time.monotonic() - started
                    break
            except OSError:  # reset by the listener
                closed_after = time.monotonic() - started
                break
        assert closed_after is not None and closed_after < 3.0
    assert served.kept_lines() == []
