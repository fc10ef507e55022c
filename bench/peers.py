"""The servers bench/compare.py sets side by side, their configs, and what each must answer.

- `SPECS`: every server it knows, in report order: ours (twistd gtm), NSD, PowerDNS 4.7 with
  a LUA record for the wide IP (packet cache on, and all caches off), gdnsd 3.8 with its
  geoip plugin on `nets` data, and the bare Python floor (bench/floor.py);
- the configs, from the templates in bench/peerconf/ and the topology of our node's config
  (`comparelib.region_networks`): `topology`, `pdns_lua`, `pdns_zone_text`, `pdns_conf`,
  `gdnsd_config`, `gdnsd_zone_text`; `write_files` writes them into the work folder;
- `unavailable` (what is not installed) and `make_servers` (each chosen server's command);
- `sanity_asks`: the questions asked before measuring, each with its check of the answer;
- `ratios` and `ratio_lines`: each server's queries/s and CPU per query against ours and
  against the floor's.
"""

from __future__ import annotations

import argparse
import glob
import ipaddress
import os
import shutil
import string
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import comparelib as lib  # bench/ is not a package: its folder is on sys.path

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "peerconf"
PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
#: the bind backend's module, which pdns-server alone does not bring
PDNS_BIND = "/usr/lib/*/pdns/libbindbackend.so"


@dataclass(frozen=True)
class Spec:
    key: str
    label: str
    address: str  # the default ADDRESS:PORT
    command: str | None  # the program it needs (None: the Python that runs our node)
    packages: str  # the Debian packages that bring it
    wideip: str  # how it answers the wide IP: "topology" (one data center's address) or "static" (all three)
    about: str  # one line for the report's header


SPECS: dict[str, Spec] = {
    s.key: s
    for s in (
        Spec(
            "ours",
            "ours",
            "127.0.0.242:5300",
            None,
            "",
            "topology",
            "twistd gtm; wide IP: rtt -> topology -> global_availability, persistence /24",
        ),
        Spec("nsd", "NSD", "127.0.0.241:5300", "nsd", "nsd", "static", "server-count = cores, reuseport, RRL off"),
        Spec(
            "pdns",
            "PDNS",
            "127.0.0.243:5300",
            "pdns_server",
            "pdns-server pdns-backend-bind",
            "topology",
            "bind backend; wide IP: LUA view() by netmask, shared Lua states; packet cache on",
        ),
        Spec(
            "pdns-nocache",
            "PDNS-nc",
            "127.0.0.244:5300",
            "pdns_server",
            "pdns-server pdns-backend-bind",
            "topology",
            "the same with cache-ttl, query-cache-ttl and negquery-cache-ttl 0",
        ),
        Spec(
            "gdnsd",
            "gdnsd",
            "127.0.0.245:5300",
            "gdnsd",
            "gdnsd",
            "topology",
            "wide IP: DYNA geoip!gslb, a map of `nets` only (no GeoIP database)",
        ),
        Spec(
            "floor",
            "floor",
            "127.0.0.246:5300",
            None,
            "",
            "static",
            "bench/floor.py: one epoll loop, recvfrom/sendto, the reply by a dict lookup",
        ),
    )
}


def parse_servers(text: str) -> list[str]:
    """`ours,nsd,...` in the report's order; ValueError naming what is unknown."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in SPECS]
    if unknown or not keys:
        raise ValueError(f"unknown: {', '.join(unknown) or 'none given'} (known: {', '.join(SPECS)})")
    return [k for k in SPECS if k in keys]


def unavailable(keys: Sequence[str]) -> dict[str, str]:
    """Each chosen server that cannot run here, with what is missing (and its Debian package)."""
    missing = {}
    for key in keys:
        spec = SPECS[key]
        if spec.command and shutil.which(spec.command, path=PATH) is None:
            missing[key] = f"{spec.command} (Debian package {spec.packages.split()[0]})"
        elif key.startswith("pdns") and not glob.glob(PDNS_BIND):
            missing[key] = "the bind backend (Debian package pdns-backend-bind)"
    return missing


# --- the configs ---


def topology(sources: int) -> list[tuple[str, str]]:
    """(network, data center) of our node's topology: each region's networks (its ECS range and
    the dnsperf source addresses placed in it) with that region's data center."""
    return [(net, lib.REGION_DC[region]) for region, nets in lib.region_networks(sources).items() for net in nets]


def _by_dc(sources: int) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for network, dc in topology(sources):
        groups.setdefault(dc, []).append(network)
    return groups


def _addresses() -> dict[str, str]:
    return {dc: address for _, dc, address in lib.POOL}


def _without_wideip(zone: str) -> str:
    name = lib.WIDEIP.removesuffix("." + lib.ORIGIN)
    return "".join(line for line in zone.splitlines(keepends=True) if line.split(maxsplit=1)[:1] != [name])


