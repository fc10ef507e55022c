"""A hostile zone transfer client against a real node: its memory and its UDP answers.

    PYTHONPATH=.:twistd-plugins .venv/bin/python bench/xfrflood.py [--records 20000]
        [--requests 1500] [--connections 1] [--seconds 20]

Starts ``twistd -n gtm`` serving example.test with ``--records`` more records and
``transfer: {allow: [127.0.0.0/8]}``, then, from one address inside ``allow``, opens
``--connections`` TCP connections, each sending ``--requests`` AXFR requests at once and
reading nothing (a 4 KiB receive buffer). For ``--seconds`` a UDP query is sent every
50 ms (2 s timeout): prints the node's RSS (``/proc``) before and at its peak, the UDP
answers' median and slowest times and the timeouts, and how many of the connections the
node closed. Issue 30's defect 1; docs/zone-transfer.md has the figures. Not a test: the
figures depend on the machine (tests/process/test_zone_transfer.py asserts the bounds).
"""

from __future__ import annotations

import argparse
import re
import socket
import statistics
import struct
import tempfile
import time
from pathlib import Path

import dns.message

from tests.support import configs, dnsclient, nodeproc


def rss_mib(pid: int) -> float:
    found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    assert found
    return int(found.group(1)) / 1024


def closed(sock: socket.socket) -> bool:
    """Whether the node closed *sock* (read what it holds to see the end or a reset)."""
    sock.settimeout(0.5)
    try:
        while sock.recv(1 << 20):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    hosts = "".join(f"h{i} IN A 10.{i // 65536}.{i // 256 % 256}.{i % 256}\n" for i in range(args.records))
    ours, hostile = "127.0.77.1", "127.0.77.2"
    axfr = dns.message.make_query("example.test", "AXFR").to_wire()
    www = dnsclient.query("www.example.test")
    with tempfile.TemporaryDirectory() as tmp:
        config = configs.base(ours)
        config["zones"][0]["transfer"] = {"allow": ["127.0.0.0/8"]}
        path = configs.write(Path(tmp), config, zone=configs.ZONE + hosts)
        with nodeproc.running_node(path, "n1", ours, 5353, Path(tmp)) as node:
            before = peak = rss_mib(node.proc.pid)
            sockets, sent = [], 0
            for _ in range(args.connections):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.bind((hostile, 0))
                sock.connect(node.server)
                requests = (struct.pack("!H", len(axfr)) + axfr) * args.requests
                sock.sendall(requests)
                sent += len(requests)
                sockets.append(sock)
            latencies: list[float] = []
            timeouts = 0
            started = time.monotonic()
            while time.monotonic() - started < args.seconds:
                asked = time.monotonic()
                try:
                    dnsclient.udp(www, node.server, timeout=2)
                    latencies.append((time.monotonic() - asked) * 1000)
                except OSError:
                    timeouts += 1
                peak = max(peak, rss_mib(node.proc.pid))
                time.sleep(0.05)
            after = rss_mib(node.proc.pid)
            cut = sum(closed(sock) for sock in sockets)
            for sock in sockets:
                sock.close()
    print(
        f"{args.records} records, {args.connections} connection(s) x {args.requests} AXFR ({sent // 1024} KiB sent), "
        f"{args.seconds:g} s: RSS {before:.0f} MiB before, {peak:.0f} peak, {after:.0f} after; "
        f"UDP {len(latencies)} answered, median {statistics.median(latencies):.1f} ms, "
        f"slowest {max(latencies):.1f} ms, {timeouts} timed out (2 s); "
        f"connections closed by the node: {cut} of {len(sockets)}"
    )


if __name__ == "__main__":
    main()
