"""The loaded configuration: frozen objects with every name resolved.

`gtmcluster.config.load` builds these from the YAML file after validating all of it; the
rest of the code never sees the raw YAML. Cross references are object references (a pool
member holds its `VirtualServer`), so nothing downstream looks names up or can dangle.
The health checks and load sources are in `config.monitoring`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from gtmcluster.config.addresses import HostPort, IPAddress, IPNetwork
from gtmcluster.config.alerts import Alerts
from gtmcluster.config.dnsserver import DNSServer, ZoneTransfer
from gtmcluster.config.monitoring import HealthRule, Monitor, MonitorRule, TrafficSource
from gtmcluster.config.rum import Proximity, Rum
from gtmcluster.config.users import NO_USERS, ApiUsers
from gtmcluster.config.wideipnames import WideIPNames
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import RData, ZoneSet
from gtmcluster.runtime import slices
from gtmcluster.state.admin import AdminState
from gtmcluster.topology.records import Topology

if TYPE_CHECKING:
    from gtmcluster.dnsdata.keys import ZoneKey


@dataclass(frozen=True, slots=True)
class TLSFiles:
    """Paths of the sync group CA and of this node's certificate and key."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    datacenter: str
    peer: HostPort
    dns: tuple[HostPort, ...]
    api: HostPort
    #: LDNS probes leave from this address (default: whatever the routing table picks)
    probe_source: IPAddress | None = None
    #: the member's public listener of browsers' beacons (`config.rum`); None: takes none
    rum: HostPort | None = None


@dataclass(frozen=True, slots=True)
class SyncSettings:
    """Timers of the peer protocol and of the state snapshot."""

    idle_timeout: float = 30.0  # a silent peer connection is closed after this
    heartbeat_interval: float = 1.0  # each connection sends a heartbeat this often
    #: a peer not heard from for this long stops counting (its verdicts, its quorum vote)
    #: until it is heard again; its connection stays open until `idle_timeout`
    heartbeat_timeout: float = 3.0
    handshake_timeout: float = 10.0  # TLS handshake and Hello must be done within this
    reconcile_interval: float = 60.0  # anti-entropy with every peer this often
    cold_start_wait: float = 5.0  # at start, wait this long for peers before using measurements
    snapshot_interval: float = 10.0  # write the state snapshot this often (when changed)
    #: the group's config is shared (`sync.configsync`): a push or SIGHUP on one member
    #: reaches all; off: each member runs its own file, as before config sync
    config_sync: bool = True


@dataclass(frozen=True, slots=True)
class SyncGroup:
    name: str
    members: tuple[Member, ...]
    #: templates, with ``{node}`` still in them; see `Config.tls_for`
    tls: TLSFiles
    settings: SyncSettings = SyncSettings()


@dataclass(frozen=True, slots=True)
class Link:
    """A data center's uplink: up while any of its targets answers the monitor."""

    name: str
    datacenter: str
    targets: tuple[HostPort, ...]  # port 0 where the monitor needs none (icmp) or sets it
    monitor: Monitor
    #: capacity in megabits a second (`bandwidth_ratio`, `link_capacity`, `max_utilisation`)
    bandwidth_mbps: float | None = None
    #: price of a megabit a second on this link, in any unit common to the links (`lowest_cost`)
    cost: float | None = None
    #: share of `bandwidth_mbps` (0..1] above which the link takes no new clients
    max_utilisation: float | None = None
    traffic: TrafficSource | None = None


@dataclass(frozen=True, slots=True)
class RecordTarget:
    """What a virtual server answers with instead of an address: the data of one CNAME,
    MX, SRV or NAPTR record (read and encoded by `gtmcluster.config.targets`)."""

    rtype: int
    name: Name  # the CNAME target, MX exchange, SRV target or NAPTR replacement
    rdata: RData  # the record's RDATA, ready for the wire writer
    text: str  # its presentation form, e.g. "10 mail1.example.com." (API, explain)


