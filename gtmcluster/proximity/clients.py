"""Client proximity (issue 36): client-subnet RTTs per data center, the client populations
that each LDNS serves, and which of them decides a query's figures.

Pure and bounded; nothing here is wired into the node yet. A client is known only by its
subnet (the /24 of an IPv4 source, the /48 of an IPv6 one): no address finer than that is
kept. Sources in the ranges the prober leaves alone (`config.ranges`) are refused, the
special-purpose ones unless an allow list opens them.

Per DC the table keeps the last `SAMPLES_PER_DC` samples and reads their **median**, not an
EWMA: a beacon is one browser's fetch, so its figures are heavy-tailed (a cold TLS session,
a busy tab); the median ignores such outliers where an EWMA would carry them for several
samples, and it is the same whatever order replicated samples arrive in.
"""

from __future__ import annotations

import ipaddress
import statistics
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gtmcluster.config.ranges import NEVER, SPECIAL_PURPOSE
from gtmcluster.topology.prefixes import PrefixMap

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: the prefix a client is known by
V4_PREFIX = 24
V6_PREFIX = 48
#: samples kept per subnet and DC (the median reads them)
SAMPLES_PER_DC = 16
#: the sources `decide_source` knows, and the default order
SOURCES = ("client", "ldns-population", "ldns")


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
        if address in self.never:
            raise Refused("multicast, broadcast or unspecified")
        if address in self.special and address not in self.allow:
            raise Refused("a special-purpose address (RFC 6890) that the allow list does not open")
        prefix = V4_PREFIX if address.version == 4 else V6_PREFIX
        return ipaddress.ip_network(f"{address}/{prefix}", strict=False)


@dataclass
class Entry:
    """One client subnet: per DC its last samples as (time, ms)."""

    seen: float
    samples: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)


class ClientTable:
    """Client-subnet RTT samples per DC, at most *max_subnets* subnets (the least recently
    seen goes first), samples older than *max_age* seconds forgotten."""

    def __init__(self, clock: Callable[[], float], max_subnets: int, max_age: float, ranges: Ranges | None = None):
        if max_subnets < 1 or max_age <= 0:
            raise ValueError("max_subnets and max_age must be positive")
        self.clock = clock
        self.max_subnets = max_subnets
        self.max_age = max_age
        self.ranges = ranges or Ranges()
        self.entries: OrderedDict[IPNetwork, Entry] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, source: str, samples: Mapping[str, float]) -> IPNetwork:
        """Keep *samples* (DC name -> ms) for the subnet of *source*; Refused if it may not."""
        subnet = self.ranges.subnet(source)
        self.add_subnet(subnet, samples)
        return subnet

    def add_subnet(self, subnet: IPNetwork, samples: Mapping[str, float]) -> None:
        now = self.clock()
        entry = self.entries.pop(subnet, None) or Entry(now)
        entry.seen = now
        for dc, ms in samples.items():
            entry.samples.setdefault(dc, deque(maxlen=SAMPLES_PER_DC)).append((now, ms))
        self.entries[subnet] = entry
        while len(self.entries) > self.max_subnets:
            self.entries.popitem(last=False)
            self.evicted += 1

    def expire(self) -> None:
        """Forget samples past max_age, and subnets left with none."""
        cutoff = self.clock() - self.max_age
        for subnet in list(self.entries):
            entry = self.entries[subnet]
            for dc in list(entry.samples):
                kept = entry.samples[dc]
                while kept and kept[0][0] < cutoff:
                    kept.popleft()
                if not kept:
                    del entry.samples[dc]
            if not entry.samples:
                del self.entries[subnet]

    def _live(self, subnet: IPNetwork, dc: str) -> list[float]:
        entry = self.entries.get(subnet)
        cutoff = self.clock() - self.max_age
        return [ms for at, ms in entry.samples.get(dc, ()) if at >= cutoff] if entry else []

    def rtt(self, subnet: IPNetwork, dc: str) -> float | None:
        """The median of the subnet's live samples for *dc*, or None."""
        live = self._live(subnet, dc)
        return statistics.median(live) if live else None

    def count(self, subnet: IPNetwork, dc: str) -> int:
        return len(self._live(subnet, dc))

    def figures(self, subnet: IPNetwork) -> dict[str, float]:
        """Each DC's RTT for *subnet* (DCs with no live sample left out)."""
        entry = self.entries.get(subnet)
        out = {dc: self.rtt(subnet, dc) for dc in entry.samples} if entry else {}
        return {dc: ms for dc, ms in out.items() if ms is not None}


