"""A stand-in LDNS for the demo: answers any DNS query after a delay that depends on who asks.

    python -m gtmcluster.demo.resolver --listen 127.0.4.1 --delay 127.0.0.11=50 --delay 127.0.0.13=8

On one machine every path is equally short; this resolver stands in for the WAN by
answering the GTM of each data center (which probes it from its own address) after that
data center's delay in milliseconds, so the path table and the RTT method have something
to show. It answers REFUSED with the query's ID and question (any reply is a probe sample).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import select
import signal
import socket
import struct
import sys
import time


def reply_to(query: bytes) -> bytes | None:
    if len(query) < 12 or query[2] & 0x80:
        return None
    qid, flags = struct.unpack("!HH", query[:4])
    # copy ID, opcode and RD; QR=1; rcode REFUSED; echo the question section as sent
    out_flags = 0x8000 | (flags & 0x7900) | 5
    return struct.pack("!HHHHHH", qid, out_flags, 1, 0, 0, 0) + query[12:] if query[5] == 1 else None


def serve(listen: str, port: int, delays: dict[str, float]) -> None:
    family = socket.AF_INET6 if ":" in listen else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.bind((listen, port))
    sock.setblocking(False)
    pending: list[tuple[float, int, bytes, tuple[str, int]]] = []
    seq = 0
    running = True

    def stop(signum: int, frame: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while running:
        timeout = max(0.0, pending[0][0] - time.monotonic()) if pending else 0.5
        readable, _, _ = select.select([sock], [], [], timeout)
        if readable:
            try:
                data, source = sock.recvfrom(4096)
            except OSError:
                data = b""
            answer = reply_to(data) if data else None
            if answer is not None:
                due = time.monotonic() + delays.get(source[0], 0.0) / 1000
                seq += 1
                heapq.heappush(pending, (due, seq, answer, source))
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _, _, answer, source = heapq.heappop(pending)
            with contextlib.suppress(OSError):
                sock.sendto(answer, source)
    sock.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", required=True, metavar="ADDRESS")
    p.add_argument("--port", type=int, default=53)
    p.add_argument("--delay", action="append", default=[], metavar="SOURCE=MS")
    args = p.parse_args(argv)
    delays = {}
    for item in args.delay:
        source, _, ms = item.partition("=")
        delays[source] = float(ms)
    serve(args.listen, args.port, delays)
    return 0


if __name__ == "__main__":
    sys.exit(main())