@dataclass(frozen=True, slots=True)
class VirtualServer:
    name: str
    address: IPAddress | None  # None when the server answers with a `target` instead
    port: int
    datacenter: str
    #: checked by each of these (none: not monitored, always up as far as health goes)
    monitors: tuple[Monitor, ...]
    admin_state: str = "enabled"  # enabled | disabled | drain (the configured default)
    link: Link | None = None
    depends_on: tuple[str, ...] = ()  # names of virtual servers this one needs
    manual_resume: bool = False  # after going down, stay out until an operator enables it
    slow_start: float = 0.0  # seconds over which a returning server's share ramps up
    #: a CNAME, MX, SRV or NAPTR record answered instead of an address (docs/wideip-types.md)
    target: RecordTarget | None = None
    #: what the monitor of a `target` server checks (it has no address of its own)
    check_address: IPAddress | None = None
    monitor_rule: MonitorRule = MonitorRule()  # noqa: RUF009 - frozen; how the verdicts of its monitors combine

    @property
    def enabled(self) -> bool:
        return self.admin_state != "disabled"

    @property
    def rtype(self) -> int:
        """The record type this server answers: A or AAAA by its address, else its target's."""
        if self.target is not None:
            return self.target.rtype
        assert self.address is not None
        return 1 if self.address.version == 4 else 28

    @property
    def probe_address(self) -> IPAddress | None:
        """The address health checks go to: its own, or a target server's `check_address`."""
        return self.address if self.address is not None else self.check_address

    @property
    def health_rule(self) -> HealthRule:
        """How the GTM nodes' verdicts combine: its monitors' `rule` (the config makes
        them all the same)."""
        return self.monitors[0].rule if self.monitors else HealthRule("any")

    @property
    def unknown_as_up(self) -> bool:
        """Whether it counts as up before any node's verdict: the monitor rule applied to
        each monitor's `unknown_as`."""
        ups = sum(m.unknown_as_up for m in self.monitors)
        return ups >= self.monitor_rule.needed(len(self.monitors))


@dataclass(frozen=True, slots=True)
class Health:
    """Node-wide health checking settings: the checker's budget (`gtmcluster.health.schedule`)."""

    max_in_flight: int = 2500  # checks running at once on one node (each may hold a socket)
    max_checks_per_second: float = 1000.0  # checks started per second on one node


@dataclass(frozen=True, slots=True)
class Tolerance:
    """RTTs this close to the best count as ties (then completion rate, then hops decide)."""

    percent: float = 10.0
    min_us: int = 1000

    def tied(self, rtt_us: int, best_us: int) -> bool:
        return rtt_us - best_us <= max(best_us * self.percent / 100, self.min_us)


@dataclass(frozen=True, slots=True)
class QosWeights:
    """Coefficients of the qos method's score (BIG-IP DNS's defaults)."""

    rtt: float = 50.0
    hops: float = 0.0
    completion_rate: float = 5.0
    topology: float = 0.0
    vs_capacity: float = 0.0
    packet_rate: float = 1.0
    kbps: float = 3.0
    connections: float = 0.0


@dataclass(frozen=True, slots=True)
class PoolMember:
    vs: VirtualServer
    ratio: int
    #: indexes of topology records whose server selector matches this member in this pool
    topology_mask: frozenset[int]
    #: enabled | disabled | drain in this pool: the configured default, which an operator's
    #: record ``admin/member/POOL/SERVER`` overrides (`state.admin`)
    admin_state: str = "enabled"

    @property
    def name(self) -> str:
        return self.vs.name

    @property
    def datacenters(self) -> frozenset[str]:
        return frozenset((self.vs.datacenter,))

    @property
    def members(self) -> tuple[VirtualServer, ...]:
        return (self.vs,)


@dataclass(frozen=True, slots=True)
class Methods:
    preferred: str
    alternate: str
    fallback: str

    def chain(self) -> tuple[tuple[str, str], ...]:
        return (("preferred", self.preferred), ("alternate", self.alternate), ("fallback", self.fallback))

    def names(self) -> tuple[str, str, str]:
        return (self.preferred, self.alternate, self.fallback)


