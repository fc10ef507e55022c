"""Runs every monitor on this node and records its verdicts in the store.

Every node checks every monitored virtual server and link (its own data center's and the
others'). Each subject has a `Flap` (anti-flap thresholds) fed by raw results; a link's raw
result is the OR of its targets (one dead target does not fail it). A verdict change is
written at once as this node's observation record, ``obs/vs/<vs>/<node>`` or
``obs/link/<link>/<node>``; unchanged verdicts are rewritten now and then so that they
outlive their TTL only while this node keeps checking.

A virtual server with several monitors is a subject per (server, monitor), each with its
own `Flap`, schedule and check; their verdicts combine by the server's monitor rule
(`gtmcluster.health.monitors`) into a `Group`, which writes the one record
``obs/vs/<vs>/<node>`` as a single subject does: peers see one verdict per node.

When rounds run is the `Schedule`'s business (`gtmcluster.health.schedule`): each subject
every interval at a phase of its own (spread over the first interval from its key), at
most `health.max_checks_per_second` checks started a second and `health.max_in_flight`
running at once; a round that cannot start within half an interval is skipped and
counted (`HealthChecker.stats`), never queued. One timer drives it all.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from gtmcluster.config.changes import Changes, between
from gtmcluster.config.model import Config, VirtualServer
from gtmcluster.config.monitoring import Monitor, MonitorRule
from gtmcluster.health.flap import DOWN, UNKNOWN, UP, Flap
from gtmcluster.health.monitors import MonitorVerdict, decide
from gtmcluster.health.schedule import Entry, Schedule
from gtmcluster.probe.base import Check, Result, Target
from gtmcluster.state import keys
from gtmcluster.state.schema import shorten
from gtmcluster.state.store import Store

log = Logger()

#: due rounds are started together, at most this often (seconds): a little late, in batches
TICK = 0.01
#: skipped checks are logged at most this often (seconds)
SKIP_LOG_EVERY = 60.0
#: an observation lives this long at least, and is rewritten every third of its life
MIN_OBSERVATION_TTL = 90.0

CheckFactory = Callable[[Monitor], Check]


@dataclass(slots=True)
class Subject:
    kind: str  # "vs" | "link"
    name: str
    monitor: Monitor
    targets: tuple[Target, ...]
    flap: Flap
    key: str
    last_written: float = float("-inf")
    entry: Entry[Subject] | None = field(default=None, repr=False)  # its place in the schedule
    check: Check | None = field(default=None, repr=False)
    #: one of the monitors of a server with several: the verdict written is the group's
    group: Group | None = field(default=None, repr=False)
    reason: str = ""  # what its last round said

    @property
    def ident(self) -> str:
        """What tells it from the others: its record's key, and its monitor's name when
        it is one of a server's several (they share that record)."""
        return self.key if self.group is None else f"{self.key}#{self.monitor.name}"

    @property
    def ttl(self) -> float:
        return ttl_of(self.monitor)

    @property
    def description(self) -> str:
        what = f"{'virtual server' if self.kind == 'vs' else 'link'} {self.name}"
        return what if self.group is None else f"{what} monitor {self.monitor.name}"

    def verdict(self) -> MonitorVerdict:
        return MonitorVerdict(self.monitor.name, self.flap.state, self.reason, self.monitor.unknown_as_up)


@dataclass(slots=True, eq=False)
class Group:
    """A virtual server checked by several monitors (its `parts`, in the config's order):
    their verdicts combined by its monitor rule are this node's one verdict on it."""

    name: str
    key: str  # obs/vs/<vs>/<node>
    rule: MonitorRule
    parts: list[Subject]
    up: bool | None = None  # the verdict last written or confirmed (None: none yet)
    reason: str = ""  # and its reason
    last_written: float = float("-inf")

    @property
    def ttl(self) -> float:
        return max(ttl_of(m.monitor) for m in self.parts)

    @property
    def description(self) -> str:
        return f"virtual server {self.name}"

    def decide(self) -> tuple[bool, str]:
        return decide(self.rule, [part.verdict() for part in self.parts])


def ttl_of(m: Monitor) -> float:
    """How long a verdict by *m* lives: three of its slowest decisions, at least `MIN_OBSERVATION_TTL`."""
    return max(MIN_OBSERVATION_TTL, 3 * m.interval * max(m.up_after, m.down_after))


def vs_target(vs: VirtualServer, m: Monitor) -> Target:
    """Where *m* checks *vs*: its address (a record server's `check_address`), at the
    monitor's port if it sets one."""
    address = vs.probe_address
    assert address is not None  # (`subjects` leaves out a server without one)
    return Target(address, m.port or vs.port, f"virtual server {vs.name}")


