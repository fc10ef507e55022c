"""Reference authoritative servers (gdnsd, knotd) as real processes, for the conformance test.

Each runs in the foreground from files written into its own folder (config, zone, run and
storage directories), as root without dropping privileges, on one loopback address, and is
stopped with SIGTERM afterwards. `running` waits until the server answers the zone's SOA,
so a server that fails to start says why (its output) instead of timing out on probes.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support import dnsclient


@dataclass
class RunningServer:
    name: str
    address: str
    port: int
    proc: subprocess.Popen[bytes]
    output: Path

    @property
    def server(self) -> tuple[str, int]:
        return (self.address, self.port)

    def output_text(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""


def gdnsd_files(workdir: Path, origin: str, zone: str, address: str, port: int) -> list[str]:
    """Write gdnsd's config folder (``config`` and ``zones/ORIGIN``); its command line."""
    config_dir = workdir / "etc"
    (config_dir / "zones").mkdir(parents=True, exist_ok=True)
    run_dir = workdir / "run"
    state_dir = workdir / "state"
    run_dir.mkdir(exist_ok=True)
    state_dir.mkdir(exist_ok=True)
    (config_dir / "zones" / origin).write_text(zone)
    (config_dir / "config").write_text(
        "options => {\n"
        f"  listen => [ {address} ]\n"
        f"  dns_port => {port}\n"
        f"  run_dir => {run_dir}\n"
        f"  state_dir => {state_dir}\n"
        "}\n"
    )
    return ["gdnsd", "-c", str(config_dir), "start"]


def knotd_files(
    workdir: Path, origin: str, zone: str, address: str, port: int, online_signing: bool = False
) -> list[str]:
    """Write knotd's config, zone file, run and storage folders; its command line. With
    *online_signing*, knotd signs its answers as it gives them (its ``mod-onlinesign``, with
    a policy of one ECDSA P-256 key, the keys made by knotd in its storage)."""
    run_dir = workdir / "run"
    storage = workdir / "storage"
    run_dir.mkdir(parents=True, exist_ok=True)
    storage.mkdir(exist_ok=True)
    zone_file = workdir / f"{origin}.zone"
    zone_file.write_text(zone)
    config = workdir / "knot.conf"
    config.write_text(
        "server:\n"
        f'    rundir: "{run_dir}"\n'
        f"    listen: {address}@{port}\n"
        "database:\n"
        f'    storage: "{storage}"\n'
        "log:\n"
        "  - target: stderr\n"
        "    any: info\n"
        + (
            "policy:\n"
            "  - id: online\n"
            "    algorithm: ecdsap256sha256\n"
            "    single-type-signing: on\n"
            "mod-onlinesign:\n"
            "  - id: online\n"
            "    policy: online\n"
            if online_signing
            else ""
        )
        + "zone:\n"
        f"  - domain: {origin}\n"
        f'    file: "{zone_file}"\n'
        f'    storage: "{storage}"\n' + ("    module: mod-onlinesign/online\n" if online_signing else "")
    )
    return ["knotd", "-c", str(config)]


@contextmanager
def running(
    name: str, command: list[str], address: str, port: int, origin: str, workdir: Path, timeout: float = 20.0
) -> Iterator[RunningServer]:
    """Run *command* (a server in the foreground) until the block ends."""
    output = workdir / f"{name}.out"
    with output.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    server = RunningServer(name, address, port, proc, output)
    try:
        _wait_answering(server, origin, timeout)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_answering(server: RunningServer, origin: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    wire = dnsclient.query(origin, "SOA")
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise AssertionError(f"{server.name} exited with {server.proc.returncode}:\n{server.output_text()}")
        try:
            reply = dnsclient.parse(dnsclient.udp(wire, server.server, timeout=0.2))
        except OSError:
            reply = None
        if reply is not None and reply.answer:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(timeout=0.05)
    raise AssertionError(f"{server.name} did not answer {origin} SOA within {timeout}s:\n{server.output_text()}")