@dataclass(frozen=True, slots=True)
class Prefixes:
    """How much of a client address identifies it (persistence, static persist)."""

    ipv4: int
    ipv6: int

    def for_version(self, version: int) -> int:
        return self.ipv4 if version == 4 else self.ipv6


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    members: tuple[PoolMember, ...]
    methods: Methods
    ttl: int
    max_answers: int
    fallback_ips: tuple[IPAddress, ...]
    static_persist: Prefixes
    rtt_tolerance: Tolerance = Tolerance()
    qos: QosWeights = QosWeights()
    #: enabled | disabled | drain: the configured default (an operator's ``admin/pool/NAME``
    #: record overrides it); a pool without members answers only by `fallback_ip`
    admin_state: str = "enabled"


@dataclass(frozen=True, slots=True)
class PoolRef:
    """A pool as a wide IP uses it, with its ratio for ``pool_lb: ratio``."""

    pool: Pool
    ratio: int
    topology_mask: frozenset[int]

    @property
    def name(self) -> str:
        return self.pool.name

    @property
    def datacenters(self) -> frozenset[str]:
        return frozenset(m.vs.datacenter for m in self.pool.members)

    @property
    def members(self) -> tuple[VirtualServer, ...]:
        return tuple(m.vs for m in self.pool.members)


@dataclass(frozen=True, slots=True)
class Persistence:
    ttl: int
    prefixes: Prefixes


FAILURE_RESPONSES = ("return_to_dns", "fallback_ip", "nxdomain", "servfail", "refused", "drop")


@dataclass(frozen=True, slots=True)
class WideIP:
    name: str  # presentation form, lowercase, without the trailing dot
    labels: Name  # lowercased
    #: DNS types answered by load balancing (A = 1, AAAA = 28; CNAME, MX, SRV, NAPTR:
    #: docs/wideip-types.md); a CNAME wide IP has that type alone
    types: frozenset[int]
    pools: tuple[PoolRef, ...]
    pool_lb: str
    persistence: Persistence | None
    last_resort: PoolRef | None
    #: what to answer when every pool (and the last resort) yields nothing
    failure_response: str = "return_to_dns"
    fallback_ips: tuple[IPAddress, ...] = ()  # for failure_response: fallback_ip
    #: more names answered exactly as this one (lowercased labels; ``*.`` wildcards too)
    aliases: tuple[Name, ...] = ()
    #: enabled | disabled | drain: the configured default (an operator's record overrides it)
    admin_state: str = "enabled"
    #: the configured admin states other than `enabled` of this wide IP, its pools (the last
    #: resort's too) and their members, by the keys the balancer reads ("wideip/NAME",
    #: "pool/NAME", "member/POOL/SERVER"): made once, when the config is read; usually empty
    configured_admin: Mapping[str, AdminState] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    networks: tuple[IPNetwork, ...]
    #: GeoIP terms it holds: ("country", "CN"), ("continent", "EU"), ("asn", "4134")
    geo: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Prober:
    """How this node measures its paths to the LDNSes that ask it."""

    protocols: tuple[str, ...] = ("dns_dot", "dns_rev", "udp", "tcp", "icmp")
    path_ttl: int = 2419200  # a measured path is kept this long (28 days) unless re-measured
    probe_interval: float = 600.0  # a path older than this is re-measured when its LDNS asks
    inactive_ldns_ttl: int = 2419200  # an LDNS nobody has heard from this long is forgotten
    timeout: float = 2.0  # per protocol attempt
    max_per_second: float = 20.0  # probes started per second, per node
    max_in_flight: int = 32  # probes running at once, per node
    udp_port: int = 33434  # the udp protocol's destination port (any reply counts)
    allow: tuple[IPNetwork, ...] = ()  # special-purpose networks (RFC 6890) that may be probed
    deny: tuple[IPNetwork, ...] = ()  # never probed (wins over allow)
    only: tuple[IPNetwork, ...] = ()  # when set, only LDNSes in these networks are probed
    #: LDNSes whose paths the group keeps (per data center with a member: the path records
    #: are at most this many times those data centers); past it the least recently measured go
    max_ldns: int = 1_000_000


