"""Load and validate the sync group's YAML config into the frozen model.

``load(path)`` reads the whole file, reports every problem at once as
``FILE: key.path: problem`` (raising `ConfigError`), and otherwise returns a `Config`.
This module owns the top level and the infrastructure sections (sync group, monitors,
prober, DNS listener settings); `apisettings` reads the API's, `zones` the zones, and
`traffic` owns the load-balancing objects.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

from gtmcluster.config import alerts as alert_settings
from gtmcluster.config import geoip, health, membername, probersettings, querylog, rum, sharing, traffic, transfer
from gtmcluster.config import links as link_settings
from gtmcluster.config import pools as pool_settings
from gtmcluster.config.addresses import HostPort
from gtmcluster.config.apisettings import api_beyond_loopback, read_api
from gtmcluster.config.dnsserver import DNSServer, RateLimit, ZoneTransfer
from gtmcluster.config.model import (
    ApiSettings,
    Config,
    Member,
    PersistenceTable,
    SyncGroup,
    SyncSettings,
    TLSFiles,
    wideips_by_server,
)
from gtmcluster.config.problems import ConfigError, Problem, Problems
from gtmcluster.config.reader import IPNetwork, Mapping, Reader
from gtmcluster.config.source import yamlchild, yamlsplit, yamlsrc
from gtmcluster.config.wideipnames import WideIPNames
from gtmcluster.config.zones import read_zones
from gtmcluster.dnsdata import names, zonefile
from gtmcluster.dnsdata.keys import ZoneKey
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import ZoneSet
from gtmcluster.runtime import files, slices
from gtmcluster.runtime.gcpause import collection_paused
from gtmcluster.state import schema
from gtmcluster.topology.geoip import GeoIP

DEFAULT_PEER_PORT = 4353
DEFAULT_DNS_PORT = 53
DEFAULT_API_PORT = 8053
DEFAULT_RUM_PORT = 443
TOP_LEVEL = (
    "base_dir",
    "sync_group",
    "state_dir",
    "log_dir",
    "datacenters",
    "dns_server",
    "api",
    "health",
    "monitors",
    "links",
    "geoip",
    "virtual_servers",
    "regions",
    "topology",
    "pools",
    "wideips",
    "persistence",
    "prober",
    "tsig_keys",
    "zones",
    "alerts",
    "rum",
    "proximity",
)
#: the sections `build` reads last, in its order: the others come first, and a reload's
#: YAML child sends them in this order (`yamlchild`), so the build starts before it is done
BIG_SECTIONS = ("virtual_servers", "regions", "pools", "topology", "wideips")
SECTION_ORDER = tuple(k for k in TOP_LEVEL if k not in BIG_SECTIONS) + BIG_SECTIONS


def load(path: str | os.PathLike[str], own_dir: Path | None = None) -> Config:
    """Read and validate the config at *path* (*own_dir*: see `build`). Raises
    `ConfigError` listing every problem."""
    file = os.fspath(path)
    with collection_paused():
        parsed = parse_file(file)
        config = slices.whole(build(file, parsed, own_dir))
    yamlchild.MEMORY.keep(parsed)  # a reload reads only the sections that changed
    return config


def config_value(file: str, text: bytes) -> Any:
    """*text* (read from *file*) as the config reader reads it: what it last read, when that
    was this text (the config just loaded: a big file is not parsed a second time), else
    parsed (`yamlsrc.parse`, a second or more at 5,000 servers). Raises `ConfigError`."""
    try:
        pieces = yamlsplit.cut(text.decode("utf-8"))
    except UnicodeDecodeError:
        pieces = None
    if pieces is not None and len({p.key for p in pieces}) == len(pieces):
        held = [yamlchild.MEMORY.get(p.key, p.sha()) for p in pieces]
        if all(h is not None for h in held):
            return {p.key: h[0] for p, h in zip(pieces, held, strict=True) if h is not None}
    return yamlsrc.parse(file, text)


def parse_file(file: str) -> yamlchild.Parsed:
    """Read *file* and parse its YAML (cut at its top-level keys, for `yamlchild.Memory`).
    Raises `ConfigError` if it cannot be read or parsed."""
    return yamlchild.here(file, read_text(file), SECTION_ORDER, split=True)


def read_text(file: str) -> str:
    """The text of *file* (a regular file of at most `files.CONFIG`, never a FIFO or a device:
    a reload reads it on the reactor thread); raises `ConfigError` if it cannot be read."""
    try:
        return files.read_text(file, files.CONFIG)
    except OSError as e:
        raise ConfigError([Problem(file, (), f"cannot read the config: {e.strerror or e}")]) from None


def build(file: str, parsed: yamlchild.Parsed, own_dir: Path | None = None) -> slices.Steps[Config]:
    """Check the parsed *file* and build its `Config`, in steps (`gtmcluster.runtime.slices`): the
    model of 5,000 servers and 20,000 topology records takes over a second. *parsed* may
    still be filling (a reload's YAML child): a step waits for a section not there yet.
    The last step raises `ConfigError` listing every problem found.

    *own_dir*: *file* is the group's config as a bundle written out (`groupconfig.bundle`),
    and this is the member's own base folder, from its own config file. The member's
    own things (certificates and key, API token file, state and log folders) are named
    relative to it, and the bundle's files (zones, regions, CA files of monitors)
    relative to the folder of *file*: the bundle's ``base_dir`` was the publisher's.
    A bundle's names must stay in its folder (checked before any file is read), it holds
    no inline secret, and no file its config does not name (`sharing`); what the
    member runs decides its own things (`changes.own_ground`)."""
    yield from parsed.wanted(*SECTION_ORDER[: -len(BIG_SECTIONS)])
    data = parsed.value
    problems = Problems(file, parsed.lines)
    r = Reader(problems)
    top = r.mapping((), data, "a mapping of sections (sync_group, datacenters, ...)")
    if top is None:
        problems.raise_if_any()
        raise AssertionError("unreachable")
    for key in TOP_LEVEL:
        top.has(key)

    config_dir = Path(file).resolve().parent
    base_dir = config_dir
    if top.has("base_dir"):
        value = r.string(top.at("base_dir"), top.get("base_dir"))
        if value is not None:
            base_dir = (config_dir / value).resolve()
    content_dir = base_dir
    if own_dir is not None:
        base_dir, content_dir = own_dir, config_dir
        _bundle_names(r, problems, data, ("zones", "monitors", "geoip"))
        for at, problem in sharing.secrets(data):
            r.error(at, problem)
    own_paths: dict[Path, str] = {}

    def resolve(p: str) -> Path:
        """A path of the member's own."""
        path = Path(p) if os.path.isabs(p) else base_dir / p
        own_paths.setdefault(path, p)
        return path

    def content(p: str) -> Path:
        """A path of the group's content (a bundle carries these files)."""
        return Path(p) if os.path.isabs(p) else content_dir / p

    yield
    datacenters = _datacenters(r, top)
    api_settings = read_api(r, top, resolve)
    sync_group = _sync_group(r, top, datacenters, resolve, api_settings)
    monitors = health.read_monitors(r, top.get("monitors", {}), content)
    links = health.read_links(
        r, top.get("links", {}), lambda at, v: traffic.datacenter(r, at, v, datacenters), monitors
    )
    health_settings = health.read_health(r, top.get("health"))
    for name, monitor in monitors.items():
        if monitor.rule.kind == "quorum" and sync_group.members and monitor.rule.quorum > len(sync_group.members):
            r.error(
                ("monitors", name, "rule", "quorum"),
                f"{monitor.rule.quorum} is more than the sync group's {len(sync_group.members)} members",
            )
    prober = probersettings.read(r, top)
    alerts = alert_settings.read(r, top, resolve)
    rum_settings, proximity = rum.read(r, top, datacenters, resolve)
    if rum_settings is None and not top.has("rum"):
        for i, member in enumerate(sync_group.members):
            if member.rum is not None:
                where = ("sync_group", "members", i, "rum")
                r.error(where, f"{member.name} has a RUM listener but the config has no rum section (its targets)")
    log_dir = resolve(top.string("log_dir", "var/log") or "var/log")
    dns_server = _dns_server(r, top, resolve, log_dir)
    persistence = _persistence(r, top)
    zone_keys: dict[Name, tuple[ZoneKey, ...]] = {}
    tsig_keys = transfer.read_tsig_keys(r, top, resolve)
    transfers: dict[Name, ZoneTransfer] = {}
    shared = own_dir is not None or sync_group.settings.config_sync
    zone_data, broken_zones = read_zones(r, top, content, resolve, zone_keys, tsig_keys, transfers, shared)
    state_dir = top.string("state_dir", "var/state/{node}") or "var/state/{node}"

    yield
    yield from parsed.wanted("virtual_servers")
    vss = yield from traffic.read_virtual_servers(r, top.get("virtual_servers", {}), datacenters, monitors, links)
    health.check_budget(r, health_settings, vss, links)
    yield
    yield from parsed.wanted("regions")
    if own_dir is not None:
        _bundle_names(r, problems, data, ("regions",))
    databases = yield from geoip.read_geoip(r, top, content)
    regions = yield from traffic.read_regions(r, top.get("regions", {}), content, databases)
    yield from parsed.wanted("pools")
    raw_pools = top.get("pools", {})
    pool_names = [str(k) for k in raw_pools] if isinstance(raw_pools, dict) else []
    raw_vss = top.get("virtual_servers", {})
    vs_names = [str(k) for k in raw_vss] if isinstance(raw_vss, dict) else []
    yield from parsed.wanted("topology")
    topology = yield from traffic.read_topology(
        r, top.get("topology"), regions, datacenters, pool_names, vs_names, databases
    )
    pools = yield from pool_settings.read_pools(r, raw_pools, vss, topology)
    lookup_zones = ZoneSet(z.build() for z in zone_data)
    yield from parsed.wanted("wideips")
    wideips = yield from pool_settings.read_wideips(
        r, top.get("wideips", {}), pools, topology, lookup_zones, broken_zones
    )
    link_settings.check_methods(r, pools, wideips.values())
    top.done()
    yield from parsed.complete()
    problems.found.extend(parsed.problems)  # the duplicate keys
    if own_dir is not None:
        _extra_files(r, data, Path(file).name, content_dir, None if problems.found else zone_data)
    problems.raise_if_any()
    r.keep_networks()
    yield

    wideip_names = WideIPNames.of(wideips.values())
    zones = ZoneSet(
        z.build(labels for labels in wideip_names.names() if names.is_subdomain(labels, names.key(z.origin)))
        for z in zone_data
    )
    yield
    digest = yield from _digest(parsed.canonical, zone_data, regions, databases)
    wideips_of = MappingProxyType((yield from wideips_by_server(wideips.values())))
    yield
    return Config(
        path=Path(file),
        base_dir=base_dir,
        sync_group=sync_group,
        state_dir=state_dir,
        log_dir=log_dir,
        datacenters=datacenters,
        monitors=MappingProxyType(monitors),
        links=MappingProxyType(links),
        health=health_settings,
        virtual_servers=MappingProxyType(vss),
        regions=MappingProxyType(regions),
        topology=topology,
        pools=MappingProxyType(pools),
        wideips=MappingProxyType(wideips),
        prober=prober,
        zones=zones,
        dns_server=dns_server,
        api=api_settings,
        persistence=persistence,
        alerts=alerts,
        rum=rum_settings,
        proximity=proximity,
        digest=digest,
        wideips_of=wideips_of,
        wideip_names=wideip_names,
        dnssec=MappingProxyType(zone_keys),
        transfers=MappingProxyType(transfers),
        own_paths=MappingProxyType(own_paths),
    )


def _bundle_names(r: Reader, problems: Problems, data: Any, keys: tuple[str, ...]) -> None:
    """In a bundle: a file named by sections *keys* must be in the bundle's folder; one
    that is not (an absolute path, ``..``) is refused before any file is read."""
    if not isinstance(data, dict):
        return
    for at, name in sharing.referenced({k: data[k] for k in keys if k in data}):
        problem = sharing.name_problem(name)
        if problem is not None:
            r.error(at, problem)
    problems.raise_if_any()


def _extra_files(r: Reader, data: Any, main: str, folder: Path, zones: list[zonefile.ZoneData] | None) -> None:
    """In a bundle written out in *folder*: a file its config does not name is refused.
    The files its zones include are those the zones' reading included (*zones*, when
    every zone loaded), else its zone files are read again for them (`sharing.names`)."""
    if zones is None:
        wanted = set(sharing.names(data, main, base=folder)[0])  # (their problems: the readers')
    else:
        top = PurePosixPath(folder)
        wanted = set(sharing.named(data, main)[0])
        wanted.update(
            PurePosixPath(name).relative_to(top).as_posix()
            for zone in zones
            for name in zone.included
            if PurePosixPath(name).is_relative_to(top)
        )
    present = {Path(root, name).relative_to(folder).as_posix() for root, _, names in os.walk(folder) for name in names}
    for name in sorted(present - set(wanted) - {main}):
        r.error(
            (),
            f"{name}: the bundle carries a file its config does not name (refused: a bundle holds exactly the "
            "files its config names and their zones include)",
        )


def _digest(
    canonical: bytes, zones: list[zonefile.ZoneData], regions: dict[str, Any], databases: GeoIP | None
) -> slices.Steps[str]:
    """A short hash of everything that decides answers: the YAML (*canonical*, its values
    as `yamlframes.canonical` writes them), zone data, address lists, GeoIP databases."""
    h = hashlib.sha256(canonical)
    for zone in sorted(zones, key=lambda z: z.origin):
        h.update(repr((zone.origin, sorted(zone.rrsets, key=repr))).encode())
        yield
    for i, name in enumerate(sorted(regions)):
        if i % traffic.REGION_STEP == traffic.REGION_STEP - 1:
            yield
        h.update(repr((name, [str(n) for n in regions[name].networks])).encode())
    for key, database in sorted((databases.databases if databases else {}).items()):
        h.update(f"geoip {key} {database.sha256}".encode())
    return h.hexdigest()[:16]


def _datacenters(r: Reader, top: Mapping) -> tuple[str, ...]:
    raw = top.require("datacenters", "the list of data center names")
    items = r.list(top.at("datacenters"), raw)
    if items is None:
        r.broken.add(("datacenter", "*"))  # do not also report every reference to one
    out: list[str] = []
    for i, item in enumerate(items or []):
        name = r.name(("datacenters", i), item, "data center name")
        if name is None:
            r.broken.add(("datacenter", str(item)))
            continue
        if name in out:
            r.error(("datacenters", i), f"data center {name!r} is listed twice")
        else:
            out.append(name)
    return tuple(out)


def _hostport(r: Reader, m: Mapping, key: str, default_port: int, default: str | None = None) -> HostPort | None:
    value = m.get(key, default) if default is not None else m.require(key, "ADDRESS:PORT")
    parsed = r.hostport(m.at(key), value, default_port)
    return None if parsed is None else HostPort(*parsed)


def _sync_group(
    r: Reader, top: Mapping, datacenters: tuple[str, ...], resolve: Any, api_settings: ApiSettings
) -> SyncGroup:
    empty = SyncGroup("", (), TLSFiles(Path(), Path(), Path()))
    m = r.mapping(("sync_group",), top.require("sync_group", "the sync group: name, tls and members"))
    if m is None:
        return empty
    name = r.name(m.at("name"), m.require("name", "the sync group's name"), "sync group name") or ""
    tls = TLSFiles(resolve("certs/ca.pem"), resolve("certs/{node}.pem"), resolve("certs/{node}.key"))
    if m.has("tls"):
        t = r.mapping(m.at("tls"), m.get("tls"), "a mapping {ca, cert, key}")
        if t is not None:
            tls = TLSFiles(
                *(resolve(t.string(k, str(getattr(tls, k))) or str(getattr(tls, k))) for k in ("ca", "cert", "key"))
            )
            t.done()
    settings = SyncSettings()
    values = {}
    for key, default, lo, hi in (
        ("idle_timeout", settings.idle_timeout, 3, 3600),
        ("heartbeat_interval", settings.heartbeat_interval, 0.1, 60),
        ("heartbeat_timeout", settings.heartbeat_timeout, 0.3, 600),
        ("handshake_timeout", settings.handshake_timeout, 1, 600),
        ("reconcile_interval", settings.reconcile_interval, 1, 86400),
        ("cold_start_wait", settings.cold_start_wait, 0, 600),
        ("snapshot_interval", settings.snapshot_interval, 1, 3600),
    ):
        value = m.number(key, default, lo, hi)
        values[key] = default if value is None else value
    if values["heartbeat_timeout"] < 2 * values["heartbeat_interval"]:
        r.error(
            m.at("heartbeat_timeout"),
            f"must be at least twice heartbeat_interval ({values['heartbeat_interval']:g}), "
            "or one late heartbeat makes a peer silent",
        )
    if values["heartbeat_timeout"] >= values["idle_timeout"]:
        r.error(
            m.at("heartbeat_timeout"),
            f"must be less than idle_timeout ({values['idle_timeout']:g}): a silent peer stops counting "
            "before its connection is closed",
        )
    settings = SyncSettings(**values, config_sync=m.boolean("config_sync", True))
    members: list[Member] = []
    raw_members = r.list(m.at("members"), m.require("members", "the GTM nodes of the group"))
    if raw_members is not None and not raw_members:
        r.error(m.at("members"), "a sync group needs at least one member")
    listeners: dict[str, str] = {}
    for i, entry in enumerate(raw_members or []):
        path = (*m.at("members"), i)
        e = r.mapping(path, entry, "a mapping {name, datacenter, peer, dns, api}")
        if e is None:
            continue
        member_name = r.name(
            e.at("name"), e.require("name", "the node's name, also its certificate's DNS name"), "member name"
        )
        if member_name is not None:
            try:
                membername.check(member_name)
            except membername.BadName as err:
                r.error(e.at("name"), str(err))
                member_name = None
        dc = traffic.datacenter(r, e.at("datacenter"), e.require("datacenter", "the member's data center"), datacenters)
        peer = _hostport(r, e, "peer", DEFAULT_PEER_PORT)
        api = _hostport(r, e, "api", DEFAULT_API_PORT, "127.0.0.1:8053")
        if api is not None and not api.host.is_loopback:
            problem = api_beyond_loopback(api, api_settings)
            if problem is not None:
                r.error(e.at("api"), problem)
                api = None
        probe_source = r.address(e.at("probe_source"), e.get("probe_source")) if e.has("probe_source") else None
        rum_listener = _hostport(r, e, "rum", DEFAULT_RUM_PORT) if e.has("rum") else None
        dns: list[HostPort] = []
        raw_dns = e.require("dns", "the addresses the node answers DNS on")
        dns_list = r.list(e.at("dns"), raw_dns, "a list of ADDRESS:PORT", allow_scalar=True)
        if dns_list is not None and not dns_list:
            r.error(e.at("dns"), "a member needs at least one DNS address")
        for j, value in enumerate(dns_list or []):
            at = (*e.at("dns"), j) if isinstance(raw_dns, list) else e.at("dns")
            parsed = r.hostport(at, value, DEFAULT_DNS_PORT)
            if parsed is not None:
                if HostPort(*parsed) in dns:
                    r.error(at, f"{HostPort(*parsed)} is listed twice")
                    continue
                dns.append(HostPort(*parsed))
        e.done()
        if member_name is None or dc is None or peer is None or api is None or not dns:
            continue
        if any(x.name == member_name for x in members):
            r.error(e.at("name"), f"member {member_name!r} is listed twice")
            continue
        heard = [("peer", peer), ("api", api)] + [("dns", d) for d in dns] + [("rum", h) for h in [rum_listener] if h]
        for what, hp in heard:
            if hp.host.is_loopback or hp.host.is_unspecified:
                continue  # the same on every host: members on different machines may share it
            owner = listeners.setdefault(f"{what}/{hp}", member_name)
            if owner != member_name:
                r.error(e.at(what), f"{what} address {hp} is also member {owner!r}'s")
        members.append(Member(member_name, dc, peer, tuple(dns), api, probe_source, rum_listener))
    m.done()
    return SyncGroup(name, tuple(members), tls, settings)


def _persistence(r: Reader, top: Mapping) -> PersistenceTable:
    default = PersistenceTable()
    if not top.has("persistence"):
        return default
    m = r.mapping(("persistence",), top.get("persistence"), "a mapping {max_records}")
    if m is None:
        return default
    max_records = m.integer("max_records", default.max_records, 1, schema.KINDS["persist"].writer_limit)
    m.done()
    return PersistenceTable(max_records or default.max_records)


def _dns_server(r: Reader, top: Mapping, resolve: Any, log_dir: Path) -> DNSServer:
    default = DNSServer(1232, 10.0, 1000, 1)
    if not top.has("dns_server"):
        return default
    m = r.mapping(("dns_server",), top.get("dns_server"))
    if m is None:
        return default
    # 1232 at most: larger UDP answers fragment (DNS flag day 2020) and amplify more
    size = m.integer("udp_payload_size", default.udp_payload_size, 512, 1232)
    idle = m.number("tcp_idle_timeout", default.tcp_idle_timeout, 0.1, 3600)
    message = m.number("tcp_message_timeout", default.tcp_message_timeout, 0.1, 3600)
    clients = m.integer("tcp_max_clients", default.tcp_max_clients, 1, 1_000_000)
    per_source = m.integer("tcp_max_per_source", None, 1, 1_000_000)
    processes = m.integer("processes", default.processes, 1, 64)
    rate_limit = _rate_limit(r, m) if m.has("rate_limit") else default.rate_limit
    version = m.string("version", None)
    if version is not None and not (version.isascii() and version.isprintable() and len(version) <= 255):
        r.error(m.at("version"), "must be at most 255 printable ASCII characters (one TXT string)")
        version = None
    ecs_trusted: list[IPNetwork] = []
    if m.has("ecs_trusted"):
        items = r.list(m.at("ecs_trusted"), m.get("ecs_trusted"), "a list of resolver networks such as 192.0.2.0/24")
        for i, item in enumerate(items or []):
            network = r.network((*m.at("ecs_trusted"), i), item)
            if network is not None:
                ecs_trusted.append(network)
    query_log = querylog.read_query_log(r, m, resolve, log_dir)
    transfer_limits = transfer.read_transfer_limits(r, m)
    m.done()
    if per_source is None:  # (absent or broken: the default, within tcp_max_clients)
        per_source = min(default.tcp_max_per_source, clients or default.tcp_max_clients)
    elif clients is not None and per_source > clients:
        r.error(m.at("tcp_max_per_source"), f"{per_source} is more than tcp_max_clients ({clients})")
        per_source = clients
    return DNSServer(
        size or default.udp_payload_size,
        idle or default.tcp_idle_timeout,
        clients or default.tcp_max_clients,
        processes or default.processes,
        message or default.tcp_message_timeout,
        rate_limit,
        version,
        tuple(ecs_trusted),
        query_log,
        transfer_limits,
        per_source,
    )


def _rate_limit(r: Reader, parent: Mapping) -> RateLimit:
    default = RateLimit()
    m = r.mapping(parent.at("rate_limit"), parent.get("rate_limit"))
    if m is None:
        return default
    rate = m.integer("responses_per_second", default.responses_per_second, 0, 1_000_000)
    window = m.number("window", default.window, 1, 3600)
    slip = m.integer("slip", default.slip, 0, 100)
    v4 = m.integer("ipv4_prefix", default.ipv4_prefix, 8, 32)
    v6 = m.integer("ipv6_prefix", default.ipv6_prefix, 16, 128)
    table = m.integer("table_size", default.table_size, 1000, 10_000_000)
    exempt: list[IPNetwork] = []
    if m.has("exempt"):
        items = r.list(m.at("exempt"), m.get("exempt"), "a list of networks such as 192.0.2.0/24")
        for i, item in enumerate(items or []):
            network = r.network((*m.at("exempt"), i), item)
            if network is not None:
                exempt.append(network)
    m.done()
    return RateLimit(
        default.responses_per_second if rate is None else rate,
        window or default.window,
        default.slip if slip is None else slip,
        v4 or default.ipv4_prefix,
        v6 or default.ipv6_prefix,
        tuple(exempt),
        table or default.table_size,
    )
