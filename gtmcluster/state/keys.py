"""The record store's keys: one constructor per kind of record, and a parser where a reader
needs a key's parts back, so that no other module spells a key. The first segment is the
record's kind (`state.schema.KINDS`, which checks every key that arrives); the shapes:

    obs/vs/<vs>/<node>, obs/link/<link>/<node>    a node's verdict (`health.checker`)
    admin/<level>/<name>, admin/member/<pool>/<vs> an operator's admin state (`state.admin`)
    held/vs/<vs>                                  a server held down for a manual resume
    metrics/vs/<vs>                               a server's load figures
    traffic/link/<link>                           a link's measured traffic (`lb.linkload`)
    path/<LDNS>/<data center>                     a path to an LDNS (`proximity.table`)
    probe/<LDNS>                                  a request to probe an LDNS
    persist/<wide IP>/<qtype>/<network>           a client's persistence record
    persist/<wide IP>/<qtype>/<resolver>/ecs/<network>   ... of a client known by its subnet
    client/<subnet>/<data center>                 a client subnet's RTT (`proximity.clients`)
    pop/<LDNS>                                    the clients an LDNS serves (`proximity.clients`)
    rumid/<id>                                    the LDNS that resolved a one-use name
    cprobe/<subnet>                               a request to probe a client subnet, or its
                                                  silent mark (`proximity.clientrequests`)

Each prefix (`OBS`, `ADMIN`, ...) is the start of every key of its kind, for `Store.scan`
and for the watchers of changes.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal, Protocol

#: a subject of verdicts: a virtual server or a link
Subject = Literal["vs", "link"]

OBS = "obs/"
OBS_VS = "obs/vs/"
OBS_LINK = "obs/link/"
ADMIN = "admin/"
HELD_VS = "held/vs/"
METRICS_VS = "metrics/vs/"
TRAFFIC_LINK = "traffic/link/"
PATH = "path/"
_PATH_KIND = PATH[:-1]
PROBE = "probe/"
PERSIST = "persist/"
CLIENT = "client/"
_CLIENT_KIND = CLIENT[:-1]
POP = "pop/"
RUMID = "rumid/"
CPROBE = "cprobe/"


def observation(subject: Subject, name: str, node: str) -> str:
    """*node*'s verdict on the server or link *name*."""
    return f"{OBS}{subject}/{name}/{node}"


def observations(subject: Subject, name: str) -> str:
    """The prefix of every node's verdict on *name* (for `Store.children`)."""
    return f"{OBS}{subject}/{name}/"


def observed(key: str) -> tuple[Subject, str] | None:
    """(subject, name) of a verdict's key, or None when *key* is not one."""
    if key.startswith(OBS_VS):
        name, slash, _ = key[len(OBS_VS) :].partition("/")
        return ("vs", name) if slash else None
    if key.startswith(OBS_LINK):
        name, slash, _ = key[len(OBS_LINK) :].partition("/")
        return ("link", name) if slash else None
    return None


def admin(level: str, name: str) -> str:
    """*name*'s admin state at *level* (a pool member's name: "POOL/SERVER")."""
    return f"{ADMIN}{level}/{name}"


def admin_parts(key: str) -> tuple[str, str] | None:
    """(level, name) of an admin key, or None when *key* is not ``admin/<level>/<name>``
    (whether the level is one is `state.admin.parse_key`'s)."""
    if not key.startswith(ADMIN):
        return None
    level, slash, name = key[len(ADMIN) :].partition("/")
    return (level, name) if slash and name else None


def held(vs: str) -> str:
    """The hold of server *vs* (down until an operator resumes it)."""
    return f"{HELD_VS}{vs}"


def held_name(key: str) -> str | None:
    """The server of a hold's key, or None when *key* is not one."""
    return key[len(HELD_VS) :] if key.startswith(HELD_VS) else None


def load_figures(vs: str) -> str:
    """Server *vs*'s load figures (read from its monitor's body)."""
    return f"{METRICS_VS}{vs}"


def traffic(link: str) -> str:
    """Link *link*'s measured traffic."""
    return f"{TRAFFIC_LINK}{link}"