@dataclass(frozen=True, slots=True)
class PersistenceTable:
    """The group's LDNS persistence records, all wide IPs together."""

    #: records kept at most; past it the least recently written go (on every member alike)
    max_records: int = 200_000


@dataclass(frozen=True, slots=True)
class ApiLimits:
    """What the HTTP API's clients may hold (``api.limits``): connections, answers in
    progress and log followers, in all and per source address, counted apart for clients
    that showed the token and those that did not (so these never lock an operator out);
    and how long a connection may idle and an answer wait for its client to read."""

    #: open connections, in all and per source; past either, the new one displaces the
    #: least recently active connection that never showed the token (else it is refused)
    connections: int = 256
    connections_per_source: int = 32
    #: answers in progress (from the request to the last byte handed to the connection)
    #: to clients that showed the token, to those that did not, and per source of each kind
    answers: int = 64
    answers_without_token: int = 16
    answers_per_source: int = 8
    #: log followers (``/api/v1/logs?follow=1``), the same way
    followers: int = 16
    followers_without_token: int = 4
    followers_per_source: int = 4
    #: seconds a connection has to send a whole request head, from its opening or the end
    #: of its last answer
    idle_timeout: float = 15.0
    #: seconds an answer (or a follower) may wait for its client to read before the
    #: connection is cut
    stall_timeout: float = 30.0
    #: seconds a follower without the token is kept before its answer ends (0: no limit)
    follow_without_token: float = 600.0


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """The HTTP API's bearer token (required for every write, and for every request when the
    API listens beyond loopback or `token_for_reads` is set; when None, the node's own
    generated token), and the host names its requests may give in ``Host``."""

    token: str | None = None
    #: reads need the token too, even on loopback (a host shared with other users)
    token_for_reads: bool = False
    #: names operators use for the API (``{node}`` stands for the member's name), accepted
    #: in ``Host`` besides the API's own address (and ``localhost`` when on loopback)
    names: tuple[str, ...] = ()
    #: where the token was read from (``api.token_file``), None when given inline or not at all
    token_file: Path | None = None
    #: serve the API over HTTPS with the member's sync group certificate (``api.tls``)
    tls: bool = False
    #: with `tls`: every connection must show a client certificate from the group CA
    #: (``api.client_certificates: required``)
    client_certificates_required: bool = False
    #: the operator accepts plain HTTP beyond loopback (``api.insecure_http: true``)
    insecure_http: bool = False
    #: what clients may hold of the API (``api.limits``)
    limits: ApiLimits = ApiLimits()
    #: the identities of ``api.users_file`` (read with the config), and where they were read
    users: ApiUsers = NO_USERS
    users_file: Path | None = None
    #: the operators' CA (``api.tls: {client_ca: FILE}``): client certificates it issued are
    #: identities of the users file, by subject or SAN
    client_ca: Path | None = None
    client_ca_pem: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class Config:
    path: Path
    base_dir: Path
    sync_group: SyncGroup
    state_dir: str  # template with {node}
    log_dir: Path
    datacenters: tuple[str, ...]
    monitors: Mapping[str, Monitor]
    links: Mapping[str, Link]
    health: Health
    virtual_servers: Mapping[str, VirtualServer]
    regions: Mapping[str, Region]
    topology: Topology
    pools: Mapping[str, Pool]
    wideips: Mapping[Name, WideIP]  # by lowercased labels of their own names
    prober: Prober
    zones: ZoneSet
    dns_server: DNSServer
    api: ApiSettings
    persistence: PersistenceTable = PersistenceTable()
    #: the webhooks told of what the node notices (``alerts``)
    alerts: Alerts = field(default_factory=Alerts)
    #: real-user measurements (``rum``; None: off) and the order of proximity's sources
    rum: Rum | None = None
    proximity: Proximity = field(default_factory=Proximity)
    #: identifies what this config makes nodes do (its YAML, zones and address lists):
    #: nodes of one group compare it to notice different configs
    digest: str = ""
    #: virtual server -> the wide IPs whose answers it may be part of (through any of their
    #: pools, the last resort included): made when the config is read, off the reactor
    wideips_of: Mapping[str, tuple[str, ...]] = field(repr=False, compare=False, default_factory=dict)
    #: which wide IP answers a name (own names, aliases, wildcards): the responder's lookup
    wideip_names: WideIPNames[WideIP] = field(repr=False, compare=False, default_factory=WideIPNames)
    #: the keys of the zones signed online (`zones[].dnssec`), by lowercased origin labels
    dnssec: Mapping[Name, tuple[ZoneKey, ...]] = field(repr=False, compare=False, default_factory=dict)
    #: zone origin (lowercased labels) -> its ``transfer`` settings, for zones that have them
    transfers: Mapping[Name, ZoneTransfer] = field(default_factory=dict)
    #: every file and folder of the member's own the config names (certificates, token and
    #: secret files, signing keys, log folder...), as resolved -> as written
    own_paths: Mapping[Path, str] = field(repr=False, compare=False, default_factory=dict)

    @cached_property
    def admin_defaults(self) -> Mapping[str, AdminState]:
        """The configured admin states other than `enabled` of every pool, pool member and
        wide IP, by "<level>/<name>" (what applies where no operator's record is held)."""
        found: dict[str, AdminState] = {}
        for pool in self.pools.values():
            found.update(_pool_admin(pool))
        for wideip in self.wideips.values():
            if wideip.admin_state != "enabled":
                found[f"wideip/{wideip.name}"] = AdminState("wideip", wideip.name, wideip.admin_state, configured=True)
        return MappingProxyType(found)

    def member(self, name: str) -> Member:
        for m in self.sync_group.members:
            if m.name == name:
                return m
        known = ", ".join(m.name for m in self.sync_group.members)
        raise KeyError(f"{name!r} is not a member of sync group {self.sync_group.name!r} (members: {known})")

    def tls_for(self, node: str) -> TLSFiles:
        t = self.sync_group.tls
        return TLSFiles(*(Path(str(p).replace("{node}", node)) for p in (t.ca, t.cert, t.key)))

    def state_dir_for(self, node: str) -> Path:
        return self.base_dir / self.state_dir.replace("{node}", node)


