"""A peer cut off without a reset, with two real `twistd -n gtm` members: answers move within
the partition bound, and SIGTERM still stops the other member within 3 s.

n2 is made silent with SIGSTOP: its kernel keeps the TCP connection open (it even
acknowledges what n1 sends) but nothing comes out of it, as when every link of a site is
cut and packets are dropped. At the same moment vsm's backend is killed, so n1's own
verdict on vsm turns `down` while n2's last verdict, `up`, stays in n1's store.

- With rule `any`, n1 must stop answering vsm within ``interval x down_after + timeout +
  heartbeat_timeout``: n2's verdict stops counting once n2 has been silent for
  `heartbeat_timeout`, though its connection is still open (`idle_timeout` is 30 s here,
  as by default: before heartbeats bounded silence, n1 answered vsm until then).
- SIGTERM to n1 while n2 is still stopped: n1 exits within 3 s (its connection to n2
  does not close, and is aborted), and its snapshot, written only at stop here
  (`snapshot_interval` is an hour), holds its latest records.

Times are measured and printed; they are asserted against the documented bounds plus
`SLACK` (polling, dig's round trip, process scheduling on a shared machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.state.record import Version, fingerprint
from tests.support import dnsclient
from tests.support.backends import Backend, running_backends
from tests.support.nodeproc import loopback_address
from tests.support.trio import Group, running_group

pytestmark = pytest.mark.process

BACKEND_PORT = 8080
#: vsm's monitor: two refused connections (about a second) take it down
PROBE: dict[str, Any] = {"type": "tcp", "interval": 0.5, "timeout": 0.25, "up_after": 1, "down_after": 2}
WATCHED = "watched.example.test"  # pool pw: vsm while it is available, else vsalt
VSALT = "10.0.9.1"
HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT, IDLE_TIMEOUT = 1.0, 3.0, 30.0
#: the partition bound (README, "Failover time")
BOUND = PROBE["interval"] * PROBE["down_after"] + PROBE["timeout"] + HEARTBEAT_TIMEOUT
#: the stop bound (README, "Snapshots"): SIGTERM to exit, whatever the peers do
STOP_BOUND = 3.0
SLACK = 1.0
SETTLE = 15.0


def customize(backend: Backend) -> Any:
    def change(config: dict[str, Any]) -> None:
        config["sync_group"].update(
            {
                "idle_timeout": IDLE_TIMEOUT,
                "heartbeat_interval": HEARTBEAT_INTERVAL,
                "heartbeat_timeout": HEARTBEAT_TIMEOUT,
                "snapshot_interval": 3600,  # the only write before the end is the one at stop
            }
        )
        config["monitors"] = {"probe": PROBE}
        config["virtual_servers"].update(
            {
                "vsm": {"address": backend.address, "port": BACKEND_PORT, "datacenter": "DC1", "monitor": "probe"},
                "vsalt": {"address": VSALT, "datacenter": "DC2"},
            }
        )
        config["pools"]["pw"] = {
            "members": ["vsm", "vsalt"],
            "load_balancing": {"preferred": "global_availability"},
            "ttl": 5,
        }
        config["wideips"][WATCHED] = {"type": "A", "pools": ["pw"]}

    return change


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    server = Backend("vsm", loopback_address(), BACKEND_PORT)
    with running_backends(server):
        yield server


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, backend: Backend) -> Iterator[Group]:
    """n1 and n2 running; n2 resumed (if stopped) and both stopped afterwards."""
    workdir: Path = tmp_path_factory.mktemp("partition")
    with running_group(workdir, 2, customize=customize(backend)) as group:
        try:
            yield group
        finally:
            resume(group, "n2")


def pause(group: Group, node: str) -> None:
    proc = group.members[node].proc
    assert proc is not None and proc.poll() is None, f"{node} is not running"
    os.kill(proc.pid, signal.SIGSTOP)


def resume(group: Group, node: str) -> None:
    proc = group.members[node].proc
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)


def ask(group: Group, node: str) -> list[str]:
    wire = dnsclient.query(WATCHED, "A", qid=7)
    reply = dnsclient.udp(wire, group.members[node].dns, timeout=2.0)
    return sorted(dnsclient.addresses(dnsclient.parse(reply)))


def peer(status: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [p for p in status["peers"] if p["name"] == name]
    assert len(found) == 1, status["peers"]
    return found[0]


def snapshot_rows(group: Group, node: str) -> dict[str, tuple[str, Version]]:
    """The records in *node*'s snapshot file: key -> (value as stored, version)."""
    path = group.workdir / "var" / "state" / node / "state.sqlite"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT key, value, wall_ms, logical, origin FROM records").fetchall()
    finally:
        db.close()
    return {key: (value, Version(wall_ms, logical, origin)) for key, value, wall_ms, logical, origin in rows}


