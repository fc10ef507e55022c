"""TCP DNS connections from one hostile source against a real node: what it holds, and
whether another client keeps its connection.

    PYTHONPATH=.:twistd-plugins .venv/bin/python bench/tcpflood.py [--connections 2000]
        [--sources 1]

Starts ``twistd -n gtm`` with the default ``dns_server`` (tcp_max_clients 1,000 per DNS
address, tcp_max_per_source 64, idle timeout 10 s), opens one idle connection from a
neighbour (127.0.78.250), then ``--connections`` connections spread over ``--sources``
hostile addresses (127.0.78.1...), one after the other, silent. Once the node has seen
them all: prints the node's RSS (``/proc``) before and after, the connections it holds,
how many it closed and why (/metrics), whether the neighbour's connection is still open
and answered, and how long a fresh TCP query took. Issue 30 rule 5; docs/dns-tcp.md has the
figures. Not a test: tests/process/test_abuse.py asserts the behaviour.
"""

from __future__ import annotations

import argparse
import re
import socket
import struct
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.support import configs, dnsclient, nodeproc, poll


def rss_mib(pid: int) -> float:
    found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    assert found
    return int(found.group(1)) / 1024


def metrics(address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{address}:8053/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        name: float(value)
        for name, value in (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    }


def closed_by(samples: dict[str, float]) -> dict[str, int]:
    prefix = 'gtm_dns_tcp_closed_total{reason="'
    return {k[len(prefix) : -2]: int(v) for k, v in samples.items() if k.startswith(prefix)}


def connect(source: str, server: tuple[str, int]) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    s.bind((source, 0))
    s.connect(server)
    return s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--sources", type=int, default=1)
    args = parser.parse_args()
    ours, neighbour_address = "127.0.78.200", "127.0.78.250"
    www = dnsclient.query("www.example.test")
    with tempfile.TemporaryDirectory() as tmp:
        path = configs.write(Path(tmp), configs.base(ours))
        with nodeproc.running_node(path, "n1", ours, 5353, Path(tmp)) as node:
            neighbour = connect(neighbour_address, node.server)
            poll.until(lambda: metrics(ours)["gtm_dns_tcp_connections"] >= 1, what="the neighbour")
            before = rss_mib(node.proc.pid)
            flood = []
            for i in range(args.connections):
                flood.append(connect(f"127.0.78.{1 + i % args.sources}", node.server))

            def seen() -> bool:
                samples = metrics(ours)
                held = samples["gtm_dns_tcp_connections"] + sum(closed_by(samples).values())
                return bool(held >= 1 + args.connections)

            poll.until(seen, timeout=60, what="every connection accepted")
            after = rss_mib(node.proc.pid)
            samples = metrics(ours)
            try:
                neighbour.sendall(struct.pack("!H", len(www)) + www)
                answered = dnsclient.addresses(dnsclient.parse(dnsclient.read_framed(neighbour))) == ["192.0.2.80"]
            except OSError:
                answered = False
            asked = time.monotonic()
            dnsclient.tcp(www, node.server, timeout=5)
            fresh_ms = (time.monotonic() - asked) * 1000
            for s in [neighbour, *flood]:
                s.close()
    print(
        f"{args.connections} connections from {args.sources} source(s) after a neighbour's idle one: "
        f"RSS {before:.0f} MiB before, {after:.0f} after; held {samples['gtm_dns_tcp_connections']:.0f}, "
        f"closed {closed_by(samples)}; the neighbour's connection "
        f"{'kept and answered' if answered else 'CLOSED'}; a fresh TCP query {fresh_ms:.1f} ms"
    )


if __name__ == "__main__":
    main()
