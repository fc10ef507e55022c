"""The chaos run's world: three GTM sites and a client on the emulated WAN, and their processes.

One `WanProcess` joins the namespaces ``<prefix>gtm-cnc``, ``<prefix>gtm-tel``,
``<prefix>gtm-cmcc`` (one per data center) and ``<prefix>client`` (subnet 10.98.0.0/16). In
each data center's namespace run a GTM node (`twistd -n gtm`; DNS on its WAN address port 53,
peers on 4353 over mutual TLS with certificates from `gtmcluster.sync.certs`, the API on the
namespace's own 127.0.0.1:8053) and the HTTP backend of its virtual server (its WAN address,
port 8080). Every node monitors every server, so a node checks the other data centers'
servers across the WAN. The client namespace holds the load generator.

Nodes run in sessions of their own, so `kill_node` SIGKILLs the whole process group (the
`faketime` wrapper and twistd under it alike); a restarted node keeps its state directory.
`skew` starts a node under ``faketime -m -f +Ns`` (Debian package faketime).

API requests run in a thread of this process that joined the node's namespace
(`tests.support.multisite.in_namespace`), so they never cross the WAN: the observer sees
every live node whatever the nemesis does to the links.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from functools import partial
from itertools import combinations
from pathlib import Path
from typing import IO, Any

import yaml

from gtmcluster.sync import certs
from tests.support.backends import accepts
from tests.support.multisite import in_namespace, wait_for
from tests.support.nodeproc import twistd
from tests.tools import wanem
from tests.tools.wanem import WanProcess

ROOT = Path(__file__).resolve().parents[2]
GROUP = "chaos"
ZONE = "chaos.test"
WIDEIP = f"www.{ZONE}"
SUBNET = "10.98.0.0/16"
DNS_PORT = 53
PEER_PORT = 4353
API = ("127.0.0.1", 8053)
#: the API's bearer token (the admin writer's POSTs need it)
API_TOKEN = "chaos-run-api-token-0123456789"
BACKEND_PORT = 8080
#: node (member and WAN host) -> (WAN address, data center, its virtual server)
NODES: dict[str, tuple[str, str, str]] = {
    "gtm-cnc": ("10.98.1.1", "CNC", "vs-cnc"),
    "gtm-tel": ("10.98.2.1", "TEL", "vs-tel"),
    "gtm-cmcc": ("10.98.3.1", "CMCC", "vs-cmcc"),
}
CLIENT = "client"
CLIENT_ADDRESS = "10.98.100.1"
#: servers only the admin writer touches: in no pool, no monitor, so answers never depend on them
ADMIN_SERVERS = [f"vs-admin-{i}" for i in range(1, 7)]
#: the server only the crash_after_ack episodes write, so that their last write decides its end state
DURABLE_SERVER = "vs-durable"
#: one-way delays: between data centers, and from the client to each
DELAY_BETWEEN_SITES = 0.010
DELAY_CLIENT = 0.002
#: short timers, so that the group notices and repairs within seconds
SYNC_SETTINGS: dict[str, Any] = {
    "reconcile_interval": 2,
    "idle_timeout": 6,
    "handshake_timeout": 3,
    "cold_start_wait": 3,
    "snapshot_interval": 2,
}
MONITOR: dict[str, Any] = {
    "type": "http",
    "interval": 2,
    "timeout": 2,
    "up_after": 2,
    "down_after": 3,
    "path": "/",
    "expect_status": [200],
}
#: the failover bound the README states: interval x down_after + timeout
MONITOR_BOUND = MONITOR["interval"] * MONITOR["down_after"] + MONITOR["timeout"]
PERSISTENCE_TTL = 60


def servers() -> dict[str, str]:
    """Every virtual server -> its address (the monitored ones and the admin ones)."""
    out = {vs: address for address, _, vs in NODES.values()}
    out |= {vs: f"192.0.2.{i}" for i, vs in enumerate([*ADMIN_SERVERS, DURABLE_SERVER], 1)}
    return out


def group_config() -> dict[str, Any]:
    """The group's one config: three members, their monitored servers in one pool answered
    round robin with LDNS persistence, and the admin-only servers."""
    dcs = [dc for _, dc, _ in NODES.values()]
    vservers: dict[str, Any] = {
        vs: {"address": address, "port": BACKEND_PORT, "datacenter": dc, "monitor": "web"}
        for address, dc, vs in NODES.values()
    }
    for i, vs in enumerate([*ADMIN_SERVERS, DURABLE_SERVER]):
        vservers[vs] = {"address": servers()[vs], "port": 80, "datacenter": dcs[i % len(dcs)]}
    return {
        "sync_group": {
            "name": GROUP,
            **SYNC_SETTINGS,
            "members": [
                {
                    "name": node,
                    "datacenter": dc,
                    "peer": f"{address}:{PEER_PORT}",
                    "dns": [f"{address}:{DNS_PORT}"],
                    "api": f"{API[0]}:{API[1]}",
                }
                for node, (address, dc, _) in NODES.items()
            ],
        },
        "datacenters": dcs,
        "monitors": {"web": MONITOR},
        "virtual_servers": vservers,
        "pools": {
            "www": {
                "members": [vs for _, _, vs in NODES.values()],
                "load_balancing": {"preferred": "round_robin"},
                "ttl": 5,
            }
        },
        "wideips": {
            WIDEIP: {"type": "A", "pools": ["www"], "persistence": {"ttl": PERSISTENCE_TTL, "ipv4_prefix": 24}}
        },
        "zones": [{"origin": ZONE, "file": f"{ZONE}.zone"}],
        "api": {"token": API_TOKEN},
        # the load generator's client subnets count (it is the group's resolver)
        "dns_server": {"ecs_trusted": [SUBNET]},
    }


def zone_text() -> str:
    lines = ["$TTL 60", f"@ IN SOA {next(iter(NODES))}.{ZONE}. hostmaster.{ZONE}. 1 3600 600 86400 5"]
    lines += [f"  IN NS {node}" for node in NODES]
    lines += [f"{node} IN A {address}" for node, (address, _, _) in NODES.items()]
    return "\n".join(lines) + "\n"


def faketime_works(skew: int = 30) -> str | None:
    """None when `faketime` shifts Python's clock by *skew* seconds, else why not."""
    if shutil.which("faketime") is None:
        return "`faketime` is not installed (Debian package faketime; make chaos installs it)"
    argv = ["faketime", "-m", "-f", f"{skew:+d}s", sys.executable, "-c", "import time; print(time.time())"]
    before = time.time()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    try:
        shifted = float(out.stdout.strip()) - before
    except ValueError:
        return f"faketime did not run Python: {out.stderr.strip()}"
    if abs(shifted - skew) > 5:
        return f"faketime shifted Python's clock by {shifted:.1f} s, not {skew} s"
    return None