def configured_admin(wideip: str, state: str, refs: Iterable[PoolRef]) -> Mapping[str, AdminState]:
    """`WideIP.configured_admin` of wide IP *wideip* (configured *state*) using *refs*."""
    found: dict[str, AdminState] = {}
    if state != "enabled":
        found[f"wideip/{wideip}"] = AdminState("wideip", wideip, state, configured=True)
    for ref in refs:
        found.update(_pool_admin(ref.pool))
    return MappingProxyType(found) if found else _NO_ADMIN


def _pool_admin(pool: Pool) -> dict[str, AdminState]:
    """The configured admin states other than `enabled` of *pool* and its members."""
    found = {}
    if pool.admin_state != "enabled":
        found[f"pool/{pool.name}"] = AdminState("pool", pool.name, pool.admin_state, configured=True)
    for m in pool.members:
        if m.admin_state != "enabled":
            name = f"{pool.name}/{m.name}"
            found[f"member/{name}"] = AdminState("member", name, m.admin_state, configured=True)
    return found


_NO_ADMIN: Mapping[str, AdminState] = MappingProxyType({})


def servers_of(wideip: WideIP) -> dict[str, None]:
    """The virtual servers an answer for *wideip* may name (its pools' members and its last
    resort's), in order, once each."""
    refs = [*wideip.pools, *([wideip.last_resort] if wideip.last_resort else [])]
    return dict.fromkeys(m.vs.name for ref in refs for m in ref.pool.members)


def wideips_by_server(wideips: Iterable[WideIP]) -> slices.Steps[dict[str, tuple[str, ...]]]:
    """Virtual server -> the wide IPs whose answers it may be part of (in steps:
    `gtmcluster.runtime.slices`)."""
    out: dict[str, list[str]] = {}
    for i, wideip in enumerate(wideips):
        if i % 128 == 127:
            yield
        for name in servers_of(wideip):
            out.setdefault(name, []).append(wideip.name)
    yield
    return {name: tuple(names) for name, names in out.items()}
