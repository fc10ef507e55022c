"""Two data centers, a client with a browser and its resolver elsewhere, on an emulated WAN:
the world of the real-browser tests of client proximity (issue 36).

`RumWorld` builds, with one `WanProcess` (namespaces ``<prefix>dc1``, ``<prefix>dc2``,
``<prefix>client`` and ``<prefix>ldns`` on 10.36.0.0/16), and runs in them:

- at each data center (``dc1``, ``dc2``): a `webobject` server on ``<dc address>:8080``
  answering ``GET /object`` (``ok dc1``: a few bytes, ``Timing-Allow-Origin: *``, CORS open): the DC's
  measurement URL and its virtual server's backend. The DC's address is free on ports 53
  (DNS), 4353 (peers) and 8036 (the RUM listener) and the namespace's 127.0.0.1:8053 (API)
  for a GTM node, which `start_gtms` starts with a config the test gives (`base_config` is
  a working one to extend; `with_rum` adds ``rum:`` and each member's ``rum:`` listener);
- at ``client`` (10.36.3.1, so its subnet is 10.36.3.0/24): a `webobject` server on
  ``10.36.3.1:8000`` serving the test pages and taking their reports (``POST /collect``),
  and headless Chromium, one per page (`load`), whose resolver is the LDNS
  (``/etc/netns/<prefix>client/resolv.conf``);
- at ``ldns`` (10.36.4.1): `unbound`, which answers the names ``dc1.web.test`` and
  ``dc2.web.test`` itself (the DCs' addresses) and sends queries for ``gslb.test`` to both
  DCs' GTMs (a stub zone), with EDNS Client Subnet (the client's /24) or without
  (``ecs=``); it logs every reply (`unbound_log`).

Round-trip times (`set_rtt`, `swap`; each way half of it) start as `RTTS`: the client is
20 ms from dc1 and 120 ms from dc2, the LDNS the other way round (120 and 20 ms), so the
LDNS's RTTs and the client's disagree. They change at run time without restarting anything.

`running_rumworld` stops every process, deletes every namespace and the resolv.conf on the
way out, failures included; `require_rumworld` skips (or, in CI, fails) without what it needs.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from gtmcluster.sync import certs
from tests.conftest import IN_CI
from tests.support import nsbrowser
from tests.support.backends import accepts
from tests.support.multisite import gtmcluster_command, in_namespace, wait_for
from tests.support.nodeproc import twistd
from tests.tools import wanem
from tests.tools.wanem import WanProcess

SUBNET = "10.36.0.0/16"
#: host -> WAN address
HOSTS: dict[str, str] = {"dc1": "10.36.1.1", "dc2": "10.36.2.1", "client": "10.36.3.1", "ldns": "10.36.4.1"}
DCS = ("dc1", "dc2")
#: DC host -> (data center name, GTM member, virtual server)
SITES: dict[str, tuple[str, str, str]] = {"dc1": ("DC1", "gtm-dc1", "vs-dc1"), "dc2": ("DC2", "gtm-dc2", "vs-dc2")}
CLIENT_SUBNET = "10.36.3.0/24"
ZONE = "gslb.test"
WIDEIP = f"www.{ZONE}"
DNS_PORT = 53
PEER_PORT = 4353
API = ("127.0.0.1", 8053)
RUM_PORT = 8036
WEB_PORT = 8080
PAGE_PORT = 8000
#: names the LDNS answers itself: each DC's web server
WEB_NAMES = {dc: f"{dc}.web.test" for dc in DCS}
#: round-trip times at the start (seconds; each way half): the client and the LDNS disagree
RTTS: dict[tuple[str, str], float] = {
    ("client", "dc1"): 0.020,
    ("client", "dc2"): 0.120,
    ("ldns", "dc1"): 0.120,
    ("ldns", "dc2"): 0.020,
    ("client", "ldns"): 0.010,
    ("dc1", "dc2"): 0.010,
}
SYNC_SETTINGS: dict[str, Any] = {
    "reconcile_interval": 2,
    "idle_timeout": 6,
    "handshake_timeout": 3,
    "cold_start_wait": 3,
    "snapshot_interval": 2,
}
MONITOR: dict[str, Any] = {"type": "http", "interval": 1, "timeout": 0.5, "down_after": 2, "up_after": 1}
MONITOR_PATH = "/object"
#: what a dig that got no reply reports as its status
TIMEOUT = "TIMEOUT"


def require_rumworld() -> None:
    """Skip (fail in CI, ``CI=true``) unless root, /dev/net/tun, ip, unbound, dig and
    chromium are there."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces and TUN devices)")
    if not os.path.exists("/dev/net/tun"):
        missing.append("/dev/net/tun (TUN support)")
    for tool, package in (
        ("ip", "iproute2"),
        ("unbound", "unbound"),
        ("dig", "bind9-dnsutils"),
        ("chromium", "chromium"),
    ):
        if shutil.which(tool) is None:
            missing.append(f"`{tool}` (Debian package {package}; make test installs it)")
    if missing:
        reason = "the real-browser WAN test needs " + ", ".join(missing)
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


