"""The config's ``rum`` and ``proximity`` sections: real-user measurements (browsers' beacons
on each member's public listener) and the order of the sources a proximity method decides by
(docs/client-proximity.md).

    rum:                                  # off when absent
      zone: example.com                   # one-use names are <id>.rum.<zone> (default: the
                                          # zone of the first wide IP)
      targets: {DC1: "https://dc1.example.net/rum/v1/object", DC2: ...}
      tls: {cert: certs/rum.pem, key: certs/rum.key}   # HTTPS on the listener (optional)
      allow: [10.0.0.0/8]                 # special-purpose sources accepted (as prober.allow)
      trusted_proxies: [192.0.2.8/32]     # reverse proxies whose X-Forwarded-For names the client
      answer: [192.0.2.10]                # what one-use names answer (default: the node's
                                          # own rum listener address)
      min_samples: 10                     # samples behind an LDNS population before it decides
      max_subnets: 100000                 # client subnets the group keeps
      max_populations: 10000              # LDNS populations the group keeps
      sample_ttl: 604800                  # a client figure lives this long past its last sample
      beacons_per_second: 1.0             # per source /24 or /48 (a token bucket) ...
      burst: 10                           # ... with this burst
      max_body: 4096                      # bytes of a beacon
      max_pending_ids: 100000             # one-use ids a node remembers awaiting their beacon
      id_ttl: 120                         # ... for this long
    proximity:
      sources: [client, population, ldns] # default with rum or client_probe on; else [ldns]
      client_probe: {enabled: false, subnets_per_interval: 10, interval: 60}

Each member names its own listener in its entry (``sync_group.members[].rum``), as it names
its ``api``; a member without one takes no beacons (it still answers one-use names and
decides by what the group measured).
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping as MappingType
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol
from urllib.parse import urlsplit

from gtmcluster.config.addresses import IPAddress, IPNetwork
from gtmcluster.config.ranges import read_allow
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import ZoneSet
from gtmcluster.state import schema

#: the sources a proximity method may take its figures from, in the default order
SOURCES = ("client", "population", "ldns")
#: a beacon's body at most (bytes): what the listener reads before it refuses
MAX_BODY = 65536
#: the longest measurement URL taken
MAX_URL = 2048


@dataclass(frozen=True, slots=True)
class TLSPair:
    """The public listener's own certificate and key (not the sync group's)."""

    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class Rum:
    """The ``rum`` section."""

    targets: MappingType[str, str]
    zone: str | None = None
    tls: TLSPair | None = None
    allow: tuple[IPNetwork, ...] = ()
    answer: tuple[IPAddress, ...] = ()
    trusted_proxies: tuple[IPNetwork, ...] = ()
    min_samples: int = 10
    max_subnets: int = 100_000
    max_populations: int = 10_000
    sample_ttl: int = 604_800
    beacons_per_second: float = 1.0
    burst: int = 10
    max_body: int = 4096
    max_pending_ids: int = 100_000
    id_ttl: int = 120


@dataclass(frozen=True, slots=True)
class ClientProbe:
    """``proximity.client_probe``: probing client subnets an ECS names (opt-in)."""

    enabled: bool = False
    subnets_per_interval: int = 10
    interval: float = 60.0


@dataclass(frozen=True, slots=True)
class Proximity:
    """The ``proximity`` section."""

    sources: tuple[str, ...] = ("ldns",)
    client_probe: ClientProbe = field(default_factory=ClientProbe)


def read(r: Reader, top: Mapping, datacenters: tuple[str, ...], resolve: Any) -> tuple[Rum | None, Proximity]:
    """The ``rum`` and ``proximity`` sections; *resolve* names a file of the member's own."""
    rum = _rum(r, top, datacenters, resolve)
    return rum, _proximity(r, top, rum)


def _rum(r: Reader, top: Mapping, datacenters: tuple[str, ...], resolve: Any) -> Rum | None:
    if not top.has("rum"):
        return None
    m = r.mapping(("rum",), top.get("rum"), "a mapping {targets, tls, allow, min_samples, ...}")
    if m is None:
        return None
    default = Rum(MappingProxyType({}))
    targets = _targets(r, m, datacenters)
    zone = m.string("zone", None) if m.has("zone") else None
    tls = _tls(r, m, resolve)
    allow = read_allow(r, m)
    answer: list[IPAddress] = []
    raw_answer = r.list(m.at("answer"), m.get("answer", []), "a list of addresses", allow_scalar=True)
    for i, item in enumerate(raw_answer or []):
        address = r.address((*m.at("answer"), i), item)
        if address is not None:
            answer.append(address)
    proxies: list[IPNetwork] = []
    raw_proxies = r.list(m.at("trusted_proxies"), m.get("trusted_proxies", []), "a list of networks")
    for i, item in enumerate(raw_proxies or []):
        network = r.network((*m.at("trusted_proxies"), i), item)
        if network is not None:
            proxies.append(network)
    client_limit = schema.KINDS["client"].writer_limit // max(1, len(datacenters))
    numbers = (
        m.integer("min_samples", default.min_samples, 1, 1_000_000),
        m.integer("max_subnets", default.max_subnets, 1, client_limit),
        m.integer("max_populations", default.max_populations, 1, schema.KINDS["pop"].writer_limit),
        m.integer("sample_ttl", default.sample_ttl, 60, int(schema.MAX_CLIENT_TTL)),
        m.number("beacons_per_second", default.beacons_per_second, 0.001, 1000),
        m.integer("burst", default.burst, 1, 10_000),
        m.integer("max_body", default.max_body, 256, MAX_BODY),
        m.integer("max_pending_ids", default.max_pending_ids, 1, schema.KINDS["rumid"].writer_limit),
        m.integer("id_ttl", default.id_ttl, 5, int(schema.MAX_RUMID_TTL)),
    )
    m.done()
    if targets is None or None in numbers:
        return None
    min_samples, max_subnets, max_pops, ttl, rate, burst, body, pending, id_ttl = numbers
    assert min_samples and max_subnets and max_pops and ttl and rate and burst and body and pending and id_ttl
    return Rum(
        MappingProxyType(targets),
        zone,
        tls,
        tuple(allow),
        tuple(answer),
        tuple(proxies),
        int(min_samples),
        int(max_subnets),
        int(max_pops),
        int(ttl),
        float(rate),
        int(burst),
        int(body),
        int(pending),
        int(id_ttl),
    )


