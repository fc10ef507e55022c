"""The answering half of the traffic config: pools (members, method chains, fallback
addresses) and wide IPs (names, types, pools, persistence, failure response), with the
admin states configured for pools, pool members and wide IPs (`admin_state`: the default an
operator's record overrides, as for a virtual server: `state.admin`)."""

from __future__ import annotations

from collections.abc import Mapping as MappingT
from typing import Any

import dns.rdatatype

from gtmcluster.config import wideipnames
from gtmcluster.config.lbmethods import MEMBER_METHODS, POOL_METHODS
from gtmcluster.config.model import (
    FAILURE_RESPONSES,
    Methods,
    Persistence,
    Pool,
    PoolMember,
    PoolRef,
    Prefixes,
    QosWeights,
    Tolerance,
    VirtualServer,
    WideIP,
    configured_admin,
)
from gtmcluster.config.problems import KeyPath
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.config.targets import TARGET_KEYS
from gtmcluster.config.traffic import (
    ADMIN_STATES,
    MAX_ANSWERS,
    MAX_RATIO,
    MAX_TTL,
    POOL_STEP,
    STEP,
    TYPE_NAMES,
    WIDEIP_TYPES,
)
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_AAAA, TYPE_CNAME, ZoneSet
from gtmcluster.runtime.slices import Steps
from gtmcluster.state import schema
from gtmcluster.topology.records import ServerFacts, Topology

#: what answers each type (for the message when no pool has it)
_TYPE_SOURCES = {
    TYPE_A: "an IPv4 virtual server or fallback_ip",
    TYPE_AAAA: "an IPv6 virtual server or fallback_ip",
    **{t: f"a virtual server with '{k}'" for k, t in TARGET_KEYS.items()},
}


def _methods(r: Reader, pool: Mapping, has_fallback_ip: bool) -> Methods:
    defaults = {"preferred": "round_robin", "alternate": "none", "fallback": "none"}
    chosen = dict(defaults)
    if pool.has("load_balancing"):
        m = r.mapping(
            pool.at("load_balancing"), pool.get("load_balancing"), "a mapping {preferred, alternate, fallback}"
        )
        if m is not None:
            for slot, default in defaults.items():
                value = m.string(slot, default, MEMBER_METHODS)
                if value is not None:
                    chosen[slot] = value
                    if value == "fallback_ip" and not has_fallback_ip:
                        r.error(m.at(slot), "fallback_ip needs the pool's 'fallback_ip' address(es)")
            m.done()
    return Methods(**chosen)


def _prefixes(m: Mapping, v4: int, v6: int) -> Prefixes:
    ipv4 = m.integer("ipv4_prefix", v4, 0, 32)
    ipv6 = m.integer("ipv6_prefix", v6, 0, 128)
    return Prefixes(v4 if ipv4 is None else ipv4, v6 if ipv6 is None else ipv6)


def read_pools(r: Reader, raw: Any, vss: MappingT[str, VirtualServer], topology: Topology) -> Steps[dict[str, Pool]]:
    out: dict[str, Pool] = {}
    section = r.mapping(("pools",), raw, "a mapping of pool names to settings")
    if section is None:
        return out
    for n, (name, value) in enumerate(section.items()):
        if n % POOL_STEP == POOL_STEP - 1:
            yield
        path = section.at(name)
        m = r.mapping(path, value)
        if r.name(path, name, "pool name") is None or m is None:
            r.broken.add(("pool", name))
            continue
        before = len(r.problems.found)
        members = _members(r, m, name, vss, topology)
        fallback_ips = []
        if m.has("fallback_ip"):
            items = r.list(m.at("fallback_ip"), m.get("fallback_ip"), allow_scalar=True) or []
            for i, item in enumerate(items):
                at = (*m.at("fallback_ip"), i) if isinstance(m.get("fallback_ip"), list) else m.at("fallback_ip")
                address = r.address(at, item)
                if address is not None:
                    fallback_ips.append(address)
        methods = _methods(r, m, bool(fallback_ips))
        listed = m.get("members", [])
        answers = bool(fallback_ips) and "fallback_ip" in methods.names()
        if listed == [] and (m.has("members") or m.has("fallback_ip")) and not answers:
            r.error(
                m.at("members") if m.has("members") else path,
                "a pool needs at least one member, or else 'fallback_ip' addresses and the method fallback_ip"
                " in its load_balancing (a pool without members answers only by fallback_ip)",
            )
        ttl = m.integer("ttl", 30, 0, MAX_TTL)
        max_answers = m.integer("max_answers", 1, 1, MAX_ANSWERS)
        tolerance = Tolerance()
        if m.has("rtt_tolerance"):
            t = r.mapping(m.at("rtt_tolerance"), m.get("rtt_tolerance"), "a mapping {percent, min_us}")
            if t is not None:
                percent = t.number("percent", tolerance.percent, 0, 1000)
                min_us = t.integer("min_us", tolerance.min_us, 0, 10_000_000)
                tolerance = Tolerance(
                    tolerance.percent if percent is None else percent, tolerance.min_us if min_us is None else min_us
                )
                t.done()
        qos = QosWeights()
        if m.has("qos"):
            q = r.mapping(m.at("qos"), m.get("qos"), "a mapping of qos coefficients")
            if q is not None:
                values = {}
                for field_name in QosWeights.__dataclass_fields__:
                    value = q.number(field_name, getattr(qos, field_name), 0, 1_000_000)
                    values[field_name] = getattr(qos, field_name) if value is None else value
                q.done()
                qos = QosWeights(**values)
        static_persist = Prefixes(32, 128)
        if m.has("static_persist"):
            sp = r.mapping(m.at("static_persist"), m.get("static_persist"), "a mapping {ipv4_prefix, ipv6_prefix}")
            if sp is not None:
                static_persist = _prefixes(sp, 32, 128)
                sp.done()
        admin = m.string("admin_state", "enabled", ADMIN_STATES)
        m.done()
        if len(r.problems.found) > before:
            r.broken.add(("pool-incomplete", name))  # wide IPs cannot judge its address families
        if ttl is None or max_answers is None or admin is None:
            r.broken.add(("pool", name))
            continue
        out[name] = Pool(
            name, tuple(members), methods, ttl, max_answers, tuple(fallback_ips), static_persist, tolerance, qos, admin
        )
    return out