def unbound_config(workdir: Path, address: str, gtms: Sequence[str], ecs: bool) -> str:
    """The LDNS: on *address*, answering anyone, no validation, answers kept 1 s at most,
    ``dc*.web.test`` answered locally, ``gslb.test`` asked of *gtms* (with the client's /24
    as EDNS Client Subnet when *ecs*); every reply logged."""
    server = [
        f"interface: {address}",
        f"port: {DNS_PORT}",
        f"outgoing-interface: {address}",
        "do-ip6: no",
        "access-control: 0.0.0.0/0 allow",
        'chroot: ""',
        'username: ""',
        f'directory: "{workdir}"',
        f'pidfile: "{workdir / "unbound.pid"}"',
        f'logfile: "{workdir / "unbound.log"}"',
        "use-syslog: no",
        "log-time-ascii: yes",
        "log-replies: yes",
        "log-local-actions: yes",
        "verbosity: 1",
        "num-threads: 1",
        "qname-minimisation: no",
        "prefetch: no",
        "cache-max-ttl: 1",
        "cache-max-negative-ttl: 1",
        'local-zone: "test." nodefault',
        'local-zone: "web.test." static',
        *(f'local-data: "{name}. 1 IN A {HOSTS[dc]}"' for dc, name in WEB_NAMES.items()),
    ]
    if ecs:
        server += [
            'module-config: "subnetcache iterator"',
            *(f"send-client-subnet: {gtm}" for gtm in gtms),
            "client-subnet-always-forward: yes",
            "max-client-subnet-ipv4: 24",
        ]
    else:
        server.append('module-config: "iterator"')
    control = ["control-enable: yes", f'control-interface: "{workdir / "unbound.ctl"}"', "control-use-cert: no"]
    stub = [f'name: "{ZONE}"', *(f"stub-addr: {gtm}@{DNS_PORT}" for gtm in gtms)]
    sections = [("server", server), ("remote-control", control), ("stub-zone", stub)]
    return "".join(f"{name}:\n" + "".join(f"    {line}\n" for line in lines) for name, lines in sections)


def zone_text() -> str:
    """gslb.test: SOA, both GTMs as its name servers, and their addresses."""
    lines = ["$TTL 60", f"@        IN SOA gtm-dc1.{ZONE}. hostmaster.{ZONE}. 1 3600 600 86400 1"]
    lines += [f"         IN NS  {member}" for _, member, _ in SITES.values()]
    lines += [f"{member:<8} IN A   {HOSTS[dc]}" for dc, (_, member, _) in SITES.items()]
    return "\n".join(lines) + "\n"