def refresh_share(key: str) -> float:
    """A subject's own fraction (0 to 1) of its refresh period, from its key (so every
    member's is the same for the same server, and stays so across restarts)."""
    return zlib.crc32(b"refresh " + key.encode()) / 2**32


Keep = Callable[[str, object], "list[Subject] | None"]


def subjects(config: Config, node: str, keep: Keep | None = None) -> list[Subject]:
    """What this node checks: every monitored virtual server (once per monitor) and every
    link. *keep*, given a verdict key and the definition (the VirtualServer or Link), may
    return the subjects to keep for it as they are (its definition unchanged), so none is
    made anew."""
    out = []
    for vs in config.virtual_servers.values():
        if not vs.monitors or vs.probe_address is None:  # (a record server's check_address: config.targets)
            continue
        key = keys.observation("vs", vs.name, node)
        kept = keep(key, vs) if keep is not None else None
        if kept is not None:
            out += kept
            continue
        made = [
            Subject("vs", vs.name, m, (vs_target(vs, m),), Flap(m.up_after, m.down_after), key) for m in vs.monitors
        ]
        if len(made) > 1:
            group = Group(vs.name, key, vs.monitor_rule, made)
            for subject in made:
                subject.group = group
        out += made
    for link in config.links.values():
        key = keys.observation("link", link.name, node)
        kept = keep(key, link) if keep is not None else None
        if kept is not None:
            out += kept
            continue
        m = link.monitor
        targets = tuple(Target(t.host, m.port or t.port, f"link {link.name} target {t}") for t in link.targets)
        out.append(Subject("link", link.name, m, targets, Flap(m.up_after, m.down_after), key))
    return out