def _targets(r: Reader, m: Mapping, datacenters: tuple[str, ...]) -> dict[str, str] | None:
    at = m.at("targets")
    raw = m.require("targets", "each data center's measurement URL, {DC: URL}")
    t = r.mapping(at, raw, "a mapping {data center: URL}")
    if t is None:
        return None
    out: dict[str, str] = {}
    for dc, raw_url in t.items():
        url = r.string((*at, dc), raw_url)
        if url is None:
            continue
        if str(dc) not in datacenters:
            r.error((*at, dc), f"{dc!r} is not a data center (one of {', '.join(datacenters)})")
            continue
        parts = urlsplit(url)
        if len(url) > MAX_URL or parts.scheme not in ("http", "https") or not parts.hostname:
            r.error((*at, dc), f"{url[:80]!r} is not an http:// or https:// URL of at most {MAX_URL} characters")
            continue
        out[str(dc)] = url
    if not t.raw:
        r.error(at, "names no data center: rum needs at least one measurement URL")
    return out or None


def _tls(r: Reader, m: Mapping, resolve: Any) -> TLSPair | None:
    if not m.has("tls"):
        return None
    t = r.mapping(m.at("tls"), m.get("tls"), "a mapping {cert, key}")
    if t is None:
        return None
    cert = t.string("cert", None)
    key = t.string("key", None)
    if cert is None:
        r.error(t.at("cert"), "the listener's certificate file is needed")
    if key is None:
        r.error(t.at("key"), "the listener's key file is needed")
    t.done()
    return None if cert is None or key is None else TLSPair(resolve(cert), resolve(key))


def _proximity(r: Reader, top: Mapping, rum: Rum | None) -> Proximity:
    if not top.has("proximity"):
        return Proximity(SOURCES if rum is not None else ("ldns",))
    m = r.mapping(("proximity",), top.get("proximity"), "a mapping {sources, client_probe}")
    if m is None:
        return Proximity()
    probe = ClientProbe()
    if m.has("client_probe"):
        what = "a mapping {enabled, subnets_per_interval, interval}"
        p = r.mapping(m.at("client_probe"), m.get("client_probe"), what)
        if p is not None:
            enabled = p.boolean("enabled", False)
            per = p.integer("subnets_per_interval", probe.subnets_per_interval, 1, 10_000)
            interval = p.number("interval", probe.interval, 1, 86400)
            p.done()
            if per is not None and interval is not None:
                probe = ClientProbe(enabled, per, interval)
    default = SOURCES if rum is not None or probe.enabled else ("ldns",)
    sources: list[str] = []
    if m.has("sources"):
        raw = r.list(m.at("sources"), m.get("sources"), "a list of sources", allow_scalar=True) or []
        for i, item in enumerate(raw):
            source = r.string((*m.at("sources"), i), item, choices=SOURCES)
            if source is None:
                continue
            if source in sources:
                r.error((*m.at("sources"), i), f"{source!r} is listed twice")
                continue
            sources.append(source)
        if isinstance(raw, list) and not raw:
            r.error(m.at("sources"), f"names no source (of {', '.join(SOURCES)})")
    m.done()
    return Proximity(tuple(sources) or default, probe)


class Named(Protocol):
    """A wide IP, as far as finding its zone goes."""

    @property
    def labels(self) -> Name: ...


def rum_zones(rum: Rum | None, zones: ZoneSet, wideips: Iterable[Named]) -> tuple[Name, ...]:
    """The zones of the one-use names (``<id>.rum.<zone>``, docs/client-proximity.md), of a
    config's *rum*, *zones* and *wideips*, as lowercased origins: ``rum.zone`` first when it is
    a zone served here, then every zone holding a wide IP, in the order of their first wide
    IP; none with ``rum`` off."""
    if rum is None:
        return ()
    found: list[Name] = []
    if rum.zone is not None:
        try:
            base = names.key(names.from_text(rum.zone))
        except names.BadName:
            base = None
        if base is not None and zones.find(base) is not None:
            found.append(base)
    for wideip in wideips:
        zone = zones.find(wideip.labels)
        if zone is not None and zone.origin_key not in found:
            found.append(zone.origin_key)
    return tuple(found)
