"""Several monitors per virtual server against real listeners: the checker, with the real
reactor and real checks (in a process of its own, `tests.support.runhealth`), against an
HTTP server of this test (``/`` answers 200, ``/down`` 503) and a port nothing listens on.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import configs
from tests.support.probeservers import ROOT, closed_port, http_server

pytestmark = pytest.mark.process

FAST = {"interval": 0.2, "timeout": 0.15, "up_after": 1, "down_after": 1}


def verdicts(config: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.runhealth", str(config), "n1", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, f"runhealth failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["complete"], result
    found: dict[str, Any] = result["verdicts"]
    return found


def test_the_monitors_of_a_server_combine_by_its_rule(tmp_path: Path) -> None:
    """Each server has its own port (never listened on: every monitor sets the port it
    checks). Every monitor checks for real; each server's verdict is its rule applied to
    its monitors' verdicts, and the reason names each monitor's, with what it found."""
    with http_server(4) as web:
        closed = closed_port(4, socket.SOCK_STREAM)
        raw = configs.base()
        raw["monitors"] = {
            "ok_http": {"type": "http", "path": "/", "port": web.port, **FAST},
            "bad_http": {"type": "http", "path": "/down", "port": web.port, **FAST},
            "tcp": {"type": "tcp", "port": web.port, **FAST},
            "closed": {"type": "tcp", "port": closed, **FAST},
        }

        def vs(port: int, monitors: list[str], rule: Any = "all") -> dict[str, Any]:
            return {
                "address": "127.0.0.1",
                "port": port,
                "datacenter": "DC1",
                "monitor": monitors,
                "monitor_rule": rule,
            }

        raw["virtual_servers"] = {
            "both_up": vs(1001, ["ok_http", "tcp"]),
            "all_of_them": vs(1002, ["bad_http", "tcp"]),
            "one_of_them": vs(1003, ["bad_http", "tcp"], {"at_least": 1}),
            "two_of_three": vs(1004, ["ok_http", "bad_http", "closed"], {"at_least": 2}),
        }
        raw["pools"] = {}
        raw["wideips"] = {}
        found = verdicts(configs.write(tmp_path, raw))
        asked = {line.split()[1] for line, _, _ in web.requests}
    assert asked == {"/", "/down"}  # both http monitors asked the real server
    assert found["both_up"] == {"up": True, "reason": "ok_http: up; tcp: up; rule all: up"}
    assert found["all_of_them"]["up"] is False
    assert found["all_of_them"]["reason"].startswith("bad_http: down (")
    assert "503" in found["all_of_them"]["reason"]
    assert found["all_of_them"]["reason"].endswith("; tcp: up; rule all: down")
    assert found["one_of_them"]["up"] is True
    assert found["one_of_them"]["reason"].endswith("; tcp: up; rule at_least 1: up")
    assert found["two_of_three"]["up"] is False
    reason = found["two_of_three"]["reason"]
    assert reason.startswith("ok_http: up; bad_http: down (") and "; closed: down (" in reason, reason
    assert reason.endswith("; rule at_least 2: down")
