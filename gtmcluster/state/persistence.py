"""LDNS persistence kept as records in the store, so every GTM knows every client's answer.

A persistence record lives at ``persist/<wide IP>/<qtype>/<client network>`` with the pool
and the members chosen, and the wide IP's persistence TTL; replicated like any record, it
lets a client keep its answer whichever GTM of the sync group it asks.
"""

from __future__ import annotations

from gtmcluster.lb.context import PersistKey, PersistRecord
from gtmcluster.state.store import Store

PREFIX = "persist/"


def record_key(key: PersistKey) -> str:
    return f"{PREFIX}{key.wideip}/{key.qtype}/{key.network}"


class StorePersistence:
    """The persistence view the balancer reads, and the writer for its decisions."""

    def __init__(self, store: Store):
        self.store = store

    def get(self, key: PersistKey, now: float) -> PersistRecord | None:
        record = self.store.get(record_key(key))
        if record is None:
            return None
        value = record.value
        try:
            members = tuple(str(m) for m in value["members"])
            pool = str(value["pool"])
        except (KeyError, TypeError):
            return None  # not a persistence record we understand: decide anew
        return PersistRecord(key, pool, members, record.born, record.ttl or 0)

    def put(self, record: PersistRecord) -> None:
        self.store.put(record_key(record.key), {"pool": record.pool, "members": list(record.members)}, ttl=record.ttl)

    def __len__(self) -> int:
        return sum(1 for _ in self.store.scan(PREFIX))