def _members(
    r: Reader, m: Mapping, pool: str, vss: MappingT[str, VirtualServer], topology: Topology
) -> list[PoolMember]:
    """A pool's members: virtual server names, or {virtual_server, ratio, admin_state}. The
    key may be absent (or the list empty) only where the pool answers by fallback_ip."""
    members: list[PoolMember] = []
    if not m.has("members") and not m.has("fallback_ip"):
        m.require("members", "the virtual servers of the pool, or else its fallback_ip addresses")
        return members
    raw_members = r.list(m.at("members"), m.get("members", []))
    for i, entry in enumerate(raw_members or []):
        at = (*m.at("members"), i)
        ratio: int | None = 1
        admin: str | None = "enabled"
        if isinstance(entry, dict):
            e = Mapping(r, at, entry)
            vs_name = e.require("virtual_server", "a virtual server name")
            ratio = e.integer("ratio", 1, 0, MAX_RATIO)
            admin = e.string("admin_state", "enabled", ADMIN_STATES)
            e.done()
            at = (*at, "virtual_server")
        else:
            vs_name = entry
        vs_name = r.name(at, vs_name, "virtual server name")
        if vs_name is None or ratio is None or admin is None:
            continue
        if r.known(at, vs_name, "virtual_server", vss, "virtual server") is None:
            r.broken.add(("pool-incomplete", pool))
            continue
        vs = vss[vs_name]
        if any(p.vs is vs for p in members):
            r.error(at, f"virtual server {vs_name!r} is listed twice in this pool")
            continue
        addresses = () if vs.address is None else (vs.address,)
        facts = ServerFacts(vs.name, False, frozenset([pool]), frozenset([vs.datacenter]), addresses)
        members.append(PoolMember(vs, ratio, topology.server_mask(facts), admin))
    return members


def _pool_ref(r: Reader, at: KeyPath, entry: Any, pools: MappingT[str, Pool], topology: Topology) -> PoolRef | None:
    ratio: int | None = 1
    if isinstance(entry, dict):
        e = Mapping(r, at, entry)
        pool_name = e.require("pool", "a pool name")
        ratio = e.integer("ratio", 1, 0, MAX_RATIO)
        e.done()
        at = (*at, "pool")
    else:
        pool_name = entry
    pool_name = r.name(at, pool_name, "pool name")
    if pool_name is None or ratio is None:
        return None
    if r.known(at, pool_name, "pool", pools, "pool") is None:
        return None
    pool = pools[pool_name]
    facts = ServerFacts(
        pool.name,
        True,
        frozenset([pool.name]),
        frozenset(m.vs.datacenter for m in pool.members),
        tuple(m.vs.address for m in pool.members if m.vs.address is not None),
    )
    return PoolRef(pool, ratio, topology.server_mask(facts))


