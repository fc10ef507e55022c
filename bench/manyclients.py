"""TCP and many clients in bench/compare.py (issue 19): the options, and what our node keeps.

- `--transport tcp` drives every server with dnsperf -m tcp; `--connections N` is the number
  of TCP connections in all, split over the dnsperf processes (dnsperf's -c: one connection
  per client). The Python floor answers UDP only, so it is left out over TCP. The sanity
  step asks each server one question over TCP first (`tcp_sanity`).
- For our node with the wide IP mix (e.g. `--ecs 100000`): its resident memory (VmRSS of its
  process tree, /proc) before the runs and after, and the kept-decision cache from /metrics
  (`gtm_kept_decisions`, `gtm_kept_decision_lookups{result=hit|miss}`): its size at the end
  and the hit rate over the measured runs (after the warm-up), with CPU per query
  (`kept_report`).
"""

from __future__ import annotations

import argparse
import random
import socket
import struct
import urllib.request
from pathlib import Path
from typing import Any

import comparelib as lib  # bench/ is not a package: its folder is on sys.path

TRANSPORTS = ("udp", "tcp")
UDP_ONLY = {"floor": "TCP (bench/floor.py answers UDP only)"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transport", choices=TRANSPORTS, default="udp", help="dnsperf -m: udp or tcp (default udp)")
    p.add_argument(
        "--connections", type=int, default=64, help="with --transport tcp: TCP connections in all (default 64)"
    )


def check(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    if args.transport == "tcp" and args.connections < args.sources:
        p.error(f"--connections: at least one per dnsperf process (--sources {args.sources})")


def clients_per_process(transport: str, connections: int, sources: int, clients: int) -> int:
    """dnsperf's -c for each process: over TCP the connections split evenly (the remainder is
    dropped, at least one each), over UDP --clients."""
    return max(1, connections // sources) if transport == "tcp" else clients


def left_out(transport: str, keys: list[str]) -> dict[str, str]:
    """The servers that cannot take *transport*, with why."""
    return {k: why for k, why in UDP_ONLY.items() if k in keys} if transport == "tcp" else {}


def load_line(args: argparse.Namespace) -> str:
    if args.transport == "udp":
        return "  transport: UDP"
    per = clients_per_process(args.transport, args.connections, args.sources, args.clients)
    return f"  transport: TCP, {per * args.sources} connections ({per} per dnsperf process, dnsperf -m tcp -c {per})"


# --- one query over TCP ---


def _read(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


def ask_tcp(server: lib.Endpoint, message: bytes, timeout: float = 2.0) -> lib.Reply | None:
    """Send one query over TCP (two-byte length first); the parsed reply, or None on error."""
    qid = random.randrange(65536)
    message = struct.pack("!H", qid) + message[2:]
    try:
        with socket.create_connection((server.host, server.port), timeout=timeout) as s:
            s.sendall(struct.pack("!H", len(message)) + message)
            (length,) = struct.unpack("!H", _read(s, 2))
            data = _read(s, length)
    except OSError:
        return None
    if len(data) < 12 or struct.unpack("!H", data[:2])[0] != qid:
        return None
    return lib.parse_reply(data)


def tcp_sanity(servers: dict[str, lib.Server]) -> list[str]:
    """Ask each server `www A` over TCP; print the answers and return what looks wrong."""
    problems = []
    line = f"    {'www.' + lib.ORIGIN + ' A over TCP':<44}"
    for server in servers.values():
        reply = ask_tcp(server.endpoint, lib.query(f"www.{lib.ORIGIN}", "A"))
        if reply is None:
            problems.append(f"{server.label} www A over TCP: no reply")
            line += f" {'no reply':<20}"
        else:
            if (reply.rcode, reply.answers) != ("NOERROR", len(lib.WWW)):
                problems.append(f"{server.label} www A over TCP: {reply.rcode} with {reply.answers} answers")
            line += f" {reply.rcode + ' ' + str(reply.answers) + ' A':<20}"
    print(line.rstrip())
    return problems


# --- our node's memory and kept decisions ---


def rss_kib(pids: list[int]) -> int:
    """VmRSS of the processes (kB, from /proc/PID/status), summed; gone ones count 0."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total


def parse_kept(text: str) -> dict[str, float]:
    """kept (gtm_kept_decisions), hits and misses (gtm_kept_decision_lookups_total) from /metrics
    text; empty when the node exposes no kept-decision cache."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("gtm_kept_decisions "):
            found["kept"] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("gtm_kept_decision_lookups_total{"):
            result = line[line.index('"') + 1 : line.rindex('"')]
            found[{"hit": "hits", "miss": "misses"}.get(result, result)] = float(line.rsplit(" ", 1)[1])
    return found


def kept_metrics(host: str, api_port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://{host}:{api_port}/metrics", timeout=5) as response:
            return parse_kept(response.read().decode())
    except OSError:
        return {}


def hit_rate(before: dict[str, float], after: dict[str, float]) -> float | None:
    """hits / (hits + misses) between two readings (None when there was no lookup or no cache)."""
    if not {"hits", "misses"} <= before.keys() & after.keys():
        return None
    hits = after["hits"] - before["hits"]
    looked = hits + after["misses"] - before["misses"]
    return hits / looked if looked > 0 else None


def kept_report(
    rss_before: int, rss_after: int, before: dict[str, float], after: dict[str, float], cpu_us: float | None
) -> tuple[list[str], dict[str, Any]]:
    """Lines for the report and the --json figures of our node's memory and kept decisions."""
    rate = hit_rate(before, after)
    figures = {
        "rss_kib_before": rss_before,
        "rss_kib_after": rss_after,
        "kept_decisions": after.get("kept"),
        "kept_hits": after.get("hits", 0) - before.get("hits", 0) if after else None,
        "kept_misses": after.get("misses", 0) - before.get("misses", 0) if after else None,
        "hit_rate": rate,
        "wideip_cpu_us_per_query": cpu_us,
    }
    lines = [
        f"resident memory (VmRSS, all its processes): {rss_before / 1024:.1f} MiB after start,"
        f" {rss_after / 1024:.1f} MiB after the runs ({(rss_after - rss_before) / 1024:+.1f} MiB)"
    ]
    if after:
        lines.append(
            f"kept decisions at the end: {after.get('kept', 0):.0f}; over the measured runs"
            f" {figures['kept_hits']:.0f} hits, {figures['kept_misses']:.0f} misses,"
            f" hit rate {'-' if rate is None else f'{rate:.1%}'}"
        )
    else:
        lines.append("kept decisions: not in /metrics (no kept-decision cache)")
    if cpu_us is not None:
        lines.append(f"CPU per wide IP query (median of the max-rate runs): {cpu_us:.1f} us")
    return lines, figures
