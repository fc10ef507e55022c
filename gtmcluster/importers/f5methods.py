"""F5's load-balancing method names (tmsh and 3-DNS spellings) and ours (`lb.catalog`).

`member_method` maps a pool's preferred, alternate or fallback mode; `pool_method` a wide
IP's pool-lb-mode. A name with no equivalent of ours is in `NO_EQUIVALENT` with the reason.
"""

from __future__ import annotations

from gtmcluster.lb.catalog import MEMBER_METHODS, POOL_METHODS

#: F5 name (tmsh, BIG-IP DNS GUI or 3-DNS wideip.conf) -> ours
METHODS: dict[str, str] = {
    # static
    "round-robin": "round_robin",
    "rr": "round_robin",
    "ratio": "ratio",
    "global-availability": "global_availability",
    "ga": "global_availability",
    "topology": "topology",
    "static-persistence": "static_persist",
    "static-persist": "static_persist",
    "static_persist": "static_persist",
    "random": "random",
    # dynamic
    "round-trip-time": "rtt",
    "lowest-round-trip-time": "rtt",
    "rtt": "rtt",
    "completion-rate": "completion_rate",
    "completion_rate": "completion_rate",
    "hops": "hops",
    "fewest-hops": "hops",
    "quality-of-service": "qos",
    "qos": "qos",
    "least-connections": "least_connections",
    "leastconn": "least_connections",
    "packet-rate": "packet_rate",
    "packet_rate": "packet_rate",
    "kilobytes-per-second": "kbps",
    "kbps": "kbps",
    "virtual-server-capacity": "vs_capacity",
    "vs_capacity": "vs_capacity",
    # special
    "drop-packet": "drop_packet",
    "drop_packet": "drop_packet",
    "fallback-ip": "fallback_ip",
    "return-to-dns": "return_to_dns",
    "return_to_dns": "return_to_dns",
    "none": "none",
    "null": "none",
}

#: F5 names we have nothing like, and why
NO_EQUIVALENT: dict[str, str] = {
    "cpu": "needs the servers' CPU load reported over iQuery",
    "virtual-server-score": "needs the score an LTM iRule assigns to its virtual servers",
    "vs_score": "needs the score an LTM iRule assigns to its virtual servers",
    "ldns-persistence": "use the wide IP's persistence instead",
    "explicit_ip": "use fallback_ip with the pool's fallback_ip",
}

#: the BIG-IP DNS defaults a tmsh listing leaves out (it shows only values that differ)
DEFAULTS = {"preferred": "round-robin", "alternate": "round-robin", "fallback": "return-to-dns"}


def member_method(f5: str) -> tuple[str | None, str]:
    """Our method for F5's pool mode *f5*: (name, "") or (None, why not)."""
    key = f5.lower()
    ours = METHODS.get(key)
    if ours is not None and ours in MEMBER_METHODS:
        return ours, ""
    return None, NO_EQUIVALENT.get(key, f"unknown F5 load-balancing mode {f5!r}")


def pool_method(f5: str) -> tuple[str | None, str]:
    """Our method for choosing among a wide IP's pools by F5's *f5*: (name, "") or (None, why)."""
    key = f5.lower()
    ours = METHODS.get(key)
    if ours is not None and ours in POOL_METHODS:
        return ours, ""
    if ours is not None:
        return None, f"{ours} is not a method for choosing among pools here"
    return None, NO_EQUIVALENT.get(key, f"unknown F5 load-balancing mode {f5!r}")
