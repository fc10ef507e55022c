"""`gtmcluster demo --once` with the sample config, run as a user runs it from the checkout.

The demo starts member gtm-cnc of etc/cluster.yaml (127.0.0.11:5353 and [::1]:5353) as a real
twistd process, asks for the wide IP with dig from resolvers of different ISPs, prints who got
which virtual server, and stops the node. No other test uses those addresses.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

REPO = Path(__file__).resolve().parents[2]
DEMO_DNS = [(socket.AF_INET, "127.0.0.11", 5353), (socket.AF_INET6, "::1", 5353)]
PIDFILE = REPO / "var" / "run" / "gtm-cnc.pid"

#: the wide IP's answer for each asker the demo shows, from the sample config's topology
EXPECTED = {
    "dig -b 127.0.1.1 ": ("127.0.0.21", "vs-cnc", "CNC"),
    "dig -b 127.0.2.1 ": ("127.0.0.22", "vs-tel", "TEL"),
    "dig -b 127.0.3.1 ": ("127.0.0.23", "vs-cmcc", "CMCC"),
    "+subnet=202.106.0.0/24": ("127.0.0.21", "vs-cnc", "CNC"),
    "+subnet=219.128.0.0/24": ("127.0.0.22", "vs-tel", "TEL"),
    "+subnet=211.136.0.0/24": ("127.0.0.23", "vs-cmcc", "CMCC"),
}
#: the demo's HTTP backends (one per data center's virtual server)
BACKENDS = [
    (socket.AF_INET, "127.0.0.21", 8081),
    (socket.AF_INET, "127.0.0.22", 8082),
    (socket.AF_INET, "127.0.0.23", 8083),
]


def port_is_free(family: socket.AddressFamily, host: str, port: int) -> bool:
    """Whether UDP and TCP *port* on *host* can be bound (nothing listens there)."""
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(family, kind) as s:
            if kind == socket.SOCK_STREAM:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture(scope="module")
def demo() -> subprocess.CompletedProcess[str]:
    busy = [f"{host}:{port}" for family, host, port in DEMO_DNS if not port_is_free(family, host, port)]
    if busy:
        pytest.fail(f"the demo's DNS addresses are already in use before the test: {busy}")
    return subprocess.run(
        [sys.executable, "-m", "gtmcluster.cli.main", "demo", "--once", "--config", "etc/cluster.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def answer_lines(output: str) -> dict[str, str]:
    """The demo's answer lines, by the asker part of each (``dig -b ... [+subnet=...]``)."""
    lines: dict[str, str] = {}
    for line in output.splitlines():
        if "->" not in line:
            continue
        for asker in EXPECTED:
            if asker in line:
                lines[asker] = line.split("->", 1)[1].strip()
    return lines


def test_demo_exits_zero(demo: subprocess.CompletedProcess[str]) -> None:
    """``gtmcluster demo --once`` starts the node, shows the answers and exits with status 0."""
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "www.wip.example.com A" in demo.stdout


def test_demo_shows_answers_that_differ_by_asker(demo: subprocess.CompletedProcess[str]) -> None:
    """Resolvers (and client subnets) of CNC, TEL and CMCC each get their own data center's
    virtual server for the wide IP."""
    lines = answer_lines(demo.stdout)
    assert set(lines) == set(EXPECTED), demo.stdout
    for asker, (address, vs, datacenter) in EXPECTED.items():
        assert lines[asker] == f"{address} ({vs} in {datacenter})", f"{asker}: {lines[asker]}"
    assert len({lines[a] for a in EXPECTED}) == 3


def test_demo_shows_failover_within_the_bound_and_the_return(demo: subprocess.CompletedProcess[str]) -> None:
    """The demo stops the CNC backend: the CNC resolver's answer moves to another data center
    within interval x down_after + timeout; restarted, the backend gets it back."""
    out = demo.stdout
    moved = re.search(
        r"interval x down_after \+ timeout = .* = ([\d.]+) s\n  -> (\S+) \((\S+) in (\S+)\) after ([\d.]+) s", out
    )
    assert moved, out
    bound, address, vs, _, took = moved.groups()
    assert vs != "vs-cnc" and address != "127.0.0.21"
    assert float(took) <= float(bound) + 1.0, out  # + the poll step and one check phase
    back = re.search(r"it should be back after .*\n  -> 127\.0\.0\.21 \(vs-cnc in CNC\) after ([\d.]+) s", out)
    assert back, out


def test_demo_leaves_no_node_running(demo: subprocess.CompletedProcess[str]) -> None:
    """After the demo exits its twistd node is gone: the pid file names no live process (or is
    removed) and the DNS addresses can be bound again."""
    assert demo.returncode == 0, demo.stdout + demo.stderr
    started = re.search(r"starting gtm-cnc", demo.stdout)
    assert started, demo.stdout
    if PIDFILE.exists():
        with contextlib.suppress(ValueError):
            assert not pid_alive(int(PIDFILE.read_text().strip()))
    for family, host, port in DEMO_DNS + BACKENDS:
        assert port_is_free(family, host, port), f"{host}:{port} is still in use after the demo"


def test_interactive_demo_stops_cleanly_on_ctrl_c(demo: subprocess.CompletedProcess[str]) -> None:
    """Without --once the demo keeps the node answering until Ctrl-C (SIGINT), then stops it
    and exits 0, leaving the DNS addresses free."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gtmcluster.cli.main", "demo", "--config", "etc/cluster.yaml"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen = ""
    deadline = time.monotonic() + 60
    try:
        while "Press Ctrl-C" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], deadline - time.monotonic())
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                break
            seen += chunk.decode(errors="replace")
        assert "Press Ctrl-C" in seen, seen
        assert not any(port_is_free(f, h, p) for f, h, p in DEMO_DNS)  # the node is answering
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
        out = rest.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.terminate()  # the demo stops its node on SIGTERM too
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, seen + out
    assert "stopping" in out
    for family, host, port in DEMO_DNS:
        assert port_is_free(family, host, port), f"{host}:{port} is still in use after Ctrl-C"
