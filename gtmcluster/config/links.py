"""A link's capacity and cost in the config: ``bandwidth_mbps``, ``cost``, ``max_utilisation``
and ``traffic`` (where its measured traffic comes from), and the check that the link
methods (`lb.links`) find on every member's link what they need.

    links:
      cnc-link:
        datacenter: CNC
        monitor: ping
        targets: [202.106.0.20]
        bandwidth_mbps: 1000          # capacity, megabits a second
        cost: 1.5                     # price of a Mbps on this link (any unit common to the links)
        max_utilisation: 90%          # or 90: above it the link takes no new clients
        traffic:                      # polled by the members in the link's data center
          snmp: {host: 10.0.0.1, port: 161, community: public, if_index: 2}
          interval: 10

    Or the counters of a page over HTTP(S), in a Prometheus exposition or HAProxy's stats:

        traffic:
          http:
            url: http://10.0.0.1:9100/metrics
            received: {metric: node_network_receive_bytes_total, labels: {device: eth1}}
            sent: {metric: node_network_transmit_bytes_total, labels: {device: eth1}}
        traffic:
          http: {url: "http://10.0.0.2:8404/stats;csv", format: haproxy, proxy: uplink}

    with ``max_response_bytes`` (1 KiB .. 16 MiB, default 4 MiB) the most of a page read.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterable
from collections.abc import Mapping as MappingT
from typing import Any

from gtmcluster.config.loadsource import samples_of
from gtmcluster.config.model import Link, Pool, WideIP
from gtmcluster.config.monitoring import HttpCounterSource, LoadSource, Sample, SnmpSource, TrafficSource
from gtmcluster.config.problems import KeyPath
from gtmcluster.config.reader import Mapping, Reader

#: the methods that read each of a link's settings
NEEDS = {
    "bandwidth_ratio": ("bandwidth_mbps",),
    "link_capacity": ("bandwidth_mbps", "traffic"),
    "lowest_cost": ("cost",),
}
MAX_MBPS = 10_000_000.0  # 10 Pbit/s: anything above is a typo
MAX_COST = 1e12
SNMP_PORT = 161
MAX_IF_INDEX = 2**31 - 1
#: the pages a link's counters may be read from over HTTP (`probe.httpcounters`)
HTTP_FORMATS = ("prometheus", "haproxy")
#: the most of a counters page read (``max_response_bytes``): by default and at most (an
#: http monitor's limit), and at least
HTTP_MAX_RESPONSE = 4 * 1024 * 1024
HTTP_MAX_RESPONSE_LIMIT = 16 * 1024 * 1024
HTTP_MIN_RESPONSE = 1024


def read_capacity(r: Reader, m: Mapping) -> tuple[float | None, float | None, float | None, TrafficSource | None, bool]:
    """The link's ``bandwidth_mbps``, ``cost``, ``max_utilisation`` (a share, 0..1] and
    ``traffic``, and whether all were read without a problem."""
    before = len(r.problems.found)
    bandwidth = m.number("bandwidth_mbps", None, 0.001, MAX_MBPS)
    cost = m.number("cost", None, 0, MAX_COST)
    limit = _share(r, m) if m.has("max_utilisation") else None
    traffic = _traffic(r, m) if m.has("traffic") else None
    if limit is not None and bandwidth is None and not m.has("bandwidth_mbps"):
        r.error(m.at("max_utilisation"), "needs the link's 'bandwidth_mbps' (the capacity it is a share of)")
    if limit is not None and traffic is None and not m.has("traffic"):
        r.error(m.at("max_utilisation"), "needs the link's 'traffic' (a source of its measured traffic)")
    return bandwidth, cost, limit, traffic, len(r.problems.found) == before


def _share(r: Reader, m: Mapping) -> float | None:
    """``90%`` or ``90`` (percent, more than 0, at most 100) -> 0.9."""
    at = m.at("max_utilisation")
    value = m.get("max_utilisation")
    if isinstance(value, str):
        text = value.strip().removesuffix("%").strip()
        try:
            number: Any = float(text)
        except ValueError:
            r.error(at, f"{value!r} is not a percentage such as 90% or 90")
            return None
    else:
        number = value
    percent = r.number(at, number, 0.1, 100)
    return None if percent is None else percent / 100


def _traffic(r: Reader, m: Mapping) -> TrafficSource | None:
    t = r.mapping(m.at("traffic"), m.get("traffic"), "a mapping {snmp: {...} or http: {...}, interval, timeout}")
    if t is None:
        return None
    source: SnmpSource | HttpCounterSource | None = None
    if t.has("snmp") and t.has("http"):
        t.get("snmp"), t.get("http")  # (both known keys: the problem is having both)
        r.error(t.path, "give one source: 'snmp' or 'http', not both")
    elif t.has("http"):
        source = _http(r, t)
    else:
        source = _snmp(r, t)
    interval = t.number("interval", 10.0, 1, 3600)
    timeout = t.number("timeout", 2.0, 0.1, 60)
    t.done()
    if interval is not None and timeout is not None and timeout > interval:
        r.error(t.at("timeout"), f"{timeout:g} is longer than the interval ({interval:g})")
        return None
    if source is None or interval is None or timeout is None:
        return None
    return TrafficSource(source, interval, timeout)


def _snmp(r: Reader, t: Mapping) -> SnmpSource | None:
    raw = t.require("snmp", "where to read the interface counters: snmp: {...} or http: {...}")
    s = r.mapping(t.at("snmp"), raw, "a mapping {host, port, community, if_index, version}")
    if s is None:
        return None
    host = r.address(s.at("host"), s.require("host", "the router's (SNMP agent's) address"))
    port = s.integer("port", SNMP_PORT, 1, 65535)
    community = s.string("community", "public")
    if community is not None and not community:
        r.error(s.at("community"), "the community must not be empty")
        community = None
    if_index = r.integer(
        s.at("if_index"), s.require("if_index", "the interface's ifIndex on the router"), 1, MAX_IF_INDEX
    )
    s.string("version", "2c", ("2c",))
    s.done()
    if host is not None and port is not None and community and if_index is not None:
        return SnmpSource(host, port, community, if_index)
    return None


def _http(r: Reader, t: Mapping) -> HttpCounterSource | None:
    """``http: {url, format: prometheus, received, sent}`` or ``{url, format: haproxy,
    proxy, server}``, and ``max_response_bytes``: octet counters in a page
    (`probe.httpcounters`)."""
    h = r.mapping(
        t.at("http"), t.get("http"), "a mapping {url, format, received, sent} or {url, format, proxy, server}"
    )
    if h is None:
        return None
    before = len(r.problems.found)
    url = r.string(h.at("url"), h.require("url", "the page's address, http://ADDRESS:PORT/PATH"))
    if url is not None:
        url = _url(r, h.at("url"), url)
    kind = h.string("format", "prometheus", HTTP_FORMATS)
    received: tuple[Sample, ...] = ()
    sent: tuple[Sample, ...] = ()
    proxy, server = "", "FRONTEND"
    if kind == "prometheus":
        received = samples_of(r, h.at("received"), h.require("received", "the samples of octets received"))
        sent = samples_of(r, h.at("sent"), h.require("sent", "the samples of octets sent"))
    elif kind == "haproxy":
        proxy = r.string(h.at("proxy"), h.require("proxy", "the proxy (pxname) whose bin and bout to read")) or ""
        server = h.string("server", "FRONTEND") or ""
    cap = h.integer("max_response_bytes", HTTP_MAX_RESPONSE, HTTP_MIN_RESPONSE, HTTP_MAX_RESPONSE_LIMIT)
    h.done()
    if len(r.problems.found) > before or url is None or kind is None or cap is None:
        return None
    load = LoadSource(kind, proxy=proxy, server=server) if kind == "haproxy" else LoadSource(kind)
    return HttpCounterSource(url, load, received, sent, cap)


def _url(r: Reader, at: KeyPath, text: str) -> str | None:
    """An http(s) URL whose host is an IP address (no name is resolved to read a counter)."""
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
        host = parts.hostname or ""
        ipaddress.ip_address(host)
    except ValueError:
        r.error(at, f"{text!r} is not http(s)://ADDRESS[:PORT]/PATH with an IP address")
        return None
    if parts.scheme not in ("http", "https") or port == 0 or parts.username or parts.password:
        r.error(at, f"{text!r} is not http(s)://ADDRESS[:PORT]/PATH with an IP address")
        return None
    return text


def check_methods(r: Reader, pools: MappingT[str, Pool], wideips: Iterable[WideIP]) -> None:
    """Every pool (and wide IP) using a link method has, on each member's link, the
    settings it reads (`NEEDS`); else an error at the method naming what is missing.
    (Not while a link has problems of its own: its servers then seem to have none.)"""
    if any(kind == "link" for kind, _ in r.broken):
        return
    for pool in pools.values():
        for slot, method in pool.methods.chain():
            if method in NEEDS:
                _check(r, ("pools", pool.name, "load_balancing", slot), method, [m.vs for m in pool.members])
    for wideip in wideips:
        if wideip.pool_lb in NEEDS:
            _check(
                r,
                ("wideips", wideip.name, "pool_lb"),
                wideip.pool_lb,
                [m.vs for ref in wideip.pools for m in ref.pool.members],
            )


def _check(r: Reader, at: KeyPath, method: str, servers: Iterable[Any]) -> None:
    unlinked: list[str] = []
    lacking: dict[str, list[str]] = {}
    for vs in servers:
        link: Link | None = vs.link
        if link is None:
            if vs.name not in unlinked:
                unlinked.append(vs.name)
            continue
        for key in NEEDS[method]:
            if getattr(link, key) is None:
                paths = lacking.setdefault(key, [])
                if f"links.{link.name}.{key}" not in paths:
                    paths.append(f"links.{link.name}.{key}")
    if unlinked:
        listed = ", ".join(f"virtual_servers.{n}.link" for n in unlinked)
        r.error(at, f"{method} needs every member on a link; missing: {listed}")
    for key, paths in lacking.items():
        r.error(at, f"{method} needs each member's link's {key!r}; missing: {', '.join(paths)}")
