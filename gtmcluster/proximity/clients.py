"""Client proximity (issue 36): what the group knows of client subnets and of the clients
each LDNS serves, as record values, and which source decides a query's figures.

A client is known only by its subnet (the /24 of an IPv4 source, the /48 of an IPv6 one): no
address finer than that is kept. Sources in the ranges the prober leaves alone
(`config.ranges`) are refused, the special-purpose ones unless ``rum.allow`` opens them.

The records (`state.keys`, checked by `state.schema`):

- ``client/<subnet>/<dc>``: the subnet's last `SAMPLES_PER_DC` samples from one DC and their
  **median** (not an EWMA: a beacon is one browser's fetch, heavy-tailed by a cold TLS
  session or a busy tab; the median ignores such outliers where an EWMA would carry them).
  Written by the node that took the beacon or probed the subnet (`merge_sample`).
- ``pop/<ldns>``: per LDNS, how many beacons tied it to each client subnet (at most
  `MAX_SUBNETS`, the least counted dropped first) and the RTT to each DC of those clients
  weighted by their counts, recomputed from the client records held when a beacon is tied
  (`population_after`).

`ClientSources.paths` is what `lb.dynamic` asks: the figures of the first source, in the
config's ``proximity.sources`` order, that has one for every data center of the candidates.
"""

from __future__ import annotations

import ipaddress
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gtmcluster.config.ranges import NEVER, SPECIAL_PURPOSE
from gtmcluster.proximity import clientvalue  # noqa: F401  (the store keeps client values compact)
from gtmcluster.state import keys
from gtmcluster.state.schema import MAX_CLIENT_RTT, MAX_CLIENT_SAMPLES, MAX_POPULATION_SUBNETS
from gtmcluster.topology.prefixes import PrefixMap

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: the prefix a client is known by (`state.keys.CLIENT_PREFIX`)
V4_PREFIX, V6_PREFIX = keys.CLIENT_PREFIX[4], keys.CLIENT_PREFIX[6]
#: samples kept per subnet and DC (the median reads them)
SAMPLES_PER_DC = MAX_CLIENT_SAMPLES
#: client subnets an LDNS's population keeps
MAX_SUBNETS = MAX_POPULATION_SUBNETS
#: a one-use name's id: what the snippet makes, what the schema takes
ID = keys.RUM_ID
#: the sources, as `config.rum.SOURCES` names them
CLIENT, POPULATION, LDNS = "client", "population", "ldns"


class Refused(ValueError):
    """A source address that may not name a client subnet; the message says why."""


class Ranges:
    """The prober's refused ranges: NEVER always, SPECIAL_PURPOSE unless *allow* opens it."""

    def __init__(self, allow: Iterable[IPNetwork] = ()):
        self.never: PrefixMap[bool] = PrefixMap((ipaddress.ip_network(n), True) for n in NEVER)
        self.special: PrefixMap[bool] = PrefixMap((ipaddress.ip_network(n), True) for n in SPECIAL_PURPOSE)
        self.allow: PrefixMap[bool] = PrefixMap((n, True) for n in allow)

    def subnet(self, source: str) -> IPNetwork:
        """The client subnet of *source* (/24 or /48), or Refused."""
        try:
            address = ipaddress.ip_address(source)
        except ValueError:
            raise Refused("not an address") from None
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address in self.never:
            raise Refused("multicast, broadcast or unspecified")
        if address in self.special and address not in self.allow:
            raise Refused("a special-purpose address (RFC 6890) that the allow list does not open")
        return keys.client_subnet(address)


def merge_sample(value: Mapping[str, Any] | None, rtt_us: int, source: str, by: str) -> dict[str, Any]:
    """A client record's value after one more sample of *rtt_us* (µs, clamped to the
    schema's range), the oldest of `SAMPLES_PER_DC` forgotten."""
    rtt_us = min(max(int(rtt_us), 1), MAX_CLIENT_RTT)
    held = list(value.get("samples", ())) if value else []
    samples = [*held[-(SAMPLES_PER_DC - 1) :], rtt_us]
    return {"rtt": int(statistics.median_low(samples)), "samples": samples, "source": source, "by": by}


def population_after(
    value: Mapping[str, Any] | None, subnet: IPNetwork, figures: Callable[[str], Mapping[str, int]]
) -> dict[str, Any]:
    """An LDNS's population after one more beacon tied it to *subnet*: the subnet's count
    grows by one (past `MAX_SUBNETS` subnets the least counted goes), and each DC's RTT is
    the mean of its subnets' figures (*figures*: subnet key text -> {DC: µs}) weighted by
    their counts, over the subnets measured from that DC."""
    counts: dict[str, int] = dict(value.get("subnets", {})) if value else {}
    text = keys.subnet_text(str(subnet))
    counts[text] = counts.get(text, 0) + 1
    if len(counts) > MAX_SUBNETS:
        least = min((c, s) for s, c in counts.items() if s != text)
        del counts[least[1]]
    sums: dict[str, float] = {}
    weights: dict[str, int] = {}
    for name, count in counts.items():
        for dc, us in figures(name).items():
            sums[dc] = sums.get(dc, 0.0) + count * us
            weights[dc] = weights.get(dc, 0) + count
    rtt = {dc: max(1, min(round(sums[dc] / weights[dc]), MAX_CLIENT_RTT)) for dc in sorted(sums)}
    return {"subnets": counts, "rtt": rtt, "n": sum(counts.values())}


