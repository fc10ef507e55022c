"""The IXFR journal (RFC 1995): what each reload changed in a transferable zone.

When a reload gives a zone with ``transfer`` a newer serial (RFC 1982), the records the new
zone no longer has and the ones it has anew are kept as one `Step` (old serial -> new
serial). A secondary asking IXFR from a serial the journal starts a step at gets the steps
from there on (`Journal.chain_from`) instead of the whole zone.

The difference (`difference`) walks the two versions' names side by side and compares
their RRsets; only where they differ are the records, each an (owner, type, TTL, RDATA)
tuple, set against each other. So a reload costs a comparison per name (far less than the
zone file's parsing) and records in proportion to the change. The SOA is left out: each
step carries both SOAs itself.

Bounds: at most `MAX_VERSIONS` steps, and no more records (deleted plus added, over all
steps) than the zone itself has; the oldest steps go first. A single change bigger than the
zone is not kept at all (the journal is emptied: the whole zone is cheaper to send). A
reload that changes a zone's records without a newer serial (or with an older one) also
empties it: the steps before would no longer lead to what is served.

The journal lives in memory only, from one config to the next (`Transfers` hands it on):
after a restart a secondary's first IXFR gets the whole zone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import RData, RRset, Zone

#: the most changes kept per zone (a secondary more versions behind gets the whole zone)
MAX_VERSIONS = 20

#: one record: owner (as the zone file spells it), type, TTL, RDATA
Record = tuple[Name, int, int, RData]


def serial_of(zone: Zone) -> int:
    """The SOA serial of *zone*."""
    return soa_serial(zone.soa)


def soa_serial(soa: RRset) -> int:
    """The serial of the SOA RRset *soa*."""
    fixed = soa.rdatas[0][-1]
    assert isinstance(fixed, bytes)
    return int.from_bytes(fixed[:4], "big")


def newer(serial: int, than: int) -> bool:
    """Whether *serial* is greater than *than* in RFC 1982 serial arithmetic (32 bits).
    Two serials 2**31 apart are not comparable: neither is newer."""
    return 0 < (serial - than) % 2**32 < 2**31


def records_of(zone: Zone) -> set[Record]:
    """Every record of *zone* but its SOA, as tuples."""
    out: set[Record] = set()
    for node in zone.nodes.values():
        out.update(_records(node.rrsets.values(), zone.soa))
    return out


def difference(old: Zone, new: Zone) -> tuple[set[Record], set[Record]]:
    """The records *old* has and *new* has not, and the other way round (SOAs aside).
    Names whose RRsets are equal are passed over: records are made only where they differ."""
    deleted: set[Record] = set()
    added: set[Record] = set()
    new_nodes = new.nodes
    for key, node in old.nodes.items():
        other = new_nodes.get(key)
        if other is None:
            deleted.update(_records(node.rrsets.values(), old.soa))
        elif other.rrsets != node.rrsets:
            for rtype in node.rrsets.keys() | other.rrsets.keys():
                was, now = node.rrsets.get(rtype), other.rrsets.get(rtype)
                if was != now:
                    before = set(_records([was] if was is not None else [], old.soa))
                    after = set(_records([now] if now is not None else [], new.soa))
                    deleted |= before - after
                    added |= after - before
    old_nodes = old.nodes
    for key, node in new_nodes.items():
        if key not in old_nodes:
            added.update(_records(node.rrsets.values(), new.soa))
    return deleted, added


def _records(rrsets: Iterable[RRset], soa: RRset) -> Iterator[Record]:
    for rrset in rrsets:
        if rrset is not soa:
            owner, rtype, ttl = rrset.owner, rrset.rtype, rrset.ttl
            yield from ((owner, rtype, ttl, rdata) for rdata in rrset.rdatas)


@dataclass(frozen=True, slots=True)
class Step:
    """One change: from the version with SOA *old* to the one with SOA *new*."""

    old: RRset
    new: RRset
    deleted: tuple[Record, ...]
    added: tuple[Record, ...]

    @property
    def size(self) -> int:
        return len(self.deleted) + len(self.added)


@dataclass(frozen=True, slots=True)
class Journal:
    """The changes of one zone, oldest first, each step starting where the one before ends.
    Immutable: a reload makes a new one (`after`), so a config not taken changes nothing."""

    steps: tuple[Step, ...] = ()

    @property
    def size(self) -> int:
        return sum(step.size for step in self.steps)

    def chain_from(self, serial: int) -> tuple[Step, ...] | None:
        """The steps from version *serial* to the newest, or None when no step starts there."""
        for i, step in enumerate(self.steps):
            if soa_serial(step.old) == serial:
                return self.steps[i:]
        return None

    def after(self, old: Zone, new: Zone, limit: int | None = None) -> Journal:
        """The journal once *old* is replaced by *new*: a step more when *new* has a newer
        serial, the same journal when nothing changed, an empty one when the records changed
        without a newer serial. *limit*: the most records all steps may hold (by default
        the number of records *new* has)."""
        if old is new:
            return self
        before, now = serial_of(old), serial_of(new)
        deleted, added = difference(old, new)
        if before == now and old.soa == new.soa:
            return self if not deleted and not added else Journal()
        if not newer(now, before):
            return Journal()
        step = Step(old.soa, new.soa, _sorted(deleted), _sorted(added))
        if limit is None:
            limit = sum(len(r.rdatas) for node in new.nodes.values() for r in node.rrsets.values())
        return Journal((*self.steps, step)).bounded(limit)

    def bounded(self, limit: int, versions: int = MAX_VERSIONS) -> Journal:
        """The newest steps holding at most *limit* records, and at most *versions* of them."""
        kept: list[Step] = []
        total = 0
        for step in reversed(self.steps[-versions:] if versions > 0 else ()):
            if total + step.size > limit:
                break
            total += step.size
            kept.append(step)
        return Journal(tuple(reversed(kept)))


def rrsets_of(records: Iterable[Record]) -> list[RRset]:
    """*records* (sorted, so an RRset's records are together) as RRsets."""
    out: list[RRset] = []
    key: tuple[Name, int, int] | None = None
    rdatas: list[RData] = []
    for owner, rtype, ttl, rdata in records:
        if (owner, rtype, ttl) != key:
            if key is not None:
                out.append(RRset(key[0], key[1], key[2], tuple(rdatas)))
            key, rdatas = (owner, rtype, ttl), []
        rdatas.append(rdata)
    if key is not None:
        out.append(RRset(key[0], key[1], key[2], tuple(rdatas)))
    return out


def _sorted(records: Iterable[Record]) -> tuple[Record, ...]:
    # (an RDATA mixes bytes and names: sort by the parts that are comparable, then repr)
    return tuple(sorted(records, key=lambda r: (r[0], r[1], r[2], repr(r[3]))))
