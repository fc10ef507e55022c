"""Keeps the node's current `HealthSnapshot` and acts on changes, in proportion to them.

A changed record marks its subject dirty: ``obs/vs/<vs>/<observer>``, ``admin/vs/<vs>`` and
``held/vs/<vs>`` mark the server, ``obs/link/<link>/<observer>`` and a new traffic figure
``traffic/link/<link>`` (whether the link is over its `max_utilisation`) the link,
``admin/datacenter/<dc>`` every server of that data center and ``admin/link/<link>`` every
server bound to that link (see `state.admin`). The admin states of pools, pool members
and wide IPs (``admin/pool/...``, ``admin/member/...``, ``admin/wideip/...``) are the
balancer's to apply: the tracker keeps them in the snapshot (`HealthSnapshot.admin`) and
tells its `wideip_listeners` which wide IPs they concern, so only those wide IPs' kept
decisions end. Dirty subjects
are evaluated once (`health.status`: each reads its own records only) when the tracker
flushes: on the next reactor turn when the node gave it a `schedule` (so a reconcile that
merges a hundred verdicts in one turn evaluates each server once), at once without one
(tests, tools), and in any case before anyone reads the snapshot, so readers never see it
behind the store. A link whose state changed marks the servers bound to it; a server whose
status changed marks the servers that depend on it. One verdict change thus costs the
evaluation of its subject (and of what hangs on it), never a walk over the config.

A change of the observers whose verdicts count (a peer connecting or leaving: see
`observers_changed`) and a new config re-evaluate everything: every subject has verdicts
from every observer.

On each change of a virtual server or link the tracker logs a structured event (from, to,
reason, observer). Two changes have effects:

- a server with `manual_resume` that stops being healthy gets a ``held/vs/<vs>`` record,
  which keeps it out until an operator enables it again (deleting the record);
- a server that becomes available again after being out starts its `slow_start` ramp.

It is also the `Availability` the balancer asks (delegating to the current snapshot).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from twisted.logger import Logger

from gtmcluster.config.changes import Changes, between
from gtmcluster.config.model import Config, VirtualServer
from gtmcluster.health.status import (
    HealthSnapshot,
    Observed,
    VsStatus,
    balancer_admin,
    link_status,
    vs_status,
)
from gtmcluster.state import admin, keys
from gtmcluster.state.admin import AdminState
from gtmcluster.state.record import Record
from gtmcluster.state.schema import shorten
from gtmcluster.state.store import Store

log = Logger()

WATCHED = (keys.OBS, keys.ADMIN, keys.HELD_VS, keys.TRAFFIC_LINK)
#: how often (seconds) ramps that ended are dropped (a ramp's end needs no evaluation)
RAMP_SWEEP = 1.0
#: with a schedule, subjects evaluated at most per reactor turn (or per read of the
#: snapshot, or per answer that finds some not evaluated yet): a change that touches
#: everything (a peer leaving, a data center down, with 5,000 servers) is spread over
#: turns of a few milliseconds (an evaluation at 5 members is 40-60 us: 500 a turn held
#: the reactor 30-50 ms, and each answer as long, in an outage of 2,500 servers; an
#: evaluation that changes a server's standing costs more, its wide IPs told: 100 such
#: took 25-32 ms a turn), and readers meanwhile see each server either as it was or as it
#: is now
SLICE = 50

Schedule = Callable[[Callable[[], None]], object]


class HealthTracker:
    def __init__(
        self,
        config: Config,
        store: Store,
        clock: Callable[[], float],
        node: str,
        schedule: Schedule | None = None,
    ):
        self.config = config
        self.store = store
        self.clock = clock
        self.node = node
        #: runs a callable on the next reactor turn (`reactor.callLater(0, f)`); None: the
        #: tracker flushes at once on every change
        self.schedule = schedule
        self._scheduled = False
        self._vs: dict[str, VsStatus] = {}
        self._links: dict[str, Observed] = {}
        self._ramps: dict[str, tuple[float, float]] = {}
        #: admin states of pools, pool members and wide IPs, by "<level>/<name>"
        self._admin: dict[str, AdminState] = {}
        self._swept = float("-inf")
        #: what a reader sees: views of the tracker's current statuses
        self._snapshot = HealthSnapshot(
            MappingProxyType(self._vs),
            MappingProxyType(self._links),
            MappingProxyType(self._ramps),
            MappingProxyType(self._admin),
        )
        #: subjects to evaluate (dicts as ordered sets)
        self._dirty_vs: dict[str, None] = {}
        self._dirty_links: dict[str, None] = {}
        self._flushing = False
        self._quiet = False  # the first evaluation: no events
        self._observers: Callable[[], frozenset[str]] | None = None
        self._counted: frozenset[str] | None = None
        #: grows whenever which servers are available or serving changes (not when only a
        #: reason or an observer's verdict does): kept decisions hold while it stays
        self._generation = 0
        #: whether this tracker writes the records its evaluation calls for (held servers);
        #: an answering worker's copy does not: the node writes them, and they come back
        self.writes = True
        #: subjects evaluated, in all (a figure for tests and benchmarks)
        self.evaluations = 0
        #: told, after each evaluation, the servers whose availability or serving changed
        self.standing_listeners: list[Callable[[list[str]], object]] = []
        #: told the wide IPs whose pools', pool members' or own admin state changed
        self.wideip_listeners: list[Callable[[list[str]], object]] = []
        self._index(config)
        self._read_admin()
        self._all_dirty()
        self._quiet = True
        try:
            self._flush(None)
        finally:
            self._quiet = False
        store.subscribe(self._changed)

    def _index(self, config: Config, index: HealthIndex | None = None) -> None:
        """Use *index* (`index_of` *config*, made already, or now)."""
        index = index or index_of(config)
        self._on_link = index.on_link
        self._in_dc = index.in_dc
        self._dependants = index.dependants
        self._using_pool = index.using_pool
        self._wideip_names = index.wideip_names

    def _read_admin(self) -> None:
        """The admin states the balancer applies, from the store (at start, on a new config)."""
        self._admin.clear()
        self._admin.update(balancer_admin(self.store))

    def _wideips_of_admin(self, level: str, name: str) -> list[str]:
        """The wide IPs an admin state at *level* of *name* concerns."""
        if level == "wideip":
            return [name] if name in self._wideip_names else []
        pool = name.partition("/")[0] if level == "member" else name
        return list(self._using_pool.get(pool, ()))

    def _all_dirty(self) -> None:
        self._dirty_links.update(dict.fromkeys(self.config.links))
        self._dirty_vs.update(dict.fromkeys(self.config.virtual_servers))

    # -- what readers see ---------------------------------------------------------------------

    @property
    def snapshot(self) -> HealthSnapshot:
        """Availability now: changes not yet evaluated are evaluated first (with a schedule,
        up to a `SLICE` of them; the rest follow in the next turns)."""
        if self._dirty_vs or self._dirty_links:
            self._flush(None if self.schedule is None else SLICE)
        return self._snapshot

    @property
    def generation(self) -> int:
        if self._dirty_vs or self._dirty_links:
            self._flush(None if self.schedule is None else SLICE)
        return self._generation

    def settle(self) -> None:
        """Evaluate every change now, however many (before the node answers at all)."""
        self._flush(None)

    def catch_up(self, servers: Collection[str] | None = None) -> None:
        """Evaluate changes not yet evaluated (as a read of the snapshot does); with a
        schedule and *servers* (those an answer may name), only the dirty links and those
        of *servers* that are dirty (and the servers they depend on): an answer needs no
        more, and the scheduled flushes take the rest a slice per turn. (Up to a slice at
        every answer held the reactor 30-90 ms a read of the DNS socket in an outage.)"""
        if not (self._dirty_vs or self._dirty_links):
            return
        if self.schedule is None or servers is None:
            self._flush(None if self.schedule is None else SLICE)
        elif self._dirty_links or not self._dirty_vs.keys().isdisjoint(servers):
            self._flush(None, servers)

    @property
    def pending(self) -> int:
        """Subjects waiting to be evaluated."""
        return len(self._dirty_vs) + len(self._dirty_links)

    # Availability, as the balancer asks it: with a schedule, as evaluated so far (an answer
    # has caught up with its wide IP's servers first: `catch_up`; a read here must not
    # evaluate a slice of others at every server a decision looks at)
    def _current(self) -> HealthSnapshot:
        if self.schedule is None and (self._dirty_vs or self._dirty_links):
            self._flush(None)
        return self._snapshot

    def vs_up(self, vs: VirtualServer) -> bool:
        return self._current().vs_up(vs)

    def vs_serving(self, vs: VirtualServer) -> bool:
        return self._current().vs_serving(vs)

    def weight(self, vs: VirtualServer, now: float) -> float:
        return self._current().weight(vs, now)

    def admin_states(self) -> Mapping[str, AdminState]:
        return self._snapshot.admin

    # -- what changes it ----------------------------------------------------------------------

    @property
    def observers(self) -> Callable[[], frozenset[str]] | None:
        """The nodes whose verdicts count (set by the node's wiring: itself and its connected
        peers, asked again on `observers_changed`); None counts every verdict held."""
        return self._observers

    @observers.setter
    def observers(self, observers: Callable[[], frozenset[str]] | None) -> None:
        self._observers = observers
        self.refresh()

    def reconfigure(self, config: Config, changes: Changes | None = None, index: HealthIndex | None = None) -> None:
        """Evaluate with *config* from now on. Only the servers and links whose definition
        changed (and what hangs on them) are evaluated again: a reload that changes one
        server costs one evaluation, not one per server. *changes*: what differs from the
        running config (compared here when not given); *index*: its `index_of` (made here
        when not given)."""
        if changes is None:
            changes = between(self.config, config)
        self.config = config
        self._index(config, index)
        self._read_admin()
        for name in [n for n in self._vs if n not in config.virtual_servers]:
            del self._vs[name]
            self._ramps.pop(name, None)
            self._dirty_vs.pop(name, None)
        for name in [n for n in self._links if n not in config.links]:
            del self._links[name]
            self._dirty_links.pop(name, None)
        self._dirty_links.update((name, None) for name in changes.links if name in config.links)
        self._dirty_vs.update((name, None) for name in changes.virtual_servers if name in config.virtual_servers)
        self._generation += 1
        self._flush(None if self.schedule is None else SLICE)
        self._kick()

    def observers_changed(self) -> None:
        """The set of observers whose verdicts count may have changed (a peer connected or
        left): re-evaluate everything if it did."""
        counted = self.observers() if self.observers is not None else None
        if counted != self._counted:
            self.refresh()

    def refresh(self) -> HealthSnapshot:
        """Re-evaluate everything (with a schedule: the first `SLICE` now, the rest in the
        next turns)."""
        self._counted = self.observers() if self.observers is not None else None
        self._all_dirty()
        self._flush(None if self.schedule is None else SLICE)
        self._kick()
        return self._snapshot

    def _changed(self, record: Record) -> None:
        key = record.key
        if not key.startswith(WATCHED):
            return
        observed = keys.observed(key)
        if observed is not None:
            subject, name = observed
            if name not in (self.config.virtual_servers if subject == "vs" else self.config.links):
                return
            (self._dirty_vs if subject == "vs" else self._dirty_links)[name] = None
        elif (traffic := keys.traffic_link(key)) is not None:
            link = self.config.links.get(traffic)
            if link is None or link.max_utilisation is None:
                return  # a figure that decides nothing about availability
            self._dirty_links[traffic] = None
        else:
            parsed = admin.parse_key(key)
            if parsed is None:
                held = keys.held_name(key)
                if held is None:
                    return
                parsed = ("vs", held)  # a hold marks its server, as its admin state does
            level, name = parsed
            if level == "vs":
                servers: Collection[str] = (name,) if name in self.config.virtual_servers else ()
            elif level == "datacenter":
                servers = self._in_dc.get(name, ())
            elif level == "link":
                servers = self._on_link.get(name, ())
            else:
                self._balancer_admin_changed(level, name, record)
                return
            if not servers:
                return
            self._dirty_vs.update(dict.fromkeys(servers))
        if self.schedule is None:
            self._flush(None)
        else:
            self._kick()

    def _balancer_admin_changed(self, level: str, name: str, record: Record) -> None:
        """A pool's, pool member's or wide IP's admin state changed: keep it, and tell the
        listeners which wide IPs it concerns (their kept decisions end)."""
        state = admin.from_value(level, name, record.value)
        held = f"{level}/{name}"
        if state is None:
            if self._admin.pop(held, None) is None:
                return
        elif self._admin.get(held) == state:
            return
        else:
            self._admin[held] = state
        wideips = self._wideips_of_admin(level, name)
        if not self._quiet:
            log.info(
                "{target} {name} admin state now {state}",
                target=admin.LEVEL_WORDS[level],
                name=name,
                state=state.state if state is not None else admin.ENABLED,
                by=state.by if state is not None else "",
                reason=state.reason if state is not None else "",
                event="admin_state",
            )
        if wideips:
            for listener in self.wideip_listeners:
                listener(wideips)

    def _kick(self) -> None:
        """Have the next reactor turn evaluate what is dirty (with a schedule)."""
        if self.schedule is not None and not self._scheduled and (self._dirty_vs or self._dirty_links):
            self._scheduled = True
            self.schedule(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._scheduled = False
        self._flush(SLICE)
        self._kick()

    # -- evaluation -----------------------------------------------------------------------------

    def _flush(self, budget: int | None, only: Collection[str] | None = None) -> None:
        """Evaluate the dirty subjects (at most *budget* of them, None: all), links first,
        and what hangs on those that changed. Records written while reacting (held
        servers) are evaluated in the same flush. With *only*, the dirty links and the
        dirty servers among *only*."""
        if self._flushing:
            return
        self._flushing = True
        try:
            now = self.clock()
            counted = self._counted
            config = self.config
            standing_changed: list[str] = []
            left = -1 if budget is None else budget
            # *only* is walked round from where the last look stopped, not from its start:
            # a wide IP's hundreds of servers cost one pass, not one pass per server; a whole
            # round without a dirty one ends the flush (one evaluated may dirty another)
            wanted = list(only) if only is not None else []
            cursor = 0
            while (self._dirty_links or self._dirty_vs) and left != 0:
                if self._dirty_links:
                    name = next(iter(self._dirty_links))
                    del self._dirty_links[name]
                    self._evaluate_link(name, counted)
                else:
                    if only is None:
                        name = next(iter(self._dirty_vs))
                    else:
                        found = None
                        for _ in range(len(wanted)):
                            candidate = wanted[cursor]
                            cursor = (cursor + 1) % len(wanted)
                            if candidate in self._dirty_vs:
                                found = candidate
                                break
                        if found is None:
                            break
                        name = found
                    del self._dirty_vs[name]
                    vs = config.virtual_servers.get(name)
                    if vs is not None and self._evaluate_vs(vs, counted, now):
                        standing_changed.append(name)
                left -= 1
            if standing_changed:
                self._generation += 1
                for listener in self.standing_listeners:
                    listener(standing_changed)
            if self._ramps and now - self._swept >= RAMP_SWEEP:
                self._swept = now
                for name in [n for n, (_, end) in self._ramps.items() if end <= now]:
                    del self._ramps[name]
        finally:
            self._flushing = False

    def _evaluate_link(self, name: str, counted: frozenset[str] | None) -> None:
        link = self.config.links.get(name)
        if link is None:
            return
        self.evaluations += 1
        new = link_status(link, self.store, counted)
        old = self._links.get(name)
        if old == new:
            return
        self._links[name] = new
        self._dirty_vs.update(dict.fromkeys(self._on_link.get(name, ())))
        if old is not None and old.state != new.state and not self._quiet:
            log.info(
                "link {link} {old} -> {new}: {reason}",
                link=name,
                old=old.state,
                new=new.state,
                reason=new.reason,
                observer="sync group",
                event="link_state",
            )
        if old is not None and bool(old.busy) != bool(new.busy) and not self._quiet:
            log.info(
                "link {link} {what}",
                link=name,
                what=f"full: {new.busy}" if new.busy else "back under its max_utilisation",
                busy=new.busy,
                event="link_utilisation",
            )

    def _evaluate_vs(self, vs: VirtualServer, counted: frozenset[str] | None, now: float) -> bool:
        """Evaluate *vs*; True when its availability or serving changed."""
        self.evaluations += 1
        new = vs_status(vs, self.store, self._links, self._dependency, counted)
        old = self._vs.get(vs.name)
        if old == new:
            return False
        self._vs[vs.name] = new
        self._dirty_vs.update(dict.fromkeys(self._dependants.get(vs.name, ())))
        if old is None:
            return True
        if not self._quiet:
            self._vs_changed(vs, old, new, now)
        return (old.available, old.serving) != (new.available, new.serving)

    def _dependency(self, name: str) -> VsStatus:
        status = self._vs.get(name)
        if status is None:  # not evaluated yet (a first evaluation in config order)
            vs = self.config.virtual_servers[name]
            self.evaluations += 1
            status = self._vs[name] = vs_status(vs, self.store, self._links, self._dependency, self._counted)
        return status

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
            self.store.put(keys.held(vs.name), {"since": now, "reason": shorten(after.reason), "by": self.node})
            log.warn(
                "virtual server {vs} held out until an operator enables it (manual_resume): {reason}",
                vs=vs.name,
                reason=after.reason,
                event="vs_held",
            )
        if vs.slow_start > 0 and after.available and not before.available:
            self._ramps[vs.name] = (now, now + vs.slow_start)


def _word(status: VsStatus) -> str:
    if status.available:
        return "available"
    return "draining" if status.serving else "unavailable"


@dataclass(frozen=True)
class HealthIndex:
    """Who hangs on whom in a config: the servers bound to each link, in each data center,
    depending on each server; the wide IPs using each pool."""

    on_link: dict[str, list[str]]
    in_dc: dict[str, list[str]]
    dependants: dict[str, list[str]]
    using_pool: dict[str, list[str]]
    wideip_names: frozenset[str]


def index_of(config: Config) -> HealthIndex:
    """The `HealthIndex` of *config* (a reload makes it before its switch: 12 ms at 5,000
    servers and 2,000 wide IPs)."""
    on_link: dict[str, list[str]] = {}
    in_dc: dict[str, list[str]] = {}
    dependants: dict[str, list[str]] = {}
    for vs in config.virtual_servers.values():
        in_dc.setdefault(vs.datacenter, []).append(vs.name)
        if vs.link is not None:
            on_link.setdefault(vs.link.name, []).append(vs.name)
        for dep in vs.depends_on:
            dependants.setdefault(dep, []).append(vs.name)
    using: dict[str, list[str]] = {}
    for wideip in config.wideips.values():
        for ref in (*wideip.pools, *((wideip.last_resort,) if wideip.last_resort else ())):
            users = using.setdefault(ref.pool.name, [])
            if wideip.name not in users:
                users.append(wideip.name)
    return HealthIndex(on_link, in_dc, dependants, using, frozenset(w.name for w in config.wideips.values()))
