"""Real haproxy and nginx as load sources, for the load-source tests.

Each runs in the foreground from a config written into its own folder, on one loopback
address, and is stopped with SIGTERM afterwards. `running_haproxy` serves its stats CSV
(``/stats;csv``) and Prometheus exporter (``/metrics``) on `STATS_PORT`, with one HTTP
frontend per proxy name on the ports after it; `running_nginx` serves ``stub_status`` at
``/nginx_status``. `hold` opens idle connections (load) and closes them afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.support import poll

STATS_PORT = 8404
FRONTEND_PORT = 8405  # the first proxy's; the next ones follow
NGINX_PORT = 8480
#: a frontend's maxconn: its stats row's slim
FRONTEND_MAXCONN = 50


@dataclass
class Server:
    address: str
    port: int  # where the figures are read
    ports: dict[str, int]  # haproxy: each proxy's frontend port; nginx: {"http": port}
    proc: subprocess.Popen[bytes]
    output: Path

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://{self.address}:{self.port}{path}", timeout=5) as reply:
            body: bytes = reply.read()
            return body


def available(tool: str) -> bool:
    return shutil.which(tool) is not None or Path("/usr/sbin", tool).exists()


def require(tool: str) -> None:
    """Fail in CI, skip elsewhere, when *tool* (Debian package of the same name) is missing."""
    if not available(tool):
        message = f"{tool} is not installed (Debian package {tool}; make test installs it)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


def _path(tool: str) -> str:
    return shutil.which(tool) or str(Path("/usr/sbin", tool))


def haproxy_config(address: str, proxies: Sequence[str], binds: Mapping[str, str]) -> tuple[str, dict[str, int]]:
    """The config; each proxy's frontend port. A proxy listens on *address* unless *binds*
    gives it another, and the stats are served on each of those addresses too."""
    ports = {name: FRONTEND_PORT + i for i, name in enumerate(proxies)}
    lines = [
        "global",
        "  maxconn 200",
        "defaults",
        "  mode http",
        "  timeout connect 1s",
        "  timeout client 60s",
        "  timeout server 60s",
        "  timeout http-request 60s",
        "frontend stats",
        *(f"  bind {a}:{STATS_PORT}" for a in sorted({address, *binds.values()})),
        "  http-request use-service prometheus-exporter if { path /metrics }",
        "  stats enable",
        "  stats uri /stats",
    ]
    for name, port in ports.items():
        lines += [
            f"frontend {name}",
            f"  bind {binds.get(name, address)}:{port}",
            f"  maxconn {FRONTEND_MAXCONN}",
            f"  default_backend {name}-servers",
            f"backend {name}-servers",
            f"  server s1 {address}:9",
        ]
    return "\n".join(lines) + "\n", ports


def nginx_config(workdir: Path, address: str) -> str:
    return f"""daemon off;
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {workdir}/body;
  proxy_temp_path {workdir}/proxy;
  fastcgi_temp_path {workdir}/fastcgi;
  uwsgi_temp_path {workdir}/uwsgi;
  scgi_temp_path {workdir}/scgi;
  server {{
    listen {address}:{NGINX_PORT};
    location = /nginx_status {{ stub_status; }}
    location / {{ return 200 "ok\\n"; }}
  }}
}}
"""


@contextmanager
def _running(cmd: list[str], server: Server, probe: str) -> Iterator[Server]:
    try:
        poll.until(lambda: _answers(server, probe), 15, f"{cmd[0]} answering", details=lambda: _output(server))
        yield server
    finally:
        if server.proc.poll() is None:
            server.proc.send_signal(signal.SIGTERM)
            try:
                server.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait()


def _answers(server: Server, probe: str) -> bool:
    if server.proc.poll() is not None:
        raise AssertionError(f"server exited ({server.proc.returncode}): {_output(server)}")
    try:
        server.get(probe)
    except OSError:
        return False
    return True


def _output(server: Server) -> str:
    return server.output.read_text(errors="replace") if server.output.exists() else ""


@contextmanager
def running_haproxy(
    workdir: Path, address: str, proxies: Sequence[str] = ("web",), binds: Mapping[str, str] | None = None
) -> Iterator[Server]:
    """haproxy with a frontend per proxy name (on the address *binds* gives it, else *address*)."""
    workdir.mkdir(parents=True, exist_ok=True)
    text, ports = haproxy_config(address, proxies, binds or {})
    config = workdir / "haproxy.cfg"
    config.write_text(text)
    output = workdir / "haproxy.out"
    cmd = [_path("haproxy"), "-db", "-f", str(config)]
    with output.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    with _running(cmd, Server(address, STATS_PORT, ports, proc, output), "/stats;csv") as server:
        yield server


@contextmanager
def running_nginx(workdir: Path, address: str) -> Iterator[Server]:
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "nginx.conf"
    config.write_text(nginx_config(workdir, address))
    output = workdir / "nginx.out"
    cmd = [_path("nginx"), "-c", str(config), "-p", str(workdir), "-e", str(workdir / "error.log")]
    with output.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    with _running(cmd, Server(address, NGINX_PORT, {"http": NGINX_PORT}, proc, output), "/nginx_status") as server:
        yield server


@contextmanager
def hold(address: str, port: int, count: int) -> Iterator[list[socket.socket]]:
    """*count* idle TCP connections to *address*:*port*, closed afterwards."""
    with contextlib.ExitStack() as stack:
        held = []
        for _ in range(count):
            s = stack.enter_context(socket.create_connection((address, port), timeout=5))
            held.append(s)
        yield held
