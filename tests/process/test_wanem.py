"""The WAN emulator (``tests/tools/wanem.py``) between real network namespaces.

Three hosts a, b and c, each a namespace with a TUN ``wan0`` on 10.99.0.0/16 (and
fd99::/64), joined by one in-process emulator. Measured from inside the namespaces with
real sockets: ICMP echo (the emulator's own raw-socket pinger: no `ping` binary needed),
UDP round trips to an echo server, TCP connect times; then loss, one-way cuts, healing,
asymmetric delays, the standalone program with its control socket (and WanProcess,
which drives it), and cleanup.

Needs root (namespaces, TUN): skipped without it, but in CI (``CI=true``) a missing
capability fails the run. RTTs are never shorter than the configured ones (less
``TOLERANCE``), and the quickest is within ``TOLERANCE`` of them.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.tools import wanem
from tests.tools.wanem import Wan, WanProcess

pytestmark = [pytest.mark.process, pytest.mark.alone]

WANEM = str(Path(wanem.__file__).resolve())
TOLERANCE = 0.008
PORT = 7007

#: UDP echo and TCP accept-and-close on PORT; prints "ready" once bound.
ECHO_SERVER = r"""
import selectors, socket, sys
port = int(sys.argv[1])
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("0.0.0.0", port))
tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("0.0.0.0", port))
tcp.listen(64)
sel = selectors.DefaultSelector()
sel.register(udp, selectors.EVENT_READ)
sel.register(tcp, selectors.EVENT_READ)
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        if key.fileobj is udp:
            data, peer = udp.recvfrom(2048)
            udp.sendto(data, peer)
        else:
            conn, _ = tcp.accept()
            conn.close()
"""

#: `udp HOST PORT COUNT INTERVAL TIMEOUT`: COUNT datagrams INTERVAL apart, then waits up to
#: TIMEOUT after the last; `tcp HOST PORT COUNT`: COUNT connects one after the other.
#: Prints the round-trip times as a JSON list (null: no reply).
CLIENT = r"""
import json, selectors, socket, struct, sys, time
mode, host, port, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rtts = [None] * count
if mode == "udp":
    interval, timeout = float(sys.argv[5]), float(sys.argv[6])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ)
    sent = {}
    start = time.monotonic()
    end = start + (count - 1) * interval + timeout
    seq = 0
    while True:
        now = time.monotonic()
        if seq < count and now >= start + seq * interval:
            sent[seq] = time.monotonic()
            s.sendto(struct.pack("!I", seq), (host, port))
            seq += 1
            continue
        if seq == count and (now >= end or None not in rtts):
            break
        wake = end if seq == count else start + seq * interval
        for _ in sel.select(max(0.0, wake - now)):
            while True:
                try:
                    data = s.recv(2048)
                except BlockingIOError:
                    break
                (n,) = struct.unpack("!I", data[:4])
                if rtts[n] is None:
                    rtts[n] = time.monotonic() - sent[n]
else:
    for i in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(3)
        t = time.monotonic()
        try:
            s.connect((host, port))
            rtts[i] = time.monotonic() - t
        except OSError:
            pass
        s.close()
print(json.dumps(rtts))
"""


def require(condition: bool, reason: str) -> None:
    """Skip without *condition*, or fail in CI, where a missing capability is an error."""
    if not condition:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def wan() -> Iterator[Wan]:
    require(os.geteuid() == 0, "the WAN emulator needs root (network namespaces and TUN devices)")
    require(shutil.which("ip") is not None, "`ip` (iproute2) is not installed")
    require(os.path.exists("/dev/net/tun"), "/dev/net/tun is missing (no TUN support)")
    prefix = wanem.run_prefix("wanemt")
    with Wan(prefix, subnet="10.99.0.0/16", subnet6="fd99::/64", seed=1) as w:
        for name in ("a", "b", "c"):
            w.add_host(name)
        yield w
    assert wanem.list_namespaces(prefix) == [], "namespaces left behind"


@pytest.fixture(autouse=True)
def fresh_links(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test starts from default links (no delay, loss or cut)."""
    yield
    if "wan" in request.fixturenames:
        request.getfixturevalue("wan").reset()


