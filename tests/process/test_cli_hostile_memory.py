"""The memory of a real `gtmcluster` process against what answers at a member's API address
with an endless body: it stops reading at its cap, says so in one line and exits 1, its
peak resident memory (ru_maxrss) a few times the cap above that of the same command
against an honest answer.

Each command runs under an address-space limit (`AS_LIMIT`), so that a client that reads
without a cap (today's main) fails here with a MemoryError rather than taking the host's
memory. `measure` prints the figures docs/operations.md gives:

    PYTHONPATH=.:twistd-plugins python -m tests.process.test_cli_hostile_memory
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.hostileapi import STATUS, Script, answer, chunked, config_at, flood, hostile, until_closed

pytestmark = [pytest.mark.process]

#: the address space a command may take, bytes
AS_LIMIT = 1024 * 1024 * 1024
#: bytes an endless body goes on for, at most: well past AS_LIMIT
ENDLESS = 2 * AS_LIMIT
#: seconds a command may take here
WALL = 60.0
#: `gtmcluster ARGS` under `AS_LIMIT`
LIMITED = (
    "import resource, runpy, sys; "
    f"resource.setrlimit(resource.RLIMIT_AS, ({AS_LIMIT}, {AS_LIMIT})); "
    "sys.argv = ['gtmcluster', *sys.argv[1:]]; "
    "runpy.run_module('gtmcluster.cli.main', run_name='__main__')"
)


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str
    #: peak resident memory, bytes
    peak: int
    took: float


def gtmcluster(args: list[str], wall: float = WALL, unread: bool = False) -> Ran:
    """Run ``gtmcluster ARGS`` (this checkout's) under `AS_LIMIT`; its peak memory from
    wait4. Interrupted (Ctrl-C) after *wall* seconds, killed 5 s later. With *unread*, its
    output goes to a pipe nobody reads (a terminal paused, a pager not scrolled)."""

    start = time.monotonic()
    with (
        open(os.devnull, "w") as sink,
        subprocess.Popen(
            [sys.executable, "-c", LIMITED, *args],
            stdout=subprocess.PIPE if args[0] != "logs" or unread else sink,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc,
    ):
        end = start + wall
        interrupted = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > end + 5:
                proc.kill()
            elif time.monotonic() > end and not interrupted:
                proc.send_signal(signal.SIGINT)
                interrupted = True
                if unread and proc.stdout:  # (the terminal taken up again: what was held goes out)
                    threading.Thread(target=proc.stdout.read, daemon=True).start()
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out = proc.stdout.read() if proc.stdout and not unread else ""
        err = proc.stderr.read() if proc.stderr else ""
    return Ran(proc.returncode, out, err, usage.ru_maxrss * 1024, time.monotonic() - start)


def against(tmp_path: Path, script: Script, command: str) -> Ran:
    with hostile(script) as server:
        return gtmcluster([command, "--config", str(config_at(tmp_path, server.port))])


HONEST: dict[str, Callable[[], Script]] = {
    "status": lambda: answer(STATUS),
    "logs": lambda: answer(b"", kind="application/x-ndjson"),
}
ENDLESS_BODIES: dict[str, Callable[[], Script]] = {
    "status": lambda: chunked(most=ENDLESS),
    "logs": lambda: until_closed(most=ENDLESS),
}
#: the cap each command reads up to (`nodeapi.MAX_JSON`, `logs.MAX_LINE`)
CAPS = {"status": 16 * 1024 * 1024, "logs": 64 * 1024}


@pytest.mark.parametrize("command", ["status", "logs"])
def test_an_endless_body_costs_a_command_at_most_a_few_times_its_cap(tmp_path: Path, command: str) -> None:
    """`gtmcluster status` against an endless chunked body, `gtmcluster logs` against an
    endless line (no length, no newline): exit 1 (status: the node unreachable, saying why;
    logs: the line left out, noted), no traceback, and a peak memory within twice the cap
    (16 MiB for a JSON answer) of the same command's against an honest answer."""
    honest = against(tmp_path / "honest", HONEST[command](), command)
    assert honest.code == 0, honest
    hostile_run = against(tmp_path / "endless", ENDLESS_BODIES[command](), command)
    said = hostile_run.out + hostile_run.err
    assert "Traceback" not in said and "MemoryError" not in said, said[-2000:]
    if command == "status":
        assert hostile_run.code == 1
        assert "sent more than 16,777,216 bytes, over the limit for this answer" in hostile_run.out
    else:
        assert hostile_run.err == "gtmcluster logs: n1: left out a log line longer than 65,536 bytes\n"
    assert hostile_run.peak < honest.peak + 2 * CAPS["status"], (honest.peak, hostile_run.peak)


#: what `logs -f` may hold at most: the lines waiting to be printed (`logs.MAX_WAITING` of
#: `logs.MAX_LINE`) and those held for time order (`logs.MAX_HELD_BYTES`), and as much again
FOLLOW_HELD = 2 * (1000 * 64 * 1024 + 16 * 1024 * 1024)


def test_a_flood_of_lines_never_read_costs_logs_f_a_bounded_memory(tmp_path: Path) -> None:
    """`gtmcluster logs -f` following a node that floods 60 KB lines while the operator's
    terminal takes nothing: it stops reading (the node's own follow buffer takes the wait),
    its memory bounded, and Ctrl-C ends it (exit 0)."""
    honest = against(tmp_path / "honest", HONEST["logs"](), "logs")
    with hostile(flood()) as server:
        ran = gtmcluster(["logs", "-f", "--config", str(config_at(tmp_path / "f", server.port))], wall=6.0, unread=True)
        taken = sum(peer.sent for peer in server.peers)
    assert ran.code == 0 and "Traceback" not in ran.err, ran.err[-2000:]
    assert ran.peak < honest.peak + FOLLOW_HELD, (honest.peak, ran.peak, taken)


def measure() -> None:
    """Print each command's peak memory against an honest and an endless answer."""
    import tempfile

    for command in ("status", "logs"):
        with tempfile.TemporaryDirectory() as folder:
            honest = against(Path(folder) / "h", HONEST[command](), command)
            endless = against(Path(folder) / "e", ENDLESS_BODIES[command](), command)
        print(
            json.dumps(
                {
                    "command": command,
                    "honest_peak_mib": round(honest.peak / 2**20, 1),
                    "endless_peak_mib": round(endless.peak / 2**20, 1),
                    "endless_exit": endless.code,
                    "endless_seconds": round(endless.took, 2),
                    "endless_said": (endless.out + endless.err).strip().splitlines()[-1:],
                }
            )
        )
    with tempfile.TemporaryDirectory() as folder, hostile(flood()) as server:
        ran = gtmcluster(["logs", "-f", "--config", str(config_at(Path(folder), server.port))], wall=6.0, unread=True)
        taken = sum(peer.sent for peer in server.peers)
    print(
        json.dumps(
            {
                "command": "logs -f, output unread",
                "peak_mib": round(ran.peak / 2**20, 1),
                "read_mib": round(taken / 2**20),
            }
        )
    )


if __name__ == "__main__":
    measure()
