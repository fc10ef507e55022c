"""A real sync group for process tests: N `twistd -n gtm` members on their own loopback addresses.

`Group` writes one config for members n1..nN (each on a unique 127.x address from
`nodeproc.loopback_address`, so the fixed ports below never collide), makes the group CA and
every member's certificate in ``<dir>/certs`` (the config's default TLS paths), and runs the
members it is asked to run as real processes, each logging to ``<dir>/<node>.log``.

Everything waits by polling with a deadline (`POLL` steps); nothing sleeps blindly.
`running_group` stops every process it started on the way out, failures included.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gtmcluster.sync import certs
from tests.support import configs, poll
from tests.support.nodeproc import loopback_address, twistd, wait_answering

DNS_PORT = 5353
PEER_PORT = 4353
API_PORT = 8053
POLL = 0.1
GROUP = "test"
#: short timers so a whole group settles in seconds
SYNC_SETTINGS: dict[str, Any] = {
    "snapshot_interval": 1,
    "reconcile_interval": 2,
    "idle_timeout": 6,
    "handshake_timeout": 3,
}
DATACENTERS = ("DC1", "DC2", "DC3")


@dataclass
class Member:
    """One member of the group: its addresses and, while it runs, its process."""

    name: str
    address: str
    datacenter: str
    log: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    output: IO[bytes] | None = field(default=None, repr=False)

    @property
    def dns(self) -> tuple[str, int]:
        return (self.address, DNS_PORT)

    @property
    def peer(self) -> tuple[str, int]:
        return (self.address, PEER_PORT)

    @property
    def api(self) -> tuple[str, int]:
        return (self.address, API_PORT)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Group:
    """The config, certificates and processes of one sync group in *workdir*."""

    def __init__(
        self,
        workdir: Path,
        size: int = 3,
        customize: Callable[[dict[str, Any]], None] | None = None,
        logfile: bool = True,
    ):
        self.workdir = workdir
        #: started with twistd --logfile (else as under systemd: twistd -n, its text on stdout)
        self.logfile = logfile
        self.certs = workdir / "certs"
        self.members: dict[str, Member] = {}
        for i in range(size):
            name = f"n{i + 1}"
            self.members[name] = Member(
                name, loopback_address(), DATACENTERS[i % len(DATACENTERS)], workdir / f"{name}.log"
            )
        self.config = self._config()
        if customize is not None:
            customize(self.config)
        self.config_path = configs.write(workdir, self.config)
        certs.init_ca(self.certs)
        for name in self.members:
            certs.issue(self.certs, name)

    def _config(self) -> dict[str, Any]:
        first = next(iter(self.members.values()))
        config = configs.base(first.address, DNS_PORT)
        config["sync_group"] = {
            "name": GROUP,
            **SYNC_SETTINGS,
            "members": [
                {
                    "name": m.name,
                    "datacenter": m.datacenter,
                    "peer": f"{m.address}:{PEER_PORT}",
                    "dns": [f"{m.address}:{DNS_PORT}"],
                    "api": f"{m.address}:{API_PORT}",
                }
                for m in self.members.values()
            ],
        }
        return config

    # -- processes --------------------------------------------------------------------------

    def spawn(self, node: str) -> None:
        """Start *node*'s process (see `wait_started`); its log file is appended to."""
        member = self.members[node]
        assert not member.running, f"{node} is already running"
        self._reap(member)
        member.output = (self.workdir / f"{node}.stdout").open("ab")
        cmd = [
            *twistd(),
            "--nodaemon",
            *([f"--logfile={member.log}"] if self.logfile else []),
            f"--pidfile={self.workdir / (node + '.pid')}",
            "gtm",
            f"--config={self.config_path}",
            f"--node={node}",
        ]
        member.proc = subprocess.Popen(cmd, stdout=member.output, stderr=subprocess.STDOUT, cwd=self.workdir)

    def wait_started(self, node: str, timeout: float = 20.0) -> None:
        """Return once *node* answers DNS and its API answers; fail if it exits first."""
        member = self.members[node]
        assert member.proc is not None, f"{node} was not started"
        try:
            wait_answering(member.dns, member.proc, timeout)
        except AssertionError as e:
            raise AssertionError(f"{node}: {e}\n--- stdout ---\n{self.output_text(node)}") from None
        self.wait_for(lambda: self._try_status(node) is not None, timeout, f"{node}'s API to answer")

    def start(self, *nodes: str) -> None:
        """Start *nodes* together and wait until each answers."""
        for node in nodes:
            self.spawn(node)
        for node in nodes:
            self.wait_started(node)

    def kill(self, node: str, sig: int = signal.SIGKILL, timeout: float = 10.0) -> int:
        """Send *sig* to *node* and wait for it to exit; returns its exit status."""
        member = self.members[node]
        assert member.proc is not None and member.running, f"{node} is not running"
        member.proc.send_signal(sig)
        try:
            code = member.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            member.proc.kill()
            code = member.proc.wait()
            raise AssertionError(f"{node} did not exit within {timeout}s of signal {sig}") from None
        finally:
            self._reap(member)
        return code

    def restart(self, node: str) -> None:
        """Start *node* again (after `kill`) and wait until it answers."""
        self.start(node)

    def stop_all(self) -> None:
        """SIGTERM every running member (SIGKILL after 10 s) and reap them all."""
        running = [m for m in self.members.values() if m.running]
        for member in running:
            assert member.proc is not None
            member.proc.send_signal(signal.SIGTERM)
        for member in self.members.values():
            if member.proc is not None:
                try:
                    member.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    member.proc.kill()
                    member.proc.wait()
            self._reap(member)

    @staticmethod
    def _reap(member: Member) -> None:
        if member.proc is not None and member.proc.poll() is not None:
            member.proc = None
        if member.proc is None and member.output is not None:
            member.output.close()
            member.output = None

    # -- looking at members -----------------------------------------------------------------

    def status(self, node: str, timeout: float = 2.0) -> dict[str, Any]:
        """GET /api/v1/status of *node*, parsed (over HTTPS, checked against the group CA
        and the member's name, when the config says api.tls)."""
        host, port = self.members[node].api
        if not self.config.get("api", {}).get("tls"):
            with urllib.request.urlopen(f"http://{host}:{port}/api/v1/status", timeout=timeout) as response:
                body: dict[str, Any] = json.loads(response.read())
            return body
        context = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
        connection.sock = context.wrap_socket(socket.create_connection((host, port), timeout), server_hostname=node)
        try:
            connection.request("GET", "/api/v1/status")
            response = connection.getresponse()
            if response.status != 200:
                raise OSError(f"{node}'s API answered {response.status}")
            body = json.loads(response.read())
        finally:
            connection.close()
        return body

    def _try_status(self, node: str) -> dict[str, Any] | None:
        try:
            return self.status(node)
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def log_text(self, node: str, since: int = 0) -> str:
        """*node*'s log from byte offset *since* (see `log_size`)."""
        log = self.members[node].log
        if not log.exists():
            return ""
        with log.open("rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace")

    def log_size(self, node: str) -> int:
        log = self.members[node].log
        return log.stat().st_size if log.exists() else 0

    def output_text(self, node: str) -> str:
        path = self.workdir / f"{node}.stdout"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_log(self, node: str, text: str, timeout: float = 10.0, since: int = 0) -> str:
        """Wait until *node*'s log (from offset *since*) has a line containing *text*; return it."""
        found: list[str] = []

        def seen() -> bool:
            found[:] = [line for line in self.log_text(node, since).splitlines() if text in line]
            return bool(found)

        self.wait_for(seen, timeout, f"a line with {text!r} in {node}'s log", lambda: self.log_text(node, since))
        return found[0]

    @staticmethod
    def wait_for(
        condition: Callable[[], bool],
        timeout: float,
        what: str,
        details: Callable[[], object] | None = None,
    ) -> float:
        """Poll *condition* every `POLL` s until it holds (returns the seconds it took) or fail."""
        return poll.seconds_until(condition, timeout, what, details, POLL)

    def converged(self, statuses: dict[str, dict[str, Any]], synced: bool = True) -> bool:
        """Every node lists every other as connected (and synced) and all digests are equal."""
        nodes = set(statuses)
        for node, status in statuses.items():
            peers = {p["name"]: p for p in status["peers"]}
            for other in nodes - {node}:
                peer = peers.get(other)
                if peer is None or not peer["connected"] or (synced and not peer["synced"]):
                    return False
        return len({s["state"]["digest"] for s in statuses.values()}) == 1

    def wait_converged(
        self, nodes: Iterable[str] | None = None, timeout: float = 20.0, synced: bool = True
    ) -> dict[str, dict[str, Any]]:
        """Poll every `POLL` s until *nodes* (default: the running ones) have converged; returns
        their statuses then, or fails showing the last ones."""
        names = list(nodes) if nodes is not None else [n for n, m in self.members.items() if m.running]
        last: dict[str, dict[str, Any] | None] = {}

        def check() -> bool:
            for name in names:
                last[name] = self._try_status(name)
            complete = {n: s for n, s in last.items() if s is not None}
            return len(complete) == len(names) and self.converged(complete, synced)

        self.wait_for(check, timeout, f"convergence of {', '.join(names)}", lambda: summarize(last))
        return {n: s for n, s in last.items() if s is not None}


