"""Two GTM sites and two resolvers on an emulated WAN: the multi-site proximity test's world.

`MultiSite` builds, with one `WanProcess` (namespaces ``<prefix>cnc``, ``<prefix>tel``,
``<prefix>ldns1`` and ``<prefix>ldns2`` joined by the emulator), the config of one sync group
with its certificates and zone in a work folder, and runs, each in its host's namespace:

- at each site (``cnc``, ``tel``): a GTM node (`twistd -n gtm`, member ``gtm-<site>`` of data
  center ``<SITE>``; DNS on the site's WAN address port 53, peers on port 4353, the API on
  the namespace's own 127.0.0.1:8053) and the HTTP backend of its virtual server
  ``vs-<site>`` (the site's WAN address, port 8080);
- at each LDNS (``ldns1``, ``ldns2``): `unbound` on its WAN address and 127.0.0.1, with a
  stub zone ``gslb.test`` pointing at both GTMs.

Clients (`dig`), the `gtmcluster` command line and API requests run inside the namespaces:
processes through ``ip netns exec``, API requests from a thread of this process that has
joined the namespace (`in_namespace`), which costs no process start per poll.

`running_multisite` stops every process and deletes every namespace on the way out,
failures included. Everything waits by polling with deadlines (`wait_for`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml

from gtmcluster.sync import certs
from tests.support.backends import accepts
from tests.support.nodeproc import twistd
from tests.support.poll import seconds_until
from tests.tools import wanem
from tests.tools.wanem import WanProcess

T = TypeVar("T")

POLL = 0.25
#: the status of a `dig` that got no reply
TIMEOUT = "TIMEOUT"
ZONE = "gslb.test"
WIDEIP = f"www.{ZONE}"
DNS_PORT = 53
PEER_PORT = 4353
API = ("127.0.0.1", 8053)
BACKEND_PORT = 8080
GROUP = "multisite"
SUBNET = "10.77.0.0/16"
#: site -> (WAN address, member, data center, virtual server)
SITES: dict[str, tuple[str, str, str, str]] = {
    "cnc": ("10.77.1.1", "gtm-cnc", "CNC", "vs-cnc"),
    "tel": ("10.77.2.1", "gtm-tel", "TEL", "vs-tel"),
}
#: LDNS host -> WAN address
LDNSES: dict[str, str] = {"ldns1": "10.77.101.1", "ldns2": "10.77.102.1"}
#: short timers, so that a group settles and notices a dead peer in seconds
SYNC_SETTINGS: dict[str, Any] = {
    "reconcile_interval": 2,
    "idle_timeout": 6,
    "handshake_timeout": 3,
    "cold_start_wait": 3,
    "snapshot_interval": 2,
}
#: the sites' LDNSes are on a private network (10.77/16), which a prober leaves alone unless opened
PROBER: dict[str, Any] = {
    "protocols": ["dns_dot", "udp", "tcp", "icmp"],
    "probe_interval": 10,
    "timeout": 1,
    "allow": [SUBNET],
}
MONITOR: dict[str, Any] = {"type": "http", "interval": 1, "timeout": 0.5, "down_after": 2, "up_after": 1}

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def in_namespace(namespace: str, call: Callable[[], T], timeout: float = 30.0) -> T:
    """Run *call* in a new thread that has joined network namespace *namespace* (setns(2)
    moves only the calling thread); its result, or its exception raised here."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    errno = ctypes.get_errno()
                    raise OSError(errno, f"setns into {namespace}: {os.strerror(errno)}")
            finally:
                os.close(fd)
            outcome.append((True, call()))
        except BaseException as e:
            outcome.append((False, e))

    thread = threading.Thread(target=run, name=f"netns-{namespace}", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        raise TimeoutError(f"a call in namespace {namespace} did not return within {timeout}s")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def wait_for(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    details: Callable[[], object] | None = None,
    poll: float = POLL,
) -> float:
    """Poll *condition* every *poll* s until it holds (returns the seconds it took) or fail
    saying *what* was awaited, with *details* of the last state."""
    return seconds_until(condition, timeout, what, details, poll)


@dataclass
class DigAnswer:
    """What `dig` through an LDNS got: the A records (sorted), status, and how long it took."""

    addresses: list[str]
    status: str
    seconds: float
    output: str = field(repr=False)


def zone_text(addresses: Mapping[str, str]) -> str:
    """The gslb.test zone: SOA, the two GTMs as its name servers, and their addresses."""
    lines = [
        "$TTL 60",
        f"@        IN SOA gtm-cnc.{ZONE}. hostmaster.{ZONE}. 1 3600 600 86400 1",
    ]
    lines += [f"         IN NS  {member}" for _, member, _, _ in SITES.values()]
    lines += [f"{member:<8} IN A   {addresses[site]}" for site, (_, member, _, _) in SITES.items()]
    return "\n".join(lines) + "\n"


def group_config(addresses: Mapping[str, str]) -> dict[str, Any]:
    """The one config of the group: both members, their servers, and www.gslb.test answered
    by RTT first, then topology (TEL for everybody), then global availability."""
    return {
        "sync_group": {
            "name": GROUP,
            **SYNC_SETTINGS,
            "members": [
                {
                    "name": member,
                    "datacenter": dc,
                    "peer": f"{addresses[site]}:{PEER_PORT}",
                    "dns": [f"{addresses[site]}:{DNS_PORT}"],
                    "api": f"{API[0]}:{API[1]}",
                }
                for site, (_, member, dc, _) in SITES.items()
            ],
        },
        "datacenters": [dc for _, _, dc, _ in SITES.values()],
        "monitors": {"web": MONITOR},
        "virtual_servers": {
            vs: {"address": addresses[site], "port": BACKEND_PORT, "datacenter": dc, "monitor": "web"}
            for site, (_, _, dc, vs) in SITES.items()
        },
        "topology": [{"ldns": "any", "server": "datacenter TEL", "score": 100}],
        "pools": {
            "www": {
                "members": [vs for _, _, _, vs in SITES.values()],
                "load_balancing": {"preferred": "rtt", "alternate": "topology", "fallback": "global_availability"},
                "ttl": 1,
                "rtt_tolerance": {"percent": 10},
            }
        },
        "wideips": {WIDEIP: {"type": "A", "pools": ["www"]}},
        "prober": PROBER,
        "zones": [{"origin": ZONE, "file": f"{ZONE}.zone"}],
    }


def unbound_config(workdir: Path, host: str, address: str, gtms: list[str]) -> str:
    """An unbound that listens on *address* and 127.0.0.1, answers anyone, does not validate,
    keeps answers 1 s at most, sends the gslb.test queries to *gtms* and asks the fastest one
    (90 % of the time: `fast-server-permil`); its files are in *workdir*."""
    server = [
        f"interface: {address}",
        "interface: 127.0.0.1",
        f"port: {DNS_PORT}",
        "do-ip6: no",
        "access-control: 0.0.0.0/0 allow",
        'chroot: ""',
        'username: ""',
        f'directory: "{workdir}"',
        f'pidfile: "{workdir / (host + "-unbound.pid")}"',
        f'logfile: "{workdir / (host + "-unbound.log")}"',
        "use-syslog: no",
        "log-time-ascii: yes",
        "verbosity: 1",
        "num-threads: 1",
        'module-config: "iterator"',
        "qname-minimisation: no",
        "prefetch: no",
        "cache-max-ttl: 1",
        "cache-max-negative-ttl: 1",
        "fast-server-permil: 900",
        "fast-server-num: 1",
        'local-zone: "test." nodefault',
    ]
    control = [  # for looking into a failed run: unbound-control -c <workdir>/<host>-unbound.conf ...
        "control-enable: yes",
        f'control-interface: "{workdir / (host + "-unbound.ctl")}"',
        "control-use-cert: no",
    ]
    stub = [f'name: "{ZONE}"', *(f"stub-addr: {gtm}@{DNS_PORT}" for gtm in gtms)]
    sections = [("server", server), ("remote-control", control), ("stub-zone", stub)]
    return "".join(f"{name}:\n" + "".join(f"    {line}\n" for line in lines) for name, lines in sections)


class MultiSite:
    """The WAN, the config and the processes of the multi-site test, in *workdir*."""

    def __init__(
        self,
        workdir: Path,
        prefix: str,
        delays: Mapping[tuple[str, str], float],
        hops: Mapping[tuple[str, str], int] | None = None,
    ):
        self.workdir = workdir
        self.prefix = prefix
        self.delays = dict(delays)
        self.hops = dict(hops or {})
        hosts = {site: address for site, (address, _, _, _) in SITES.items()} | dict(LDNSES)
        self.wan = WanProcess(prefix, hosts, subnet=SUBNET)
        self.addresses: dict[str, str] = dict(hosts)
        self.config_path = workdir / "cluster.yaml"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._outputs: list[IO[bytes]] = []

    # -- names --------------------------------------------------------------------------------

    @staticmethod
    def member(site: str) -> str:
        return SITES[site][1]

    @staticmethod
    def vs(site: str) -> str:
        return SITES[site][3]

    def log_path(self, site: str) -> Path:
        return self.workdir / f"{self.member(site)}.log"

    # -- building -----------------------------------------------------------------------------

    def write_config(self) -> None:
        """The group's YAML, zone file and certificates (CA and one per member) in workdir."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / f"{ZONE}.zone").write_text(zone_text(self.addresses))
        self.config_path.write_text(yaml.safe_dump(group_config(self.addresses), sort_keys=False))
        certs.init_ca(self.workdir / "certs")
        for _, member, _, _ in SITES.values():
            certs.issue(self.workdir / "certs", member)

    def start(self, timeout: float = 30.0) -> None:
        """Build the WAN (with its delays and hops) and start every process; return once each answers.
        The backends come first, so that the nodes' first health verdicts are "up"."""
        self.write_config()
        self.wan.start()
        self.set_delays(self.delays)
        for (a, b), count in self.hops.items():
            self.wan.set_hops(a, b, count)
        for site, (address, _, _, vs) in SITES.items():
            backend = [sys.executable, "-m", "gtmcluster.cli.backend", "--listen", f"{address}:{BACKEND_PORT}"]
            self._spawn(f"backend-{site}", site, [*backend, "--name", vs])
        for site in SITES:
            self._wait_process(f"backend-{site}", site, partial(self._backend_accepts, site), timeout)
        for site, (_, member, _, _) in SITES.items():
            node = [*twistd(), "--nodaemon", f"--logfile={self.log_path(site)}"]
            node += [f"--pidfile={self.workdir / (member + '.pid')}", "gtm", f"--config={self.config_path}"]
            self._spawn(member, site, [*node, f"--node={member}"])
        gtms = [self.addresses[site] for site in SITES]
        for host, address in LDNSES.items():
            conf = self.workdir / f"{host}-unbound.conf"
            conf.write_text(unbound_config(self.workdir, host, address, gtms))
            self._spawn(f"unbound-{host}", host, ["unbound", "-d", "-c", str(conf)])
        for site in SITES:
            self._wait_process(self.member(site), site, partial(self._node_answers, site), timeout)
        for host in LDNSES:
            self._wait_process(f"unbound-{host}", host, partial(self._unbound_answers, host), timeout)

    def _backend_accepts(self, site: str) -> bool:
        return in_namespace(self.wan.namespace(site), partial(accepts, self.addresses[site], BACKEND_PORT, 0.5))

    def _node_answers(self, site: str) -> bool:
        return self.status(site) is not None

    def _unbound_answers(self, host: str) -> bool:
        return self.dig(host, "id.server", "TXT", "CH").status != TIMEOUT

    def _spawn(self, name: str, host: str, argv: list[str]) -> None:
        output = (self.workdir / f"{name}.out").open("ab")
        self._outputs.append(output)
        self.procs[name] = self.wan.popen(
            host, argv, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir
        )

    def _wait_process(self, name: str, host: str, ready: Callable[[], bool], timeout: float) -> None:
        proc = self.procs[name]

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"{name} (in {host}) exited with {proc.returncode}:\n{self.output(name)}")
            return ready()

        wait_for(up, timeout, f"answer from {name} in {host}", lambda: self.output(name))

    def output(self, name: str) -> str:
        """What process *name* wrote to stdout and stderr."""
        path = self.workdir / f"{name}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_text(self, site: str) -> str:
        """The GTM node's twistd log at *site*."""
        path = self.log_path(site)
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        """SIGTERM every process (SIGKILL after 10 s), then stop the WAN, which deletes the
        namespaces and anything left running in them."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for output in self._outputs:
            output.close()
        self.wan.close()

    # -- the WAN ------------------------------------------------------------------------------

    def set_delays(self, delays: Mapping[tuple[str, str], float]) -> None:
        """One-way delays, the same both ways, per pair of hosts."""
        for (a, b), seconds in delays.items():
            self.wan.set_delay(a, b, seconds)

    def cut_off(self, host: str) -> None:
        """Cut every link of *host*, both ways: it can reach nobody and nobody reaches it."""
        for other in self.addresses:
            if other != host:
                self.wan.cut(host, other)

    # -- asking -------------------------------------------------------------------------------

    def status(self, site: str) -> dict[str, Any] | None:
        """GET /api/v1/status of the node at *site* (from inside its namespace); None when it
        does not answer."""

        def get() -> dict[str, Any]:
            url = f"http://{API[0]}:{API[1]}/api/v1/status"
            with urllib.request.urlopen(url, timeout=2) as response:
                body: dict[str, Any] = json.loads(response.read())
            return body

        try:
            return in_namespace(self.wan.namespace(site), get)
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def dig(
        self,
        host: str,
        name: str = WIDEIP,
        rdtype: str = "A",
        rdclass: str = "IN",
        server: str = "127.0.0.1",
        wait: int = 3,
    ) -> DigAnswer:
        """`dig @SERVER NAME CLASS TYPE` inside *host* (through its unbound by default), one try
        of *wait* seconds."""
        argv = ["dig", f"@{server}", name, rdclass, rdtype, f"+time={wait}", "+tries=1"]
        argv += ["+noall", "+answer", "+comments"]
        start = time.monotonic()
        out = self.wan.run(host, argv, capture_output=True, text=True, timeout=30)
        seconds = time.monotonic() - start
        status = TIMEOUT
        addresses = []
        for line in out.stdout.splitlines():
            if "status:" in line:
                status = line.split("status:", 1)[1].split(",", 1)[0].strip()
            fields = line.split()
            if not line.startswith(";") and len(fields) == 5 and fields[3] == "A":
                addresses.append(fields[4])
        return DigAnswer(sorted(addresses), status, seconds, out.stdout + out.stderr)

    def answer(self, host: str) -> str | None:
        """The virtual server (vs-cnc or vs-tel) a client behind LDNS *host* is sent to now,
        or the odd answer as it came (None: no single address)."""
        got = self.dig(host)
        if len(got.addresses) != 1:
            return None
        by_address = {self.addresses[site]: self.vs(site) for site in SITES}
        return by_address.get(got.addresses[0], got.addresses[0])

    def cli(self, site: str, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """``gtmcluster ARGS --config ... --node <member>`` inside *site*'s namespace."""
        command, *rest = args
        argv = [*gtmcluster_command(), command, "--config", str(self.config_path), "--node", self.member(site), *rest]
        return self.wan.run(site, argv, capture_output=True, text=True, timeout=timeout, cwd=self.workdir)