class ChaosWorld:
    """The WAN, the config and the processes of one chaos run, in *workdir*."""

    def __init__(self, workdir: Path, prefix: str):
        self.workdir = workdir
        self.prefix = prefix
        hosts = {node: address for node, (address, _, _) in NODES.items()} | {CLIENT: CLIENT_ADDRESS}
        self.wan = WanProcess(prefix, hosts, subnet=SUBNET)
        self.config_path = workdir / "cluster.yaml"
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}
        self.backends: dict[str, subprocess.Popen[bytes]] = {}
        self.skews: dict[str, int] = dict.fromkeys(NODES, 0)
        self.loadgen: subprocess.Popen[bytes] | None = None
        self._outputs: list[IO[bytes]] = []

    # -- building ---------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Files, WAN, backends, then nodes; returns once the group is connected and agrees."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / f"{ZONE}.zone").write_text(zone_text())
        self.config_path.write_text(yaml.safe_dump(group_config(), sort_keys=False))
        certs.init_ca(self.workdir / "certs")
        for node in NODES:
            certs.issue(self.workdir / "certs", node)
        self.wan.start()
        for a, b in combinations(NODES, 2):
            self.wan.set_delay(a, b, DELAY_BETWEEN_SITES)
        for node in NODES:
            self.wan.set_delay(CLIENT, node, DELAY_CLIENT)
        for node in NODES:
            self.start_backend(node_server(node))
        for node in NODES:
            self.start_node(node)
        for node in NODES:
            self.wait_node(node, timeout)
        self.wait_converged(timeout)

    def _spawn(self, name: str, host: str, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        output = (self.workdir / f"{name}.out").open("ab")
        self._outputs.append(output)
        return self.wan.popen(
            host, argv, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir, **kwargs
        )

    def start_node(self, node: str, skew: int | None = None) -> None:
        """Start *node* (again), under `faketime` when its clock is skewed (*skew* seconds;
        None keeps the node's skew)."""
        if skew is not None:
            self.skews[node] = skew
        pidfile = self.workdir / f"{node}.pid"
        pidfile.unlink(missing_ok=True)  # a SIGKILLed twistd leaves it behind
        argv = [*twistd(), "--nodaemon", f"--logfile={self.log_path(node)}", f"--pidfile={pidfile}"]
        argv += ["gtm", f"--config={self.config_path}", f"--node={node}"]
        if self.skews[node]:
            argv = ["faketime", "-m", "-f", f"{self.skews[node]:+d}s", *argv]
        self.nodes[node] = self._spawn(node, node, argv, start_new_session=True)

    def wait_node(self, node: str, timeout: float) -> None:
        proc = self.nodes[node]

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"{node} exited with {proc.returncode}:\n{self.output(node)[-4000:]}")
            return self.get(node, "/api/v1/status") is not None

        wait_for(up, timeout, f"the API of {node}", lambda: self.output(node)[-4000:])

    def wait_converged(self, timeout: float) -> None:
        """Until every node is connected to both others and their digests agree."""
        seen: dict[str, Any] = {}

        def converged() -> bool:
            seen.update({node: self.get(node, "/api/v1/status") for node in NODES})
            if any(s is None for s in seen.values()):
                return False
            connected = all(p["connected"] for s in seen.values() for p in s["peers"])
            return connected and len({s["state"]["digest"] for s in seen.values()}) == 1

        wait_for(converged, timeout, "a connected group with equal digests", lambda: json.dumps(seen)[:3000], poll=0.5)

    def kill_node(self, node: str) -> None:
        """SIGKILL the node's whole process group (no stop, no last snapshot)."""
        proc = self.nodes[node]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def alive(self, node: str) -> bool:
        return self.nodes[node].poll() is None

    def start_backend(self, vs: str) -> None:
        node = next(n for n, (_, _, v) in NODES.items() if v == vs)
        address = NODES[node][0]
        argv = [sys.executable, "-m", "gtmcluster.cli.backend", "--listen", f"{address}:{BACKEND_PORT}", "--name", vs]
        self.backends[vs] = self._spawn(f"backend-{vs}", node, argv)
        check = partial(accepts, address, BACKEND_PORT, 0.5)  # in this thread's namespace
        wait_for(lambda: in_namespace(self.wan.namespace(node), check), 20, f"backend {vs} accepting")

    def stop_backend(self, vs: str) -> None:
        proc = self.backends[vs]
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def start_loadgen(self, out: Path, rate: float, timeout: float, networks: int) -> None:
        """The load generator (`tests.chaos.loadgen`) in the client's namespace."""
        argv = [sys.executable, "-m", "tests.chaos.loadgen", "--out", str(out), "--rate", str(rate)]
        argv += ["--timeout", str(timeout), "--networks", str(networks), "--name", WIDEIP]
        argv += [f"--server={node}={address}:{DNS_PORT}" for node, (address, _, _) in NODES.items()]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        output = (self.workdir / "loadgen.out").open("ab")
        self._outputs.append(output)
        self.loadgen = self.wan.popen(CLIENT, argv, stdout=output, stderr=subprocess.STDOUT, cwd=ROOT, env=env)

    def stop_loadgen(self) -> None:
        if self.loadgen is not None and self.loadgen.poll() is None:
            self.loadgen.terminate()
            try:
                self.loadgen.wait(10)
            except subprocess.TimeoutExpired:
                self.loadgen.kill()
                self.loadgen.wait()

    # -- the WAN ----------------------------------------------------------------------------

    def heal_all(self) -> None:
        """Every link between the GTMs whole again, both ways, without loss (delays stay)."""
        for a, b in combinations(NODES, 2):
            self.wan.heal(a, b)
            self.wan.set_loss(a, b, 0.0)

    def set_loss(self, share: float) -> None:
        for a, b in combinations(NODES, 2):
            self.wan.set_loss(a, b, share)

    # -- the API ----------------------------------------------------------------------------

    def request(self, node: str, method: str, path: str, timeout: float = 3.0) -> tuple[int, Any] | None:
        """(status, JSON body) of an API request to *node*, from inside its namespace; None
        when it does not answer."""

        def call() -> tuple[int, Any]:
            headers = {"Authorization": f"Bearer {API_TOKEN}"}
            if method == "POST":
                headers["Content-Type"] = "application/json"
            req = urllib.request.Request(
                f"http://{API[0]}:{API[1]}{path}",
                method=method,
                data=b"{}" if method == "POST" else None,
                headers=headers,
            )
            try:
                with urllib.request.urlopen(req, timeout=timeout) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as e:
                return e.code, None

        try:
            return in_namespace(self.wan.namespace(node), call, timeout=timeout + 5)
        except (OSError, urllib.error.URLError, ValueError, TimeoutError):
            return None

    def get(self, node: str, path: str) -> Any:
        """The JSON body of GET *path* on *node*, None when it does not answer."""
        got = self.request(node, "GET", path)
        return got[1] if got is not None and got[0] == 200 else None

    # -- files and the end ------------------------------------------------------------------

    def log_path(self, node: str) -> Path:
        return self.workdir / f"{node}.log"

    def log_text(self, node: str) -> str:
        path = self.log_path(node)
        return path.read_text(errors="replace") if path.exists() else ""

    def output(self, name: str) -> str:
        path = self.workdir / f"{name}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        """Stop the load generator, every node (SIGTERM to its group, SIGKILL after 10 s) and
        backend, then the WAN, which deletes the namespaces and anything left in them."""
        self.stop_loadgen()
        for proc in self.nodes.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.nodes.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for vs, proc in self.backends.items():
            if proc.poll() is None:
                self.stop_backend(vs)
        for output in self._outputs:
            output.close()
        self.wan.close()
        wanem.cleanup(self.prefix)


def node_server(node: str) -> str:
    """The virtual server in *node*'s data center."""
    return NODES[node][2]