def pdns_lua(sources: int) -> str:
    """The LUA record's expression: view() picks the address of the data center whose networks
    hold `bestwho` (the ECS address, or the source's), else the default data center's."""
    address = _addresses()
    views = [
        "{{" + ", ".join(f"'{n}'" for n in networks) + "}, {'" + address[dc] + "'}}"
        for dc, networks in _by_dc(sources).items()
    ]
    views.append("{{'0.0.0.0/0', '::/0'}, {'" + address[lib.DEFAULT_DC] + "'}}")
    return "view({" + ", ".join(views) + "})"


def pdns_zone_text(sources: int) -> str:
    """The bench zone with the wide IP as a LUA A record."""
    name = lib.WIDEIP.removesuffix("." + lib.ORIGIN)
    return _without_wideip(lib.zone_text()) + f'{name:<5} 30 IN LUA A "{pdns_lua(sources)}"\n'


def _template(template: str, **values: object) -> str:
    return string.Template((TEMPLATES / template).read_text()).substitute(values)


def pdns_conf(directory: Path, listen: lib.Endpoint, threads: int, cache: bool) -> str:
    """pdns.conf (packet and query caches at PowerDNS's defaults) or pdns-nocache.conf (off)."""
    settings = (
        "# caches: PowerDNS's defaults (packet cache cache-ttl=20, query-cache-ttl=20)"
        if cache
        else "# every cache off: each query runs the LUA record\ncache-ttl=0\nquery-cache-ttl=0\nnegquery-cache-ttl=0"
    )
    name = "pdns" if cache else "pdns-nocache"
    return _template(
        "pdns.conf", directory=directory, name=name, host=listen.host, port=listen.port, threads=threads, cache=settings
    )


def gdnsd_config(directory: Path, listen: lib.Endpoint, threads: int, sources: int) -> str:
    """gdnsd's config: the geoip plugin's map `bench` holds our topology as `nets`."""
    dcs = [lib.DEFAULT_DC] + [dc for _, dc, _ in lib.POOL if dc != lib.DEFAULT_DC]
    nets = "\n".join(f"          {network} => [ {dc} ]" for network, dc in topology(sources))
    dcmap = "\n".join(f"          {dc} => {address}" for dc, address in _addresses().items())
    return _template(
        "gdnsd.config",
        directory=directory,
        origin=lib.ORIGIN,
        host=listen.host,
        port=listen.port,
        threads=threads,
        datacenters=", ".join(dcs),
        nets=nets,
        dcmap=dcmap,
    )


def gdnsd_zone_text() -> str:
    """The bench zone with the wide IP as the geoip plugin's resource `gslb`."""
    name = lib.WIDEIP.removesuffix("." + lib.ORIGIN)
    return _without_wideip(lib.zone_text()) + f"{name:<5} 30 DYNA geoip!gslb\n"


def write_files(
    directory: Path, keys: Sequence[str], addresses: dict[str, lib.Endpoint], threads: int, sources: int
) -> None:
    """The peers' configs and zones into *directory*/pdns and *directory*/gdnsd (ours and NSD's:
    comparelib.write_files)."""
    if any(k.startswith("pdns") for k in keys):
        (directory / "pdns").mkdir(exist_ok=True)
        (directory / "pdns" / f"{lib.ORIGIN}.zone").write_text(pdns_zone_text(sources))
        (directory / "pdns" / "named.conf").write_text(_template("named.conf", directory=directory, origin=lib.ORIGIN))
        for key, cache in (("pdns", True), ("pdns-nocache", False)):
            if key in keys:
                (directory / "pdns" / f"{key}.conf").write_text(pdns_conf(directory, addresses[key], threads, cache))
    if "gdnsd" in keys:
        (directory / "gdnsd" / "zones").mkdir(parents=True, exist_ok=True)
        (directory / "gdnsd" / "config").write_text(gdnsd_config(directory, addresses["gdnsd"], threads, sources))
        (directory / "gdnsd" / "zones" / lib.ORIGIN).write_text(gdnsd_zone_text())


# --- the processes ---