def base_config() -> dict[str, Any]:
    """A working config of the two GTMs (no ``rum:`` yet): members gtm-dc1 (DC1) and gtm-dc2
    (DC2), each DC's web server as its virtual server (monitored on /object), and
    www.gslb.test by rtt, then global availability; probers allowed on the WAN subnet."""
    return {
        "sync_group": {
            "name": "rumworld",
            **SYNC_SETTINGS,
            "members": [
                {
                    "name": member,
                    "datacenter": name,
                    "peer": f"{HOSTS[dc]}:{PEER_PORT}",
                    "dns": [f"{HOSTS[dc]}:{DNS_PORT}"],
                    "api": f"{API[0]}:{API[1]}",
                }
                for dc, (name, member, _) in SITES.items()
            ],
        },
        "datacenters": [name for name, _, _ in SITES.values()],
        "monitors": {"web": {**MONITOR, "path": MONITOR_PATH}},
        "virtual_servers": {
            vs: {"address": HOSTS[dc], "port": WEB_PORT, "datacenter": name, "monitor": "web"}
            for dc, (name, _, vs) in SITES.items()
        },
        "pools": {
            "www": {
                "members": [vs for _, _, vs in SITES.values()],
                "load_balancing": {"preferred": "rtt", "fallback": "global_availability"},
                "ttl": 1,
            }
        },
        "wideips": {WIDEIP: {"type": "A", "pools": ["www"]}},
        "prober": {"protocols": ["udp", "tcp", "icmp"], "probe_interval": 10, "timeout": 1, "allow": [SUBNET]},
        "zones": [{"origin": ZONE, "file": f"{ZONE}.zone"}],
    }


def with_rum(config: Mapping[str, Any], min_samples: int = 1, **rum: Any) -> dict[str, Any]:
    """*config* (a `base_config`) with ``rum:`` on: one-use names under gslb.test, each DC's
    object as its measurement URL, the WAN subnet allowed (it is private), *min_samples*, and
    *rum*'s other keys; each member's ``rum:`` listener on its DC address, port `RUM_PORT`."""
    by_name = {name: dc for dc, (name, _, _) in SITES.items()}
    out = copy.deepcopy(dict(config))
    out["rum"] = {
        "zone": ZONE,
        "targets": {name: RumWorld.object_url(dc) for name, dc in by_name.items()},
        "allow": [SUBNET],
        "min_samples": min_samples,
        **rum,
    }
    for member in out["sync_group"]["members"]:
        member["rum"] = RumWorld.rum_listen(by_name[member["datacenter"]])
    return out


@dataclass
class DigAnswer:
    """What `dig` got: the A records (sorted) and the status (`TIMEOUT` without a reply)."""

    addresses: list[str]
    status: str
    output: str = field(repr=False)