class HealthChecker(Service):
    def __init__(self, config: Config, store: Store, reactor: IReactorTime, node: str, make_check: CheckFactory):
        self.store = store
        self.reactor = reactor
        self.node = node
        self.make_check = make_check
        settings = config.health
        self.schedule: Schedule[Subject] = Schedule(
            settings.max_checks_per_second, settings.max_in_flight, reactor.seconds()
        )
        #: checks started and skipped, in flight, and how late they started
        self.stats = self.schedule.stats
        self.config = config
        self.subjects = subjects(config, node)
        #: one check per monitor, shared by the subjects it checks
        self._checks: dict[Monitor, Check] = {}
        for subject in self.subjects:
            subject.check = self._check_for(subject.monitor, self._checks)
        self._timer: IDelayedCall | None = None
        self._last_pump = float("-inf")
        self._pumping = False
        self._skips_logged = (0, 0, float("-inf"))  # skipped late, skipped busy, when

    def startService(self) -> None:
        super().startService()
        now = self.reactor.seconds()
        for subject in self.subjects:
            self._add(subject, now)
        self._arm(now)

    def stopService(self) -> None:
        super().stopService()
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        for subject in self.subjects:
            self._remove(subject)

    def reconfigure(self, config: Config) -> None:
        """Check what *config* says from now on. A subject whose monitor and targets are
        unchanged keeps its verdict, thresholds and schedule; others start afresh; removed
        ones stop (their records expire with their TTL)."""
        self.prepare(config)()

    def prepare(self, config: Config, changes: Changes | None = None) -> Callable[[], None]:
        """The checks *config* needs, made now (raising if one cannot be); the switch it
        returns puts them in use (as `reconfigure` describes) in one step. *changes*: what
        differs from the running config (compared here when not given)."""
        old = {s.ident: s for s in self.subjects}
        by_key: dict[str, list[Subject]] = {}
        for s in self.subjects:
            by_key.setdefault(s.key, []).append(s)
        if changes is None:
            changes = between(self.config, config)
        #: the checks made so far, by monitor (a few; a new subject of a monitor already
        #: checked shares its check)
        checks: dict[Monitor, Check] = dict(self._checks)

        def keep(key: str, definition: object) -> list[Subject] | None:
            # an unchanged definition (read from a file again: equal, not the same object)
            before = by_key.get(key)
            if before is None:
                return None
            if before[0].name in (changes.virtual_servers if before[0].kind == "vs" else changes.links):
                return None
            return before

        plan: list[tuple[Subject, Subject | None]] = []  # (subject, the one it replaces)
        #: subjects kept as they are in a server's new group: (kept, group, its place)
        regroup: list[tuple[Subject, Group, int]] = []
        for subject in subjects(config, self.node, keep):
            before = old.pop(subject.ident, None)
            unchanged = before is not None and (before.monitor, before.targets) == (subject.monitor, subject.targets)
            if before is not None and (subject is before or unchanged):
                plan.append((before, before))  # kept as it is
                if subject is not before and subject.group is not None:
                    regroup.append((before, subject.group, subject.group.parts.index(subject)))
                continue
            subject.check = self._check_for(subject.monitor, checks)
            plan.append((subject, before))
        gone = list(old.values())
        settings = config.health

        def switch() -> None:
            self.config = config
            self._checks = checks
            for kept, group, place in regroup:  # (its verdict and schedule go on)
                kept.group = group
                group.parts[place] = kept
            now = self.reactor.seconds()
            for subject, before in plan:
                if subject is before:
                    continue
                if before is not None:
                    self._remove(before)
                if self.running:
                    self._add(subject, now)
            for subject in gone:
                self._remove(subject)
            self.subjects = [subject for subject, _ in plan]
            self.schedule.configure(settings.max_checks_per_second, settings.max_in_flight)
            if self.running:
                self._arm(now)

        return switch

    def _confirms(self, subject: Subject | Group, up: bool) -> bool:
        """Whether *up*, the first verdict of *subject* since it was made (this node
        started, or its definition changed), is what this node's live record of it says
        already: one it wrote before a restart, read back from its snapshot. Then it is no
        change: not logged nor written again before a third of its TTL (a member restarted
        at 5,000 servers would otherwise write, log and send every peer 5,000 verdicts the
        group already holds, while it reconciles)."""
        held = self.store.get(subject.key)
        if held is None or held.origin != self.node or not isinstance(held.value, dict):
            return False
        if held.value.get("up") is not up:
            return False
        expires = held.expires()
        # when it was written, as far as its life tells (a record read from a snapshot is
        # born when read, with what was left of its TTL): rewritten a third of a TTL later
        subject.last_written = held.born if expires is None else expires - subject.ttl
        return True

    def _check_for(self, monitor: Monitor, made: dict[Monitor, Check]) -> Check:
        """The check of *monitor*: one per monitor (a check holds no state of its targets)."""
        check = made.get(monitor)
        if check is None:
            check = made[monitor] = self.make_check(monitor)
        return check

    def _add(self, subject: Subject, now: float) -> None:
        interval = subject.monitor.interval
        phase = zlib.crc32(subject.ident.encode()) / 2**32 * interval
        subject.entry = self.schedule.add(subject, interval, len(subject.targets), now + phase)

    def _remove(self, subject: Subject) -> None:
        if subject.entry is not None:
            self.schedule.remove(subject.entry)
            subject.entry = None

    # -- the one timer

    def _arm(self, now: float) -> None:
        """Have `_pump` run when the schedule next needs it (no sooner than `TICK` after
        the last run: due rounds are started in batches, a little late, not one per turn)."""
        if self._pumping or not self.running:
            return
        at = self.schedule.wakeup(now)
        if at is None:
            return
        at = max(at, self._last_pump + TICK)
        timer = self._timer
        if timer is not None and timer.active():
            if timer.getTime() <= at:
                return
            timer.cancel()  # (moving a timer sooner would search the reactor's heap)
        self._timer = self.reactor.callLater(max(0.0, at - now), self._pump)

    def _pump(self) -> None:
        self._timer = None
        now = self.reactor.seconds()
        self._last_pump = now
        self._pumping = True
        try:
            for entry in self.schedule.take(now):
                self._round(entry)
        finally:
            self._pumping = False
        self._arm(now)
        self._log_skips(now)

    def _log_skips(self, now: float) -> None:
        late, busy, when = self._skips_logged
        stats = self.stats
        if (stats.skipped_late, stats.skipped_busy) == (late, busy) or now - when < SKIP_LOG_EVERY:
            return
        log.warn(
            "{late} health checks skipped for want of budget (health.max_checks_per_second "
            "{rate:g}, max_in_flight {cap}: {in_flight} running) and {busy} because their last "
            "round still ran, since {since}",
            late=stats.skipped_late - late,
            busy=stats.skipped_busy - busy,
            rate=self.schedule.bucket.rate,
            cap=self.schedule.max_in_flight,
            in_flight=stats.in_flight,
            since="start" if when == float("-inf") else f"{now - when:.0f} s ago",
            event="health_checks_skipped",
        )
        self._skips_logged = (stats.skipped_late, stats.skipped_busy, now)

    # -- a round

    def _round(self, entry: Entry[Subject]) -> None:
        """Check every target of the entry's subject once."""
        subject = entry.item
        check = subject.check
        assert check is not None
        d: defer.Deferred[Any]
        if len(subject.targets) == 1:
            d = check(subject.targets[0]).addCallback(lambda result: [result])
        else:
            d = defer.gatherResults([check(target) for target in subject.targets], consumeErrors=True)
        d.addCallback(self._judge, entry)
        d.addErrback(lambda f: log.failure("health check of {subject} failed", f, subject=subject.description))
        d.addBoth(self._finished, entry)

    def _finished(self, _: object, entry: Entry[Subject]) -> None:
        now = self.reactor.seconds()
        self.schedule.finished(entry, now)
        self._arm(now)

    def _judge(self, results: list[Result], entry: Entry[Subject]) -> None:
        if not self.running or entry.removed:
            return  # (removed: the subject is no longer checked, or checked afresh)
        subject = entry.item
        ok = any(r.ok for r in results)
        if len(results) == 1:
            reason = results[0].reason
        else:
            reason = ", ".join(f"{t.address}: {r.reason}" for t, r in zip(subject.targets, results, strict=True))
        reason = shorten(reason)  # what peers take (state.schema)
        old = subject.flap.state
        changed = subject.flap.feed(ok)
        now = self.reactor.seconds()
        data = next((r.data for r in results if r.data), None)
        if data is not None and subject.kind == "vs":
            self.store.put(keys.load_figures(subject.name), {**data, "by": self.node}, ttl=subject.ttl)
        if subject.group is not None:
            subject.reason = reason
            self._judge_group(subject, subject.group, old, changed, now)
            return
        if changed is not None and old == UNKNOWN and self._confirms(subject, changed == UP):
            changed = None  # what this node said before (its snapshot): no change
        if changed is not None:
            log.info(
                "{subject} seen {new} by {observer} (was {old}): {reason}",
                subject=subject.description,
                new=changed,
                old=old,
                observer=self.node,
                reason=reason,
                event="observation",
            )
        if changed is not None or now - subject.last_written >= subject.ttl / 3:
            self.store.put(subject.key, {"up": subject.flap.state == UP, "reason": reason}, ttl=subject.ttl)
            # after a change, the next rewrite comes sooner by this subject's own share of
            # a third of the TTL, then every third: the rewrites of servers that changed
            # together (all of them, at start) are spread over those 30 s rather than
            # bunched in the 5 s of an interval (5,000 writes, and each member merging the
            # others', in the same 5 s every 30 s slowed whatever met that wave)
            subject.last_written = now - (refresh_share(subject.key) * subject.ttl / 3 if changed else 0.0)

    def _judge_group(self, part: Subject, group: Group, old: str, changed: str | None, now: float) -> None:
        """After a round of one of a server's several monitors: the group's verdict, written
        when it or one of the monitors' changes (and now and then), as `_judge` does for a
        single subject. Nothing before every monitor has its first verdict (within an
        interval of the slowest): until then the record held, if any, stands, and a node
        without one counts as the monitors' `unknown_as` say (`health.status`)."""
        if any(p.flap.state == UNKNOWN for p in group.parts):
            return
        up, reason = group.decide()
        reason = shorten(reason)
        was = group.up
        flipped = was is None or up != was
        if flipped and was is None and self._confirms(group, up):
            flipped = False  # what this node said before (its snapshot): no change
            held = self.store.get(group.key)
            group.reason = str(held.value.get("reason", "")) if held is not None else ""
        group.up = up
        verdict = UP if up else DOWN
        if flipped:
            log.info(
                "{subject} seen {new} by {observer} (was {old}): {reason}",
                subject=group.description,
                new=verdict,
                old=UNKNOWN if was is None else (UP if was else DOWN),
                observer=self.node,
                reason=reason,
                event="observation",
            )
        elif changed is not None and old != UNKNOWN:  # (a first verdict: the record tells)
            log.info(
                "{subject} seen {new} by {observer} (was {old}); the server stays {verdict}: {reason}",
                subject=part.description,
                new=changed,
                old=old,
                observer=self.node,
                verdict=verdict,
                reason=reason,
                event="monitor_observation",
            )
        # a monitor's own change is written too (the reason names it), and a first verdict
        # that confirms the one held with another reason (a rule changed); a reason that
        # varies while no verdict changes waits for the next rewrite
        told = (changed is not None or was is None) and reason != group.reason
        if flipped or told or now - group.last_written >= group.ttl / 3:
            self.store.put(group.key, {"up": up, "reason": reason}, ttl=group.ttl)
            group.reason = reason
            group.last_written = now - (refresh_share(group.key) * group.ttl / 3 if flipped else 0.0)
