"""The chaos run's load generator: asks every node, all the time, and writes down what came back.

    python -m tests.chaos.loadgen --out FILE --server gtm-cnc=10.98.1.1:53 [--server ...]
                                  [--rate 10] [--timeout 1] [--networks 64] [--name www.chaos.test]

A process of its own (in the client's namespace; the runner's threads cannot delay it): every
``1/rate`` seconds it sends one query for NAME (type A) to each server over UDP, each with an
EDNS client subnet taken in turn from 10.200.0.0/24, 10.200.1.0/24, ... (``--networks`` of
them, so persistence records are made for many clients). Each query becomes one JSON line:
``{"kind": "dns", "t": SENT, "node", "rcode", "answer", "ms"}``, with ``rcode`` None when no
reply came within ``--timeout``. It runs until SIGTERM or SIGINT (the line being written is finished first).
"""

from __future__ import annotations

import argparse
import json
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import IO

import dns.edns
import dns.exception
import dns.message
import dns.rcode
import dns.rdatatype


def run(
    servers: dict[str, tuple[str, int]],
    name: str,
    rate: float,
    timeout: float,
    networks: int,
    out: IO[str],
    stopping: Callable[[], bool],
) -> None:
    """Ask and record until *stopping()* says so."""
    socks = {node: socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for node in servers}
    by_fd = {s.fileno(): node for node, s in socks.items()}
    for s in socks.values():
        s.setblocking(False)
    pending: dict[tuple[str, int], float] = {}  # (node, id) -> sent
    seq = 0
    next_tick = time.time()

    def record(node: str, sent: float, rcode: str | None, answer: list[str], now: float) -> None:
        line = {"kind": "dns", "t": round(sent, 4), "node": node, "rcode": rcode, "answer": answer}
        line["ms"] = None if rcode is None else round((now - sent) * 1000, 2)
        out.write(json.dumps(line) + "\n")

    try:
        while not stopping():
            now = time.time()
            if now >= next_tick:
                seq += 1
                qid = seq & 0xFFFF
                network = f"10.200.{seq % networks}.0"
                for node, server in servers.items():
                    q = dns.message.make_query(
                        name, dns.rdatatype.A, use_edns=0, options=[dns.edns.ECSOption(network, 24)]
                    )
                    q.id = qid
                    try:
                        socks[node].sendto(q.to_wire(), server)
                    except OSError:
                        record(node, now, None, [], now)  # e.g. no route: as good as no reply
                        continue
                    stale = pending.pop((node, qid), None)  # an id reused before its reply came
                    if stale is not None:
                        record(node, stale, None, [], now)
                    pending[node, qid] = now
                next_tick = max(next_tick + 1 / rate, now)
            for key, sent in list(pending.items()):
                if now - sent > timeout:
                    del pending[key]
                    record(key[0], sent, None, [], now)
            ready, _, _ = select.select(list(by_fd), [], [], max(0.0, min(next_tick - time.time(), 0.05)))
            for fd in ready:
                node = by_fd[fd]
                try:
                    data = socks[node].recv(4096)
                    msg = dns.message.from_wire(data)
                except (OSError, dns.exception.DNSException):
                    continue
                sent_at = pending.pop((node, msg.id), None)
                if sent_at is None:
                    continue  # late: already recorded as a timeout
                answer = sorted(rd.address for rrset in msg.answer if rrset.rdtype == dns.rdatatype.A for rd in rrset)
                record(node, sent_at, dns.rcode.to_text(msg.rcode()), answer, time.time())
            out.flush()
    finally:
        out.flush()
        for s in socks.values():
            s.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--server", action="append", required=True, metavar="NODE=ADDRESS:PORT")
    p.add_argument("--name", default="www.chaos.test")
    p.add_argument("--rate", type=float, default=10.0, help="queries per second to each server")
    p.add_argument("--timeout", type=float, default=1.0)
    p.add_argument("--networks", type=int, default=64, help="client subnets to rotate through")
    args = p.parse_args(argv)
    servers = {}
    for spec in args.server:
        node, _, hostport = spec.partition("=")
        host, _, port = hostport.rpartition(":")
        if not node or not host or not port.isdigit():
            p.error(f"--server {spec!r}: expected NODE=ADDRESS:PORT")
        servers[node] = (host, int(port))

    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    signal.signal(signal.SIGINT, lambda signum, frame: stop.append(signum))
    with open(args.out, "a") as out:
        run(servers, args.name, args.rate, args.timeout, args.networks, out, lambda: bool(stop))
    return 0


if __name__ == "__main__":
    sys.exit(main())
