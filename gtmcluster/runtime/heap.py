"""Short garbage-collector pauses with a large store.

A node with a full proximity table holds millions of long-lived objects (two per record:
the record and its compact value). CPython's cyclic garbage collector examines all of them
in each full collection: 2 s for a table of 1,000,000 LDNSes x 3 data centers on the
development machine (bench/scale.py), and the reactor, so DNS, stands still meanwhile.
The store's records hold no reference cycles; they are freed by reference counting when
replaced, so the collector has nothing to find among them.

`gc.freeze()` moves every object the collector tracks into a permanent generation that no
collection examines again (objects in it are still freed by reference counting). The
price: a reference cycle that is alive when frozen and becomes garbage later is never
collected. So the node freezes rarely, at moments when nearly everything alive is
long-lived state:

- at start, once the node is built, before its first answer (`collect_and_freeze`, from
  the tap: the config was built with the collector paused, so its objects are all in the
  youngest generation, and the first collections after the start examined them all);
  after the snapshot is loaded at start (`freeze_now`), and while its path records load
  after the node answers, every few thousand rows (`collect_and_freeze`);
- after a full collection that took more than `SLOW` of CPU time (it has just removed
  every cycle that was garbage, and what it examined cost that much, so the next one would
  too): the freeze happens at the reactor's next turn (`HeapKeeper`), at most once per
  `MIN_INTERVAL` unless a collection took four times `SLOW`;
- and before the next full collection gets long: every `CHECK_EVERY` seconds the keeper
  counts the objects of the oldest generation (what a full collection examines; counting
  them is a walk of them, a fraction of a millisecond), and freezes when there are more
  than `MAX_UNFROZEN`. A member at 5,000 servers replaces its 25,000 verdict records
  every 30 s; between freezes a minute apart its full collections had grown to 40-100 ms
  (about 1.5 µs an object on the 2-core machine), and they were most of its stalls in an
  outage.

Between freezes, full collections examine only what was created since the last one.

So the node's own code makes no reference cycles on the paths it runs again and again:
what merges a peer's batch a slice per turn, runs a walk over turns, reads a config or
evaluates health is an object or a module-level function, never a nested function that
calls or schedules itself by name (the function and its cell are a cycle, and all it holds
waits for a collection, or for good after a freeze). Measured at 5,000 servers before that
rule: about 1,000 objects kept for good per freeze, most of them peer batches
(tests/unit/test_no_cycles.py). `gtm_gc_*` metrics and a log
line per freeze say how often it happens and what the pauses were.

Building a large structure of long-lived objects, such as reading a big config, pauses the
collector instead (`gtmcluster.runtime.gcpause`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gtmcluster.runtime.reactors import TimeFromThreads, as_time

log = Logger()

#: a full collection that took at least this much CPU time (seconds) is followed by a freeze
SLOW = 0.05
#: ... but at most one freeze per this many seconds, unless a collection took 4 x SLOW: each
#: freeze keeps forever the reference cycles then alive that die later (an HTTPS check or a
#: TCP client under way), so freezes must stay rare where cycles are made all the time
MIN_INTERVAL = 60.0
#: unfrozen objects in the oldest generation above which the keeper freezes ...
MAX_UNFROZEN = 10_000
#: ... counted every this many seconds
CHECK_EVERY = 1.0


def unfrozen_old() -> int:
    """Objects in the oldest generation, not frozen (what a full collection examines,
    with the few younger ones)."""
    return len(gc.get_objects(2))


class HeapKeeper(Service):
    """Watches full collections (a `gc.callbacks` hook) and freezes after a slow one."""

    def __init__(
        self,
        reactor: TimeFromThreads,
        slow: float = SLOW,
        clock: Any = time.perf_counter,
        cpu_clock: Any = time.thread_time,
        min_interval: float = MIN_INTERVAL,
        max_unfrozen: int = MAX_UNFROZEN,
        unfrozen: Callable[[], int] = unfrozen_old,
    ) -> None:
        self.reactor = reactor
        self.slow = slow
        self.clock = clock  # wall time: how long the reactor stood still (the metrics)
        #: the collecting thread's CPU time: what the collection cost, whatever else the
        #: machine did meanwhile (a busy machine makes quick collections slow on the wall)
        self.cpu_clock = cpu_clock
        self.min_interval = min_interval
        self.max_unfrozen = max_unfrozen
        self.unfrozen = unfrozen
        self._counting: LoopingCall | None = None
        self._started: tuple[float, float] | None = None
        self._pending = False  # a freeze is scheduled
        self._last_freeze: float | None = None
        #: full collections seen, freezes made, and the longest full collection (seconds)
        self.full_collections = 0
        self.freezes = 0
        self.longest = 0.0
        self.last_pause = 0.0
        #: objects frozen in all, counted at the last freeze here (counting them walks every
        #: one: 40 ms at a million, too long for each scrape of /metrics)
        self.frozen = 0

    def startService(self) -> None:
        super().startService()
        gc.callbacks.append(self._hook)
        self._counting = LoopingCall(self.check)
        self._counting.clock = as_time(self.reactor)
        self._counting.start(CHECK_EVERY, now=False)

    def stopService(self) -> Any:
        if self._hook in gc.callbacks:
            gc.callbacks.remove(self._hook)
        if self._counting is not None and self._counting.running:
            self._counting.stop()
        self._counting = None
        return super().stopService()

    def check(self) -> None:
        """Freeze now if the next full collection would examine more than `max_unfrozen`
        objects of the oldest generation."""
        count = self.unfrozen()
        if count > self.max_unfrozen:
            gc.freeze()
            self.frozen += count  # (counting them all again would walk every frozen one)
            self.freezes += 1
            self._last_freeze = self.reactor.seconds()

    def _hook(self, phase: str, info: dict[str, int]) -> None:
        # Runs inside the collector, in whichever thread triggered it: note times only.
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = (self.clock(), self.cpu_clock())
            return
        if self._started is None:
            return
        took = self.clock() - self._started[0]
        cpu = self.cpu_clock() - self._started[1]
        self._started = None
        self.full_collections += 1
        self.last_pause = took
        self.longest = max(self.longest, took)
        if cpu < self.slow or self._pending:
            return
        last = self._last_freeze
        if cpu >= 4 * self.slow or last is None or self.reactor.seconds() - last >= self.min_interval:
            self._pending = True
            self.reactor.callFromThread(self._freeze_after, took)

    def _freeze_after(self, took: float) -> None:
        self._pending = False
        if not self.running:
            return
        frozen = self.frozen = freeze_now()
        self.freezes += 1
        self._last_freeze = self.reactor.seconds()
        log.info(
            "a full garbage collection took {ms:.0f} ms: {frozen:,} long-lived objects frozen "
            "(later collections leave them out)",
            ms=took * 1000,
            frozen=frozen,
        )


def collect_and_freeze() -> None:
    """A full collection (it examines only what is not frozen yet), then a freeze: while a
    snapshot loads after the node answers (see gtmcluster.state.loading), now and then, so
    no collection ever examines more than the records of the last few thousand rows, and
    only objects alive are frozen. (Counting what is frozen would walk all of it.)"""
    gc.collect()
    gc.freeze()


def freeze_now() -> int:
    """Freeze everything alive now; the number of objects frozen in all."""
    gc.freeze()
    return gc.get_freeze_count()
