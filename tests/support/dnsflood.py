"""A flood of DO=1 queries for random names, from a thread, while a test asks its own questions.

`Flood.running` sends queries for a fresh random label under the zone (``RANDOM.example.test
A``, DO=1) from one UDP socket, keeping up to `window` of them in flight, for as long as
the block runs and until `at_least` were answered, and counts the answers: their RCODEs and
how many came truncated.
"""

from __future__ import annotations

import contextlib
import random
import socket
import string
import threading
from collections.abc import Iterator

import dns.flags
import dns.message

LABEL = string.ascii_lowercase + string.digits


class Flood:
    def __init__(self, address: str, port: int, rng: random.Random, zone: str = "example.test", window: int = 32):
        self.target = (address, port)
        self.rng = rng
        self.zone = zone
        self.window = window
        self.sent = 0
        self.answered = 0
        self.truncated = 0
        self.rcodes: set[int] = set()

    def _query(self) -> bytes:
        label = "".join(self.rng.choice(LABEL) for _ in range(16))
        q = dns.message.make_query(f"{label}.{self.zone}", "A", want_dnssec=True, use_edns=0)
        q.flags &= ~dns.flags.RD
        return q.to_wire()

    def _run(self, stop: threading.Event, enough: threading.Event, at_least: int) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(0.5)
            in_flight = 0
            while not stop.is_set():
                while in_flight < self.window:
                    sock.sendto(self._query(), self.target)
                    self.sent += 1
                    in_flight += 1
                try:
                    data = sock.recv(4096)
                except TimeoutError:
                    in_flight = 0  # (lost: send more)
                    continue
                in_flight -= 1
                reply = dns.message.from_wire(data)
                self.answered += 1
                if self.answered >= at_least:
                    enough.set()
                self.rcodes.add(reply.rcode())
                if reply.flags & dns.flags.TC:
                    self.truncated += 1

    @contextlib.contextmanager
    def running(self, at_least: int = 1000, timeout: float = 60) -> Iterator[Flood]:
        stop = threading.Event()
        enough = threading.Event()
        thread = threading.Thread(target=self._run, args=(stop, enough, at_least), daemon=True)
        thread.start()
        try:
            yield self
            enough.wait(timeout)
        finally:
            stop.set()
            thread.join(timeout=10)
