"""Runs every monitor on this node and records its verdicts in the store.

Every node checks every monitored virtual server and link (its own data center's and the
others'). Each subject has a `Flap` (anti-flap thresholds) fed by raw results; a link's raw
result is the OR of its targets (one dead target does not fail it). A verdict change is
written at once as this node's observation record, ``obs/vs/<vs>/<node>`` or
``obs/link/<link>/<node>``; unchanged verdicts are rewritten now and then so that they
outlive their TTL only while this node keeps checking. At most `health.max_in_flight`
checks run at once; a subject whose previous round is still running skips a round.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer, task
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from gtmcluster.config.model import Config, Monitor
from gtmcluster.health.flap import UP, Flap
from gtmcluster.probe.base import Check, Result, Target
from gtmcluster.state.store import Store

log = Logger()

#: the first round of checks is spread over this many seconds (at most one interval)
STARTUP_SPREAD = 2.0
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
    busy: bool = False
    due: bool = False  # a tick came while a round ran: the next round starts when it ends
    last_written: float = float("-inf")
    loop: task.LoopingCall | None = None
    starter: IDelayedCall | None = None
    check: Check | None = field(default=None, repr=False)

    @property
    def ttl(self) -> float:
        m = self.monitor
        return max(MIN_OBSERVATION_TTL, 3 * m.interval * max(m.up_after, m.down_after))

    @property
    def description(self) -> str:
        return f"{'virtual server' if self.kind == 'vs' else 'link'} {self.name}"


def subjects(config: Config, node: str) -> list[Subject]:
    """What this node checks: every monitored virtual server and every link."""
    out = []
    for vs in config.virtual_servers.values():
        if vs.monitor is None:
            continue
        m = vs.monitor
        target = Target(vs.address, m.port or vs.port, f"virtual server {vs.name}")
        out.append(Subject("vs", vs.name, m, (target,), Flap(m.up_after, m.down_after), f"obs/vs/{vs.name}/{node}"))
    for link in config.links.values():
        m = link.monitor
        targets = tuple(Target(t.host, m.port or t.port, f"link {link.name} target {t}") for t in link.targets)
        out.append(
            Subject("link", link.name, m, targets, Flap(m.up_after, m.down_after), f"obs/link/{link.name}/{node}")
        )
    return out


class HealthChecker(Service):
    def __init__(self, config: Config, store: Store, reactor: Any, node: str, make_check: CheckFactory):
        self.store = store
        self.reactor = reactor
        self.node = node
        self.make_check = make_check
        self.semaphore = defer.DeferredSemaphore(config.health.max_in_flight)
        self.subjects = subjects(config, node)
        for subject in self.subjects:
            subject.check = make_check(subject.monitor)

    def startService(self) -> None:
        super().startService()
        for subject in self.subjects:
            self._schedule(subject)

    def _schedule(self, subject: Subject) -> None:
        interval = subject.monitor.interval
        spread = min(interval, STARTUP_SPREAD)
        delay = (zlib.crc32(subject.key.encode()) % 1000) / 1000 * spread
        loop = task.LoopingCall(self._tick, subject)
        loop.clock = self.reactor
        subject.loop = loop
        subject.starter = self.reactor.callLater(delay, self._start_loop, subject)

    def reconfigure(self, config: Config) -> None:
        """Check what *config* says from now on. A subject whose monitor and targets are
        unchanged keeps its verdict and thresholds; others start afresh; removed ones stop
        (their records expire with their TTL)."""
        old = {s.key: s for s in self.subjects}
        new = subjects(config, self.node)
        kept = []
        for subject in new:
            before = old.pop(subject.key, None)
            if before is not None and (before.monitor, before.targets) == (subject.monitor, subject.targets):
                kept.append(before)
                continue
            if before is not None:
                self._stop(before)
            subject.check = self.make_check(subject.monitor)
            if self.running:
                self._schedule(subject)
            kept.append(subject)
        for gone in old.values():
            self._stop(gone)
        self.subjects = kept
        self.semaphore.limit = config.health.max_in_flight

    def _stop(self, subject: Subject) -> None:
        if subject.starter is not None and subject.starter.active():
            subject.starter.cancel()
        subject.starter = None
        if subject.loop is not None and subject.loop.running:
            subject.loop.stop()

    def _start_loop(self, subject: Subject) -> None:
        subject.starter = None
        if self.running and subject.loop is not None:
            subject.loop.start(subject.monitor.interval, now=True).addErrback(
                lambda f: log.failure("health checks of {subject} stopped", f, subject=subject.description)
            )

    def stopService(self) -> None:
        super().stopService()
        for subject in self.subjects:
            self._stop(subject)

    def _tick(self, subject: Subject) -> None:
        """The loop's tick, every interval whatever a round takes: a round, or, while the last
        one still runs, a round as soon as it ends (never two at once, never a queue). A loop
        that waited for each round would start the next at the tick after the round ended:
        with a check that times out after a whole interval (timeout = interval), a round every
        two intervals, and a server down after twice the failover bound."""
        if subject.busy:
            subject.due = True
            return
        self.round(subject)

    def round(self, subject: Subject) -> defer.Deferred[Any] | None:
        """Check every target of *subject* once (skipped while the last round runs)."""
        if subject.busy:
            return None
        subject.busy = True
        check = subject.check
        assert check is not None
        runs = [self.semaphore.run(check, target) for target in subject.targets]
        d: defer.Deferred[Any] = defer.gatherResults(runs, consumeErrors=True)
        d.addCallback(self._judge, subject)
        d.addErrback(lambda f: log.failure("health check of {subject} failed", f, subject=subject.description))

        def done(_: object) -> None:
            subject.busy = False
            if subject.due:
                subject.due = False
                if self.running and subject.loop is not None and subject.loop.running:
                    self.round(subject)

        d.addBoth(done)
        return d

    def _judge(self, results: list[Result], subject: Subject) -> None:
        if not self.running:
            return
        ok = any(r.ok for r in results)
        if len(results) == 1:
            reason = results[0].reason
        else:
            reason = ", ".join(f"{t.address}: {r.reason}" for t, r in zip(subject.targets, results, strict=True))
        old = subject.flap.state
        changed = subject.flap.feed(ok)
        now = self.reactor.seconds()
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
        data = next((r.data for r in results if r.data), None)
        if data is not None and subject.kind == "vs":
            self.store.put(f"metrics/vs/{subject.name}", {**data, "by": self.node}, ttl=subject.ttl)
        if changed is not None or now - subject.last_written >= subject.ttl / 3:
            self.store.put(subject.key, {"up": subject.flap.state == UP, "reason": reason}, ttl=subject.ttl)
            subject.last_written = now
