"""Real twistd nodes for process tests: start, wait until they answer, stop, keep the log."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support import dnsclient

_counter = itertools.count(1)


def loopback_address() -> str:
    """A loopback address no other test in this run uses (so fixed ports never collide)."""
    n = next(_counter)
    return f"127.{100 + os.getpid() % 100}.{n // 250}.{n % 250 + 2}"


def twistd() -> list[str]:
    return [sys.executable, "-c", "from twisted.scripts.twistd import run; run()"]


@dataclass
class RunningNode:
    address: str
    port: int
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def server(self) -> tuple[str, int]:
        return (self.address, self.port)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def wait_answering(server: tuple[str, int], proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    wire = dnsclient.query("example.test", "SOA")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            raise AssertionError(f"node exited with {proc.returncode}:\n{out}")
        try:
            dnsclient.udp(wire, server, timeout=0.2)
            return
        except OSError:
            # not listening yet: wait a little for the process (returns at once if it exits)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.05)
    raise AssertionError(f"node did not answer on {server} within {timeout}s")


@contextmanager
def running_node(
    config: Path,
    node: str,
    address: str,
    port: int,
    workdir: Path,
    preexec_fn: Callable[[], None] | None = None,
) -> Iterator[RunningNode]:
    """Run ``twistd -n gtm`` for *node* and stop it (SIGTERM) afterwards. *preexec_fn* runs
    in the child before twistd (to start it with other process limits, say)."""
    log = workdir / f"{node}.log"
    cmd = [
        *twistd(),
        "--nodaemon",
        f"--logfile={log}",
        f"--pidfile={workdir / (node + '.pid')}",
        "gtm",
        f"--config={config}",
        f"--node={node}",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=workdir, preexec_fn=preexec_fn)  # noqa: PLW1509 - tests set limits only
    running = RunningNode(address, port, log, proc)
    try:
        wait_answering((address, port), proc)
        yield running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout:
            proc.stdout.close()