def make_servers(args: argparse.Namespace, work: Path, keys: Sequence[str]) -> dict[str, lib.Server]:
    """The comparelib.Server of each key, its command line and version (nothing started yet)."""
    python_version = lib.command_version(
        [args.python, "-c", "import platform; print(platform.python_implementation(), platform.python_version())"],
        r"\w+ [\d.]+",
    )
    servers = {}
    for key in keys:
        spec, endpoint = SPECS[key], args.addresses[key]
        program = shutil.which(spec.command, path=PATH) or spec.command if spec.command else args.python
        log = work / f"{key}.log"
        if key == "ours":
            argv = [args.python, "-c", "from twisted.scripts.twistd import run; run()", "--nodaemon"]
            argv += [f"--logfile={work}/node.log", f"--pidfile={work}/node.pid", "gtm"]
            argv += [f"--config={work}/cluster.yaml", "--node=bench"]
            log, version = work / "node.log", python_version
        elif key == "nsd":
            argv = [program, "-d", "-c", str(work / "nsd.conf")]
            log, version = work / "nsd.log", lib.command_version([program, "-v"], r"NSD version [\d.]+")
        elif key.startswith("pdns"):
            argv = [program, f"--config-dir={work}/pdns"] + (["--config-name=nocache"] if key != "pdns" else [])
            version = lib.command_version([program, "--version"], r"PowerDNS Authoritative Server [\d.]+")
        elif key == "gdnsd":
            argv = [program, "-c", str(work / "gdnsd"), "start"]
            version = lib.command_version([program, "--help"], r"gdnsd version [\d.]+")
        else:
            argv = [program, str(HERE / "floor.py"), str(endpoint)]
            version = python_version
        servers[key] = lib.Server(key, spec.label, endpoint, argv, log, work, version=version)
    return servers


# --- what each must answer ---

Check = Callable[[lib.Reply, str], str | None]


@dataclass(frozen=True)
class Ask:
    label: str
    message: bytes
    source: str | None  # the source address (an LDNS of the load), or any
    check: Check  # (reply, server key) -> what is wrong, or None


def expect(rcode: str, answers: int) -> Check:
    def check(reply: lib.Reply, server: str) -> str | None:
        if reply.rcode != rcode or reply.answers != answers:
            return f"expected {rcode} with {answers} answers, got {reply.rcode} with {reply.answers}"
        return None

    return check


def gslb(dc: str, why: str) -> Check:
    """A static server: the three addresses; one that decides: the one of data center *dc*."""
    address = _addresses()[dc]

    def check(reply: lib.Reply, server: str) -> str | None:
        if reply.rcode != "NOERROR":
            return f"rcode {reply.rcode}"
        if SPECS[server].wideip == "static":
            return None if len(reply.addresses) == 3 else f"{len(reply.addresses)} addresses, expected 3"
        if reply.addresses != (address,):
            return f"{', '.join(reply.addresses) or 'no address'}, expected {address} ({dc}: {why})"
        return None

    return check


def sanity_asks(sources: int) -> list[Ask]:
    """Static names; then the wide IP for the first and the last /24 of each region, a client
    in no region, and an LDNS without ECS (in this order: a cache that ignored the client
    subnet would answer a later region with an earlier one's data center)."""
    origin, wideip = lib.ORIGIN, lib.WIDEIP
    asks = [
        Ask(f"www.{origin} A", lib.query(f"www.{origin}", "A"), None, expect("NOERROR", 2)),
        Ask(f"host7.{origin} A", lib.query(f"host7.{origin}", "A"), None, expect("NOERROR", 1)),
        Ask(f"nx1.{origin} A", lib.query(f"nx1.{origin}", "A"), None, expect("NXDOMAIN", 0)),
        Ask(f"www.{origin} AAAA", lib.query(f"www.{origin}", "AAAA"), None, expect("NOERROR", 0)),
    ]
    subnets = []
    for region, network in lib.REGIONS.items():
        within = list(ipaddress.IPv4Network(network).subnets(new_prefix=24))
        subnets += [(within[0], region), (within[-1], region)]
    for subnet, region in subnets:
        check = gslb(lib.REGION_DC[region], f"topology {region}")
        asks.append(Ask(f"{wideip} A ECS {subnet}", lib.query(wideip, "A", subnet), None, check))
    outside = ipaddress.IPv4Network("10.200.0.0/24")
    check = gslb(lib.DEFAULT_DC, "in no region")
    asks.append(Ask(f"{wideip} A ECS {outside}", lib.query(wideip, "A", outside), None, check))
    # one LDNS only: ours keeps persistence per /24, and the sources share one (127.0.200.0/24);
    # the second source's region (south: DC2) is not the default data center's
    ldns, region = lib.source_address(min(1, sources - 1)), lib.source_region(min(1, sources - 1))
    check = gslb(lib.REGION_DC[region], f"LDNS in {region}")
    asks.append(Ask(f"{wideip} A from {ldns}", lib.query(wideip, "A"), ldns, check))
    return asks


def random_asks() -> list[Ask]:
    """For --names random: a name below the zone it does not hold, and one below the wildcard
    (our node decides by the LDNS, here one in no region; NSD and the floor: all three)."""
    return [
        Ask(f"q7x2k.{lib.ORIGIN} A", lib.query(f"q7x2k.{lib.ORIGIN}", "A"), None, expect("NXDOMAIN", 0)),
        Ask(f"q7x2k.{lib.APPS} A", lib.query(f"q7x2k.{lib.APPS}", "A"), None, gslb(lib.DEFAULT_DC, "in no region")),
    ]


