"""The parts of bench/compare.py that are not the schedule or the report.

- `write_files`: the zone both servers serve, NSD's config, our node's config and the
  dnsperf query files of the two mixes (static, wideip);
- `ask`: one UDP query with the standard library (readiness and the sanity check);
- `Server`: a server process started in its own session, its process tree's CPU time from
  /proc and its CPU affinity;
- `run_dnsperf`: several dnsperf processes at once, one per loopback source address, and
  their figures merged (latency percentiles from `-v` when asked).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from proctree import descendants, start_time, tree_cpu_seconds

ORIGIN = "bench.test"
HOSTS = 100
WWW = ("192.0.2.80", "192.0.2.81")
# the wide IP's pool: one virtual server per data center; NSD serves the three as gslb's A RRset
POOL = (("vs1", "DC1", "198.51.100.1"), ("vs2", "DC2", "198.51.100.2"), ("vs3", "DC3", "198.51.100.3"))
WIDEIP = f"gslb.{ORIGIN}"
# client subnets (ECS) are 10.X.Y.0/24; the topology regions split them over the data centers
REGIONS = {"north": "10.0.0.0/12", "south": "10.16.0.0/12", "west": "10.32.0.0/11"}
REGION_DC = {"north": "DC1", "south": "DC2", "west": "DC3"}
DEFAULT_DC = "DC1"  # a client in no region (topology's `any`, score 1)
#: with --names random: a wildcard below the zone, our node's wildcard wide IP over the same
#: servers (topology, no persistence: the decision is the client's); NSD and the floor answer
#: it statically
APPS = f"apps.{ORIGIN}"
ECS_LIMIT = 131072  # 10.0.0.0/8 then 11.0.0.0/8 (loopback only: the addresses are data in queries)
TYPES = {"A": 1, "NS": 2, "SOA": 6, "MX": 15, "AAAA": 28}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}

ZONE_TEMPLATE = """\
$ORIGIN {origin}.
$TTL 3600
@        IN SOA ns1 hostmaster 1 3600 600 86400 300
         IN NS  ns1