@dataclass(frozen=True, slots=True)
class Figure:
    """One DC's figure from a client source, read as a path (`proximity.table.PathInfo`'s
    fields the methods read)."""

    datacenter: str
    rtt_us: int
    age: float
    source: str
    completion: int = 10_000
    hops: int = 0

    @property
    def usable(self) -> bool:
        return self.rtt_us > 0


@dataclass(frozen=True, slots=True)
class Chosen:
    """The source that decides: its name, the ECS scope its answer holds for (the client
    subnet's prefix when a client measurement decides, 0 for the LDNS-wide ones), and its
    figure per DC."""

    source: str
    scope: int
    figures: Mapping[str, Figure]
    #: what was measured: the client subnet or the LDNS (for traces and explain)
    subject: str
    #: samples behind it (a population's beacons; the fewest of its client figures')
    samples: int


class ClientSources:
    """Reads the client and population records for a decision, in the config's order.

    *get* is the store's (it records what a decision read, so a kept decision ends when a
    record it read changes); *clock* the store's; *max_age* drops figures older than that.
    """

    def __init__(
        self,
        get: Callable[[str], Any],
        clock: Callable[[], float],
        order: Sequence[str],
        min_samples: int,
        max_age: float,
        probing: bool = False,
    ):
        self._get = get
        self._clock = clock
        self.order = tuple(order)
        self.min_samples = min_samples
        self.max_age = max_age
        #: ``proximity.client_probe.enabled`` (with ``client`` among the sources)
        self.probing = probing and CLIENT in self.order

    @property
    def on(self) -> bool:
        """Whether a client source comes before the LDNS's own paths."""
        return bool(self.order) and self.order[0] != LDNS

    def paths(
        self, client_address: IPAddress, prefix: int, from_ecs: bool, ldns: str, datacenters: Iterable[str]
    ) -> Chosen | None:
        """The first client source before ``ldns`` in the order with a live figure for every
        one of *datacenters*; None: the LDNS's own paths decide (as without client sources)."""
        dcs = sorted(set(datacenters))
        if not dcs:
            return None
        for source in self.order:
            if source == LDNS:
                return None
            if source == CLIENT and from_ecs:
                chosen = self._client(client_address, prefix, dcs)
            elif source == POPULATION:
                chosen = self._population(ldns, dcs)
            else:
                chosen = None
            if chosen is not None:
                return chosen
        return None

    def unmeasured(self, address: IPAddress, prefix: int, from_ecs: bool) -> str | None:
        """The client subnet to have probed for a client whose own figures did not decide
        (`proximity.clientrequests`), or None: probing is off, or the client is not known
        by a trusted resolver's ECS of at least a /24 (/48)."""
        if not self.probing or not from_ecs or prefix < keys.CLIENT_PREFIX[address.version]:
            return None
        return str(keys.client_subnet(address))

    def _client(self, address: IPAddress, prefix: int, dcs: list[str]) -> Chosen | None:
        """The ECS subnet's own figures, when it is at least as long as what the table
        knows (a /16 from a resolver names 256 client subnets: none of them decides)."""
        if address.version == 4:
            if prefix < V4_PREFIX:
                return None
            a, b, c, _ = address.packed  # (the /24's text, without building a network: per query)
            subnet, scope = f"{a}.{b}.{c}.0/24", V4_PREFIX
        else:
            if prefix < V6_PREFIX:
                return None
            subnet, scope = str(keys.client_subnet(address)), V6_PREFIX
        now = self._clock()
        figures: dict[str, Figure] = {}
        samples = SAMPLES_PER_DC
        for dc in dcs:
            record = self._get(keys.client(subnet, dc))
            value = None if record is None else record.value
            if not value or now - record.born > self.max_age:
                return None
            figures[dc] = Figure(dc, int(value["rtt"]), now - record.born, str(value.get("source", "rum")))
            samples = min(samples, len(value.get("samples", ())))
        return Chosen(CLIENT, scope, figures, subnet, samples)

    def _population(self, ldns: str, dcs: list[str]) -> Chosen | None:
        record = self._get(keys.population(ldns))
        value = None if record is None else record.value
        if not value or int(value.get("n", 0)) < self.min_samples:
            return None
        age = self._clock() - record.born
        if age > self.max_age:
            return None
        rtts = value.get("rtt", {})
        if any(dc not in rtts for dc in dcs):
            return None
        figures = {dc: Figure(dc, int(rtts[dc]), age, POPULATION) for dc in dcs}
        return Chosen(POPULATION, 0, figures, ldns, int(value["n"]))
