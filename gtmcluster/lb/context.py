"""What a load-balancing decision may consult: the client, time, randomness, rotations,
availability, persistence and topology, all passed in (no globals, no I/O)."""

from __future__ import annotations

import ipaddress
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from gtmcluster.config.model import VirtualServer
from gtmcluster.state.admin import AdminState
from gtmcluster.state.persistence import PersistKey, PersistRecord
from gtmcluster.topology.records import Match, Topology

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class Client:
    """Who is asking, as far as load balancing is concerned."""

    #: the address topology and persistence key on: the EDNS client subnet's address when
    #: the query carried one from a trusted resolver (`dns_server.ecs_trusted`), else the
    #: LDNS address; zeros past `prefix` (as RFC 7871 sends it)
    address: IPAddress
    #: how many leading bits of `address` are known (the ECS source prefix, or the full width)
    prefix: int
    #: the source address of the query (RTT paths are per LDNS, later)
    ldns: IPAddress
    from_ecs: bool = False

    @classmethod
    def from_ldns(cls, ldns: IPAddress) -> Client:
        return cls(ldns, ldns.max_prefixlen, ldns, False)

    def network(self, prefix: int) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        """The client's network at *prefix* bits, also past the bits known: a client subnet
        shorter than what decides is decided for its address zero-padded to that length,
        and the answer's scope says that length (RFC 7871 7.2.1; docs/answers.md)."""
        return ipaddress.ip_network((self.address, prefix), strict=False)


class Rotations:
    """Counters behind round robin, ratio and topology ties: the one thing methods advance.

    Per node, like BIG-IP DNS's own rotation; they need not agree across the sync group.
    """

    def __init__(self) -> None:
        self._counters: dict[tuple[str, ...], int] = {}

    def next(self, key: tuple[str, ...]) -> int:
        count = self._counters.get(key, 0)
        self._counters[key] = count + 1
        return count


class Availability(Protocol):
    def vs_up(self, vs: VirtualServer) -> bool:
        """Whether *vs* may be handed to new clients now."""

    def vs_serving(self, vs: VirtualServer) -> bool:
        """Whether *vs* may keep answering clients held by persistence (true while draining)."""

    def weight(self, vs: VirtualServer, now: float) -> float:
        """Its share under ratio and round robin, below 1 while it ramps up (slow start)."""

    def admin_states(self) -> Mapping[str, AdminState]:
        """Operators' admin states of pools ("pool/NAME"), pool members
        ("member/POOL/SERVER") and wide IPs ("wideip/NAME"), those set (see `state.admin`)."""


_NO_ADMIN: Mapping[str, AdminState] = MappingProxyType({})


class ConfiguredAvailability:
    """Availability from configuration alone: the configured admin state decides."""

    def vs_up(self, vs: VirtualServer) -> bool:
        return vs.admin_state == "enabled"

    def vs_serving(self, vs: VirtualServer) -> bool:
        return vs.admin_state != "disabled"

    def weight(self, vs: VirtualServer, now: float) -> float:
        return 1.0

    def admin_states(self) -> Mapping[str, AdminState]:
        return _NO_ADMIN


class PersistenceView(Protocol):
    def get(self, key: PersistKey, now: float) -> PersistRecord | None:
        """The live record for *key*, if any."""


@dataclass(slots=True)
class Context:
    """Everything one decision may read. Built per query by the engine."""

    client: Client
    now: float
    rng: random.Random
    rotations: Rotations
    availability: Availability
    persistence: PersistenceView
    topology: Topology
    #: paths to LDNSes and servers' load figures (None: a node without proximity data)
    measurements: Any = None
    #: set by a method that missed or found stale paths: the node asks for a probe
    probe_wanted: bool = False
    #: set by a path method that decided for a trusted ECS subnet without its own figures,
    #: with client probing on: the subnet (``10.1.2.0/24``) the node asks the group to probe
    probe_subnet: str | None = None
    #: the client source a path method took its figures from (`proximity.clients.Chosen`:
    #: source, scope, figures), None when the LDNS's own paths decided
    proximity: Any = None
    #: the proximity source of the last path method run (``client``, ``population``,
    #: ``ldns``; "" for other methods): the engine takes it from the method that decided
    #: into `Decision.proximity`
    source: str = ""
    #: set when the decision took a turn of a rotation or a random draw: the next query may
    #: get another answer, so the decision must not be reused
    varies: bool = False
    #: when something the decision read changes with time alone (a path going stale, a
    #: persistence record due for refresh): the decision holds until then
    until: float = math.inf
    _match: Match | None = field(default=None, repr=False)

    def holds_until(self, moment: float) -> None:
        self.until = min(self.until, moment)

    def turn(self, key: tuple[str, ...]) -> int:
        """The next count of rotation *key* (round robin, ratio, ties taken in turn)."""
        self.varies = True
        return self.rotations.next(key)

    def shuffle(self, items: list[Any]) -> None:
        """Shuffle *items* in place with the decision's random source."""
        self.varies = True
        self.rng.shuffle(items)

    def topology_match(self) -> Match:
        """Topology records matching the client, computed once per decision."""
        if self._match is None:
            self._match = self.topology.match(self.client.address)
        return self._match
