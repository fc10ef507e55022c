"""LDNS persistence kept as records in the store, so every GTM knows every client's answer.

A persistence record lives at ``persist/<wide IP>/<qtype>/<client network>`` (a client
known by the client subnet a trusted resolver sent: ``persist/<wide IP>/<qtype>/<resolver
network>/ecs/<client network>``, so each resolver has its own) with the pool and the members
chosen, and the wide IP's persistence TTL; replicated like any record, it lets a client
keep its answer whichever GTM of the sync group it asks.

The records are bounded (`persistence.max_records`, see `Store.bound`): the group keeps the
most recently written ones (an active client's record is rewritten past half its TTL).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gtmcluster.state import keys, values
from gtmcluster.state.store import Store


@dataclass(frozen=True, slots=True)
class PersistKey:
    """Whose persistence record: a wide IP and query type, and the client's network.

    A client known by its EDNS client subnet is held together with the resolver that sent
    it (`resolver`, that resolver's network at the same prefix): a resolver creates,
    refreshes and reads only records of its own, so one resolver's client subnet option
    cannot pin the answer another resolver's clients get."""

    wideip: str
    qtype: int
    #: the client's network at the persistence prefix, e.g. "202.106.1.0/24" (for a client
    #: subnet shorter than the prefix, its zero-padded address's: 10.1.0.0/16 -> 10.1.0.0/24)
    network: str
    #: with a client subnet: the asking resolver's network at the persistence prefix
    resolver: str = ""


@dataclass(frozen=True, slots=True)
class PersistRecord:
    """An LDNS persistence record: this client network keeps this pool and these members."""

    key: PersistKey
    pool: str
    members: tuple[str, ...]
    written: float
    ttl: float

    def live(self, now: float) -> bool:
        return now < self.written + self.ttl


KIND = "persist"


class PersistValue(values.Compact):
    """A persistence record's value as the store keeps it (see state.values): the pool and
    the members, one object for each distinct value. It reads, compares and travels as the dict
    ``{"pool": ..., "members": [...]}`` (each read of "members" a new list, as a copy of
    the dict would give); only a dict of exactly that shape, strings, takes this form."""

    __slots__ = ("members", "pool")
    FIELDS = ("pool", "members")

    def __init__(self, pool: str, members: tuple[str, ...]) -> None:
        self.pool = pool
        self.members = members

    @classmethod
    def of(cls, value: dict[str, Any]) -> PersistValue | None:
        """The compact form of *value*, or None when it is not exactly a persistence value."""
        pool, members = value.get("pool"), value.get("members")
        if len(value) != len(cls.FIELDS) or type(pool) is not str or type(members) is not list:
            return None
        if not all(type(m) is str for m in members):
            return None
        key = (pool, tuple(members))
        made = _values.get(key)
        if made is None:
            made = cls(values.shared_text(pool), tuple(values.shared_text(m) for m in members))
            if len(_values) < values.MAX_SHARED:
                _values[key] = made
        return made

    def to_json(self) -> dict[str, Any]:
        return {"pool": self.pool, "members": list(self.members)}

    def __getitem__(self, key: str) -> Any:
        if key == "pool":
            return self.pool
        if key == "members":
            return list(self.members)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.FIELDS)

    def __len__(self) -> int:
        return len(self.FIELDS)


#: the values in use, one object each (read-only, so records share them: a wide IP has few
#: pools and sets of members), up to `values.MAX_SHARED` of them
_values: dict[tuple[str, tuple[str, ...]], PersistValue] = {}
values.register(keys.PERSIST, PersistValue.of)


class StorePersistence:
    """The persistence view the balancer reads, and the writer for its decisions."""

    def __init__(self, store: Store):
        self.store = store

    def get(self, key: PersistKey, now: float) -> PersistRecord | None:
        record = self.store.get(keys.persist(key))
        if record is None:
            return None
        value = record.value
        if type(value) is PersistValue:
            return PersistRecord(key, value.pool, value.members, record.born, record.ttl or 0)
        try:
            members = tuple(str(m) for m in value["members"])
            pool = str(value["pool"])
        except (KeyError, TypeError):
            return None  # not a persistence record we understand: decide anew
        return PersistRecord(key, pool, members, record.born, record.ttl or 0)

    def put(self, record: PersistRecord) -> None:
        self.store.put(keys.persist(record.key), {"pool": record.pool, "members": list(record.members)}, ttl=record.ttl)

    def __len__(self) -> int:
        return sum(1 for _ in self.store.scan(keys.PERSIST))
