"""Real HTTP backends for process tests: `gtmcluster.cli.backend` processes on loopback.

Each `Backend` is one ``python -m gtmcluster.cli.backend`` process on a given address and
port. `start` returns once the port accepts TCP connections, so a test can take the time
of "the server is back" right after it; `kill` sends SIGKILL and reaps the process, so from
its return on the port refuses connections. `running_backends` stops whatever is left.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Backend:
    name: str
    address: str
    port: int
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def listen(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 10.0) -> None:
        """Start the process and wait until its port accepts connections."""
        self.spawn()
        self.wait_ready(timeout)

    def spawn(self) -> None:
        """Start the process without waiting for it (see `wait_ready`)."""
        assert not self.running, f"backend {self.name} is already running"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gtmcluster.cli.backend", "--listen", self.listen, "--name", self.name],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Return once the spawned process accepts TCP connections; fail if it exits or never does."""
        assert self.proc is not None, f"backend {self.name} was not started"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise AssertionError(f"backend {self.name} on {self.listen} exited with {self.proc.returncode}:\n{err}")
            if accepts(self.address, self.port):
                return
            # not listening yet: wait a little for the process (returns at once if it exits)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=0.02)
        self.kill()
        raise AssertionError(f"backend {self.name} did not listen on {self.listen} within {timeout}s")

    def kill(self) -> None:
        """SIGKILL the process and reap it: its port refuses connections from now on."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.stderr:
            proc.stderr.close()


def accepts(address: str, port: int, timeout: float = 0.2) -> bool:
    """Whether a TCP connection to *address*:*port* succeeds now."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


@contextmanager
def running_backends(*backends: Backend) -> Iterator[dict[str, Backend]]:
    """Start *backends* together (each ready when this yields) and kill them all afterwards."""
    try:
        for backend in backends:
            backend.spawn()
        for backend in backends:
            backend.wait_ready()
        yield {b.name: b for b in backends}
    finally:
        for backend in backends:
            backend.kill()
