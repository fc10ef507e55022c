"""F5's load-balancing method names (tmsh and 3-DNS spellings) and ours (`config.lbmethods`).

`member_method` maps a pool's preferred, alternate or fallback mode; `pool_method` a wide
IP's pool-lb-mode. A name is mapped only where ours chooses as F5 documents its mode: a name
with no equivalent of ours is in `NO_EQUIVALENT`, and one whose namesake here reads other
figures or means another thing is in `DIFFERS`, each with the reason (the caller reports a
preferred mode LOST, another CHANGED, and runs the next method instead).

tmsh spells the modes as `gtm pool` takes them (BIG-IP DNS 12-17 and the F5 Ansible
modules' choices): round-robin, ratio, global-availability, topology, static-persistence,
return-to-dns, drop-packet, fallback-ip, none, lowest-round-trip-time, fewest-hops,
completion-rate, quality-of-service, least-connections, packet-rate, kilobytes-per-second,
virtual-server-capacity, virtual-server-score, cpu; a wide IP's pool-lb-mode is one of
round-robin, ratio, global-availability, topology.
"""

from __future__ import annotations

from gtmcluster.config.lbmethods import MEMBER_METHODS, POOL_METHODS

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

_LOAD = (
    "F5 reads the {what} from the BIG-IP behind each virtual server over iQuery (or SNMP); "
    "ours ({ours}) reads it from the members' monitors' load source, which F5 configuration "
    "does not give (docs/load-sources.md): set one, then load_balancing {ours}"
)

#: our namesakes of F5 modes that do not choose as F5 documents, and why (by our name)
DIFFERS: dict[str, str] = {
    "least_connections": _LOAD.format(what="connection count", ours="least_connections"),
    "packet_rate": _LOAD.format(what="packet rate", ours="packet_rate"),
    "kbps": _LOAD.format(what="throughput", ours="kbps"),
    "vs_capacity": (
        "F5 answers each virtual server in proportion to its capacity (the LTM pool members "
        "up behind it, over iQuery), ties at random; ours (vs_capacity) always answers the "
        "one of most capacity, read from a monitor's load source (docs/load-sources.md)"
    ),
    "qos": (
        "F5's score has a link capacity term (coefficient 30 by default) that ours (qos) has "
        "not, and its packet rate, kilobytes and capacity terms read figures F5 takes from "
        "the BIG-IPs over iQuery, ours from a monitor's load source (docs/load-sources.md)"
    ),
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
    if ours in DIFFERS:
        return None, DIFFERS[ours]
    if ours is not None and ours in MEMBER_METHODS:
        return ours, ""
    return None, NO_EQUIVALENT.get(key, f"unknown F5 load-balancing mode {f5!r}")


def pool_method(f5: str) -> tuple[str | None, str]:
    """Our method for choosing among a wide IP's pools by F5's *f5*: (name, "") or (None, why)."""
    key = f5.lower()
    ours = METHODS.get(key)
    if ours in DIFFERS:
        return None, DIFFERS[ours]
    if ours is not None and ours in POOL_METHODS:
        return ours, ""
    if ours is not None:
        return None, f"{ours} is not a method for choosing among pools here"
    return None, NO_EQUIVALENT.get(key, f"unknown F5 load-balancing mode {f5!r}")
