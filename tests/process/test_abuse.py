"""Abuse resistance of a real node (``twistd -n gtm``) on 127.0.83.0/24.

- A UDP flood from one source (`dnsperf -a`) against a node with response rate limiting:
  the flooder gets its rate, every second limited answer truncated and the rest dropped;
  another source keeps getting every answer; and the flooder is answered in full over TCP.
- 1,500 TCP connections held open, half silent and half with a message begun and never
  finished, plus one trickling a byte at a time: UDP and fresh TCP queries are still
  answered, every stalled connection is closed by its timeout (idle or message), and the
  node started with the systemd-like soft limit of 1024 open files raised it to hold them.
- Past `tcp_max_clients`, the connections idle the longest are closed, oldest first, and
  a fresh query is answered.
- One source opening 50 connections past `tcp_max_per_source` loses its own oldest ones,
  never another source's idle connection; sources filling one DNS address evict only there,
  never a client of the node's other address (each has its own `tcp_max_clients`).
"""

from __future__ import annotations

import contextlib
import re
import resource
import select
import socket
import struct
import subprocess
import threading
import time
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import pytest

from tests.support import configs, dnsclient, poll
from tests.support.dig import dig
from tests.support.nodeproc import RunningNode, running_node

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.usefixtures("dig_tool", "dnsperf_tool")]

FLOOD_NODE = "127.0.83.1"
FLOODER = "127.0.83.2"
NEIGHBOUR = "127.0.83.3"
TCP_NODE = "127.0.83.10"
PORT = 5353

RATE = 100  # responses per second per source (ipv4_prefix 32: every loopback address alone)
FLOOD_QPS = 4000
FLOOD_SECONDS = 8

CONNECTIONS = 1500
IDLE_TIMEOUT = 8.0
MESSAGE_TIMEOUT = 2.0
#: a slow, shared machine: how much later than its timeout a connection may be closed
SLACK = 5.0


def metrics(node: RunningNode) -> dict[str, float]:
    """The node's Prometheus samples, by name with labels."""
    with urllib.request.urlopen(f"http://{node.address}:8053/metrics", timeout=10) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def answered(samples: dict[str, float]) -> float:
    return sum(v for k, v in samples.items() if k.startswith("gtm_dns_queries_total{"))


def dnsperf_figures(output: str) -> dict[str, int]:
    def number(label: str) -> int:
        found = re.search(rf"{label}:\s+(\d+)", output)
        assert found, output
        return int(found.group(1))

    return {"sent": number("Queries sent"), "completed": number("Queries completed"), "lost": number("Queries lost")}


def ask_udp(wire: bytes, server: tuple[str, int], source: str) -> tuple[bytes | None, int]:
    """The reply to *wire* from *source*, with one retry after 2 s (as a resolver would);
    also the tries it took."""
    for tries in (1, 2):
        try:
            return dnsclient.udp(wire, server, source=source, timeout=2.0), tries
        except TimeoutError:
            continue
    return None, 2


