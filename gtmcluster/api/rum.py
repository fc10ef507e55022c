"""GET /api/v1/rum: the client table as the store holds it (issue 36): client subnets with
each data center's RTT (from browsers' beacons or probes), and LDNS populations (the client
subnets each resolver was tied to, and the RTTs weighted by their counts).

The table holds up to ``rum.max_subnets`` subnets (100,000 by default) per data center, so
an answer is bounded by its ``limit``, not by the table: the most recently written first
(`Store.newest`), each subnet's data centers read by its key (`Store.children`). With
``ldns=ADDRESS``, that one population with each of its subnets (at most 32); with
``subnet=ADDRESS or CIDR``, that one client subnet (its /24 or /48).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from gtmcluster.api.server import ApiError
from gtmcluster.node import Node
from gtmcluster.state import keys
from gtmcluster.state.record import Record

#: subnets and populations listed by default, and at most (``limit=``)
LIMIT = 50
MAX_LIMIT = 1000


def _limit(args: Mapping[str, str]) -> int:
    if "limit" not in args:
        return LIMIT
    try:
        limit = int(args["limit"])
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(400, f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return limit


def _address(args: Mapping[str, str], name: str) -> str | None:
    text = args.get(name)
    if text is None:
        return None
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ApiError(400, f"{name} {text[:100]!r} is not an IP address") from None


def _subnet(text: str) -> str:
    """The client subnet (/24 or /48) an address or network is in."""
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ApiError(400, f"subnet {text[:100]!r} is not an IP address or network") from None
    wanted = keys.CLIENT_PREFIX[network.version]
    if network.prefixlen < wanted:
        raise ApiError(400, f"subnet {network} is wider than the /{wanted} clients are known by")
    return str(network.supernet(new_prefix=wanted))


def _age(node: Node, record: Record) -> float:
    return round(max(0.0, node.store.clock() - record.born), 3)


def subnet_json(node: Node, subnet: str) -> dict[str, Any] | None:
    """One client subnet (``10.1.2.0/24``): each data center's figure (None: none held)."""
    datacenters: dict[str, Any] = {}
    for record in node.store.children(f"{keys.CLIENT}{keys.subnet_text(subnet)}/"):
        parts = keys.client_parts(record.key)
        value = record.value
        if parts is None or not isinstance(value, Mapping):
            continue
        datacenters[parts[1]] = {
            "rtt_us": value.get("rtt"),
            "samples": len(value.get("samples", ())),
            "source": value.get("source"),
            "by": value.get("by"),
            "age": _age(node, record),
        }
    if not datacenters:
        return None
    return {
        "subnet": subnet,
        "age": min(d["age"] for d in datacenters.values()),
        "datacenters": dict(sorted(datacenters.items())),
    }


def population_json(node: Node, record: Record, detail: bool = False) -> dict[str, Any]:
    """One LDNS population; with *detail*, each of its subnets with its count and figures."""
    value = record.value if isinstance(record.value, Mapping) else {}
    counts = value.get("subnets", {})
    out: dict[str, Any] = {
        "ldns": keys.population_ldns(record.key),
        "subnets": len(counts),
        "n": value.get("n", 0),
        "rtt_us": dict(sorted(value.get("rtt", {}).items())),
        "age": _age(node, record),
    }
    if detail:
        listed = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        out["members"] = [
            {
                "subnet": keys.subnet_of_text(text),
                "count": count,
                "figures": subnet_json(node, keys.subnet_of_text(text)),
            }
            for text, count in listed
        ]
    return out


def rum_table(node: Node, args: Mapping[str, str]) -> dict[str, Any]:
    """The answer of GET /api/v1/rum (see the module's doc)."""
    limit = _limit(args)
    ldns = _address(args, "ldns")
    kinds = node.store.kinds()
    answer: dict[str, Any] = {
        "node": node.member.name,
        "sources": list(node.config.proximity.sources),
        "min_samples": node.config.rum.min_samples if node.config.rum is not None else None,
        # records held (tombstones too): client figures are one per subnet and data center
        "held": {"client_figures": kinds.get(keys.CLIENT[:-1], 0), "populations": kinds.get(keys.POP[:-1], 0)},
    }
    if ldns is not None:
        record = node.store.get(keys.population(ldns))
        live = record is not None and record.value is not None and record.live(node.store.clock())
        answer["population"] = population_json(node, record, detail=True) if live and record else None
        return answer
    if "subnet" in args:
        answer["subnet"] = subnet_json(node, _subnet(args["subnet"]))
        return answer
    seen: set[str] = set()

    def listed(record: Record) -> bool:  # (a subnet's other data centers: listed already)
        parts = keys.client_parts(record.key)
        if parts is None or parts[0] in seen:
            return True
        seen.add(parts[0])
        return False

    # (one more than shown: whether there are more)
    newest = node.store.newest(keys.CLIENT[:-1], limit + 1, listed)
    populations = node.store.newest(keys.POP[:-1], limit + 1)
    subnets = [keys.client_parts(r.key) for r in newest[:limit]]
    answer.update(
        limit=limit,
        subnets=[s for parts in subnets if parts is not None and (s := subnet_json(node, parts[0])) is not None],
        populations=[population_json(node, r) for r in populations[:limit]],
        # whether the table holds more than the `limit` shown of either
        truncated=len(newest) > limit or len(populations) > limit,
    )
    return answer
