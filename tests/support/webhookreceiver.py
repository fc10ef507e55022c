"""A webhook receiver for process tests: an HTTP server on a loopback address, in a thread
of the test, that checks each delivery's signature (`alerts.events.verify`) and keeps what
it got; it answers 500 to the first `failures` deliveries, 200 to the others."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gtmcluster.alerts.events import SIGNATURE_HEADER, verify

#: bytes of a body read at most
MAX_BODY = 64 * 1024


@dataclass
class Got:
    """One delivery attempt as received."""

    body: dict[str, Any]
    signed: bool  # the signature checked
    status: int  # what the receiver answered
    at: float
    headers: dict[str, str] = field(default_factory=dict)


class Receiver:
    def __init__(self, address: str, secret: bytes, failures: int = 0):
        self.secret = secret
        self.failures = failures
        self.got: list[Got] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = min(int(self.headers.get("Content-Length", "0")), MAX_BODY)
                raw = self.rfile.read(length)
                signed = verify(receiver.secret, self.headers.get(SIGNATURE_HEADER, ""), raw, time.time())
                with receiver.lock:
                    status = 500 if len(receiver.got) < receiver.failures else (200 if signed else 401)
                    receiver.got.append(Got(json.loads(raw), signed, status, time.time(), dict(self.headers)))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((address, 0), Handler)
        self.url = f"http://{address}:{self.server.server_address[1]}/hook"

    def deliveries(self, kind: str | None = None) -> list[Got]:
        with self.lock:
            return [g for g in self.got if kind is None or g.body["event"] == kind]


@contextmanager
def running_receiver(address: str, secret: bytes, failures: int = 0) -> Iterator[Receiver]:
    receiver = Receiver(address, secret, failures)
    thread = threading.Thread(target=receiver.server.serve_forever, name="webhook receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
        thread.join(5)