class Populations:
    """Which LDNS serves which client subnets, from (LDNS, client subnet) pairs tied by a
    beacon's id: per LDNS a count per subnet, at most *max_ldns* LDNSes and *max_subnets*
    subnets each (the least recently seen goes first), pairs older than *max_age* forgotten."""

    def __init__(self, table: ClientTable, clock: Callable[[], float], max_ldns: int, max_subnets: int, max_age: float):
        if max_ldns < 1 or max_subnets < 1 or max_age <= 0:
            raise ValueError("max_ldns, max_subnets and max_age must be positive")
        self.table = table
        self.clock = clock
        self.max_ldns = max_ldns
        self.max_subnets = max_subnets
        self.max_age = max_age
        #: LDNS -> subnet -> [pairs, last seen]
        self.ldns: OrderedDict[str, OrderedDict[IPNetwork, list[float]]] = OrderedDict()

    def tie(self, ldns: str, subnet: IPNetwork) -> None:
        now = self.clock()
        subnets = self.ldns.pop(ldns, None) or OrderedDict()
        count, _ = subnets.pop(subnet, (0.0, now))
        subnets[subnet] = [count + 1, now]
        while len(subnets) > self.max_subnets:
            subnets.popitem(last=False)
        self.ldns[ldns] = subnets
        while len(self.ldns) > self.max_ldns:
            self.ldns.popitem(last=False)

    def expire(self) -> None:
        cutoff = self.clock() - self.max_age
        for ldns in list(self.ldns):
            subnets = self.ldns[ldns]
            for subnet in [s for s, (_, seen) in subnets.items() if seen < cutoff]:
                del subnets[subnet]
            if not subnets:
                del self.ldns[ldns]

    def shares(self, ldns: str) -> dict[IPNetwork, float]:
        """Each live client subnet's share of the LDNS's pairs (they sum to 1, or nothing)."""
        cutoff = self.clock() - self.max_age
        live = {s: c for s, (c, seen) in self.ldns.get(ldns, {}).items() if seen >= cutoff}
        total = sum(live.values())
        return {s: c / total for s, c in live.items()} if total else {}

    def weighted_rtt(self, ldns: str, dc: str, min_samples: int) -> float | None:
        """The RTT to *dc* of the LDNS's clients weighted by their shares (over the subnets
        the table measured), or None when fewer than *min_samples* samples stand behind it."""
        weights: list[tuple[float, float]] = []
        samples = 0
        for subnet, share in self.shares(ldns).items():
            rtt = self.table.rtt(subnet, dc)
            if rtt is not None:
                weights.append((share, rtt))
                samples += self.table.count(subnet, dc)
        total = sum(w for w, _ in weights)
        if samples < max(min_samples, 1) or total <= 0:
            return None
        return sum(w * rtt for w, rtt in weights) / total


@dataclass(frozen=True)
class Decision:
    """Which source decided, its figure for each DC, and the ECS scope prefix to answer with."""

    source: str
    figures: dict[str, float]
    scope: int


def decide_source(
    order: Sequence[str],
    dcs: Sequence[str],
    table: ClientTable,
    populations: Populations,
    ldns: str,
    ldns_rtts: Mapping[str, float],
    min_samples: int,
    ecs: IPNetwork | None = None,
) -> Decision | None:
    """The first source in *order* with a figure for some DC of *dcs*: the client subnet's
    own (only for an ECS subnet at least as long as the table's, from a trusted resolver:
    the caller checks the trust), the LDNS's client population, the LDNS's own RTT. The
    scope is the client prefix when the client decided, else 0 (the answer is LDNS-wide)."""
    for source in order:
        if source == "client":
            if ecs is None or ecs.prefixlen < (V4_PREFIX if ecs.version == 4 else V6_PREFIX):
                continue
            subnet = ecs.supernet(new_prefix=V4_PREFIX if ecs.version == 4 else V6_PREFIX)
            measured = table.figures(subnet)
            figures = {dc: measured[dc] for dc in dcs if dc in measured}
            scope = subnet.prefixlen
        elif source == "ldns-population":
            weighted = {dc: populations.weighted_rtt(ldns, dc, min_samples) for dc in dcs}
            figures = {dc: ms for dc, ms in weighted.items() if ms is not None}
            scope = 0
        elif source == "ldns":
            figures = {dc: ldns_rtts[dc] for dc in dcs if dc in ldns_rtts}
            scope = 0
        else:
            raise ValueError(f"unknown proximity source {source!r}: one of {', '.join(SOURCES)}")
        if figures:
            return Decision(source, figures, scope)
    return None
