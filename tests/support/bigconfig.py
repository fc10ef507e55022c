"""A large configuration, generated deterministically: thousands of monitored virtual
servers, pools, wide IPs and topology records, for the large-configuration benchmark
(bench/bigconfig.py) and its scaled-down process test (tests/process/test_bigconfig.py).

The shape (`Shape`; the defaults are issue 12's: 5,000 servers, 500 pools, 2,000 wide IPs,
20,000 topology records, 5 members):

- data centers DC1..DCn, one member each (``n1`` in DC1, ...); the virtual servers are in the
  first `server_datacenters` of them (DC1 and DC2), alternately, so one data center's outage
  takes half of them down;
- virtual server i (``vs00000`` ...) has its own loopback address (127.20.0.1 upwards, see
  `vs_address`) and its data center's port (`backend_port` + the data center's index), and a
  ``tcp`` monitor (interval, timeout, up_after, down_after from the shape): one listening
  socket on 0.0.0.0:port accepts every check of that data center (`Backend`), and closing
  it is the data center's outage (checks are refused);
- pool j holds servers j*k .. j*k+k-1 (k = servers / pools, half in each data center),
  ``load_balancing: {preferred: topology, alternate: global_availability}``;
- wide IP w (``w0000.big.test`` ...) answers from pool w mod pools;
- `regions` regions of 100 /24 networks each in 10.0.0.0/8 (the size of an ISP's list);
  region ``isp000`` also holds `CLIENTS`, the loopback network the benchmark's clients ask
  from, so their answers go through a region lookup;
- topology: two records per region (its preferred data center scores 100, the other 50),
  then subnet records (11.x.y.0/24, one data center each, score 100) up to `topology` in
  all, ending with ``any`` -> DC1 (10) and ``any`` -> DC2 (5). Clients of ``isp000`` are sent
  to DC1, and to DC2 once DC1's servers are down.

`write` puts the config, the zone file and the group's certificates in a folder.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gtmcluster.sync import certs
from tests.support import configs

ZONE = "big.test"
#: the benchmark's clients ask from this network (part of region isp000, which prefers DC1)
CLIENTS = "127.77.0.0/16"
DNS_PORT = 5353
PEER_PORT = 4353
API_PORT = 8053
TOKEN = "bigconfig-bench-token"
#: networks per region
REGION_NETWORKS = 100

ZONE_TEXT = """\
$TTL 3600
@        IN SOA ns1.big.test. hostmaster.big.test. 1 3600 600 86400 300
         IN NS  ns1
ns1      IN A   192.0.2.1
www      IN A   192.0.2.80
"""


@dataclass(frozen=True)
class Shape:
    """How large the configuration is, and its monitors' timing."""

    servers: int = 5000
    pools: int = 500
    wideips: int = 2000
    topology: int = 20000
    regions: int = 200
    members: int = 5
    #: data centers that hold virtual servers (the first ones of the members')
    server_datacenters: int = 2
    interval: float = 5.0
    timeout: float = 2.0
    up_after: int = 2
    down_after: int = 3
    #: DC1's servers are checked on this port, DC2's on the next, ...
    backend_port: int = 18000

    def __post_init__(self) -> None:
        if self.servers < self.pools or self.servers % self.pools:
            raise ValueError(f"{self.servers} servers do not split evenly into {self.pools} pools")
        if not 1 <= self.server_datacenters <= max(self.members, 1):
            raise ValueError("server_datacenters must be between 1 and the number of members")
        if self.topology < 2 * self.regions + 2:
            raise ValueError(f"{self.topology} topology records are fewer than 2 per region plus 2")
        if self.servers > 250 * 256:
            raise ValueError("at most 64,000 servers (their loopback addresses)")

    @property
    def datacenters(self) -> list[str]:
        return [f"DC{i + 1}" for i in range(max(self.members, self.server_datacenters))]

    @property
    def failover_bound(self) -> float:
        """interval x down_after + timeout: how long a server may be down before answers move."""
        return self.interval * self.down_after + self.timeout

    def port_of(self, datacenter: str) -> int:
        return self.backend_port + self.datacenters.index(datacenter)

    def datacenter_of(self, i: int) -> str:
        return self.datacenters[i % self.server_datacenters]

    def servers_in(self, datacenter: str) -> list[str]:
        return [vs_name(i) for i in range(self.servers) if self.datacenter_of(i) == datacenter]

    def wideip_names(self) -> list[str]:
        return [wideip_name(w) for w in range(self.wideips)]


