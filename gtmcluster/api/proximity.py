"""The proximity table and decision explanations, as the API serves them."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from gtmcluster.api.server import ApiError
from gtmcluster.config.model import WideIP, servers_of
from gtmcluster.config.traffic import TYPE_NAMES, WIDEIP_TYPES
from gtmcluster.dnsdata import names
from gtmcluster.lb import sourcewhy
from gtmcluster.lb.context import Client
from gtmcluster.lb.dynamic import PATH_NOTE
from gtmcluster.lb.pathwhy import datacenter_figures
from gtmcluster.lb.trace import Step
from gtmcluster.node import Node
from gtmcluster.proximity.table import PathInfo

#: what decides the path methods with client sources on (`proximity.sources`)
CLIENT_NOTE = "RTT is the client subnet's own, else the LDNS's measured clients', else the LDNS's (proximity.sources)"
#: paths listed by /api/v1/ldns without an address, by default and at most (`limit=`)
LDNS_LIMIT = 1000
MAX_LDNS_LIMIT = 100_000


def path_json(p: PathInfo) -> dict[str, Any]:
    return {
        "datacenter": p.datacenter,
        "rtt_us": p.rtt_us,
        "last_rtt_us": p.last_rtt_us,
        "hops": p.hops,
        "completion_rate": p.completion,
        "protocol": p.protocol,
        "age": round(p.age, 3),
        "measured_by": p.by,
        "failures": p.failures,
    }


def ldns_table(node: Node, args: Mapping[str, str]) -> dict[str, Any]:
    address = args.get("address")
    if address is not None:
        try:
            address = str(ipaddress.ip_address(address))
        except ValueError:
            raise ApiError(400, f"address {address!r} is not an IP address") from None
    limit = LDNS_LIMIT
    if "limit" in args:
        try:
            limit = int(args["limit"])
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_LDNS_LIMIT:
            raise ApiError(400, f"limit must be a whole number from 1 to {MAX_LDNS_LIMIT}")
    prober = node.config.prober
    by_ldns: dict[str, list[PathInfo]] = {}
    held = node.measurements.paths(address, node.config.datacenters, limit=limit)
    for p in held:
        by_ldns.setdefault(p.ldns, []).append(p)
    entries = []
    for ldns, paths in by_ldns.items():
        freshest = min(paths, key=lambda p: p.age)
        entries.append(
            {
                "address": ldns,
                "ttl": max(0, round(prober.inactive_ldns_ttl - freshest.age)),
                "probe_protocol": freshest.protocol,
                "paths": [path_json(p) for p in paths],
            }
        )
    total = node.store.kinds().get("path", 0)
    return {
        "node": node.member.name,
        "ldns": entries,
        # without an address: whether the table holds more paths than the `limit` shown
        "truncated": address is None and len(held) >= limit and total > len(held),
    }


def explain(node: Node, args: Mapping[str, str]) -> dict[str, Any]:
    name = args.get("wideip")
    if not name:
        raise ApiError(400, "give wideip=NAME")
    try:
        key = names.key(names.from_text(name))
    except names.BadName as e:
        raise ApiError(400, str(e)) from None
    # its own name, an alias, or a name a wildcard covers: the wide IP a query would reach
    wideip = node.config.wideip_names.find_in(node.config.zones, key)
    if wideip is None:
        raise ApiError(404, f"no wide IP named {name!r}")
    try:
        ldns = ipaddress.ip_address(args.get("ldns", ""))
    except ValueError:
        raise ApiError(400, "give ldns=ADDRESS (the asking resolver's address)") from None
    client = Client.from_ldns(ldns)
    subnet = args.get("subnet")
    trusted = None
    if subnet:
        try:
            network = ipaddress.ip_network(subnet, strict=False)
        except ValueError:
            raise ApiError(400, f"subnet {subnet!r} is not a network") from None
        trusted = ldns in node.responder.ecs_trusted
        if network.prefixlen and trusted:
            client = Client(network.network_address, network.prefixlen, ldns, True)
    qtype_name = args.get("type", TYPE_NAMES[min(wideip.types)]).upper()
    qtype = WIDEIP_TYPES.get(qtype_name)
    if qtype is None or qtype not in wideip.types:
        raise ApiError(400, f"type {qtype_name} is not answered by {wideip.name}")
    decision = node.balancer.explain(wideip, qtype, client)
    why = sourcewhy.explained(decision, wideip, node.measurements, client)
    # the step a client source decided shows that source's figures (beside the LDNS's)
    deciding = sourcewhy.deciding_step(decision) if why["source"] in ("client", "population") else None
    paths = PATH_NOTE if node.measurements.clients is None else CLIENT_NOTE
    return {
        "wideip": wideip.name,
        "name": names.to_text(key).rstrip("."),
        "type": qtype_name,
        "client": {
            "ldns": str(ldns),
            "subnet": subnet or None,
            "keys": "topology and persistence use the client subnet (persistence together with the LDNS); " + paths
            if client.from_ecs
            else "the client subnet is ignored: the LDNS is not in dns_server.ecs_trusted; "
            "topology, persistence and paths all use the LDNS address"
            if subnet
            else "topology, persistence and paths all use the LDNS address",
            # with a subnet: whether the LDNS is one whose client subnet is taken
            "ecs_trusted": trusted,
        },
        "action": decision.action.value,
        "answer": [str(a) for a in decision.addresses] + [t.text for t in decision.targets],
        "pool": decision.pool,
        "members": list(decision.members),
        "method": decision.method,
        "ttl": decision.ttl,
        "scope": decision.scope,
        "probe_requested": decision.probe is not None,
        "trace": [
            step_json(s, wideip, node, str(ldns), why["datacenters"] if s is deciding else None) for s in decision.trace
        ],
        # which proximity source decided, each data center's RTT from it beside the LDNS's
        "proximity": why,
        "admin": admin_out(node, wideip),
        "unhealthy": health_out(node, wideip),
    }


def step_json(
    s: Step, wideip: WideIP, node: Node, ldns: str, rows: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One step of the trace; a path-based method's (rtt, completion_rate, hops, qos) with
    each data center's figure, read now as the method read it (`lb.pathwhy`), or *rows*:
    those of the client source that decided it (`lb.sourcewhy`)."""
    out: dict[str, Any] = {
        "subject": s.subject,
        "slot": s.slot,
        "method": s.method,
        "candidates": list(s.candidates),
        "scores": [[n, v] for n, v in s.scores],
        "result": list(s.result),
        "note": s.note,
        "text": s.describe(),
    }
    figures = rows if rows is not None else datacenter_figures(s, wideip, node.measurements, ldns)
    if figures is not None:
        out["datacenters"] = figures
    return out


def admin_out(node: Node, wideip: WideIP) -> list[dict[str, Any]]:
    """The wide IP's servers an operator's admin state keeps out (their own, or their data
    center's or link's): which, how, and why (who, when is in /api/v1/admin). Those of its
    pools, pool members and itself are steps of the trace."""
    snapshot = node.health.snapshot
    out = []
    for name in servers_of(wideip):
        status = snapshot.vs.get(name)
        if status is not None and status.admin != "enabled":
            out.append({"virtual_server": name, "admin": status.admin, "reason": status.reason})
    return out


def health_out(node: Node, wideip: WideIP) -> list[dict[str, Any]]:
    """The wide IP's servers enabled but out for their health (monitors, link, dependencies,
    a hold): which and why (the reason names each monitor's verdict)."""
    snapshot = node.health.snapshot
    out = []
    for name in servers_of(wideip):
        status = snapshot.vs.get(name)
        if status is not None and status.admin == "enabled" and not status.serving:
            out.append({"virtual_server": name, "health": status.health, "reason": status.reason})
    return out