def summarize(statuses: dict[str, dict[str, Any] | None]) -> str:
    """Digest, record count, readiness and peers of each status, one line per node."""
    lines = []
    for node, status in statuses.items():
        if status is None:
            lines.append(f"{node}: no answer")
            continue
        peers = ", ".join(
            f"{p['name']}{'+' if p['connected'] else '-'}{'s' if p['synced'] else ''}" for p in status["peers"]
        )
        state = status["state"]
        lines.append(
            f"{node}: digest {state['digest']} records {state['records']} by origin {state['by_origin']} "
            f"ready {status['ready']} peers [{peers}]"
        )
    return "\n".join(lines)


@contextmanager
def running_group(
    workdir: Path,
    size: int = 3,
    run: Iterable[str] | None = None,
    customize: Callable[[dict[str, Any]], None] | None = None,
    logfile: bool = True,
) -> Iterator[Group]:
    """A `Group` of *size* members with *run* (default: all) started; every process stopped after."""
    group = Group(workdir, size, customize, logfile)
    try:
        group.start(*(run if run is not None else group.members))
        yield group
    finally:
        with contextlib.suppress(Exception):
            group.stop_all()
        for member in group.members.values():  # whatever stop_all could not
            if member.proc is not None and member.proc.poll() is None:
                member.proc.kill()
                member.proc.wait()
            Group._reap(member)