def test_a_flooding_source_is_limited_while_others_keep_full_service(tmp_path: Path) -> None:
    raw = configs.base(FLOOD_NODE, PORT)
    raw["dns_server"] = {"rate_limit": {"responses_per_second": RATE, "window": 1, "slip": 2, "ipv4_prefix": 32}}
    path = configs.write(tmp_path, raw)
    queries = tmp_path / "queries"
    queries.write_text("www.example.test A\ngslb.example.test A\n")
    with running_node(path, "n1", FLOOD_NODE, PORT, tmp_path) as node:
        before = answered(metrics(node))
        started = time.monotonic()
        perf = subprocess.Popen(
            [
                "dnsperf",
                "-a",
                FLOODER,
                "-s",
                FLOOD_NODE,
                "-p",
                str(PORT),
                "-d",
                str(queries),
                "-l",
                str(FLOOD_SECONDS),
                "-Q",
                str(FLOOD_QPS),
                "-t",
                "1",
                "-q",
                "20000",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            poll.until(
                lambda: perf.poll() is not None or metrics(node)['gtm_dns_rate_limited_total{action="drop"}'] > 500,
                timeout=30,
                what="the flood being limited",
            )
            assert perf.poll() is None, perf.communicate()[0]
            # meanwhile, another source asks at 25 queries a second: all answered, in full
            neighbour = {"asked": 0, "retried": 0}
            for i in range(50):
                reply, tries = ask_udp(dnsclient.query("gslb.example.test", qid=i), node.server, NEIGHBOUR)
                assert reply is not None, f"query {i} from {NEIGHBOUR} got no answer in 2 tries"
                msg = dns.message.from_wire(reply)
                assert not msg.flags & dns.flags.TC and dnsclient.addresses(msg) == ["10.0.3.1"]
                neighbour["asked"] += 1
                neighbour["retried"] += tries - 1
                time.sleep(0.04)  # pacing: the neighbour asks at 25 queries a second
            # and the flooder itself is answered over TCP, where its address is proven
            over_tcp = dig(FLOOD_NODE, PORT, "www.example.test", "A", "+tcp", source=FLOODER)
            assert over_tcp.status == "NOERROR" and over_tcp.answer_data() == ["192.0.2.80"]
            assert over_tcp.protocol == "TCP"
            output, _ = perf.communicate(timeout=FLOOD_SECONDS + 30)
        finally:
            if perf.poll() is None:
                perf.kill()
                perf.wait()
        elapsed = time.monotonic() - started
        samples = metrics(node)
        # after the flood, a burst of 300 from the same source (its bucket full again): the
        # first RATE x window answered in full, then drops and slips alternate
        time.sleep(1.5)  # the real node's bucket refills on its own real clock meanwhile
        burst = _burst(node.server, FLOODER, 300)
    figures = dnsperf_figures(output)
    dropped = samples['gtm_dns_rate_limited_total{action="drop"}']
    slipped = samples['gtm_dns_rate_limited_total{action="slip"}']
    flooder_answered = answered(samples) - before - neighbour["asked"] - neighbour["retried"] - 1
    print(
        f"\nflood: sent {figures['sent']}, completed {figures['completed']} (answers and slips), "
        f"lost {figures['lost']}; node: answered {flooder_answered:.0f}, slipped {slipped:.0f}, "
        f"dropped {dropped:.0f} in {elapsed:.1f} s; then a burst of 300: {burst}; "
        f"neighbour: {neighbour['asked']} asked, "
        f"all answered, {neighbour['retried']} retried"
    )
    assert figures["sent"] > RATE * FLOOD_SECONDS * 3, output  # a flood well over the rate
    # every second limited answer slipped (one prefix: drops and slips alternate exactly)
    assert dropped - slipped in (0, 1)
    # the flooder got no more than its rate (plus a window's burst) in full answers
    assert flooder_answered <= RATE * (elapsed + 1)
    # what dnsperf saw: its answers and slips came back, the drops did not
    assert figures["lost"] >= dropped * 0.9
    assert figures["completed"] >= slipped
    assert RATE <= burst["full"] <= RATE + 30  # (a busy machine lets a few tokens come back)
    assert burst["truncated"] >= (300 - RATE - 30) // 2 - 5
    assert burst["full"] + 2 * burst["truncated"] >= 290


def _burst(server: tuple[str, int], source: str, n: int) -> dict[str, int]:
    """Send *n* queries from *source* as fast as the replies are read; how many came back
    in full and how many truncated (TC, the question, no records)."""
    got = {"full": 0, "truncated": 0}

    def read(s: socket.socket) -> None:
        msg = dns.message.from_wire(s.recv(4096))
        if msg.flags & dns.flags.TC:
            assert not msg.answer and not msg.authority and msg.question[0].name.to_text() == "www.example.test."
            got["truncated"] += 1
        else:
            assert dnsclient.addresses(msg) == ["192.0.2.80"]
            got["full"] += 1

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((source, 0))
        s.setblocking(False)
        for qid in range(n):
            s.sendto(dnsclient.query("www.example.test", qid=qid), server)
            with contextlib.suppress(BlockingIOError):
                while True:
                    read(s)
        s.settimeout(0.5)
        with contextlib.suppress(TimeoutError):
            while True:
                read(s)
    return got


# -- TCP ---------------------------------------------------------------------------------------


def _soft_limit_1024() -> None:
    """Start the node as systemd would: 1024 open files (soft), the hard limit unchanged."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))


def test_1500_stalled_tcp_connections_are_held_then_closed_and_others_still_answered(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= CONNECTIONS + 500, f"this test needs {CONNECTIONS + 500} open files (hard limit {hard})"
    if soft < CONNECTIONS + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    raw = configs.base(TCP_NODE, PORT)
    raw["dns_server"] = {
        "tcp_idle_timeout": IDLE_TIMEOUT,
        "tcp_message_timeout": MESSAGE_TIMEOUT,
        "tcp_max_clients": 2000,
        "tcp_max_per_source": 2000,  # (all from one loopback source: the per-source cap is tested below)
    }
    path = configs.write(tmp_path, raw)
    socks: dict[int, tuple[socket.socket, str, float]] = {}  # fd -> (socket, kind, last sent)
    message = dnsclient.query("www.example.test")
    framed = struct.pack("!H", len(message)) + message
    try:
        with running_node(path, "n1", TCP_NODE, PORT, tmp_path, preexec_fn=_soft_limit_1024) as node:
            assert f"raised the open-file limit from 1024 to {hard}" in node.log_text()
            opened_at = time.monotonic()
            for i in range(CONNECTIONS):
                s = socket.create_connection(node.server, timeout=10)
                socks[s.fileno()] = (s, "idle" if i % 2 else "partial", time.monotonic())
                if i % 250 == 249:  # let the node accept (its backlog is 256)
                    poll.until(partial(_holds, node, i + 1), timeout=30, what=f"{i + 1} connections accepted")
            opened_in = time.monotonic() - opened_at
            for fd, (s, kind, _) in list(socks.items()):
                if kind == "partial":
                    s.sendall(framed[:7])  # the length and five bytes of the message
                    socks[fd] = (s, kind, time.monotonic())
            held = metrics(node)["gtm_dns_tcp_connections"]
            closed: dict[int, float] = {}
            watcher = threading.Thread(
                target=_watch_closed, args=(socks, closed, time.monotonic() + IDLE_TIMEOUT + SLACK), daemon=True
            )
            watcher.start()
            # with them all held: UDP and fresh TCP queries are answered
            udp = dig(TCP_NODE, PORT, "www.example.test", "A")
            tcp = dig(TCP_NODE, PORT, "www.example.test", "A", "+tcp")
            assert udp.answer_data() == tcp.answer_data() == ["192.0.2.80"] and tcp.protocol == "TCP"
            # a client trickling a message byte by byte is closed by the message timeout,
            # though it is never silent long enough for the idle timeout
            with socket.create_connection(node.server, timeout=10) as trickler:
                trickled_for = _trickle(trickler, limit=MESSAGE_TIMEOUT + SLACK)
            watcher.join()
            samples = metrics(node)
    finally:
        for s, _, _ in socks.values():
            s.close()
    half_sent = [closed[fd] - sent for fd, (_, kind, sent) in socks.items() if kind == "partial" and fd in closed]
    idle = [closed[fd] - sent for fd, (_, kind, sent) in socks.items() if kind == "idle" and fd in closed]
    print(
        f"\n{CONNECTIONS} connections opened in {opened_in:.1f} s, {held:.0f} held at once; "
        f"half-sent closed {min(half_sent):.2f}-{max(half_sent):.2f} s after their last byte "
        f"(timeout {MESSAGE_TIMEOUT:g}); silent ones closed {min(idle):.2f}-{max(idle):.2f} s after connecting "
        f"(timeout {IDLE_TIMEOUT:g}); the trickler closed after {trickled_for:.2f} s of trickling"
    )
    assert held == CONNECTIONS
    assert len(half_sent) == len(idle) == CONNECTIONS // 2, "some stalled connections were never closed"
    assert min(half_sent) >= MESSAGE_TIMEOUT - 0.05 and max(half_sent) <= MESSAGE_TIMEOUT + SLACK
    assert min(idle) >= IDLE_TIMEOUT - 0.05 and max(idle) <= IDLE_TIMEOUT + SLACK
    assert MESSAGE_TIMEOUT - 0.05 <= trickled_for <= MESSAGE_TIMEOUT + SLACK
    assert samples['gtm_dns_tcp_closed_total{reason="partial"}'] >= CONNECTIONS // 2 + 1
    assert samples['gtm_dns_tcp_closed_total{reason="idle"}'] >= CONNECTIONS // 2
    assert samples['gtm_dns_tcp_closed_total{reason="evicted"}'] == 0
    assert samples["gtm_dns_tcp_connections"] == 0


def _holds(node: RunningNode, n: int) -> bool:
    return metrics(node)["gtm_dns_tcp_connections"] >= n


def _trickle(s: socket.socket, limit: float) -> float:
    """Begin a message of 65535 bytes and send one more byte every 0.3 s, so the message is
    never finished; the seconds until the node closed the connection."""
    start = time.monotonic()
    s.settimeout(0.3)
    s.sendall(b"\xff\xff")
    while time.monotonic() - start < limit:
        try:
            if s.recv(1) == b"":
                return time.monotonic() - start
        except TimeoutError:
            try:
                s.send(b"x")
            except OSError:
                return time.monotonic() - start
        except OSError:
            return time.monotonic() - start
    raise AssertionError(f"the trickling connection was still open after {limit:g} s")


def _watch_closed(socks: dict[int, Any], closed: dict[int, float], deadline: float) -> None:
    """Note in *closed* when the node closed each socket (an RST or FIN seen), until all
    are closed or *deadline* passes (runs in a thread while the test goes on)."""
    ep = select.epoll()
    for fd in socks:
        ep.register(fd, select.EPOLLIN | select.EPOLLRDHUP)
    try:
        while len(closed) < len(socks) and time.monotonic() < deadline:
            for fd, _ in ep.poll(0.02):
                closed[fd] = time.monotonic()
                ep.unregister(fd)
    finally:
        ep.close()


def test_past_the_cap_the_longest_idle_connections_make_way(tmp_path: Path) -> None:
    """With tcp_max_clients 100, 150 silent connections opened one after the other from
    three sources (50 each: within their own cap): the first 50 are closed as the later
    ones arrive, and a fresh query is still answered (its connection evicting the longest
    idle one)."""
    address = "127.0.83.11"
    sources = ["127.0.83.12", "127.0.83.13", "127.0.83.14"]
    raw = configs.base(address, PORT)
    raw["dns_server"] = {"tcp_max_clients": 100, "tcp_idle_timeout": 60}
    path = configs.write(tmp_path, raw)
    socks: list[socket.socket] = []
    try:
        with running_node(path, "n1", address, PORT, tmp_path) as node:
            for i in range(150):
                # each connect completes before the next: the kernel's accept queue is
                # first in, first out, so the node sees them in this order
                socks.append(_connect_from(sources[i % 3], node.server))
            poll.until(lambda: metrics(node)['gtm_dns_tcp_closed_total{reason="evicted"}'] >= 50, what="evictions")
            reply = dnsclient.parse(dnsclient.tcp(dnsclient.query("www.example.test"), node.server))
            assert dnsclient.addresses(reply) == ["192.0.2.80"]
            samples = metrics(node)
            closed = [i for i, s in enumerate(socks) if _closed_by_peer(s)]
    finally:
        for s in socks:
            s.close()
    assert samples['gtm_dns_tcp_closed_total{reason="evicted"}'] == 51
    assert samples["gtm_dns_tcp_connections"] == 99  # 100 held; the fresh one closed by its client
    assert closed == list(range(51))  # the oldest first: the fresh query's made way for too


def _closed_by_peer(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _connect_from(source: str, server: tuple[str, int]) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    s.bind((source, 0))
    s.connect(server)
    return s


def _seen(node: RunningNode) -> float:
    """The TCP connections the node has held: open now, or closed by it for any reason."""
    samples = metrics(node)
    closed = sum(v for k, v in samples.items() if k.startswith("gtm_dns_tcp_closed_total{"))
    return samples["gtm_dns_tcp_connections"] + closed


def _asks(s: socket.socket, qid: int) -> list[str]:
    """Ask www.example.test on the open connection *s*; the addresses answered."""
    wire = dnsclient.query("www.example.test", qid=qid)
    s.sendall(struct.pack("!H", len(wire)) + wire)
    reply = dnsclient.parse(dnsclient.read_framed(s))
    assert reply.id == qid
    return dnsclient.addresses(reply)


def test_one_source_past_its_cap_closes_its_own_connections_never_anothers(tmp_path: Path) -> None:
    """``tcp_max_per_source`` (64 by default) with room on the address (tcp_max_clients
    100): a neighbour's idle connection, then 64 + 50 from one flooding address. The
    flooder's 50 oldest are closed (reason source_cap); the neighbour's connection, the
    longest idle of all, stays and is answered. Before, one cap per process: the flood
    evicted the neighbour at its 100th connection."""
    address, neighbour_address, flooder = "127.0.83.20", "127.0.83.21", "127.0.83.22"
    raw = configs.base(address, PORT)
    raw["dns_server"] = {"tcp_max_clients": 100, "tcp_idle_timeout": 60}
    path = configs.write(tmp_path, raw)
    flood: list[socket.socket] = []
    with (
        running_node(path, "n1", address, PORT, tmp_path) as node,
        _connect_from(neighbour_address, node.server) as neighbour,
    ):
        try:
            poll.until(lambda: _seen(node) >= 1, what="the neighbour's connection")
            for _ in range(64 + 50):
                flood.append(_connect_from(flooder, node.server))
            poll.until(lambda: _seen(node) >= 1 + 64 + 50, what="every connection accepted")
            answer = _asks(neighbour, 7)
            samples = metrics(node)
            closed = [i for i, s in enumerate(flood) if _closed_by_peer(s)]
        finally:
            for s in flood:
                s.close()
    assert answer == ["192.0.2.80"], "the neighbour's idle connection was closed"
    assert closed == list(range(50)), closed  # the flooder's own oldest
    assert samples.get('gtm_dns_tcp_closed_total{reason="source_cap"}') == 50
    assert samples['gtm_dns_tcp_closed_total{reason="evicted"}'] == 0
    assert samples["gtm_dns_tcp_connections"] == 1 + 64
    assert "TCP DNS source 127.0.83.22 opened more than tcp_max_per_source (64) connections" in node.log_text()


def test_each_dns_address_keeps_its_own_tcp_clients(tmp_path: Path) -> None:
    """A node on two DNS addresses with tcp_max_clients 50: a neighbour's idle connection
    on the second, then four sources opening 30 each (within their own cap) on the first.
    The first address's longest idle make way (70 evicted, 50 held there); the client of
    the second stays and is answered. Before, all addresses shared one cap: the flood on
    one address evicted the other's clients."""
    first, second = "127.0.83.30", "127.0.83.31"
    sources = ["127.0.83.32", "127.0.83.33", "127.0.83.34", "127.0.83.35"]
    raw = configs.base(first, PORT)
    raw["sync_group"]["members"][0]["dns"] = [f"{first}:{PORT}", f"{second}:{PORT}"]
    raw["dns_server"] = {"tcp_max_clients": 50, "tcp_idle_timeout": 60}
    path = configs.write(tmp_path, raw)
    flood: list[socket.socket] = []
    with (
        running_node(path, "n1", first, PORT, tmp_path) as node,
        _connect_from("127.0.83.36", (second, PORT)) as neighbour,
    ):
        try:
            poll.until(lambda: _seen(node) >= 1, what="the neighbour's connection")
            for _ in range(30):
                for source in sources:
                    flood.append(_connect_from(source, node.server))
            poll.until(lambda: _seen(node) >= 1 + 120, what="every connection accepted")
            answer = _asks(neighbour, 8)
            samples = metrics(node)
            closed = [i for i, s in enumerate(flood) if _closed_by_peer(s)]
        finally:
            for s in flood:
                s.close()
    assert answer == ["192.0.2.80"], "the second address's client was evicted by the first's flood"
    assert closed == list(range(70)), closed  # the first address's longest idle, in order
    assert samples['gtm_dns_tcp_closed_total{reason="evicted"}'] == 70
    assert samples["gtm_dns_tcp_connections"] == 50 + 1


def test_many_sources_filling_an_address_do_not_close_a_client_holding_one(tmp_path: Path) -> None:
    """tcp_max_clients 50: a neighbour's idle connection, then ten sources opening 15 each
    (within their own cap). Past the cap, the source holding the most there loses its own
    oldest: 101 closed, none of them the neighbour's, which is answered. Before, the longest
    idle of all made way: the neighbour's, at the 50th connection."""
    address, neighbour_address = "127.0.83.40", "127.0.83.41"
    sources = [f"127.0.83.{50 + i}" for i in range(10)]
    raw = configs.base(address, PORT)
    raw["dns_server"] = {"tcp_max_clients": 50, "tcp_idle_timeout": 60}
    path = configs.write(tmp_path, raw)
    flood: list[socket.socket] = []
    with (
        running_node(path, "n1", address, PORT, tmp_path) as node,
        _connect_from(neighbour_address, node.server) as neighbour,
    ):
        try:
            poll.until(lambda: _seen(node) >= 1, what="the neighbour's connection")
            for _ in range(15):
                for source in sources:
                    flood.append(_connect_from(source, node.server))
            poll.until(lambda: _seen(node) >= 1 + 150, what="every connection accepted")
            answer = _asks(neighbour, 9)
            samples = metrics(node)
            open_per_source = [
                sum(not _closed_by_peer(s) for s in flood[i :: len(sources)]) for i in range(len(sources))
            ]
        finally:
            for s in flood:
                s.close()
    assert answer == ["192.0.2.80"], "the neighbour's idle connection was closed"
    assert samples['gtm_dns_tcp_closed_total{reason="evicted"}'] == 1 + 150 - 50
    assert samples["gtm_dns_tcp_connections"] == 50
    assert sorted(open_per_source) == [4] * 1 + [5] * 9, open_per_source  # 49 left to the flood, evenly
