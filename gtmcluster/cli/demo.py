"""`gtmcluster demo`: run a node from the sample config and show it working with dig.

Starts a small HTTP backend for every loopback virtual server with an HTTP monitor, then
``twistd gtm`` for one member as a real process. It asks for the first wide IP from
loopback addresses that the config's regions place in different ISPs (``dig -b``) and with
EDNS client subnets, printing which virtual server and data center each asker gets; then
stops one backend and shows the answer moving away within the monitor's bound, restarts
it and shows the answer coming back. Runs until Ctrl-C (or once, with ``--once``), then
stops every process it started.
"""

from __future__ import annotations

import argparse
import io
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query

from gtmcluster.config.load import load
from gtmcluster.config.model import Config, HostPort, VirtualServer
from gtmcluster.config.problems import ConfigError
from gtmcluster.dns.zone import TYPE_A
from gtmcluster.sync import certs

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
#: seconds to wait after the node answers, for its first health verdicts
STARTUP_GRACE = 2.5


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="run a node from the sample config and show answers", description=__doc__)
    p.add_argument("--config", "-c", default="etc/cluster.yaml", metavar="FILE", help="config (default: %(default)s)")
    p.add_argument("--node", "-n", default=None, metavar="NAME", help="member to run (default: the first)")
    p.add_argument("--once", action="store_true", help="show the answers, then stop (no waiting for Ctrl-C)")
    p.set_defaults(run=run)


def twistd_command() -> list[str]:
    """twistd from this Python, whatever PATH says."""
    return [sys.executable, "-c", "from twisted.scripts.twistd import run; run()"]


def wait_until_answering(address: HostPort, zone: str, deadline: float, proc: subprocess.Popen[bytes]) -> bool:
    query = dns.message.make_query(zone, "SOA")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            dns.query.udp(query, str(address.host), port=address.port, timeout=0.3)
            return True
        except (dns.exception.Timeout, OSError):
            time.sleep(0.1)
    return False


def askers(config: Config) -> list[tuple[str, str, str | None]]:
    """(label, source address, client subnet) for the demo queries."""
    regions = sorted(config.regions.values(), key=lambda r: r.name)

    def label(address: str) -> str:
        ip = ipaddress.ip_address(address)
        inside = [r.name for r in regions if any(ip in n for n in r.networks)]
        return f"regions {', '.join(inside)}" if inside else "no region"

    out: list[tuple[str, str, str | None]] = []
    loopback = sorted(
        {n for r in regions for n in r.networks if n.version == 4 and n.subnet_of(LOOPBACK) and n.num_addresses > 1},  # type: ignore[arg-type]
        key=lambda n: int(n.network_address),
    )
    for net in loopback:
        source = str(net.network_address + 1)
        out.append((f"resolver {source} ({label(source)})", source, None))
    out.append(("resolver 127.0.0.1 (no region)", "127.0.0.1", None))
    seen: set[str] = set()
    for region in regions:
        public = [n for n in region.networks if n.version == 4 and not n.is_private and n.prefixlen <= 24]
        if public:
            subnet = f"{public[0].network_address}/24"
            if subnet not in seen:
                seen.add(subnet)
                out.append((f"client {subnet} ({label(str(public[0].network_address))})", "127.0.0.1", subnet))
    return out


def dig(server: HostPort, name: str, source: str, subnet: str | None) -> list[str]:
    cmd = ["dig", f"@{server.host}", "-p", str(server.port), "-b", source, name, "A", "+norec", "+noall", "+answer"]
    if subnet:
        cmd.append(f"+subnet={subnet}")
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    return [line for line in result.stdout.splitlines() if line and not line.startswith(";")]


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a `kill` stops the node the same way Ctrl-C does


