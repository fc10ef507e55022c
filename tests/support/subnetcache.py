"""A real `unbound` subnet cache (RFC 7871) in front of a node, for the ECS interop tests.

`subnet_cache_config` is what a resolver operator runs to pass client subnets to a GSLB:
``module-config: "subnetcache iterator"``, the client subnet sent to the node
(`send-client-subnet`), also for clients that send one of their own
(`client-subnet-always-forward`), at most /24 and /56 (`max-client-subnet-ipv4/6`), the
node's zone stubbed to it over UDP and, for `TCP_ZONE`, over TCP. On loopback unbound
needs `do-not-query-localhost: no` (it refuses to query 127.0.0.0/8 by default).

`SubnetCache` runs it (``unbound -d``), waits until it answers, reads its counters
(``unbound-control stats_noreset``: `num.query.subnet_cache` counts the answers it gave
from its subnet cache; `extended-statistics` prints them) and stops it.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path
from types import TracebackType

from tests.support import dnsclient
from tests.support.poll import until

ZONE = "example.test"
#: names under it are stubbed to the node over TCP (`stub-tcp-upstream`)
TCP_ZONE = "tcp.example.test"


def subnet_cache_config(workdir: Path, name: str, address: str, port: int, node: tuple[str, int]) -> str:
    """An unbound on *address*:*port* that sends its queries from *address* too, caches by
    client subnet, and asks *node* for `ZONE` (over TCP for `TCP_ZONE`)."""
    node_address, node_port = node
    server = [
        f"interface: {address}",
        f"port: {port}",
        f"outgoing-interface: {address}",
        "do-ip6: no",
        "access-control: 127.0.0.0/8 allow",
        'chroot: ""',
        'username: ""',
        f'directory: "{workdir}"',
        f'pidfile: "{workdir / (name + ".pid")}"',
        f'logfile: "{workdir / (name + ".log")}"',
        "use-syslog: no",
        "log-time-ascii: yes",
        "verbosity: 1",
        "num-threads: 1",
        'module-config: "subnetcache iterator"',
        f"send-client-subnet: {node_address}",
        "client-subnet-always-forward: yes",
        "max-client-subnet-ipv4: 24",
        "max-client-subnet-ipv6: 56",
        "do-not-query-localhost: no",
        "qname-minimisation: no",
        "prefetch: no",
        "extended-statistics: yes",
        'local-zone: "test." nodefault',
    ]
    control = [
        "control-enable: yes",
        f'control-interface: "{workdir / (name + ".ctl")}"',
        "control-use-cert: no",
    ]
    stub = [f'name: "{ZONE}"', f"stub-addr: {node_address}@{node_port}"]
    tcp_stub = [f'name: "{TCP_ZONE}"', f"stub-addr: {node_address}@{node_port}", "stub-tcp-upstream: yes"]
    sections = [("server", server), ("remote-control", control), ("stub-zone", stub), ("stub-zone", tcp_stub)]
    return "".join(f"{section}:\n" + "".join(f"    {line}\n" for line in lines) for section, lines in sections)


class SubnetCache:
    """A running unbound subnet cache (see the module's doc); a context manager."""

    def __init__(self, workdir: Path, name: str, address: str, port: int, node: tuple[str, int]) -> None:
        self.name = name
        self.address = address
        self.port = port
        self.conf = workdir / f"{name}.conf"
        self.conf.write_text(subnet_cache_config(workdir, name, address, port, node))
        self.output = workdir / f"{name}.out"
        self.log = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def server(self) -> tuple[str, int]:
        return (self.address, self.port)

    def __enter__(self) -> SubnetCache:
        with self.output.open("ab") as out:
            self.proc = subprocess.Popen(
                ["unbound", "-d", "-c", str(self.conf)], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            until(self._answers, 20.0, f"answer from {self.name}", details=self.details)
        except BaseException:
            self.stop()  # (no __exit__ for a context that did not enter)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.details()}")
        try:  # (the node's SOA, through unbound: both are up)
            dnsclient.udp(dnsclient.query(ZONE, "SOA", rd=True), self.server, timeout=0.3)
        except OSError:
            return False
        return True

    def details(self) -> str:
        text = [p.read_text(errors="replace") for p in (self.output, self.log) if p.exists()]
        return "\n".join(text)

    def stats(self) -> dict[str, int]:
        """unbound's counters, not reset (``unbound-control stats_noreset``)."""
        out = subprocess.run(
            ["unbound-control", "-c", str(self.conf), "stats_noreset"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        counters = {}
        for line in out.splitlines():
            key, _, value = line.partition("=")
            with contextlib.suppress(ValueError):
                counters[key] = int(value)
        return counters

    def cache_answers(self) -> int:
        """How many answers it gave from its subnet cache so far."""
        return self.stats()["num.query.subnet_cache"]