def reply_text(reply: lib.Reply | None) -> str:
    if reply is None:
        return "no reply"
    if len(reply.addresses) == 1:
        return f"{reply.rcode} {reply.addresses[0]}"
    return f"{reply.rcode} {reply.answers} RRs"


# --- the report's ratios ---


def ratios(summary: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each server's qps and CPU per query over ours' and over the floor's (None where that
    server was not run or its figure is 0 or missing)."""

    def over(key: str, figure: str, base: str) -> float | None:
        value = summary[key].get(figure)
        reference = summary.get(base, {}).get(figure)
        return value / reference if value is not None and reference else None

    return {
        key: {
            "qps_vs_ours": over(key, "qps", "ours"),
            "cpu_vs_ours": over(key, "cpu_us_per_query", "ours"),
            "qps_vs_floor": over(key, "qps", "floor"),
            "cpu_vs_floor": over(key, "cpu_us_per_query", "floor"),
        }
        for key in summary
    }


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def ratio_lines(summary: dict[str, dict[str, Any]]) -> list[str]:
    """A table: per server, qps and CPU us/query (max load), then both against ours and the floor."""
    lines = [f"  {'':<8}{'qps':>9}{'CPU us/q':>10}{'qps/ours':>10}{'CPU/ours':>10}{'qps/floor':>11}{'CPU/floor':>11}"]
    for key, r in ratios(summary).items():
        s = summary[key]
        qps = "-" if s.get("qps") is None else f"{s['qps'] / 1000:.1f}k"
        cpu = "-" if s.get("cpu_us_per_query") is None else f"{s['cpu_us_per_query']:.1f}"
        lines.append(
            f"  {SPECS[key].label:<8}{qps:>9}{cpu:>10}{_x(r['qps_vs_ours']):>10}{_x(r['cpu_vs_ours']):>10}"
            f"{_x(r['qps_vs_floor']):>11}{_x(r['cpu_vs_floor']):>11}"
        )
    return lines


def header_lines(servers: dict[str, lib.Server], args: argparse.Namespace) -> list[str]:
    """One line per server for the report's header: label, version, address, what it runs."""
    lines = []
    for key, server in servers.items():
        about = SPECS[key].about
        if key == "nsd":
            about = about.replace("cores", str(args.server_count))
        elif key.startswith("pdns") or key == "gdnsd":
            about += f"; {args.peer_threads} thread{'s' if args.peer_threads > 1 else ''}"
        lines.append(f"  {server.label:<8} {server.version} on {server.endpoint}: {about}")
    return lines


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


# --- what our node says about itself ---


def node_metrics(host: str, api_port: int) -> dict[str, Any]:
    """gtm_dns_queries (by rcode and method) and gtm_store_records from our node's /metrics."""
    url = f"http://{host}:{api_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError as e:
        return {"error": f"{url}: {e}"}
    queries: dict[str, float] = {}
    records: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("gtm_dns_queries_total{"):
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split(","))
            key = "/".join(labels.get(k, "").strip('"') for k in ("wideip", "rcode", "method"))
            queries[key] = queries.get(key, 0) + float(line.rsplit(" ", 1)[1])
        elif line.startswith("gtm_store_records{"):
            kind = line[line.index('"') + 1 : line.rindex('"')]
            records[kind] = float(line.rsplit(" ", 1)[1])
    return {"queries": queries, "store_records": records}


def node_findings(work: Path, metrics: dict[str, Any]) -> list[str]:
    """Our node's own counters and log lines worth a look."""
    lines = []
    if "error" in metrics:
        lines.append(f"metrics unavailable: {metrics['error']}")
    else:
        queries: dict[str, float] = metrics["queries"]
        total = sum(queries.values()) or 1
        for key, n in sorted(queries.items(), key=lambda kv: -kv[1])[:8]:
            wideip, rcode, method = key.split("/")
            lines.append(f"answered {n:9.0f} ({n / total:6.1%}) {wideip or 'zone names'} {rcode} by {method}")
        records = metrics["store_records"]
        lines.append(
            "store records: "
            + (", ".join(f"{k} {v:.0f}" for k, v in records.items()) or "none")
            + " (persist: one per client network it answered, ECS subnets and LDNS /24s)"
        )
    log = work / "node.log"
    if log.exists():
        bad = [
            line
            for line in log.read_text(errors="replace").splitlines()
            if "Traceback" in line or "#error]" in line or "#critical]" in line or "Unhandled" in line
        ]
        lines.append(f"node log: {len(bad)} error lines" + "".join(f"\n      {b[:200]}" for b in bad[:5]))
    return lines