def gtmcluster_command() -> list[str]:
    """The `gtmcluster` program of this environment (its console script, when installed)."""
    script = Path(sys.executable).parent / "gtmcluster"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gtmcluster.cli.main"]


@contextmanager
def running_multisite(
    workdir: Path,
    prefix: str,
    delays: Mapping[tuple[str, str], float],
    hops: Mapping[tuple[str, str], int] | None = None,
) -> Iterator[MultiSite]:
    """A started `MultiSite` with *delays* (one way, both ways alike) and *hops* (the TTL
    decrement, both ways) on its links from the start; every process stopped and every
    namespace deleted afterwards."""
    world = MultiSite(workdir, prefix, delays, hops)
    try:
        world.start()
        yield world
    finally:
        with contextlib.suppress(Exception):
            world.close()
        wanem.cleanup(prefix)


def stop_all_within(world: MultiSite, bound: float) -> None:
    """SIGTERM to every site's GTM at once: each exits cleanly within *bound* seconds (the
    times are printed)."""
    procs = {site: world.procs[world.member(site)] for site in SITES}
    assert all(proc.poll() is None for proc in procs.values()), "a GTM exited before the SIGTERM"
    start = time.monotonic()
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
    took: dict[str, float] = {}
    for site, proc in procs.items():
        try:
            proc.wait(timeout=bound + 10)
        finally:
            took[site] = time.monotonic() - start
    figures = ", ".join(f"{world.member(site)} {seconds:.2f}s" for site, seconds in took.items())
    print(f"\nSIGTERM during the partition: exited after {figures}; load {os.getloadavg()[0]:.2f}")
    for site, seconds in took.items():
        assert procs[site].returncode in (0, -signal.SIGTERM), (site, procs[site].returncode)
        assert seconds <= bound, f"{world.member(site)} took {seconds:.2f}s to exit after SIGTERM"
