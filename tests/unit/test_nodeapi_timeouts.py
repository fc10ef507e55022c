"""`nodeapi.open_stream`'s two timeouts: connecting is bounded by *timeout* and the reads of
a followed stream by *read_timeout*, so that `gtmcluster logs -f` learns within seconds that
a node does not answer, yet waits long for the next line of one that does.

Against a local plain-HTTP server that accepts at once and answers 0.6 s after the request
(the wait a followed log knows between lines); a black-holed node (no answer to the
connect) is in tests/process/test_deployed.py."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gtmcluster.cli import nodeapi
from gtmcluster.config.load import load
from gtmcluster.config.model import Member
from tests.support import configs

#: how long the server waits before it answers
DELAY = 0.6


@pytest.fixture
def slow_server() -> Iterator[int]:
    """A server on 127.0.0.1 (its port) that answers each request with one line, DELAY s
    after reading it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                if stop.wait(DELAY):
                    return
                body = b'{"line": 1}\n'
                head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                conn.sendall(head.encode() + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        thread.join(5)


def member_at(tmp_path: Path, port: int) -> Member:
    config = configs.base("127.0.0.1")
    config["sync_group"]["members"][0]["api"] = f"127.0.0.1:{port}"
    return load(configs.write(tmp_path, config)).sync_group.members[0]


def test_a_read_waits_for_read_timeout_not_for_the_connect_timeout(tmp_path: Path, slow_server: int) -> None:
    """With a connect timeout shorter than the server's wait and a longer read timeout, the
    answer is read; with the connect timeout alone (the old behaviour of a short timeout),
    the same wait makes the node unreachable."""
    m = member_at(tmp_path, slow_server)
    with nodeapi.open_stream(m, "/api/v1/logs", {}, None, timeout=DELAY / 3, read_timeout=DELAY * 5) as response:
        assert response.body(100) == b'{"line": 1}\n'
    with pytest.raises(nodeapi.Unreachable, match="timed out"):
        nodeapi.open_stream(m, "/api/v1/logs", {}, None, timeout=DELAY / 3)
