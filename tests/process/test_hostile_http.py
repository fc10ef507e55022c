"""The node's HTTP clients against hostile servers: one real `twistd -n gtm` node reads a
link's traffic counters over HTTP (`probe.httpcounters`) and a virtual server's load over
an http monitor (`probe.http`) from servers on loopback that answer every request in one
bad way (`tests.support.hostilehttp`): an error with an endless body, a 200 with
``Content-Length: 10**12``, a body dripped one byte a second, headers that never end, a
chunk of 2**48 bytes, a status line and then nothing.

Each reading must end within its deadline, having read at most its cap, with its
connection closed: the node's descriptors stay where they were, the servers see at most a
connection or two open at a time (one per reader), and the node's CPU stays low. On main a
counters page of the first two kinds leaked a connection a reading (each read without end
at full speed): descriptors 27 -> 62 and the node at 80 % CPU in 42 s.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support import configs, poll
from tests.support.hostilehttp import RECEIVED, SENT, HostileServer, serving
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.alone]

HOSTILE = ("error_endless", "huge_length", "drip", "endless_headers", "huge_chunk", "slow_headers")
#: seconds of hostile readings watched (a reading a second from each reader)
WATCH = 12.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def hostile_config(address: str, servers: dict[str, HostileServer]) -> dict[str, Any]:
    """A node reading, from each hostile server, a link's counters (every second, within
    0.5 s) and a virtual server's load (an http monitor, every second, within 0.5 s)."""
    config = configs.base(address)
    config["monitors"] = {
        "load": {
            "type": "http",
            "interval": 1,
            "timeout": 0.5,
            "path": "/metrics",
            "load": {"format": "prometheus", "connections": RECEIVED},
        },
        "api": {"type": "tcp", "interval": 5, "timeout": 1},
    }
    config["links"] = {}
    for mode, server in servers.items():
        name = mode.replace("_", "-")
        config["links"][name] = {
            "datacenter": "DC1",
            "monitor": "api",
            "targets": [f"{address}:8053"],
            "bandwidth_mbps": 1000,
            "traffic": {
                "http": {"url": server.url, "received": RECEIVED, "sent": SENT},
                "interval": 1,
                "timeout": 0.5,
            },
        }
        config["virtual_servers"][f"vs-{name}"] = {
            "address": server.address,
            "port": server.port,
            "datacenter": "DC1",
            "monitor": "load",
        }
    config["sync_group"]["cold_start_wait"] = 0.5
    return config


@pytest.fixture
def hostile_node(tmp_path: Path) -> Iterator[tuple[RunningNode, dict[str, HostileServer]]]:
    address = loopback_address()
    with ExitStack() as stack:
        servers = {mode: stack.enter_context(serving(mode, loopback_address())) for mode in HOSTILE}
        path = configs.write(tmp_path, hostile_config(address, servers))
        node = stack.enter_context(running_node(path, "n1", address, 5353, tmp_path))
        yield node, servers


def test_hostile_http_servers_cost_the_node_a_capped_read_per_reading(
    hostile_node: tuple[RunningNode, dict[str, HostileServer]],
) -> None:
    node, servers = hostile_node
    pid = node.proc.pid
    # the first readings made (each server is read by a link and by a monitor): their
    # connections count in the base
    poll.until(
        lambda: all(server.counts.snapshot()["accepted"] >= 2 for server in servers.values()),
        timeout=10,
        what="a first reading by both readers of every server",
    )
    fds_before, cpu_before, started = descriptors(pid), cpu_seconds(pid), time.monotonic()
    most_open = dict.fromkeys(servers, 0)
    most_fds = fds_before
    while time.monotonic() - started < WATCH:
        time.sleep(0.25)  # (a sample of the watch: the figures are measured, nothing awaited)
        most_fds = max(most_fds, descriptors(pid))
        for mode, server in servers.items():
            most_open[mode] = max(most_open[mode], server.counts.snapshot()["open"])
    elapsed = time.monotonic() - started
    cpu_share = (cpu_seconds(pid) - cpu_before) / elapsed
    fds_after = descriptors(pid)
    counts = {mode: server.counts.snapshot() for mode, server in servers.items()}
    figures = (
        f"descriptors {fds_before} -> {fds_after} (most {most_fds}), CPU {cpu_share:.0%} over {elapsed:.0f} s, "
        f"RSS {rss_mb(pid):.0f} MB; most open per server {most_open}; counts {counts}"
    )
    print(figures)
    log = node.log_text()
    # Two readers per server, each reading once a second: every connection ends within
    # its deadline (a server may notice a second later), none is left open.
    assert fds_after <= fds_before + 2 * len(servers), figures
    assert most_fds <= fds_before + 3 * len(servers), figures
    for mode in servers:
        assert most_open[mode] <= 4, (mode, figures)
    # Each reading reads at most its cap (4 MB for a counters page, 64 KB for a monitor's).
    assert cpu_share < 0.35, figures
    # Every reading failed with a reason, and nothing was logged as a traceback.
    assert not re.search(r"Traceback|Unhandled|#critical\]", log), log[-5000:]
    failed = dict(re.findall(r"link (\S+) traffic not read from [^:]+:\S+: (.*)", log))
    assert set(failed) == {mode.replace("_", "-") for mode in servers}, (failed, log[-5000:])
    print(failed)
