"""The health checker with the real reactor and real sockets: file descriptors stay bounded.

2,000 virtual servers checked every 2 s with a 1 s timeout (1,000 checks a second) by the
checker in a process of its own (`tests.support.runchecker`), which counts
``/proc/self/fd`` every 2 ms while it runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support.probeservers import ROOT

pytestmark = [pytest.mark.process, pytest.mark.alone]

SERVERS = 2000
TIMEOUT = 1.0
#: how late the reactor of a loaded test machine may fire a timeout
LATE = 0.5


def run_checker(target: str, max_in_flight: int, seconds: float = 4) -> dict[str, Any]:
    spec = {
        "target": target,
        "servers": SERVERS,
        "interval": 2,
        "timeout": TIMEOUT,
        "max_in_flight": max_in_flight,
        "seconds": seconds,
    }
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.runchecker", json.dumps(spec)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if out.returncode != 0:
        raise AssertionError(f"runchecker failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_black_holed_checks_hold_at_most_the_cap_of_descriptors() -> None:
    """Connections that are never made (a listener whose queue is full drops the SYNs):
    at most max_in_flight (500) checks hold a socket at any moment, though the monitors
    would need 1,000; each check gives its socket back at its timeout; the rounds that find
    no free slot within half an interval are skipped and counted, not queued; and when the
    checker has stopped, every descriptor is closed."""
    r = run_checker("hang", max_in_flight=500)
    assert r["peak_running"] == 500
    assert r["peak_in_flight"] == 500
    assert r["peak_fds"] - r["base_fds"] <= 500, r
    assert r["after_fds"] == r["base_fds"], r
    assert "no connection within 1s" in r["reasons"]
    assert r["longest"] <= TIMEOUT + LATE, r
    assert r["skipped_late"] > 0
    assert r["started"] == r["checks"]
    assert r["lag_max"] <= 1.0 + LATE  # half the interval, at most
    assert r["selectables"] == []


def test_refused_checks_give_their_socket_back_at_once() -> None:
    """Refused at once: every check ends within moments, nothing is skipped, and the sockets
    open at any moment are a small fraction of the cap."""
    r = run_checker("refused", max_in_flight=2500)
    assert r["reasons"] == ["connection refused"]
    assert r["skipped_late"] == r["skipped_busy"] == 0
    assert r["checks"] == r["started"] >= SERVERS * 1.5  # 4 s at 2,000 every 2 s
    assert r["longest"] <= LATE
    assert r["peak_fds"] - r["base_fds"] <= r["peak_in_flight"] + 10, r
    assert r["after_fds"] == r["base_fds"], r
    assert r["selectables"] == []