ns1      IN A   192.0.2.1
"""


def zone_text(wildcard: bool = False) -> str:
    """SOA, NS, `www` with two A records, `host1`..`host100`, and `gslb` with the pool's three
    (with *wildcard*, `*.apps` with them too)."""
    lines = [ZONE_TEMPLATE.format(origin=ORIGIN)]
    lines += [f"www      IN A   {a}\n" for a in WWW]
    lines += [f"host{i:<5d} IN A   192.0.2.{100 + i}\n" for i in range(1, HOSTS + 1)]
    lines += [f"gslb  30 IN A   {address}\n" for _, _, address in POOL]
    if wildcard:
        lines += [f"*.apps 30 IN A  {address}\n" for _, _, address in POOL]
    return "".join(lines)


def ecs_network(i: int) -> ipaddress.IPv4Network:
    """The *i*-th client subnet: 10.(i/256).(i%256).0/24, past 65,536 on in 11.0.0.0/8."""
    return ipaddress.IPv4Network(f"{10 + (i >> 16)}.{i >> 8 & 255}.{i & 255}.0/24")


def ecs_inside_regions(count: int) -> int:
    """How many of the first *count* client subnets lie in a topology region (REGIONS); the
    rest are in none (topology's `any`: DEFAULT_DC)."""
    spans = [(int(n.network_address), n.num_addresses) for n in map(ipaddress.IPv4Network, REGIONS.values())]
    return sum(any(0 <= int(ecs_network(i).network_address) - a < size for a, size in spans) for i in range(count))


def source_address(i: int) -> str:
    """The loopback source address of dnsperf process *i* (from 0): 127.0.200.1, .2, ..."""
    return f"127.0.200.{i + 1}"


def source_region(i: int) -> str:
    return list(REGIONS)[i % len(REGIONS)]


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        host, _, port = text.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{text!r} is not ADDRESS:PORT")
        return cls(str(ipaddress.IPv4Address(host)), int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def nsd_conf(directory: Path, listen: Endpoint, server_count: int) -> str:
    """NSD 4 in *directory*: no privilege drop, no chroot, no remote control, RRL off."""
    return f"""\
server:
  ip-address: {listen.host}@{listen.port}
  server-count: {server_count}
  reuseport: yes
  username: ""
  chroot: ""
  zonesdir: "{directory}"
  database: ""
  zonelistfile: "{directory}/nsd-zone.list"
  xfrdfile: "{directory}/nsd-xfrd.state"
  xfrdir: "{directory}"
  pidfile: "{directory}/nsd.pid"
  logfile: "{directory}/nsd.log"
  rrl-ratelimit: 0
  hide-version: yes
  verbosity: 1
remote-control:
  control-enable: no
zone:
  name: {ORIGIN}
  zonefile: {ORIGIN}.zone
"""


def region_networks(sources: int) -> dict[str, list[str]]:
    """Each topology region's networks: its ECS range and the dnsperf source addresses (/32) placed
    in it, since queries without ECS are placed by their LDNS. The peers' configs use the same."""
    regions: dict[str, list[str]] = {name: [network] for name, network in REGIONS.items()}
    for i in range(sources):
        regions[source_region(i)].append(f"{source_address(i)}/32")
    return regions


def node_config(
    dns: Endpoint, api_port: int, sources: int, processes: int = 1, wildcard: bool = False
) -> dict[str, Any]:
    """One member (no peers, so no TLS) with the static zone and wide IP `gslb` over three
    DCs (with *wildcard*, the wildcard wide IP `*.apps` too), answering on *processes* processes."""
    config = _node_config(dns, api_port, sources, processes)
    if wildcard:
        # (topology first: rtt would ask to probe each loopback LDNS with every answer)
        balancing = {"preferred": "topology", "fallback": "global_availability"}
        config["pools"]["apps"] = {"members": [name for name, _, _ in POOL], "load_balancing": balancing, "ttl": 30}
        config["wideips"][f"*.{APPS}"] = {"type": "A", "pools": ["apps"]}
    return config


def _node_config(dns: Endpoint, api_port: int, sources: int, processes: int) -> dict[str, Any]:
    regions = region_networks(sources)
    return {
        "base_dir": ".",
        "sync_group": {
            "name": "bench",
            "members": [
                {
                    "name": "bench",
                    "datacenter": "DC1",
                    "peer": f"{dns.host}:4353",
                    "dns": [str(dns)],
                    "api": f"{dns.host}:{api_port}",
                }
            ],
        },
        "state_dir": "state/{node}",
        "log_dir": "log",
        # (the queries' client subnets count: they come from loopback, the trusted resolver)
        "dns_server": {"processes": processes, "ecs_trusted": ["127.0.0.0/8", "::1/128"]},
        "datacenters": ["DC1", "DC2", "DC3"],
        "virtual_servers": {name: {"address": address, "datacenter": dc} for name, dc, address in POOL},
        "regions": regions,
        "topology": [
            *({"ldns": f"region {r}", "server": f"datacenter {dc}", "score": 100} for r, dc in REGION_DC.items()),
            {"ldns": "any", "server": f"datacenter {DEFAULT_DC}", "score": 1},
        ],
        "pools": {
            "web": {
                "members": [name for name, _, _ in POOL],
                "load_balancing": {"preferred": "rtt", "alternate": "topology", "fallback": "global_availability"},
                "ttl": 30,
            }
        },
        "wideips": {
            WIDEIP: {
                "type": "A",
                "pools": ["web"],
                "persistence": {"ttl": 3600, "ipv4_prefix": 24, "ipv6_prefix": 56},
            }
        },
        "zones": [{"origin": ORIGIN, "file": f"{ORIGIN}.zone"}],
    }


# --- DNS messages (just enough for query files, readiness and the sanity check) ---


def encode_name(name: str) -> bytes:
    return b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split(".")) + b"\0"


def query(name: str, qtype: str, ecs: ipaddress.IPv4Network | None = None, qid: int = 0) -> bytes:
    """A query without RD; with *ecs*, an OPT record (payload 1232) carrying that client subnet."""
    question = encode_name(name) + struct.pack("!HH", TYPES[qtype], 1)
    if ecs is None:
        return struct.pack("!6H", qid, 0, 1, 0, 0, 0) + question
    prefix = ecs.prefixlen
    address = ecs.network_address.packed[: (prefix + 7) // 8]
    option = struct.pack("!HBB", 1, prefix, 0) + address  # family 1, source prefix, scope 0
    rdata = struct.pack("!HH", 8, len(option)) + option  # option code 8: client subnet
    opt = b"\0" + struct.pack("!HHIH", 41, 1232, 0, len(rdata)) + rdata
    return struct.pack("!6H", qid, 0, 1, 0, 0, 1) + question + opt


def _skip_name(message: bytes, offset: int) -> int:
    while True:
        length = message[offset]
        if length >= 0xC0:
            return offset + 2
        if length == 0:
            return offset + 1
        offset += length + 1


@dataclass(frozen=True)
class Reply:
    rcode: str
    answers: int
    addresses: tuple[str, ...]
    aa: bool


def parse_reply(message: bytes) -> Reply:
    _, flags, qdcount, ancount, _, _ = struct.unpack("!6H", message[:12])
    offset = 12
    for _ in range(qdcount):
        offset = _skip_name(message, offset) + 4
    addresses = []
    for _ in range(ancount):
        offset = _skip_name(message, offset)
        rtype, _, _, length = struct.unpack("!HHIH", message[offset : offset + 10])
        offset += 10
        if rtype == 1 and length == 4:
            addresses.append(socket.inet_ntoa(message[offset : offset + 4]))
        offset += length
    rcode = flags & 15
    return Reply(RCODES.get(rcode, str(rcode)), ancount, tuple(addresses), bool(flags & 0x0400))


def ask(server: Endpoint, message: bytes, timeout: float = 1.0, source: str | None = None) -> Reply | None:
    """Send one UDP query; the parsed reply, or None on timeout or error."""
    qid = random.randrange(65536)
    message = struct.pack("!H", qid) + message[2:]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        if source:
            s.bind((source, 0))
        try:
            s.sendto(message, (server.host, server.port))
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                data = s.recv(4096)
                if len(data) >= 12 and struct.unpack("!H", data[:2])[0] == qid:
                    return parse_reply(data)
        except OSError:
            return None
    return None


# --- query files ---


@dataclass(frozen=True)
class Mix:
    name: str
    description: str
    files: tuple[Path, ...]  # one per dnsperf process
    binary: bool  # dnsperf -B (raw packets, here: with ECS)
    clients: str  # how many distinct clients the server sees, in words


def static_lines(count: int = 1000, seed: int = 7) -> list[str]:
    """The PERF-BASELINE mix: 87% www A, 10% hostN A, 3% NXDOMAIN, 2% NODATA (www AAAA)."""
    rng = random.Random(seed)
    lines = [f"www.{ORIGIN} A"] * (count * 87 // 100)
    lines += [f"host{rng.randint(1, HOSTS)}.{ORIGIN} A" for _ in range(count * 10 // 100)]
    lines += [f"nx{rng.randrange(10**6)}.{ORIGIN} A" for _ in range(count * 3 // 100)]
    lines += [f"www.{ORIGIN} AAAA"] * (count - len(lines))
    rng.shuffle(lines)
    return lines


def write_mixes(directory: Path, sources: int, ecs: int) -> dict[str, Mix]:
    """Query files: the static mix (text, no EDNS) and the wide IP mix (ECS clients split over sources)."""
    static = directory / "static.txt"
    static.write_text("\n".join(static_lines()) + "\n")
    mixes = {
        "static": Mix(
            "static",
            "87% www A, 10% hostN A, 3% NXDOMAIN, 2% NODATA; no EDNS",
            (static,) * sources,
            False,
            f"{sources} source addresses",
        )
    }
    if ecs == 0:
        plain = directory / "wideip.txt"
        plain.write_text(f"{WIDEIP} A\n")
        mixes["wideip"] = Mix(
            "wideip", f"{WIDEIP} A; no EDNS", (plain,) * sources, False, f"{sources} LDNS (source) addresses"
        )
        return mixes
    files = []
    for s in range(sources):
        path = directory / f"wideip-{s}.bin"
        with path.open("wb") as f:
            for i in range(s, ecs, sources):  # client subnets i = s, s + sources, ...: each in one file
                packet = query(WIDEIP, "A", ecs_network(i))
                f.write(struct.pack("!H", len(packet)) + packet)
        files.append(path)
    last, inside = ecs_network(ecs - 1), ecs_inside_regions(ecs)
    mixes["wideip"] = Mix(
        "wideip",
        f"{WIDEIP} A; EDNS client subnet /24, {ecs} subnets (10.0.0.0/24 .. {last}),"
        f" {inside} in the topology regions, {ecs - inside} in none ({DEFAULT_DC} by `any`)",
        tuple(files),
        True,
        f"{ecs} distinct ECS client subnets (/24) from {sources} LDNS (source) addresses",
    )
    return mixes


def write_files(
    directory: Path,
    nsd: Endpoint,
    ours: Endpoint,
    api_port: int,
    server_count: int,
    sources: int,
    processes: int = 1,
    wildcard: bool = False,
) -> None:
    (directory / f"{ORIGIN}.zone").write_text(zone_text(wildcard))
    (directory / "nsd.conf").write_text(nsd_conf(directory, nsd, server_count))
    config = node_config(ours, api_port, sources, processes, wildcard)
    (directory / "cluster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


# --- processes: start and stop (their tree's CPU and affinity: proctree) ---


class ServerExited(RuntimeError):
    pass


@dataclass
class Server:
    """A server process (and its children) started in its own session, so Ctrl-C reaches us first."""

    key: str  # "ours" or "nsd"
    label: str
    endpoint: Endpoint
    argv: list[str]
    log: Path
    cwd: Path
    process: subprocess.Popen[bytes] | None = None
    version: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, ready_query: bytes, timeout: float = 30.0) -> float:
        """Start and wait for an answer to *ready_query*; the seconds that took."""
        start = time.monotonic()
        with (self.cwd / f"{self.key}.out").open("wb") as out:
            self.process = subprocess.Popen(
                self.argv, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        while time.monotonic() - start < timeout:
            if self.process.poll() is not None:
                raise ServerExited(f"{self.label} exited with status {self.process.returncode}:\n{self.tail()}")
            if ask(self.endpoint, ready_query, timeout=0.2) is not None:
                return time.monotonic() - start
            time.sleep(0.1)
        raise ServerExited(f"{self.label} did not answer on {self.endpoint} within {timeout:.0f} s:\n{self.tail()}")

    def tail(self, lines: int = 15) -> str:
        text = ""
        for path in (self.cwd / f"{self.key}.out", self.log):
            if path.exists():
                text += path.read_text(errors="replace")
        return "\n".join("    " + line for line in text.splitlines()[-lines:])

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.pid)

    def processes(self) -> int:
        return len(descendants(self.pid))

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the server (it stops its children), then SIGKILL to what is left of its tree."""
        if self.process is None or self.process.poll() is not None:
            return
        tree = [(pid, start_time(pid)) for pid in descendants(self.pid)]
        self.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout)
        for pid, started in tree:
            if started is not None and start_time(pid) == started:  # still that process, not a reused PID
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.process.wait()


# --- dnsperf ---

_FIGURES = {
    "sent": re.compile(r"Queries sent:\s+(\d+)"),
    "completed": re.compile(r"Queries completed:\s+(\d+)"),
    "lost": re.compile(r"Queries lost:\s+(\d+)"),
    "qps": re.compile(r"Queries per second:\s+([\d.]+)"),
    "run_time": re.compile(r"Run time \(s\):\s+([\d.]+)"),
    "avg_latency": re.compile(r"Average Latency \(s\):\s+([\d.]+)"),
}
_RCODES = re.compile(r"Response codes:\s+(.*)")
_VERBOSE = re.compile(rb"^> (\S+) .*?(?: (\d+\.\d+))?$")


@dataclass
class LoadResult:
    """Figures of one dnsperf run (all processes merged)."""

    sent: int = 0
    completed: int = 0
    lost: int = 0
    qps: float = 0.0
    avg_latency: float = 0.0  # seconds, weighted by completed queries
    rcodes: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)  # seconds, with -v only
    timeouts: int = 0  # -v lines with T
    load_cpu: float = 0.0  # CPU seconds of the dnsperf processes
    commands: list[str] = field(default_factory=list)


def parse_dnsperf(text: str) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for key, pattern in _FIGURES.items():
        m = pattern.search(text)
        if m is None:
            raise ValueError(f"dnsperf printed no {key!r}:\n{text[-2000:]}")
        figures[key] = float(m.group(1))
    rcodes: dict[str, int] = {}
    m = _RCODES.search(text)
    if m:
        for code, count in re.findall(r"(\w+) (\d+) \(", m.group(1)):
            rcodes[code] = int(count)
    figures["rcodes"] = rcodes
    return figures


def final_statistics(text: str) -> str:
    """dnsperf's output from its last `Statistics:` on (over TCP a `Connection Statistics:` follows)."""
    at = text.rfind("\nStatistics:")
    return text[at:] if at >= 0 else text


def _verbose_lines(path: Path) -> Iterator[tuple[bytes, float | None]]:
    """(rcode or T, latency in seconds or None) of each `-v` line: `> NOERROR www.bench.test A 0.000054`."""
    with path.open("rb") as f:
        for line in f:
            m = _VERBOSE.match(line.rstrip())
            if m:
                yield m.group(1), float(m.group(2)) if m.group(2) else None


def run_dnsperf(
    target: Endpoint,
    mix: Mix,
    directory: Path,
    seconds: float,
    clients: int,
    outstanding: int,
    qps: float | None = None,
    verbose: bool = False,
    pin: int | None = None,
    passes: int | None = None,
    mode: str = "udp",
) -> LoadResult:
    """One dnsperf per query file (its own source address), all at once; their figures merged.
    With *passes*, each runs through its file that many times instead of for *seconds*; *mode*
    is dnsperf's -m (udp, or tcp: then each of the *clients* is one connection)."""
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    result = LoadResult()
    per_process_q = max(1, outstanding // len(mix.files))
    try:
        for i, file in enumerate(mix.files):
            argv = ["taskset", "-c", str(pin)] if pin is not None else []
            argv += ["dnsperf", "-s", target.host, "-p", str(target.port), "-a", source_address(i), "-d", str(file)]
            argv += ["-n", str(passes)] if passes else ["-l", f"{seconds:g}"]
            argv += ["-c", str(clients), "-T", "1", "-q", str(per_process_q), "-t", "2"]
            argv += ["-B"] if mix.binary else []
            argv += ["-m", mode] if mode != "udp" else []
            argv += ["-Q", str(max(1, round(qps / len(mix.files))))] if qps else []
            argv += ["-v"] if verbose else []
            out = directory / f"dnsperf-{i}.out"
            with out.open("wb") as f:
                processes.append((subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT), out))
            result.commands.append(" ".join(argv))
        latency_sum = 0.0
        for process, out in processes:
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            result.load_cpu += usage.ru_utime + usage.ru_stime
            text = out.read_text(errors="replace")
            if process.returncode != 0:
                raise RuntimeError(f"dnsperf exited with {process.returncode}:\n{text[-2000:]}")
            figures = parse_dnsperf(final_statistics(text))
            result.sent += int(figures["sent"])
            result.completed += int(figures["completed"])
            result.lost += int(figures["lost"])
            result.qps += figures["qps"]
            latency_sum += figures["avg_latency"] * figures["completed"]
            for code, count in figures["rcodes"].items():
                result.rcodes[code] = result.rcodes.get(code, 0) + count
            if verbose:
                for code, latency in _verbose_lines(out):
                    if code == b"T" or latency is None:
                        result.timeouts += 1
                    else:
                        result.latencies.append(latency)
            out.unlink()
        result.avg_latency = latency_sum / result.completed if result.completed else 0.0
    finally:
        for process, _ in processes:
            if process.returncode is None:
                process.kill()
                process.wait()
    return result


def percentile(ordered: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an ascending sequence (0.0 when empty)."""
    if not ordered:
        return 0.0
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def command_version(argv: list[str], pattern: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    m = re.search(pattern, done.stdout + done.stderr)
    return m.group(0) if m else "?"
