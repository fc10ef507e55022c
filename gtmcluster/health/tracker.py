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
flushes: with a `schedule` (the node's), on the reactor's next turns, a bounded number a turn
and never inside a DNS read (the answer path reads what is evaluated so far); without one
(tests, tools) at once. A link whose state changed marks the servers bound to it; a server
whose status changed marks the servers that depend on it. One verdict change thus costs the
evaluation of its subject (and of what hangs on it), never a walk over the config.

**How old a verdict an answer uses may be.** A mark that may take a server out (a verdict
that is not "up", one that lapsed, an admin state, a hold, a link's, a server it depends on
stopping, an observer whose "up" stops counting) is *urgent*: urgent marks are evaluated
first, in the order they came, at a rate planned from the length of the last turns so that
each is evaluated within `AIM` of its coming (more than a `SLICE` a turn only when that
needs it). So an answer never names a server whose down verdict the store has held longer
than `STALE` (250 ms), as long as a reactor turn takes under `STALE - AIM`. Other marks
(a verdict of "up", an observer joining with "up" verdicts, a reload's changed servers
that stayed in) come after, a `SLICE` a turn, oldest first.

A change of the observers whose verdicts count (a peer connecting or leaving: see
`observers_changed`) re-evaluates everything (every subject has verdicts from every
observer), urgently only the servers that observer's verdict may take out: those it saw up,
when it leaves, and those it sees down, when it joins.

On each change of a virtual server or link the tracker logs a structured event (from, to,
reason, observer). Two changes have effects:

- a server with `manual_resume` that stops being healthy gets a ``held/vs/<vs>`` record,
  which keeps it out until an operator enables it again (deleting the record);
- a server that becomes available again after being out starts its `slow_start` ramp.

It is also the `Availability` the balancer asks (delegating to the current snapshot).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from types import MappingProxyType

from twisted.logger import Logger

from gtmcluster.config.changes import Changes, between
from gtmcluster.config.model import Config, VirtualServer
from gtmcluster.health.index import HealthIndex, index_of
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
#: with a schedule, subjects evaluated per reactor turn (or per read of the snapshot) while
#: no urgent mark needs more to be in time: a change that touches everything (a peer
#: leaving, a data center down, with 5,000 servers) is spread over turns of a few
#: milliseconds (an evaluation at 5 members is 40-60 us: 500 a turn held the reactor
#: 30-50 ms; an evaluation that changes a server's standing costs more, its wide IPs
#: told: 100 such took 25-32 ms a turn), and readers meanwhile see each server either as
#: it was or as it is now
SLICE = 50
#: the oldest an urgent mark (a verdict that may take a server out) may be when an answer
#: is made (seconds): the node's bound beside the failover bound (README, "Failover time")
STALE = 0.25
#: an urgent mark is planned to be evaluated this long after it came; the rest of `STALE`
#: is for the turn that runs late (the node's stall target is 50 ms)
AIM = 0.2

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
        #: when the pending turn was asked for (its length, when it runs, plans the rate)
        self._kicked_at = 0.0
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
        #: subjects to evaluate, with when each was marked (in the order they came); the
        #: urgent servers (see the module's doc) are in both dicts, with their first urgent mark
        self._dirty_vs: dict[str, float] = {}
        self._urgent_vs: dict[str, float] = {}
        self._dirty_links: dict[str, float] = {}
        #: the longest an urgent mark waited, when evaluated (seconds: a figure for tests,
        #: benchmarks and /metrics)
        self.longest_wait = 0.0
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
        #: told each change of a server's status (name, before, after) and of a link's
        #: state (name, before, after), after the first evaluation (the alerts' events)
        self.vs_listeners: list[Callable[[str, VsStatus, VsStatus], object]] = []
        self.link_listeners: list[Callable[[str, Observed, Observed], object]] = []
        self._index(config)
        self._read_admin()
        self._all_dirty(urgent=True)
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

    def _all_dirty(self, urgent: Iterable[str] | bool) -> None:
        """Mark every link and server, the *urgent* ones (True: all) urgently."""
        now = self.clock()
        for name in self.config.links:
            self._dirty_links.setdefault(name, now)
        self._mark(self.config.virtual_servers, now, urgent is True)
        if urgent is not True and urgent is not False:
            self._mark(urgent, now, True)

    def _mark(self, names: Iterable[str], since: float, urgent: bool) -> None:
        """Mark the servers *names* dirty (urgently, when *urgent*) as of *since*."""
        dirty = self._dirty_vs
        for name in names:
            if name not in dirty:
                dirty[name] = since
        if urgent:
            marked = self._urgent_vs
            for name in names:
                if name not in marked:
                    marked[name] = since

    # -- what readers see ---------------------------------------------------------------------

    @property
    def snapshot(self) -> HealthSnapshot:
        """Availability now: changes not yet evaluated are evaluated first (with a schedule,
        up to a `SLICE` of them; the rest follow in the next turns)."""
        if self._dirty_vs or self._dirty_links:
            self._flush(None if self.schedule is None else SLICE)
        return self._snapshot

    @property
    def evaluated(self) -> HealthSnapshot:
        """The statuses as evaluated so far (evaluating nothing: what a listener reads)."""
        return self._snapshot

    @property
    def generation(self) -> int:
        if self._dirty_vs or self._dirty_links:
            self._flush(None if self.schedule is None else SLICE)
        return self._generation

    def settle(self) -> None:
        """Evaluate every change now, however many (before the node answers at all)."""
        self._flush(None)

    @property
    def pending(self) -> int:
        """Subjects waiting to be evaluated."""
        return len(self._dirty_vs) + len(self._dirty_links)

    @property
    def urgent(self) -> int:
        """Servers waiting to be evaluated that may go out (see the module's doc)."""
        return len(self._urgent_vs)

    # Availability, as the balancer asks it: with a schedule, as evaluated so far (the
    # scheduled turns keep it within `STALE` of the store; an answer evaluates nothing)
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
            self._urgent_vs.pop(name, None)
        for name in [n for n in self._links if n not in config.links]:
            del self._links[name]
            self._dirty_links.pop(name, None)
        now = self.clock()
        for name in changes.links:
            if name in config.links:
                self._dirty_links.setdefault(name, now)
        self._mark([n for n in changes.virtual_servers if n in config.virtual_servers], now, False)
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
        next turns; urgently those a change of the observers may take out)."""
        before = self._counted
        self._counted = self.observers() if self.observers is not None else None
        self._all_dirty(self._weakened(before, self._counted))
        self._flush(None if self.schedule is None else SLICE)
        self._kick()
        return self._snapshot

    def _weakened(self, before: frozenset[str] | None, after: frozenset[str] | None) -> list[str] | bool:
        """The servers a change of the counted observers from *before* to *after* may take
        out (True: any, when either counts every verdict held): those an observer that stops
        counting sees up, those one that starts counting sees down. One look up per server
        and observer that changed (12 ms at 5,000 servers on a busy 2-core VM; reading each
        server's verdicts was 19-88 ms)."""
        if before is None or after is None:
            return before != after
        changed = [(observer, observer in before) for observer in before ^ after]
        raw = self.store.raw
        out = []
        for name in self.config.virtual_servers:
            for observer, leaving in changed:
                record = raw(f"{keys.OBS_VS}{name}/{observer}")
                if record is not None and _says_up(record) is leaving:
                    out.append(name)
                    break
        return out

    def _changed(self, record: Record) -> None:
        key = record.key
        if not key.startswith(WATCHED):
            return
        observed = keys.observed(key)
        if observed is not None:
            subject, name = observed
            if subject != "vs":
                if name not in self.config.links:
                    return
                if name not in self._dirty_links:
                    self._dirty_links[name] = self.clock()
            else:
                if name not in self.config.virtual_servers:
                    return
                now = self.clock()
                if name not in self._dirty_vs:
                    self._dirty_vs[name] = now
                # a verdict that is not "up", or one that lapsed (the store holds it no
                # more), may take the server out
                if name not in self._urgent_vs and (not _says_up(record) or self.store.raw(key) is not record):
                    self._urgent_vs[name] = now
        elif (traffic := keys.traffic_link(key)) is not None:
            link = self.config.links.get(traffic)
            if link is None or link.max_utilisation is None:
                return  # a figure that decides nothing about availability
            if traffic not in self._dirty_links:
                self._dirty_links[traffic] = self.clock()
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
            self._mark(servers, self.clock(), True)  # an admin state or a hold, either way
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
            self._kicked_at = self.clock()
            self.schedule(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._scheduled = False
        now = self.clock()
        # how long the reactor took to come back (a turn), as the next turns' length; one
        # longer than the bound leaves counts as that: a slow turn does not make the next
        # one evaluate everything waiting
        turn = min(now - self._kicked_at, STALE - AIM)
        self._flush(SLICE, self._planned(now, turn), now + turn - AIM)
        self._kick()

    def _planned(self, now: float, turn: float) -> int:
        """Urgent marks to evaluate this turn: enough that all those waiting are done by
        the oldest one's aim if the next turns are as long as this one, a `SLICE` at least."""
        urgent = self._urgent_vs
        if not urgent:
            return SLICE
        left = next(iter(urgent.values())) + AIM - now  # (about the oldest: see `_flush`)
        if left <= turn:
            return len(urgent)
        return max(SLICE, math.ceil(len(urgent) * turn / left))

    # -- evaluation -----------------------------------------------------------------------------

    def _flush(self, budget: int | None, urgent: int | None = None, due: float = float("-inf")) -> None:
        """Evaluate the dirty subjects, links first, then the urgent servers, then the
        rest, each in the order they came, and what hangs on those that changed: at most
        *budget* evaluations (None: all), or *urgent* (more) while urgent marks wait, and
        every urgent mark made at *due* or before however many. Records written while
        reacting (held servers) are evaluated in the same flush."""
        if self._flushing:
            return
        self._flushing = True
        try:
            now = self.clock()
            counted = self._counted
            config = self.config
            dirty, marked, links = self._dirty_vs, self._urgent_vs, self._dirty_links
            standing_changed: list[str] = []
            limit = -1 if budget is None else budget
            first = limit if urgent is None or budget is None else max(budget, urgent)
            done = 0
            # (marks made in a flush, of the servers hanging on one evaluated, carry that
            # one's time and come last: the urgent dict is in the order of its marks, about
            # the order of their times)
            while links or dirty:
                if links:
                    if 0 <= first <= done:
                        break
                    name = next(iter(links))
                    self._evaluate_link(name, counted, links.pop(name))
                elif marked:
                    name, since = next(iter(marked.items()))
                    if 0 <= first <= done and since > due:
                        break
                    del marked[name]
                    dirty.pop(name, None)
                    self.longest_wait = max(self.longest_wait, now - since)
                    vs = config.virtual_servers.get(name)
                    if vs is not None and self._evaluate_vs(vs, counted, now, since):
                        standing_changed.append(name)
                else:
                    if 0 <= limit <= done:
                        break
                    name = next(iter(dirty))
                    since = dirty.pop(name)
                    vs = config.virtual_servers.get(name)
                    if vs is not None and self._evaluate_vs(vs, counted, now, since):
                        standing_changed.append(name)
                done += 1
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

    def _evaluate_link(self, name: str, counted: frozenset[str] | None, since: float) -> None:
        link = self.config.links.get(name)
        if link is None:
            return
        self.evaluations += 1
        new = link_status(link, self.store, counted)
        old = self._links.get(name)
        if old == new:
            return
        self._links[name] = new
        self._mark(self._on_link.get(name, ()), since, True)
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
            for link_listener in self.link_listeners:
                link_listener(name, old, new)
        if old is not None and bool(old.busy) != bool(new.busy) and not self._quiet:
            log.info(
                "link {link} {what}",
                link=name,
                what=f"full: {new.busy}" if new.busy else "back under its max_utilisation",
                busy=new.busy,
                event="link_utilisation",
            )

    def _evaluate_vs(self, vs: VirtualServer, counted: frozenset[str] | None, now: float, since: float) -> bool:
        """Evaluate *vs* (marked at *since*); True when its availability or serving changed."""
        self.evaluations += 1
        new = vs_status(vs, self.store, self._links, self._dependency, counted)
        old = self._vs.get(vs.name)
        if old == new:
            return False
        self._vs[vs.name] = new
        # (one that stops serving may take out those depending on it)
        self._mark(self._dependants.get(vs.name, ()), since, old is None or (old.serving and not new.serving))
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
        for listener in self.vs_listeners:
            listener(vs.name, before, after)
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


def _says_up(record: Record) -> bool:
    """Whether *record* is a verdict of "up" (one of another shape counts for nothing)."""
    value = record.value
    if type(value) is dict:  # (the usual: a faster test than isinstance's)
        return bool(value.get("up"))
    return isinstance(value, Mapping) and bool(value.get("up"))


def _word(status: VsStatus) -> str:
    if status.available:
        return "available"
    return "draining" if status.serving else "unavailable"