def read_wideips(
    r: Reader,
    raw: Any,
    pools: MappingT[str, Pool],
    topology: Topology,
    zones: ZoneSet,
    broken_zones: set[Name] | None,
) -> Steps[dict[Name, WideIP]]:
    """Wide IPs, by their own names (a wildcard's with its ``*``; aliases are not keys here:
    `wideipnames.WideIPNames` finds wide IPs by any of their names). *broken_zones*: origins
    of zones that failed to load (None: unknown), under which a name cannot be checked."""
    out: dict[Name, WideIP] = {}
    section = r.mapping(("wideips",), raw, "a mapping of wide IP names to settings")
    if section is None:
        return out
    claims = wideipnames.Claims(r)  # names and aliases, each for one wide IP
    for n, (name, value) in enumerate(section.items()):
        if n % STEP == STEP - 1:
            yield
        path = section.at(name)
        m = r.mapping(path, value)
        if m is None:
            continue
        labels = wideipnames.read_name(r, path, name, zones, broken_zones)
        aliases = wideipnames.read_aliases(r, m.at("aliases"), m.get("aliases", []), zones, broken_zones)
        types: set[int] = set()
        type_value = m.get("type", "A")
        for i, t in enumerate(r.list(m.at("type"), type_value, "a type or a list of types", allow_scalar=True) or []):
            at = (*m.at("type"), i) if isinstance(type_value, list) else m.at("type")
            t = r.string(at, t, choices=tuple(WIDEIP_TYPES))
            if t is not None:
                types.add(WIDEIP_TYPES[t])
        refs: list[PoolRef] = []
        raw_pools = r.list(m.at("pools"), m.require("pools", "the pools that answer this wide IP"))
        if raw_pools is not None and not raw_pools:
            r.error(m.at("pools"), "a wide IP needs at least one pool")
        complete = bool(raw_pools)  # every pool (and every member) known: families can be checked
        for i, entry in enumerate(raw_pools or []):
            ref = _pool_ref(r, (*m.at("pools"), i), entry, pools, topology)
            if ref is None or ("pool-incomplete", ref.name) in r.broken:
                complete = False
            if ref is not None:
                if any(x.pool is ref.pool for x in refs):
                    r.error((*m.at("pools"), i), f"pool {ref.name!r} is listed twice")
                else:
                    refs.append(ref)
        pool_lb = m.string("pool_lb", "round_robin", POOL_METHODS)
        persistence = None
        if m.has("persistence"):
            p = r.mapping(m.at("persistence"), m.get("persistence"), "a mapping {ttl, ipv4_prefix, ipv6_prefix}")
            if p is not None:
                # (a persistence record lives this long: no longer than peers take, state.schema)
                ttl = p.integer("ttl", 3600, 1, int(schema.MAX_PERSIST_TTL))
                prefixes = _prefixes(p, 32, 128)
                if p.boolean("enabled", True) and ttl is not None:
                    persistence = Persistence(ttl, prefixes)
                p.done()
        last_resort = None
        if m.has("last_resort_pool"):
            last_resort = _pool_ref(r, m.at("last_resort_pool"), m.get("last_resort_pool"), pools, topology)
        failure = m.string("failure_response", "return_to_dns", FAILURE_RESPONSES) or "return_to_dns"
        fallback_ips = []
        raw_ips = m.get("fallback_ip", [])
        for i, item in enumerate(r.list(m.at("fallback_ip"), raw_ips, allow_scalar=True) or []):
            address = r.address((*m.at("fallback_ip"), i) if isinstance(raw_ips, list) else m.at("fallback_ip"), item)
            if address is not None:
                fallback_ips.append(address)
        if failure == "fallback_ip" and not m.has("fallback_ip"):
            r.error(m.at("failure_response"), "fallback_ip needs the wide IP's 'fallback_ip' address(es)")
        admin = m.string("admin_state", "enabled", ADMIN_STATES)
        m.done()
        if TYPE_CNAME in types and len(types) > 1:
            r.error(m.at("type"), "a CNAME wide IP has no other type (RFC 1034 3.6.2: a CNAME stands alone)")
            continue
        if labels is None or pool_lb is None or not types or admin is None:
            continue
        if TYPE_CNAME in types and not _alone(r, path, labels, zones):
            continue
        answered = {member.vs.rtype for ref in refs for member in ref.pool.members}
        answered |= {TYPE_A if a.version == 4 else TYPE_AAAA for ref in refs for a in ref.pool.fallback_ips}
        for t in sorted(types):
            if complete and t not in answered:
                kind = TYPE_NAMES[t]
                r.error(m.at("type"), f"type {kind} but no pool has {_TYPE_SOURCES[t]}")
        text = names.to_text(labels).rstrip(".")
        if not claims.take(path, labels, text, alias=False):
            continue
        taken = tuple(alias for at, alias in aliases if claims.take(at, alias, text, alias=True))
        out[labels] = WideIP(
            text,
            labels,
            frozenset(types),
            tuple(refs),
            pool_lb,
            persistence,
            last_resort,
            failure,
            tuple(fallback_ips),
            aliases=taken,
            admin_state=admin,
            configured_admin=configured_admin(text, admin, [*refs, *([last_resort] if last_resort else [])]),
        )
    yield from wideipnames.check_cnames(r, claims.wildcards(), zones)
    return out


def _alone(r: Reader, path: KeyPath, labels: Name, zones: ZoneSet) -> bool:
    """A CNAME wide IP's name holds no static records (RFC 1034 3.6.2)."""
    zone = zones.find(labels)
    node = zone.nodes.get(labels) if zone is not None else None
    if zone is None or node is None or not node.rrsets:
        return True
    kinds = ", ".join(sorted(dns.rdatatype.to_text(dns.rdatatype.RdataType.make(t)) for t in node.rrsets))
    r.error(path, f"type CNAME, but zone {names.to_text(zone.origin)} has records at this name (types {kinds})")
    return False
