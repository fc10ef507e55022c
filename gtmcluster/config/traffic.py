"""The traffic half of the config: virtual servers, regions and topology (pools and wide IPs:
`config.pools`)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping as MappingT
from pathlib import Path
from typing import Any

from gtmcluster.config import geoip as geoconf
from gtmcluster.config import health
from gtmcluster.config.model import (
    Link,
    RecordTarget,
    Region,
    VirtualServer,
)
from gtmcluster.config.monitoring import Monitor
from gtmcluster.config.problems import KeyPath
from gtmcluster.config.reader import IPNetwork, Mapping, Reader
from gtmcluster.config.targets import TARGET_KEYS, read_target, srv_port
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_AAAA, TYPE_CNAME, TYPE_MX, TYPE_NAPTR, TYPE_SRV
from gtmcluster.runtime.slices import Steps
from gtmcluster.topology import addrlist
from gtmcluster.topology.geoip import KINDS, GeoIP, Term
from gtmcluster.topology.records import LDNS_KINDS, SERVER_KINDS, SHAPES, Record, Selector, Topology

MAX_TTL = 2**31 - 1
MAX_RATIO = 65535
MAX_SCORE = 2**32 - 1
MAX_ANSWERS = 16
#: the readers below are steps (`gtmcluster.runtime.slices`): a reload builds the model in the
#: reactor thread a few milliseconds per turn; they yield every STEP definitions (tens of
#: microseconds each) ...
STEP = 64
#: ... and every REGION_STEP regions (each may hold hundreds of networks) and POOL_STEP
#: pools (each may list dozens of members)
REGION_STEP = 4
POOL_STEP = 8
WIDEIP_TYPES = {
    "A": TYPE_A,
    "AAAA": TYPE_AAAA,
    "CNAME": TYPE_CNAME,
    "MX": TYPE_MX,
    "SRV": TYPE_SRV,
    "NAPTR": TYPE_NAPTR,
}
TYPE_NAMES = {t: k for k, t in WIDEIP_TYPES.items()}
ADMIN_STATES = ("enabled", "disabled", "drain")


def datacenter(r: Reader, path: KeyPath, value: Any, datacenters: tuple[str, ...]) -> str | None:
    """A data center from the `datacenters` list (any valid name when that list is broken)."""
    if ("datacenter", "*") in r.broken:
        return r.name(path, value, "data center name")
    text = r.string(path, value)
    if text is None or ("datacenter", text) in r.broken:
        return None
    return r.string(path, text, choices=datacenters)


def read_virtual_servers(
    r: Reader,
    raw: Any,
    datacenters: tuple[str, ...],
    monitors: MappingT[str, Monitor],
    links: MappingT[str, Link],
) -> Steps[dict[str, VirtualServer]]:
    out: dict[str, VirtualServer] = {}
    section = r.mapping(("virtual_servers",), raw, "a mapping of virtual server names to settings")
    if section is None:
        return out
    seen: dict[tuple[Any, int], str] = {}
    dependency_paths: dict[tuple[str, str], KeyPath] = {}
    for n, (name, value) in enumerate(section.items()):
        if n % STEP == STEP - 1:
            yield
        path = section.at(name)
        vs = r.mapping(path, value)
        if r.name(path, name, "virtual server name") is None or vs is None:
            r.broken.add(("virtual_server", name))
            continue
        kinds = [k for k in TARGET_KEYS if vs.has(k)]
        address = target = check_address = None
        if kinds:
            target = _target(r, vs, kinds)
            if vs.has("check_address"):
                check_address = r.address(vs.at("check_address"), vs.get("check_address"))
        else:
            address = r.address(vs.at("address"), vs.require("address", "the virtual server's IP address"))
            if vs.has("check_address"):
                r.error(vs.at("check_address"), f"only for virtual servers with {', '.join(TARGET_KEYS)}")
        default_port = 80
        if target is not None and target.rtype == TYPE_SRV:
            default_port = srv_port(target) or 80  # (an SRV server's monitor checks its port)
        port = vs.integer("port", default_port, 1, 65535)
        dc = datacenter(r, vs.at("datacenter"), vs.require("datacenter", "one of the datacenters"), datacenters)
        monitored, monitor_rule = health.read_vs_monitors(r, vs, monitors)
        if kinds and monitored and not vs.has("check_address"):
            r.error(
                vs.at("monitor"),
                f"a {kinds[0]} virtual server's monitor needs 'check_address' (the address it checks);"
                " without a monitor the server counts as up",
            )
        link = None
        if vs.has("link"):
            link = links.get(r.known(vs.at("link"), vs.get("link"), "link", links, "link") or "")
        admin = vs.string("admin_state", "enabled", ADMIN_STATES)
        if vs.has("enabled"):
            if vs.has("admin_state"):
                r.error(vs.at("enabled"), "give 'admin_state' or 'enabled', not both")
            elif not vs.boolean("enabled", True):
                admin = "disabled"
        depends: list[str] = []
        raw_depends = vs.get("depends_on", [])
        for i, dep in enumerate(r.list(vs.at("depends_on"), raw_depends, allow_scalar=True) or []):
            at = (*vs.at("depends_on"), i) if isinstance(raw_depends, list) else vs.at("depends_on")
            dep_name = r.name(at, dep, "virtual server name")
            if dep_name is not None:
                depends.append(dep_name)
                dependency_paths[(name, dep_name)] = at
        manual_resume = vs.boolean("manual_resume", False)
        slow_start = vs.number("slow_start", 0.0, 0, 86400)
        vs.done()
        if (target if kinds else address) is None or port is None or dc is None or admin is None or slow_start is None:
            r.broken.add(("virtual_server", name))
            continue
        other = seen.setdefault((address, port), name) if address is not None else name
        if other != name:
            r.error(path, f"same address and port as virtual server {other!r}")
        out[name] = VirtualServer(
            name,
            address,
            port,
            dc,
            monitored,
            admin,
            link,
            tuple(depends),
            manual_resume,
            slow_start,
            target,
            check_address,
            monitor_rule,
        )
    yield
    _check_dependencies(r, out, dependency_paths)
    return out


def _target(r: Reader, vs: Mapping, kinds: list[str]) -> RecordTarget | None:
    """The record a virtual server answers with (`config.targets`): one kind, no address."""
    if len(kinds) > 1:
        r.error(vs.at(kinds[1]), f"give one of {', '.join(TARGET_KEYS)}, not {kinds[0]!r} and {kinds[1]!r}")
        return None
    if vs.has("address"):
        r.error(vs.at("address"), f"a {kinds[0]} virtual server has no address (see 'check_address')")
        return None
    return read_target(r, vs, kinds[0])


def _check_dependencies(r: Reader, vss: dict[str, VirtualServer], paths: dict[tuple[str, str], KeyPath]) -> None:
    """depends_on names existing virtual servers, without cycles."""
    for (name, dep), at in paths.items():
        if name in vss and dep not in vss:
            r.known(at, dep, "virtual_server", vss, "virtual server")
    reported: set[str] = set()
    done: set[str] = set()
    for name in vss:
        if name not in done:
            _visit(r, vss, paths, reported, done, name, (name,))


def _visit(
    r: Reader,
    vss: dict[str, VirtualServer],
    paths: dict[tuple[str, str], KeyPath],
    reported: set[str],
    done: set[str],
    name: str,
    stack: tuple[str, ...],
) -> None:
    """Depth first from *name* (*stack*: the way here), reporting each cycle once. (At
    module level: a nested function calling itself by name is a reference cycle, which a
    freeze of the heap keeps for good: `gtmcluster.runtime.heap`.)"""
    for dep in vss[name].depends_on:
        if dep not in vss:
            continue
        if dep in stack:
            cycle = (*stack[stack.index(dep) :], dep)
            if not reported & set(cycle):
                r.error(paths[(name, dep)], f"virtual servers depend on each other in a cycle: {' -> '.join(cycle)}")
                reported.update(cycle)
        elif dep not in done:
            _visit(r, vss, paths, reported, done, dep, (*stack, dep))
    done.add(name)


def read_regions(
    r: Reader, raw: Any, resolve: Callable[[str], Path], geoip: GeoIP | None = None
) -> Steps[dict[str, Region]]:
    """Regions: lists of networks, address list files, GeoIP terms ({country: CN}) and
    other regions (no cycles)."""
    section = r.mapping(("regions",), raw, "a mapping of region names to networks")
    if section is None:
        return {}
    direct: dict[str, list[IPNetwork | Term]] = {}
    includes: dict[str, list[tuple[KeyPath, str]]] = {}
    for n, (name, value) in enumerate(section.items()):
        if n % REGION_STEP == REGION_STEP - 1:
            yield
        path = section.at(name)
        if r.name(path, name, "region name") is None:
            continue
        entries = r.list(
            path,
            [value] if isinstance(value, dict) else value,
            "a list of networks, {file: PATH}, {region: NAME} or {country: CC}",
        )
        direct[name] = []
        includes[name] = []
        for i, entry in enumerate(entries or []):
            at = (*path, i) if isinstance(value, list) else path
            if isinstance(entry, dict):
                m = Mapping(r, at, entry)
                if m.has("file"):
                    _read_region_file(r, m, resolve, direct[name])
                elif m.has("region"):
                    other = r.name(m.at("region"), m.get("region"), "region name")
                    if other is not None:
                        includes[name].append((m.at("region"), other))
                elif geoconf.has_terms(m):
                    direct[name].extend(geoconf.region_terms(r, m, geoip))
                elif not entry:
                    r.error(at, "an entry is a network, {file: PATH} or {region: NAME}")
                m.done()  # names the unknown key, with a suggestion
            else:
                network = r.network(at, entry)
                if network is not None:
                    direct[name].append(network)
    # Depth-first expansion, memoised, so each bad include is reported once, at its place.
    expansion = _Expansion(r, direct, includes)
    out: dict[str, Region] = {}
    for n, name in enumerate(direct):
        if n % REGION_STEP == REGION_STEP - 1:
            yield
        entries = expansion.expand(name, (name,))
        networks = tuple(e for e in entries if not isinstance(e, tuple))
        out[name] = Region(name, networks, tuple(e for e in entries if isinstance(e, tuple)))
    return out


class _Expansion:
    """Regions' networks with those of the regions they include, however deep. (An object,
    not a nested function calling itself by name: that is a reference cycle, which a freeze
    of the heap keeps for good: `gtmcluster.runtime.heap`.)"""

    def __init__(
        self, r: Reader, direct: dict[str, list[IPNetwork | Term]], includes: dict[str, list[tuple[KeyPath, str]]]
    ) -> None:
        self.r = r
        self.direct = direct
        self.includes = includes
        self.expanded: dict[str, list[IPNetwork | Term]] = {}
        self.reported: set[KeyPath] = set()

    def expand(self, name: str, stack: tuple[str, ...]) -> list[IPNetwork | Term]:
        expanded = self.expanded
        if name in expanded:
            return expanded[name]
        networks = list(self.direct[name])
        for at, other in self.includes[name]:
            if other not in self.direct:
                if at not in self.reported:
                    self.r.known(at, other, "region", self.direct, "region")
            elif other in stack:
                if at not in self.reported:
                    cycle = stack[stack.index(other) :]
                    self.r.error(at, f"regions include each other in a cycle: {' -> '.join((*cycle, other))}")
            else:
                networks.extend(self.expand(other, (*stack, other)))
            self.reported.add(at)
        expanded[name] = list(dict.fromkeys(networks))
        return expanded[name]


def _read_region_file(r: Reader, m: Mapping, resolve: Callable[[str], Path], into: list[IPNetwork | Term]) -> None:
    file_name = r.string(m.at("file"), m.get("file"))
    if file_name is None:
        return
    path = resolve(file_name)
    try:
        networks, bad = addrlist.read(str(path))
    except OSError as e:
        r.error(m.at("file"), f"cannot read {path}: {e.strerror or e}")
        return
    for b in bad[:20]:
        r.error(m.at("file"), f"{path}:{b.line}: {b.message}")
    if len(bad) > 20:
        r.error(m.at("file"), f"{path}: {len(bad) - 20} more bad lines")
    into.extend(networks)


def _selector(
    r: Reader, path: KeyPath, raw: Any, kinds: tuple[str, ...], refs: MappingT[str, Any], geoip: GeoIP | None
) -> Selector | None:
    """Parse ``[not] KIND VALUE`` (or ``any``); *refs* maps kind to the names it may use."""
    text = r.string(path, raw)
    if text is None:
        return None
    words = text.split()
    negate = bool(words) and words[0] == "not"
    if negate:
        words = words[1:]
    if words == ["any"] and "any" in kinds:
        return Selector("any", negate, "")
    if len(words) != 2 or words[0] not in kinds:
        shapes = ", ".join(f"'{k} {SHAPES.get(k, 'NAME')}'" if k != "any" else "'any'" for k in kinds)
        r.error(path, f"{text!r} is not a selector: use {shapes}, optionally after 'not'")
        return None
    kind, value = words
    if kind == "subnet":
        network = r.network(path, value)
        return None if network is None else Selector(kind, negate, str(network), (network,))
    if kind in KINDS:  # country, continent, asn
        term = geoconf.term(r, path, kind, value, geoip)
        return None if term is None else Selector(kind, negate, term[1], (), (term,))
    known = refs[kind]
    if r.known(path, value, kind, known, kind.replace("_", " ")) is None:
        return None
    if kind == "region":
        return Selector(kind, negate, value, known[value].networks, known[value].geo)
    return Selector(kind, negate, value)


def read_topology(
    r: Reader,
    raw: Any,
    regions: MappingT[str, Region],
    datacenters: tuple[str, ...],
    pool_names: list[str],
    vs_names: list[str],
    geoip: GeoIP | None = None,
) -> Steps[Topology]:
    records: list[Record] = []
    entries = r.list(("topology",), raw, "a list of {ldns, server, score} records") if raw is not None else []
    refs: dict[str, Any] = {
        "region": regions,
        "datacenter": dict.fromkeys(datacenters),
        "pool": dict.fromkeys(pool_names),
        "virtual_server": dict.fromkeys(vs_names),
    }
    #: server selectors read so far, by their text (a few distinct ones in 20,000 records),
    #: and their ids (as `Topology.build_steps` numbers them)
    servers: dict[str, Selector] = {}
    server_ids: dict[Selector, int] = {}
    for i, entry in enumerate(entries or []):
        if i % STEP == STEP - 1:
            yield
        path = ("topology", i)
        m = r.mapping(path, entry, "a mapping {ldns: SELECTOR, server: SELECTOR, score: N}")
        if m is None:
            continue
        raw_ldns = m.require("ldns", "who asks, e.g. 'region cnc-nets'")
        ldns = _selector(r, m.at("ldns"), raw_ldns, LDNS_KINDS, refs, geoip)
        raw_server = m.require("server", "what to answer, e.g. 'datacenter CNC'")
        server = servers.get(raw_server) if isinstance(raw_server, str) else None
        if server is None:
            server = _selector(r, m.at("server"), raw_server, SERVER_KINDS, refs, geoip)
            if server is not None and isinstance(raw_server, str):
                servers[raw_server] = server
        score = m.integer("score", None, 0, MAX_SCORE) if m.has("score") else m.require("score", f"0 to {MAX_SCORE}")
        m.done()
        if ldns is not None and server is not None and isinstance(score, int):
            server_id = server_ids.setdefault(server, len(server_ids))
            records.append(Record(len(records), ldns, server, score, server_id))
    return (yield from Topology.build_steps(records, geoip))