def test_a_silent_peer_stops_counting_and_answers_move_within_the_partition_bound(
    pair: Group, backend: Backend
) -> None:
    """n2 stopped (SIGSTOP) and vsm's backend killed together: n1 stops answering vsm within
    interval x down_after + timeout + heartbeat_timeout, while its connection to n2 is still
    open (so it is n2's silence, not a closed connection, that took n2's `up` out); n1 logs
    n2 silent; resumed, n2 counts again."""
    group = pair
    group.wait_for(
        lambda: all(group.status(n)["health"]["virtual_servers"]["vsm"]["available"] for n in ("n1", "n2")),
        SETTLE,
        "vsm available on n1 and n2",
    )
    group.wait_converged(timeout=SETTLE)
    assert ask(group, "n1") == [backend.address]
    log_from = group.log_size("n1")

    pause(group, "n2")
    cut = time.monotonic()
    backend.kill()
    moved = group.wait_for(lambda: ask(group, "n1") == [VSALT], BOUND + 10, "n1 answering vsalt instead of vsm")
    status = group.status("n1")
    print(f"\nanswers moved {moved:.2f}s after the cut (bound {BOUND:g}s; load {os.getloadavg()[0]:.2f})")
    n2 = peer(status, "n2")
    assert n2["connected"] is True and n2["counted"] is False, n2
    vsm = status["health"]["virtual_servers"]["vsm"]
    assert not vsm["available"] and "n2" not in vsm["reason"], vsm
    host, port = group.members["n1"].api
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=2) as response:
        metrics = response.read().decode()
    assert 'gtm_peer_counted{peer="n2"} 0.0' in metrics and 'gtm_peer_connected{peer="n2"} 1.0' in metrics
    assert moved <= BOUND + SLACK, f"answers moved {moved:.2f}s after the cut; the bound is {BOUND:g}s"
    silent = group.wait_log("n1", "peer n2 silent", since=log_from)
    print(f"n1: {silent.strip()}")
    # n2's `up` verdict is still in n1's store: only its silence keeps it from counting
    assert time.monotonic() - cut < IDLE_TIMEOUT

    resume(group, "n2")
    group.wait_log("n1", "peer n2 heard again", since=log_from)
    group.wait_for(lambda: peer(group.status("n1"), "n2")["counted"] is True, SETTLE, "n2 counted again on n1")


def test_sigterm_with_a_peer_black_holed_exits_within_3s_and_writes_the_final_snapshot(pair: Group) -> None:
    """n2 stopped (SIGSTOP): SIGTERM to n1 makes it exit within 3 s, though its connection to
    n2 never closes; its snapshot (written only at stop here) holds the state it had: the
    same digest, its own latest verdict on vsm among the records."""
    group = pair
    group.wait_for(
        lambda: not group.status("n1")["health"]["virtual_servers"]["vsm"]["available"], SETTLE, "vsm down on n1"
    )
    pause(group, "n2")
    group.wait_for(lambda: peer(group.status("n1"), "n2")["counted"] is False, SETTLE, "n2 silent on n1")
    seen: list[str] = []

    def steady() -> bool:
        seen.append(group.status("n1")["state"]["digest"])
        return len(seen) > 1 and seen[-1] == seen[-2]

    group.wait_for(steady, 5, "n1's state digest to hold still")
    before = seen[-1]
    proc = group.members["n1"].proc
    assert proc is not None
    start = time.monotonic()
    code = group.kill("n1", signal.SIGTERM, timeout=STOP_BOUND + 10)
    took = time.monotonic() - start
    print(f"\nn1 exited {took:.2f}s after SIGTERM, code {code} (load {os.getloadavg()[0]:.2f})")
    assert code in (0, -signal.SIGTERM), code  # twistd ends with the signal that stopped it
    assert took <= STOP_BOUND, f"n1 took {took:.2f}s to exit after SIGTERM"
    assert "aborting" in group.log_text("n1"), "n1's connection to n2 closed by itself: n2 was not black-holed"
    rows = snapshot_rows(group, "n1")
    xor = 0
    for key, (_, version) in rows.items():
        xor ^= fingerprint(key, version)
    assert f"{len(rows)}-{xor:016x}" == before, "the snapshot does not hold n1's last state"
    value, version = rows["obs/vs/vsm/n1"]
    assert json.loads(value)["up"] is False, value
    assert version.origin == "n1"
