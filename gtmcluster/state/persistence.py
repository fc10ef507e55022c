"""LDNS persistence records held by this node.

For now the table is local and in memory; the sync group issue turns these into replicated
records so a client keeps its answer whichever GTM it asks.
"""

from __future__ import annotations

from gtmcluster.lb.context import PersistKey, PersistRecord


class PersistenceTable:
    """Live persistence records by key, with expiry on read and by `sweep`."""

    def __init__(self) -> None:
        self._records: dict[PersistKey, PersistRecord] = {}

    def get(self, key: PersistKey, now: float) -> PersistRecord | None:
        record = self._records.get(key)
        if record is None:
            return None
        if not record.live(now):
            del self._records[key]
            return None
        return record

    def put(self, record: PersistRecord) -> None:
        self._records[record.key] = record

    def sweep(self, now: float) -> int:
        """Drop expired records; returns how many."""
        dead = [k for k, r in self._records.items() if not r.live(now)]
        for k in dead:
            del self._records[k]
        return len(dead)

    def __len__(self) -> int:
        return len(self._records)