@pytest.fixture
def echo_server(wan: Wan) -> Iterator[str]:
    """An echo server (UDP echo, TCP accept) in b; its address."""
    proc = wan.popen("b", [sys.executable, "-c", ECHO_SERVER, str(PORT)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(10.0), "echo server did not start"
        assert proc.stdout.readline().strip() == "ready"
        yield wan.address("b")
    finally:
        proc.kill()
        proc.wait()


def client(wan: Wan, host: str, *args: object) -> list[float | None]:
    """Run CLIENT in *host*; its round-trip times."""
    out = wan.run(host, [sys.executable, "-c", CLIENT, *map(str, args)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    result: list[float | None] = json.loads(out.stdout)
    return result


def assert_rtts(rtts: list[float | None], expected: float) -> None:
    """Every round trip came back, none earlier than *expected* (less TOLERANCE), and the
    quickest within TOLERANCE of it. A busy machine can only add to a round trip (a process
    waits for a core), so the quickest one shows the delay the emulator applied."""
    assert None not in rtts, f"lost replies: {rtts}"
    got = [r for r in rtts if r is not None]
    ms = [round(r * 1000, 2) for r in got]
    assert all(r >= expected - TOLERANCE for r in got), f"RTTs {ms} ms, expected {expected * 1000:.0f} ms"
    assert abs(min(got) - expected) <= TOLERANCE, f"RTTs {ms} ms, expected {expected * 1000:.0f} ms"


def test_ping_rtt_is_twice_the_one_way_delay(wan: Wan) -> None:
    """60 ms each way a<->b: ICMP echo from a to b takes 120 ms (± 8 ms); a to c, with no
    delay set, stays fast."""
    wan.set_delay("a", "b", 0.060)
    assert_rtts(wan.ping("a", "b", count=3).rtts, 0.120)
    fast = wan.ping("a", "c", count=3)
    assert len(fast.received) == 3 and max(fast.received) < 0.005, fast.rtts


def test_ipv6_passes_too(wan: Wan) -> None:
    """ICMPv6 echo between the hosts' IPv6 WAN addresses gets the same delay."""
    wan.set_delay("a", "b", 0.030)
    assert_rtts(wanem.ping(wan.namespace("a"), wan.address("b", version=6), count=2).rtts, 0.060)


def test_udp_round_trip(wan: Wan, echo_server: str) -> None:
    """A UDP datagram a->b->a (echo server in b) takes twice the one-way delay."""
    wan.set_delay("a", "b", 0.060)
    assert_rtts(client(wan, "a", "udp", echo_server, PORT, 5, 0.05, 1.0), 0.120)


def test_tcp_connect_takes_one_round_trip(wan: Wan, echo_server: str) -> None:
    """A TCP connect from a to b (SYN, SYN-ACK) takes one round trip."""
    wan.set_delay("a", "b", 0.060)
    assert_rtts(client(wan, "a", "tcp", echo_server, PORT, 3), 0.120)


def test_loss_drops_about_the_share_set(wan: Wan, echo_server: str) -> None:
    """Loss 0.5 one way a->b: of 200 UDP datagrams about half come back (the replies b->a
    are not lost), and the emulator counted the losses."""
    wan.set_delay("a", "b", 0.005)
    wan.set_loss("a", "b", 0.5, symmetric=False)
    before = wan.stats().get(("a", "b"), wanem.LinkStats())
    rtts = client(wan, "a", "udp", echo_server, PORT, 200, 0.002, 1.0)
    received = sum(r is not None for r in rtts)
    assert 70 <= received <= 130, f"{received} of 200 came back"
    after = wan.stats()[("a", "b")]
    assert after.lost - before.lost == 200 - received
    assert wan.stats().get(("b", "a"), wanem.LinkStats()).lost == 0


def test_one_way_cut_and_heal(wan: Wan) -> None:
    """Cutting a->b only: pings from a to b fail (silently), b still reaches c, c still
    reaches a; healing restores a to b."""
    wan.set_delay("a", "b", 0.010)
    wan.cut("a", "b", both=False)
    assert wan.ping("a", "b", count=2, interval=0.1, timeout=0.5).received == []
    assert len(wan.ping("b", "c", count=2, interval=0.1).received) == 2
    assert len(wan.ping("c", "a", count=2, interval=0.1).received) == 2
    assert wan.stats()[("a", "b")].cut >= 2
    wan.heal("a", "b")
    assert_rtts(wan.ping("a", "b", count=2, interval=0.1).rtts, 0.020)


def test_cut_both_ways(wan: Wan) -> None:
    """cut(a, c) silences both directions; the other links keep working."""
    wan.cut("a", "c")
    assert wan.ping("c", "a", count=2, interval=0.1, timeout=0.5).received == []
    assert wan.ping("a", "c", count=2, interval=0.1, timeout=0.5).received == []
    assert len(wan.ping("a", "b", count=2, interval=0.1).received) == 2


def test_asymmetric_delays_add_up(wan: Wan) -> None:
    """100 ms a->b and 10 ms b->a: a round trip takes 110 ms from either side."""
    wan.set_delay("a", "b", 0.100, symmetric=False)
    wan.set_delay("b", "a", 0.010, symmetric=False)
    assert_rtts(wan.ping("a", "b", count=3).rtts, 0.110)
    assert_rtts(wan.ping("b", "a", count=2).rtts, 0.110)


def test_cleanup_on_error_and_twice(wan: Wan) -> None:
    """A Wan left by an exception deletes its namespaces; a namespace left over with the
    prefix is deleted when the next Wan starts; cleanup twice is harmless."""
    prefix = wan.prefix + "x"
    with pytest.raises(RuntimeError, match="boom"), Wan(prefix, subnet="10.98.0.0/16") as w:
        w.add_host("p")
        w.add_host("q")
        assert len(w.ping("p", "q", count=1).received) == 1
        raise RuntimeError("boom")
    assert wanem.list_namespaces(prefix) == []
    wanem.create_namespace(prefix + "stale")
    with Wan(prefix) as w:
        assert wanem.list_namespaces(prefix) == []
        w.add_host("p")
        w.close()
        w.close()
    assert wanem.cleanup(prefix) == []
    assert wanem.list_namespaces(prefix) == []


def test_standalone_program_with_control_socket(wan: Wan, tmp_path: Path) -> None:
    """``wanem.py run`` builds its hosts, takes commands on its UNIX socket (``wanem.py ctl``)
    and on stdin, and deletes its namespaces on SIGTERM."""
    prefix = wan.prefix + "s"
    sock = str(tmp_path / "wan.sock")
    argv = [sys.executable, WANEM, "run", "--prefix", prefix, "--subnet", "10.97.0.0/24"]
    argv += ["--host", "p", "--host", "q=10.97.0.20", "--delay", "p:q=0.040", "--control", sock]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(20.0), "no ready line"
        ready = json.loads(proc.stdout.readline())
        assert ready["hosts"]["q"]["namespace"] == prefix + "q"
        assert ready["hosts"]["q"]["address"] == "10.97.0.20"
        ns_p = ready["hosts"]["p"]["namespace"]
        assert_rtts(wanem.ping(ns_p, "10.97.0.20", count=2).rtts, 0.080)

        def ctl(*words: str) -> str:
            out = subprocess.run(
                [sys.executable, WANEM, "ctl", sock, *words], check=False, capture_output=True, text=True
            )
            return out.stdout.strip()

        assert ctl("cut", "p", "q", "oneway") == "ok"
        assert wanem.ping(ns_p, "10.97.0.20", count=1, timeout=0.5).received == []
        assert json.loads(ctl("stats"))["links"]["p->q"]["cut"] >= 1
        assert ctl("heal", "p", "q") == "ok"
        assert ctl("nonsense").startswith("error:")
        proc.stdin.write("delay p q 0.010\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ok"
        assert_rtts(wanem.ping(ns_p, "10.97.0.20", count=2).rtts, 0.020)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, proc.stderr.read() if proc.stderr else ""
        assert wanem.list_namespaces(prefix) == []
        assert not os.path.exists(sock)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        wanem.cleanup(prefix)


def test_wan_process_keeps_time_while_the_caller_is_busy(wan: Wan) -> None:
    """WanProcess runs the emulator in a child process driven over its control socket: same
    methods as Wan (hosts added while running too), and its RTTs stay exact while a thread
    of this process spins in Python (which would delay an in-process emulator)."""
    prefix = wan.prefix + "w"
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    with WanProcess(prefix, ["p", "q"], subnet="10.96.0.0/24") as w:
        assert w.hosts["q"].address == "10.96.0.2"
        r = w.add_host("r", "10.96.0.30")
        assert r.namespace == prefix + "r"
        w.set_delay("p", "q", 0.050)
        w.set_delay("p", "r", 0.010, symmetric=False)
        assert w.link("p", "r") == wanem.Link(delay=0.010)
        busy = threading.Thread(target=spin)
        busy.start()
        try:
            assert_rtts(w.ping("p", "q", count=3, interval=0.1).rtts, 0.100)
            assert_rtts(w.ping("p", "r", count=2, interval=0.1).rtts, 0.010)
        finally:
            stop.set()
            busy.join()
        w.cut("q", "p", both=False)
        assert w.ping("p", "q", count=1, timeout=0.3).received == []
        assert w.stats()[("q", "p")].cut == 1
        w.reset()
        assert len(w.ping("p", "q", count=1).received) == 1
        with pytest.raises(RuntimeError, match="unknown host"):
            w.cut("p", "nobody")
    assert wanem.list_namespaces(prefix) == []