def vs_name(i: int) -> str:
    return f"vs{i:05d}"


def vs_address(i: int) -> str:
    return f"127.20.{i // 250}.{i % 250 + 1}"


def wideip_name(w: int) -> str:
    return f"w{w:04d}.{ZONE}"


def member_name(i: int) -> str:
    return f"n{i + 1}"


def region_networks(r: int) -> list[str]:
    """Region r's networks: 100 /24s of 10.0.0.0/8, none shared with another region."""
    first = int(ipaddress.ip_address("10.0.0.0")) + r * REGION_NETWORKS * 256
    return [f"{ipaddress.ip_address(first + n * 256)}/24" for n in range(REGION_NETWORKS)]


def config(shape: Shape, addresses: list[str], sync: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config as YAML data: member ``n{i+1}`` on ``addresses[i]`` (DNS port `DNS_PORT`,
    peers `PEER_PORT`, API `API_PORT`); *sync* adds sync group settings (timers)."""
    if len(addresses) != shape.members:
        raise ValueError(f"{shape.members} members need {shape.members} addresses, not {len(addresses)}")
    dcs = shape.datacenters
    members = [
        {
            "name": member_name(i),
            "datacenter": dcs[i],
            "peer": f"{address}:{PEER_PORT}",
            "dns": [f"{address}:{DNS_PORT}"],
            "api": f"{address}:{API_PORT}",
        }
        for i, address in enumerate(addresses)
    ]
    servers = {
        vs_name(i): {
            "address": vs_address(i),
            "port": shape.port_of(shape.datacenter_of(i)),
            "datacenter": shape.datacenter_of(i),
            "monitor": "tcp",
        }
        for i in range(shape.servers)
    }
    per_pool = shape.servers // shape.pools
    pools = {
        f"p{j:03d}": {
            "members": [vs_name(j * per_pool + k) for k in range(per_pool)],
            "load_balancing": {"preferred": "topology", "alternate": "global_availability"},
            "ttl": 30,
        }
        for j in range(shape.pools)
    }
    wideips = {wideip_name(w): {"type": "A", "pools": [f"p{w % shape.pools:03d}"]} for w in range(shape.wideips)}
    regions: dict[str, list[str]] = {f"isp{r:03d}": region_networks(r) for r in range(shape.regions)}
    regions["isp000"] = [CLIENTS, *regions["isp000"]]
    served = dcs[: shape.server_datacenters]
    topology: list[dict[str, Any]] = []
    for r in range(shape.regions):
        first = served[r % len(served)]
        topology.append({"ldns": f"region isp{r:03d}", "server": f"datacenter {first}", "score": 100})
        for other in served:
            if other != first:
                topology.append({"ldns": f"region isp{r:03d}", "server": f"datacenter {other}", "score": 50})
                break
    base = int(ipaddress.ip_address("11.0.0.0"))
    n = 0
    while len(topology) < shape.topology - 2:
        network = f"{ipaddress.ip_address(base + n * 256)}/24"
        topology.append({"ldns": f"subnet {network}", "server": f"datacenter {served[n % len(served)]}", "score": 100})
        n += 1
    topology.append({"ldns": "any", "server": f"datacenter {served[0]}", "score": 10})
    topology.append({"ldns": "any", "server": f"datacenter {served[-1]}", "score": 5})
    return {
        "sync_group": {
            "name": "big",
            **(sync or {}),
            "tls": {"ca": "certs/ca.pem", "cert": "certs/{node}.pem", "key": "certs/{node}.key"},
            "members": members,
        },
        "api": {"token": TOKEN},
        "state_dir": "state/{node}",
        "datacenters": dcs,
        "monitors": {
            "tcp": {
                "type": "tcp",
                "interval": shape.interval,
                "timeout": shape.timeout,
                "up_after": shape.up_after,
                "down_after": shape.down_after,
            }
        },
        "virtual_servers": servers,
        "regions": regions,
        "topology": topology,
        "pools": pools,
        "wideips": wideips,
        "zones": [{"origin": ZONE, "file": f"{ZONE}.zone"}],
    }


#: the parts of the config `shell` leaves out: what a node evaluates, decides and answers from
BULK = ("virtual_servers", "pools", "wideips", "regions", "topology")


def shell(data: dict[str, Any]) -> dict[str, Any]:
    """*data* (from `config`) without its servers, pools, wide IPs, regions and topology:
    the same group, monitors and zones. A node started on it and then reloaded with the
    whole config holds whatever records were merged meanwhile, evaluated once."""
    return {k: v for k, v in data.items() if k not in BULK}


def write(
    directory: Path,
    shape: Shape,
    addresses: list[str],
    sync: dict[str, Any] | None = None,
    name: str = "big.yaml",
    make_certs: bool = True,
) -> Path:
    """Write the config (as *name*, and its `shell` as ``shell-``*name*), its zone file, the
    API token file and (unless told not to) the group CA and every member's certificate
    (``certs/``) into *directory*; the config's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{ZONE}.zone").write_text(ZONE_TEXT)
    data = config(shape, addresses, sync)
    # the token in a file of the members' own: config sync never publishes an inline secret
    configs.write_secret(directory / "api-token", TOKEN + "\n")
    data["api"] = {"token_file": "api-token"}
    path = directory / name
    dump(path, data)
    dump(path.with_name(f"shell-{name}"), shell(data))
    if make_certs and not (directory / "certs" / "ca.pem").exists():
        certs.init_ca(directory / "certs")
        for i in range(shape.members):
            certs.issue(directory / "certs", member_name(i))
    return path


def dump(path: Path, data: dict[str, Any]) -> None:
    # the C emitter when there is one: a 5,000-server config is a few MB of YAML
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    path.write_text(yaml.dump(data, Dumper=dumper, sort_keys=False))


def check_phase(key: str, interval: float) -> float:
    """When in each interval a subject is checked: the health checker gives each its phase
    by a hash of the verdict's key (the same rule as health.checker)."""
    return zlib.crc32(key.encode()) / 2**32 * interval


class Backend:
    """One data center's backends: a listening socket on 0.0.0.0:port that accepts every
    check (and closes it) in a thread; `close` is the outage (later checks are refused)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(("0.0.0.0", port))
            self.sock.listen(4096)
        except OSError:
            self.sock.close()
            raise
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, name=f"backend :{port}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        sock = self.sock
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed: the outage
            conn.close()
            self.accepted += 1

    def close(self) -> None:
        # shutdown wakes the thread blocked in accept; the socket then refuses connections
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=5)


def open_backends(datacenters: int, first_port: int) -> tuple[int, list[Backend]]:
    """One `Backend` per data center on consecutive ports, the first one free from
    *first_port* on (tried in steps of *datacenters*); the first port and the backends."""
    for base in range(first_port, first_port + 200 * datacenters, datacenters):
        opened: list[Backend] = []
        try:
            for i in range(datacenters):
                opened.append(Backend(base + i))
        except OSError:
            for backend in opened:
                backend.close()
            continue
        return base, opened
    raise OSError(f"no {datacenters} consecutive free ports from {first_port}")
