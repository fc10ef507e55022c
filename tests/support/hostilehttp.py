"""Hostile HTTP servers on loopback, for the tests of the node's HTTP clients (link counters
over HTTP, load sources): each answers every request in one bad way and counts the
connections it accepted and those still open, so a test can see a client that leaks them.

Modes (`MODES`):

- ``error_endless``: ``500`` and a body that never ends, sent as fast as the client reads;
- ``huge_length``: ``200`` with ``Content-Length: 10**12`` and a body that never ends;
- ``drip``: ``200`` with a small ``Content-Length``, then the body one byte a second;
- ``endless_headers``: ``200`` and header lines that never end;
- ``huge_chunk``: ``200``, chunked, the first chunk ``0xffffffffffff`` bytes, never ending;
- ``slow_headers``: the status line, then the headers one byte a second;
- ``ok``: a Prometheus page with two growing counters (the control).

Each connection is served by a thread of its own, which stops when the client goes (a
reset, a closed socket) or when the server stops. Run alone as
``python -m tests.support.hostilehttp MODE ADDRESS PORT`` it serves until killed.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

MODES = ("error_endless", "huge_length", "drip", "endless_headers", "huge_chunk", "slow_headers", "ok")
#: what an endless body or header block is made of, one send at a time
BLOCK = 64 * 1024
#: the Prometheus names the ``ok`` page (and every counters config of the tests) reads
RECEIVED, SENT = "gtm_test_received_bytes_total", "gtm_test_sent_bytes_total"


@dataclass
class Counts:
    """Connections the server accepted, and how many are open now (the client's end not
    yet closed)."""

    accepted: int = 0
    open: int = 0
    bytes_sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {"accepted": self.accepted, "open": self.open, "bytes_sent": self.bytes_sent}


class HostileServer:
    """One listening socket answering every request in *mode*."""

    def __init__(self, mode: str, address: str = "127.0.0.1", port: int = 0):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode
        self.counts = Counts()
        self._stop = threading.Event()
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((address, port))
        self._listener.listen(512)
        self._listener.settimeout(0.2)
        self.address = address
        self.port: int = self._listener.getsockname()[1]
        self._readings = 0
        self._thread = threading.Thread(target=self._accept, name=f"hostile-{mode}", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> HostileServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self.counts.lock:
                self.counts.accepted += 1
                self.counts.open += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(1.0)
            if self._request(conn):
                getattr(self, f"_{self.mode}")(conn)
                self._until_closed(conn)
        except OSError:
            pass  # the client went: that is the point
        finally:
            conn.close()
            with self.counts.lock:
                self.counts.open -= 1

    def _request(self, conn: socket.socket) -> bool:
        """Read the request's head (at most 64 KiB); False when the client went first."""
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            try:
                data = conn.recv(4096)
            except TimeoutError:
                if self._stop.is_set():
                    return False
                continue
            if not data:
                return False
            head += data
        return True

    def _send(self, conn: socket.socket, data: bytes) -> None:
        """Send *data* whole, however long the client takes to read it (OSError once it
        has gone)."""
        view = memoryview(data)
        while view:
            if self._stop.is_set():
                raise OSError("server stopping")
            try:
                sent = conn.send(view)
            except TimeoutError:
                continue
            view = view[sent:]
            with self.counts.lock:
                self.counts.bytes_sent += sent

    def _endless(self, conn: socket.socket, block: bytes) -> None:
        while True:
            self._send(conn, block)

    def _drip_bytes(self, conn: socket.socket, byte: bytes) -> None:
        while not self._stop.wait(1.0):
            self._send(conn, byte)

    def _until_closed(self, conn: socket.socket) -> None:
        """After a finite answer: hold the connection until the client closes it (a server
        that never closes is hostile too)."""
        while not self._stop.is_set():
            try:
                if not conn.recv(4096):
                    return
            except TimeoutError:
                continue

    # -- the modes

    def _error_endless(self, conn: socket.socket) -> None:
        self._send(conn, b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n\r\n")
        self._endless(conn, b"e" * BLOCK)

    def _huge_length(self, conn: socket.socket) -> None:
        self._send(conn, b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % 10**12)
        self._endless(conn, b"#" * (BLOCK - 1) + b"\n")

    def _drip(self, conn: socket.socket) -> None:
        self._send(conn, b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4096\r\n\r\n")
        self._drip_bytes(conn, b"#")

    def _endless_headers(self, conn: socket.socket) -> None:
        self._send(conn, b"HTTP/1.1 200 OK\r\n")
        self._endless(conn, b"X-Pad: " + b"p" * 100 + b"\r\n")

    def _huge_chunk(self, conn: socket.socket) -> None:
        self._send(conn, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffff\r\n")
        self._endless(conn, b"#" * (BLOCK - 1) + b"\n")

    def _slow_headers(self, conn: socket.socket) -> None:
        self._send(conn, b"HTTP/1.1 200 OK\r\n")
        self._drip_bytes(conn, b"X")

    def _ok(self, conn: socket.socket) -> None:
        self._readings += 1
        n = self._readings * 125_000
        body = f"# TYPE {RECEIVED} counter\n{RECEIVED} {n}\n# TYPE {SENT} counter\n{SENT} {2 * n}\n".encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body)
        self._send(conn, head + body)


@contextlib.contextmanager
def serving(mode: str, address: str = "127.0.0.1") -> Iterator[HostileServer]:
    server = HostileServer(mode, address).start()
    try:
        yield server
    finally:
        server.stop()


def main() -> None:
    mode, address, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    server = HostileServer(mode, address, port).start()
    try:
        while True:
            time.sleep(5)
            print(server.counts.snapshot(), flush=True)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
