"""The config's ``prober`` section: how this node measures its paths to LDNSes (the
protocols, timers and rates, and the networks it may probe), read and checked."""

from __future__ import annotations

import ipaddress
from typing import Any

from gtmcluster.config.model import Prober
from gtmcluster.config.ranges import SPECIAL_PURPOSE
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.state import schema

#: a node files probe requests at max_per_second, after a burst of a request's life (60 s)
#: of them: it holds at most 2 x 60 x max_per_second live ones, which must stay within what
#: its peers take from one member (state.schema)
MAX_PROBES_PER_SECOND = schema.KINDS["probe"].writer_limit // 120
PROBE_PROTOCOLS = ("dns_dot", "dns_rev", "udp", "tcp", "icmp")


def read(r: Reader, top: Mapping) -> Prober:
    """The `prober` section: the path prober's protocols, timers, rates and the networks
    it may (`allow`, `only`) and may not (`deny`) probe; F5's defaults where absent."""
    default = Prober()
    if not top.has("prober"):
        return default
    m = r.mapping(("prober",), top.get("prober"), "a mapping {protocols, path_ttl, ...}")
    if m is None:
        return default
    protocols = []
    raw = m.get("protocols", list(PROBE_PROTOCOLS))
    for i, p in enumerate(r.list(m.at("protocols"), raw) or []):
        proto = r.string((*m.at("protocols"), i), p, choices=PROBE_PROTOCOLS)
        if proto is not None:
            protocols.append(proto)
    if isinstance(raw, list) and not raw:
        r.error(m.at("protocols"), "at least one probe protocol is needed")
    path_ttl = m.integer("path_ttl", default.path_ttl, 60, 2**31 - 1)
    interval = m.number("probe_interval", default.probe_interval, 10, 86400 * 30)
    # (a path record lives this long: no longer than the sync group's members take, state.schema)
    inactive = m.integer("inactive_ldns_ttl", default.inactive_ldns_ttl, 60, int(schema.MAX_PATH_TTL))
    timeout = m.number("timeout", default.timeout, 0.05, 30)
    # (the most a sync group's members take from one member, state.schema, bound what the
    # config may let a node write: live probe requests, its paths, persistence records)
    rate = m.number("max_per_second", default.max_per_second, 0.1, MAX_PROBES_PER_SECOND)
    in_flight = m.integer("max_in_flight", default.max_in_flight, 1, 100000)
    udp_port = m.integer("udp_port", default.udp_port, 1, 65535)
    max_ldns = m.integer("max_ldns", default.max_ldns, 1, schema.KINDS["path"].writer_limit)
    lists: dict[str, list[Any]] = {}
    special = [ipaddress.ip_network(n) for n in SPECIAL_PURPOSE]
    for key in ("allow", "deny", "only"):
        lists[key] = []
        raw_list = m.get(key, [])
        for i, item in enumerate(r.list(m.at(key), raw_list, "a list of networks") or []):
            network = r.network((*m.at(key), i), item)
            if network is None:
                continue
            if key == "allow" and not any(network.overlaps(s) for s in special if s.version == network.version):
                r.error(
                    (*m.at(key), i),
                    f"{network} holds no special-purpose address (RFC 6890), and only those need opening: "
                    "to probe nothing but some networks, list them in prober.only",
                )
                continue
            lists[key].append(network)
    m.done()
    if None in (path_ttl, interval, inactive, timeout, rate, in_flight, udp_port, max_ldns):
        return default
    assert path_ttl and interval and inactive and timeout and rate and in_flight and udp_port and max_ldns
    return Prober(
        tuple(protocols),
        path_ttl,
        interval,
        inactive,
        timeout,
        rate,
        in_flight,
        udp_port,
        tuple(lists["allow"]),
        tuple(lists["deny"]),
        tuple(lists["only"]),
        max_ldns,
    )
