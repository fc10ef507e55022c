"""The demo's processes: backends, stand-in resolvers and the GTM nodes; all stopped at the end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from gtmcluster.config.addresses import HostPort
from gtmcluster.config.model import Config, Member, VirtualServer


def twistd_command() -> list[str]:
    """twistd from this Python, whatever PATH says."""
    return [sys.executable, "-c", "from twisted.scripts.twistd import run; run()"]


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def spawn(argv: list[str], log: Path | None = None) -> subprocess.Popen[bytes]:
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]


def wait_tcp(host: str, port: int, deadline: float, proc: subprocess.Popen[bytes]) -> bool:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class Processes:
    """Everything the demo started, to stop it all (also on Ctrl-C or an error)."""

    def __init__(self, config: Config, directory: Path):
        self.config = config
        self.directory = directory
        self.backends: dict[str, tuple[VirtualServer, subprocess.Popen[bytes]]] = {}
        self.resolvers: list[subprocess.Popen[bytes]] = []
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}

    def demo_servers(self) -> list[VirtualServer]:
        """The servers the demo stands up: loopback ones with an HTTP monitor."""
        return [
            vs
            for vs in self.config.virtual_servers.values()
            if any(m.type == "http" for m in vs.monitors)
            and vs.address is not None
            and vs.address.is_loopback
            and vs.admin_state != "disabled"
        ]

    def start_backend(self, vs: VirtualServer) -> None:
        assert vs.address is not None  # (one of `demo_servers`)
        listen = f"[{vs.address}]:{vs.port}" if vs.address.version == 6 else f"{vs.address}:{vs.port}"
        proc = spawn([sys.executable, "-m", "gtmcluster.cli.backend", "--listen", listen, "--name", vs.name])
        self.backends[vs.name] = (vs, proc)
        wait_tcp(str(vs.address), vs.port, time.monotonic() + 5, proc)

    def stop_backend(self, name: str) -> None:
        entry = self.backends.pop(name, None)
        if entry is not None:
            stop(entry[1])

    def start_resolver(self, address: str, delays: dict[str, float]) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "gtmcluster.demo.resolver", "--listen", address]
        argv += [f"--delay={source}={ms:g}" for source, ms in delays.items()]
        proc = spawn(argv)
        self.resolvers.append(proc)
        return proc

    def start_node(self, member: Member, config_path: Path) -> subprocess.Popen[bytes]:
        log_dir = self.config.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        log_dir.chmod(log_dir.stat().st_mode & 0o755)  # a node refuses a log_dir others may write in
        run_dir = self.directory / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            *twistd_command(),
            "--nodaemon",
            f"--logfile={log_dir / (member.name + '.log')}",
            f"--pidfile={run_dir / (member.name + '.pid')}",
            "gtm",
            f"--config={config_path}",
            f"--node={member.name}",
        ]
        proc = spawn(argv, self.directory / f"{member.name}.stdout")
        self.nodes[member.name] = proc
        return proc

    def api_up(self, member: Member, deadline: float) -> bool:
        return wait_tcp(str(member.api.host), member.api.port, deadline, self.nodes[member.name])

    def stop_all(self) -> None:
        for proc in self.nodes.values():
            stop(proc)
        for proc in self.resolvers:
            stop(proc)
        for name in list(self.backends):
            self.stop_backend(name)
        self.nodes.clear()
        self.resolvers.clear()


def in_use(host: str, port: int, kind: int) -> bool:
    """Whether something already listens on *host*:*port* (TCP) or holds it (UDP)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, kind) as s:
        if kind == socket.SOCK_STREAM:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def busy_addresses(config: Config, resolvers: list[str]) -> list[str]:
    """The demo's addresses something else holds already (another demo still running?)."""
    wanted: list[tuple[str, int, int]] = []
    for m in config.sync_group.members:
        for hp in m.dns:
            wanted += [(str(hp.host), hp.port, socket.SOCK_DGRAM), (str(hp.host), hp.port, socket.SOCK_STREAM)]
        wanted += [
            (str(m.peer.host), m.peer.port, socket.SOCK_STREAM),
            (str(m.api.host), m.api.port, socket.SOCK_STREAM),
        ]
    wanted += [(address, 53, socket.SOCK_DGRAM) for address in resolvers]
    busy = []
    for host, port, kind in wanted:
        label = f"{'udp' if kind == socket.SOCK_DGRAM else 'tcp'} {host}:{port}"
        if label not in busy and in_use(host, port, kind):
            busy.append(label)
    return busy


def address_of(hp: HostPort) -> str:
    return f"[{hp.host}]:{hp.port}" if hp.host.version == 6 else f"{hp.host}:{hp.port}"
