"""Keeps the node's current `HealthSnapshot` and acts on changes.

The tracker re-evaluates when a health-related record changes (or on `refresh`), swaps in
a new immutable snapshot for the answer path, and on each change of a virtual server or
link logs a structured event (from, to, reason, observer). Two changes have effects:

- a server with `manual_resume` that stops being healthy gets a ``held/vs/<vs>`` record,
  which keeps it out until an operator enables it again (deleting the record);
- a server that becomes available again after being out starts its `slow_start` ramp.

It is also the `Availability` the balancer asks (delegating to the current snapshot).
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.logger import Logger

from gtmcluster.config.model import Config, VirtualServer
from gtmcluster.health.status import HealthSnapshot, VsStatus, snapshot
from gtmcluster.state.store import Record, Store

log = Logger()

WATCHED = ("obs/", "admin/", "held/")


class HealthTracker:
    def __init__(self, config: Config, store: Store, clock: Callable[[], float], node: str):
        self.config = config
        self.store = store
        self.clock = clock
        self.node = node
        self._ramps: dict[str, tuple[float, float]] = {}
        self._refreshing = False
        self._dirty = False
        #: the nodes whose verdicts count (set by the node's wiring: itself and its connected
        #: peers); None counts every verdict held
        self.observers: Callable[[], frozenset[str]] | None = None
        self.snapshot = snapshot(config, store)
        #: grows whenever which servers are available or serving changes (not when only a
        #: reason or an observer's verdict does): kept decisions hold while it stays
        self.generation = 0
        self._standing = _standing(self.snapshot)
        #: whether this tracker writes the records its evaluation calls for (held servers);
        #: an answering worker's copy does not: the node writes them, and they come back
        self.writes = True
        store.subscribe(self._changed)

    def reconfigure(self, config: Config) -> None:
        """Evaluate with *config* from now on (servers, monitors and links may change)."""
        self.config = config
        self._ramps = {k: v for k, v in self._ramps.items() if k in config.virtual_servers}
        self.snapshot = snapshot(config, self.store, self._ramps, self.observers() if self.observers else None)
        self.generation += 1
        self.refresh()

    def _changed(self, record: Record) -> None:
        if record.key.startswith(WATCHED):
            self.refresh()

    def refresh(self) -> HealthSnapshot:
        """Re-evaluate now. Writes made while reacting (held records) re-evaluate once more."""
        if self._refreshing:
            self._dirty = True
            return self.snapshot
        self._refreshing = True
        try:
            while True:
                self._dirty = False
                self._evaluate()
                if not self._dirty:
                    return self.snapshot
        finally:
            self._refreshing = False

    def _evaluate(self) -> None:
        now = self.clock()
        previous = self.snapshot
        self._ramps = {k: v for k, v in self._ramps.items() if v[1] > now}
        observers = self.observers() if self.observers is not None else None
        current = snapshot(self.config, self.store, self._ramps, observers)
        for name, status in current.vs.items():
            before = previous.vs.get(name)
            if before is None:
                continue
            self._vs_changed(self.config.virtual_servers[name], before, status, now)
        for name, link in current.links.items():
            old = previous.links.get(name)
            if old is not None and old.state != link.state:
                log.info(
                    "link {link} {old} -> {new}: {reason}",
                    link=name,
                    old=old.state,
                    new=link.state,
                    reason=link.reason,
                    observer="sync group",
                    event="link_state",
                )
        ramps_changed = self._ramps != dict(current.ramps)
        self.snapshot = snapshot(self.config, self.store, self._ramps, observers) if ramps_changed else current
        standing = _standing(self.snapshot)
        if standing != self._standing:
            self._standing = standing
            self.generation += 1

    def _vs_changed(self, vs: VirtualServer, before: VsStatus, after: VsStatus, now: float) -> None:
        if (before.available, before.serving) != (after.available, after.serving):
            log.info(
                "virtual server {vs} {old} -> {new}: {reason}",
                vs=vs.name,
                old=_word(before),
                new=_word(after),
                reason=after.reason,
                observer="sync group",
                event="vs_state",
            )
        if self.writes and vs.manual_resume and before.healthy and not after.healthy and not after.held:
            self.store.put(f"held/vs/{vs.name}", {"since": now, "reason": after.reason, "by": self.node})
            log.warn(
                "virtual server {vs} held out until an operator enables it (manual_resume): {reason}",
                vs=vs.name,
                reason=after.reason,
                event="vs_held",
            )
        if vs.slow_start > 0 and after.available and not before.available:
            self._ramps[vs.name] = (now, now + vs.slow_start)

    # Availability, as the balancer asks it
    def vs_up(self, vs: VirtualServer) -> bool:
        return self.snapshot.vs_up(vs)

    def vs_serving(self, vs: VirtualServer) -> bool:
        return self.snapshot.vs_serving(vs)

    def weight(self, vs: VirtualServer, now: float) -> float:
        return self.snapshot.weight(vs, now)


def _standing(snap: HealthSnapshot) -> dict[str, tuple[bool, bool]]:
    """What decisions see of a snapshot: each server's availability and serving."""
    return {name: (status.available, status.serving) for name, status in snap.vs.items()}


def _word(status: VsStatus) -> str:
    if status.available:
        return "available"
    return "draining" if status.serving else "unavailable"