def traffic_link(key: str) -> str | None:
    """The link of a traffic key, or None when *key* is not one."""
    return key[len(TRAFFIC_LINK) :] if key.startswith(TRAFFIC_LINK) else None


def path(ldns: str, datacenter: str) -> str:
    """The path from *datacenter* to *ldns*."""
    return f"{PATH}{ldns}/{datacenter}"


def path_parts(key: str) -> tuple[str, str] | None:
    """(LDNS, data center) of a path's key, or None when *key* is not one. (Read for each
    path a decision weighs: as quick as the one split it replaced.)"""
    try:
        kind, ldns, datacenter = key.split("/", 2)
    except ValueError:
        return None
    return (ldns, datacenter) if kind == _PATH_KIND else None


def probe_request(ldns: str) -> str:
    """A request to probe *ldns* (written where a query from it was answered)."""
    return f"{PROBE}{ldns}"


class Persisted(Protocol):
    """What a persistence key is made of (`lb.context.PersistKey`)."""

    @property
    def wideip(self) -> str: ...
    @property
    def qtype(self) -> int: ...
    @property
    def network(self) -> str: ...
    @property
    def resolver(self) -> str | None: ...


def persist(key: Persisted) -> str:
    """The persistence record of a client (by its network, and for a client known by its
    subnet the resolver that sent it)."""
    if key.resolver:
        return f"{PERSIST}{key.wideip}/{key.qtype}/{key.resolver}/ecs/{key.network}"
    return f"{PERSIST}{key.wideip}/{key.qtype}/{key.network}"


#: the prefix a client is known by (its subnet: ``client/<subnet>/...``), per IP version
CLIENT_PREFIX = {4: 24, 6: 48}
#: a one-use name's id, as the RUM snippet makes it (``rumid/<id>``, ``<id>.rum.<zone>``)
RUM_ID = re.compile(r"[a-z0-9]{16,32}")


def client_subnet(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, longest: int | None = None
) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """The client subnet (/24, /48) *address* is in, or its network at *longest* bits when
    that is shorter (a client subnet a resolver names more widely)."""
    prefix = CLIENT_PREFIX[address.version]
    return ipaddress.ip_network((address, prefix if longest is None else min(prefix, longest)), strict=False)


def subnet_text(network: str) -> str:
    """A subnet as a key segment: ``10.1.2.0/24`` is ``10.1.2.0_24`` (a key's segments are
    cut at ``/``)."""
    return network.replace("/", "_")


def subnet_of_text(segment: str) -> str:
    """The subnet a key segment names (`subnet_text` undone)."""
    return segment.replace("_", "/")


def client(subnet: str, datacenter: str) -> str:
    """The RTT of client subnet *subnet* (``10.1.2.0/24``) from *datacenter*."""
    return f"{CLIENT}{subnet_text(subnet)}/{datacenter}"


def client_parts(key: str) -> tuple[str, str] | None:
    """(subnet as ``10.1.2.0/24``, data center) of a client key, or None when *key* is not one."""
    try:
        kind, subnet, datacenter = key.split("/", 2)
    except ValueError:
        return None
    return (subnet_of_text(subnet), datacenter) if kind == _CLIENT_KIND else None


def population(ldns: str) -> str:
    """The measured client population of *ldns*."""
    return f"{POP}{ldns}"


def population_ldns(key: str) -> str | None:
    """The LDNS of a population key, or None when *key* is not one."""
    return key[len(POP) :] if key.startswith(POP) else None


def rum_id(ident: str) -> str:
    """What the node that answered the one-use name of *ident* saw (the LDNS, its ECS)."""
    return f"{RUMID}{ident}"


def client_probe(subnet: str) -> str:
    """A request to probe client subnet *subnet* (``10.1.2.0/24``), or its silent mark."""
    return f"{CPROBE}{subnet_text(subnet)}"


def client_probe_subnet(key: str) -> str | None:
    """The subnet (``10.1.2.0/24``) of a client probe key, or None when *key* is not one."""
    return subnet_of_text(key[len(CPROBE) :]) if key.startswith(CPROBE) else None