class RumWorld:
    """The WAN, the servers and the browser of the real-browser tests, in *workdir*."""

    def __init__(self, workdir: Path, prefix: str, ecs: bool = False) -> None:
        self.workdir = workdir
        self.prefix = prefix
        self.ecs = ecs
        self.wan = WanProcess(prefix, HOSTS, subnet=SUBNET)
        self.pages = workdir / "pages"
        self.collect = workdir / "collected.jsonl"
        self.config_path = workdir / "cluster.yaml"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._outputs: list[IO[bytes]] = []
        self._rtts: dict[tuple[str, str], float] = {}
        self._netns_etc = Path("/etc/netns") / f"{prefix}client"

    # -- names ----------------------------------------------------------------------------

    @staticmethod
    def address(host: str) -> str:
        return HOSTS[host]

    def namespace(self, host: str) -> str:
        return self.prefix + host

    @staticmethod
    def object_url(dc: str, by_name: bool = True) -> str:
        """The DC's measurement URL, by the name the LDNS answers or by address."""
        return f"http://{WEB_NAMES[dc] if by_name else HOSTS[dc]}:{WEB_PORT}/object"

    @staticmethod
    def rum_listen(dc: str) -> str:
        """``ADDR:PORT`` for the member's ``rum:`` at *dc*."""
        return f"{HOSTS[dc]}:{RUM_PORT}"

    @staticmethod
    def page_origin() -> str:
        return f"http://{HOSTS['client']}:{PAGE_PORT}"

    # -- life ------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Build the WAN with `RTTS` and start the web servers and unbound; return once each
        answers."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pages.mkdir(parents=True, exist_ok=True)
        self._netns_etc.mkdir(parents=True, exist_ok=True)
        (self._netns_etc / "resolv.conf").write_text(f"nameserver {HOSTS['ldns']}\noptions timeout:2 attempts:2\n")
        self.wan.start()
        for (a, b), seconds in RTTS.items():
            self.set_rtt(a, b, seconds)
        webobject = [sys.executable, str(Path(wanem.__file__).with_name("webobject.py"))]
        for dc in DCS:
            self._spawn(f"web-{dc}", dc, [*webobject, "--listen", f"{HOSTS[dc]}:{WEB_PORT}", "--name", dc])
        page = ["--listen", f"{HOSTS['client']}:{PAGE_PORT}", "--root", str(self.pages), "--collect", str(self.collect)]
        self._spawn("web-client", "client", [*webobject, *page])
        conf = self.workdir / "unbound.conf"
        conf.write_text(unbound_config(self.workdir, HOSTS["ldns"], [HOSTS[dc] for dc in DCS], self.ecs))
        self._spawn("unbound", "ldns", ["unbound", "-d", "-c", str(conf)])
        for name, host, port in (("web-dc1", "dc1", WEB_PORT), ("web-dc2", "dc2", WEB_PORT)):
            self._wait(name, partial(self._accepts, host, port), timeout)
        self._wait("web-client", partial(self._accepts, "client", PAGE_PORT), timeout)
        self._wait("unbound", lambda: self.dig(WEB_NAMES["dc1"]).status != TIMEOUT, timeout)

    def _accepts(self, host: str, port: int) -> bool:
        return in_namespace(self.namespace(host), partial(accepts, HOSTS[host], port, 0.5))

    def _spawn(self, name: str, host: str, argv: list[str]) -> None:
        output = (self.workdir / f"{name}.out").open("ab")
        self._outputs.append(output)
        self.procs[name] = self.wan.popen(
            host, argv, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir
        )

    def _wait(self, name: str, ready: Callable[[], bool], timeout: float) -> None:
        proc = self.procs[name]

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{self.output(name)}")
            return ready()

        wait_for(up, timeout, f"answer from {name}", lambda: self.output(name))

    def output(self, name: str) -> str:
        """What process *name* (web-dc1, unbound, gtm-dc1, ...) wrote to stdout and stderr."""
        path = self.workdir / f"{name}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def unbound_log(self) -> str:
        """unbound's log: a line per reply (``info: CLIENT NAME TYPE CLASS RCODE ...``)."""
        path = self.workdir / "unbound.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        """SIGTERM every process (SIGKILL after 10 s), stop the WAN (it deletes the
        namespaces) and remove the client's resolv.conf."""
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
        shutil.rmtree(self._netns_etc, ignore_errors=True)
        with contextlib.suppress(OSError):
            self._netns_etc.parent.rmdir()  # /etc/netns, when nothing else is there

    # -- the WAN ---------------------------------------------------------------------------

    def set_rtt(self, a: str, b: str, seconds: float) -> None:
        """The round-trip time between hosts *a* and *b* (half each way), at once."""
        self.wan.set_delay(a, b, seconds / 2)
        self._rtts[a, b] = self._rtts[b, a] = seconds

    def rtt(self, a: str, b: str) -> float:
        return self._rtts.get((a, b), 0.0)

    def swap(self, host: str = "client") -> None:
        """Exchange *host*'s RTTs to dc1 and dc2 (the nearer DC becomes the farther)."""
        to_dc1, to_dc2 = self.rtt(host, "dc1"), self.rtt(host, "dc2")
        self.set_rtt(host, "dc1", to_dc2)
        self.set_rtt(host, "dc2", to_dc1)

    # -- the browser -----------------------------------------------------------------------

    def load(
        self, body: str, expect: Sequence[str] = (), wait_page: bool = False, deadline_ms: int = 15_000
    ) -> nsbrowser.Report:
        """Load a page of *body* (HTML) in a fresh headless Chromium in the client namespace,
        from `page_origin`; its report once every URL part in *expect* has Resource Timing
        (see `nsbrowser.load_page`)."""
        return nsbrowser.load_page(
            self.namespace("client"),
            self.page_origin(),
            self.pages,
            self.collect,
            self.workdir,
            body,
            expect,
            wait_page,
            deadline_ms,
        )

    # -- DNS -------------------------------------------------------------------------------

    def dig(self, name: str, rdtype: str = "A", host: str = "client", server: str | None = None) -> DigAnswer:
        """`dig @SERVER NAME TYPE` from *host* (the LDNS by default), one try of 3 s."""
        argv = ["dig", f"@{server or HOSTS['ldns']}", name, rdtype, "+time=3", "+tries=1", "+noall", "+answer"]
        out = self.wan.run(host, [*argv, "+comments"], capture_output=True, text=True, timeout=30)
        status, addresses = TIMEOUT, []
        for line in out.stdout.splitlines():
            if "status:" in line:
                status = line.split("status:", 1)[1].split(",", 1)[0].strip()
            fields = line.split()
            if not line.startswith(";") and len(fields) == 5 and fields[3] == rdtype:
                addresses.append(fields[4])
        return DigAnswer(sorted(addresses), status, out.stdout + out.stderr)

    def answer(self, name: str = WIDEIP) -> str | None:
        """The DC host (dc1, dc2) the LDNS's answer for *name* sends the client to, the odd
        answer as it came, or None without a single address."""
        got = self.dig(name)
        if len(got.addresses) != 1:
            return None
        by_address = {HOSTS[dc]: dc for dc in DCS}
        return by_address.get(got.addresses[0], got.addresses[0])

    # -- the GTMs --------------------------------------------------------------------------

    def start_gtms(self, config: Mapping[str, Any], timeout: float = 30.0) -> None:
        """Write *config* (`base_config`, extended), the zone and the certificates, and run
        ``twistd -n gtm`` for gtm-dc1 in dc1 and gtm-dc2 in dc2; return once both answer on
        their API."""
        (self.workdir / f"{ZONE}.zone").write_text(zone_text())
        self.config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        certs.init_ca(self.workdir / "certs")
        for _, member, _ in SITES.values():
            certs.issue(self.workdir / "certs", member)
        for dc, (_, member, _) in SITES.items():
            node = [*twistd(), "--nodaemon", f"--logfile={self.workdir / (member + '.log')}"]
            node += [f"--pidfile={self.workdir / (member + '.pid')}", "gtm", f"--config={self.config_path}"]
            self._spawn(member, dc, [*node, f"--node={member}"])
        for dc, (_, member, _) in SITES.items():
            self._wait(member, partial(self._answers_api, dc), timeout)

    def _answers_api(self, dc: str) -> bool:
        return self.status(dc) is not None

    def status(self, dc: str) -> dict[str, Any] | None:
        """GET /api/v1/status of the GTM at *dc*; None when it does not answer."""

        def get() -> dict[str, Any]:
            with urllib.request.urlopen(f"http://{API[0]}:{API[1]}/api/v1/status", timeout=2) as response:
                body: dict[str, Any] = json.loads(response.read())
            return body

        try:
            return in_namespace(self.namespace(dc), get)
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def cli(self, dc: str, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """``gtmcluster COMMAND --config ... --node <member> ARGS`` inside *dc*'s namespace."""
        command, *rest = args
        argv = [*gtmcluster_command(), command, "--config", str(self.config_path), "--node", SITES[dc][1], *rest]
        return self.wan.run(dc, argv, capture_output=True, text=True, timeout=timeout, cwd=self.workdir)

    def gtm_log(self, dc: str) -> str:
        path = self.workdir / f"{SITES[dc][1]}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def running_rumworld(workdir: Path, prefix: str, ecs: bool = False) -> Iterator[RumWorld]:
    """A started `RumWorld`; every process stopped, every namespace deleted afterwards."""
    world = RumWorld(workdir, prefix, ecs)
    try:
        world.start()
        yield world
    finally:
        with contextlib.suppress(Exception):
            world.close()
        wanem.cleanup(prefix)
        shutil.rmtree(Path("/etc/netns") / f"{prefix}client", ignore_errors=True)