def run(args: argparse.Namespace) -> int:
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # show progress as it happens, piped or not
    signal.signal(signal.SIGTERM, _terminate)
    try:
        config = load(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    if shutil.which("dig") is None:
        print("gtmcluster demo: 'dig' is missing; install bind9-dnsutils (make demo does)", file=sys.stderr)
        return 1
    member = config.member(args.node) if args.node else config.sync_group.members[0]
    wideip = next((w for w in config.wideips.values() if TYPE_A in w.types), None)
    if wideip is None:
        print(f"{args.config}: no wide IP of type A to show", file=sys.stderr)
        return 1
    run_dir = config.base_dir / "var" / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    config.log_dir.mkdir(parents=True, exist_ok=True)
    logfile = config.log_dir / f"{member.name}.log"
    problem = ensure_certificates(config, member.name)
    if problem:
        print(f"gtmcluster demo: {problem}", file=sys.stderr)
        return 1
    backends = Backends(config)
    proc: subprocess.Popen[bytes] | None = None
    try:
        backends.start_all()
        cmd = [
            *twistd_command(),
            "--nodaemon",
            f"--logfile={logfile}",
            f"--pidfile={run_dir / (member.name + '.pid')}",
            "gtm",
            f"--config={Path(args.config).resolve()}",
            f"--node={member.name}",
        ]
        print(f"starting {member.name} (data center {member.datacenter}); log: {logfile}")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        zone = wideip.name.split(".", 1)[1] if "." in wideip.name else wideip.name
        if not wait_until_answering(member.dns[0], zone, time.monotonic() + 20, proc):
            out = proc.stdout.read().decode(errors="replace") if proc.poll() is not None and proc.stdout else ""
            print(f"the node did not start answering on {member.dns[0]}:\n{out}", file=sys.stderr)
            return 1
        time.sleep(STARTUP_GRACE)  # let the first round of health checks land
        show(config, member.dns[0], wideip.name)
        failover(config, member.dns[0], wideip.name, backends)
        if args.once:
            return 0
        print(f"\n{member.name} keeps answering on {', '.join(map(str, member.dns))}; try:")
        print(f"  dig @{member.dns[0].host} -p {member.dns[0].port} -b 127.0.2.1 {wideip.name}")
        print(f"  tail -f {logfile}")
        print("Press Ctrl-C to stop.")
        while proc.poll() is None:
            time.sleep(0.5)
        print(f"{member.name} exited with status {proc.returncode}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping")
        return 0
    finally:
        if proc is not None:
            stop(proc)
        backends.stop_all()


def ensure_certificates(config: Config, node: str) -> str | None:
    """Create the sync group CA and *node*'s certificate where the config expects them, when
    missing (a group of one member needs none). Returns a problem, or None."""
    if len(config.sync_group.members) < 2:
        return None
    files = config.tls_for(node)
    directory = files.ca.parent
    if (files.cert.parent, files.key.parent) != (directory, directory) or files.ca.name != "ca.pem":
        if files.ca.exists() and files.cert.exists() and files.key.exists():
            return None
        return f"create the certificates first (gtmcluster certs init / issue): {files.ca}, {files.cert}"
    try:
        if not files.ca.exists():
            certs.init_ca(directory)
            print(f"created the sync group CA in {directory}")
        if not files.cert.exists() or not files.key.exists():
            certs.issue(directory, node)
            print(f"issued a certificate for {node} in {directory}")
    except certs.CertError as e:
        return str(e)
    return None


class Backends:
    """The demo's HTTP backends: one per loopback virtual server with an HTTP monitor."""

    def __init__(self, config: Config):
        self.servers = [
            vs
            for vs in config.virtual_servers.values()
            if vs.monitor is not None
            and vs.monitor.type == "http"
            and vs.address.is_loopback
            and vs.admin_state != "disabled"
        ]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, vs: VirtualServer) -> None:
        listen = f"[{vs.address}]:{vs.port}" if vs.address.version == 6 else f"{vs.address}:{vs.port}"
        self.procs[vs.name] = subprocess.Popen(
            [sys.executable, "-m", "gtmcluster.cli.backend", "--listen", listen, "--name", vs.name],
            start_new_session=True,
        )

    def start_all(self) -> None:
        for vs in self.servers:
            self.start(vs)
        if self.servers:
            print(f"started HTTP backends for {', '.join(vs.name for vs in self.servers)}")

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            stop(proc)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)


def failover(config: Config, server: HostPort, name: str, backends: Backends) -> None:
    """Stop one backend, show the answer moving away and back; print the bounds."""
    by_address = {str(vs.address): vs for vs in config.virtual_servers.values()}
    for _, source, subnet in askers(config):
        lines = dig(server, name, source, subnet)
        vs = by_address.get(lines[0].split()[-1]) if lines else None
        if vs is not None and vs in backends.servers and vs.monitor is not None:
            break
    else:
        return
    m = vs.monitor
    bound = m.interval * m.down_after + m.timeout
    print(f"\nstopping {vs.name}'s backend; resolver {source} should move within")
    print(f"  interval x down_after + timeout = {m.interval:g} x {m.down_after} + {m.timeout:g} = {bound:g} s")
    start = time.monotonic()
    backends.stop(vs.name)
    moved = wait_for_answer(server, name, source, lambda a: a != str(vs.address), start + bound + 10)
    took = time.monotonic() - start
    print(f"  -> {describe(config, moved)} after {took:.1f} s" if moved else "  -> no move within the bound")
    print(
        f"restarting {vs.name}'s backend; it should be back after up_after x interval = {m.up_after * m.interval:g} s"
    )
    start = time.monotonic()
    backends.start(vs)
    back = wait_for_answer(server, name, source, lambda a: a == str(vs.address), start + bound + 10)
    took = time.monotonic() - start
    print(f"  -> {describe(config, back)} after {took:.1f} s" if back else "  -> not back yet")


def wait_for_answer(
    server: HostPort, name: str, source: str, wanted: Callable[[str], bool], deadline: float
) -> str | None:
    while time.monotonic() < deadline:
        lines = dig(server, name, source, None)
        if lines and wanted(lines[0].split()[-1]):
            return lines[0].split()[-1]
        time.sleep(0.2)
    return None


def describe(config: Config, address: str | None) -> str:
    for vs in config.virtual_servers.values():
        if str(vs.address) == address:
            return f"{address} ({vs.name} in {vs.datacenter})"
    return address or "no answer"


def show(config: Config, server: HostPort, name: str) -> None:
    print(f"\n{name} A, asked by different LDNSes (topology):")
    for label, source, subnet in askers(config):
        lines = dig(server, name, source, subnet)
        where = ", ".join(describe(config, line.split()[-1]) for line in lines)
        via = f"dig -b {source}" + (f" +subnet={subnet}" if subnet else "")
        print(f"  {label:<48} {via:<40} -> {where or 'no answer'}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
