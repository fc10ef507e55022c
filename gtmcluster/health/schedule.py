"""When each subject is checked: a due time per subject, and one budget for the node.

Policy only (no Twisted, no clock of its own): the checker (`gtmcluster.health.checker`)
asks `take(now)` which rounds to start, says `finished(entry, now)` when one is over, and
asks `wakeup(now)` when to ask again.

- **Due times.** A subject is due every `interval` seconds at a fixed phase: the first
  time at a point of its first interval chosen by the caller (the checker derives it from
  the subject's key), so 5,000 subjects at interval 5 come due at about 1,000 a second
  instead of all at once, and a round that starts late does not move the phase: the next
  one is due one interval after the last was *due*.
- **The budget.** At most `max_per_second` checks start a second, averaged over a second
  (a token bucket holding one second's worth, so rounds delayed by a busy reactor catch
  up), and at most `max_in_flight` run at once (each may hold a socket). A round of a
  subject with several targets (a link) takes one of each per target. One call of `take`
  starts at most what the rate allows in one and a half times the time since the last call
  (at least `TURN_MIN`, at most `TURN_MAX` seconds' worth): the checks' share of the
  reactor's time stays about the same however often it comes round, and a turn after a
  stall does not start a flood: the rest start in the next turns.
- **Waiting, and skipping.** A due round that cannot start yet waits, oldest due first.
  One still waiting `MAX_WAIT` of its interval after it was due is skipped: counted in
  `CheckStats.skipped_late`, and due again one interval after. A round still running when
  its next one is due delays that one; a next round that could not even start within
  `MAX_WAIT` is skipped the same way (`skipped_busy`). So nothing queues without bound: a
  subject has one entry, and no round starts more than `MAX_WAIT` of its interval late
  (one waiting behind a blocked round is skipped when it comes to the front).

Every entry is in exactly one place: the heap (due, or waiting for budget), or running.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Generic, TypeVar

from gtmcluster.runtime.stats import CheckStats
from gtmcluster.runtime.tokenbucket import TokenBucket

T = TypeVar("T")

#: the rate bucket holds this many seconds' worth of checks (the catching up allowed)
BUCKET = 1.0
#: one call of `take` starts at least this many seconds' worth of checks, if due (and one)
TURN_MIN = 0.02
#: ... and at most this many: starting a check costs 150-450 us of the reactor (a socket,
#: a connect, a timer), so 50 checks (at 1,000 a second) hold it 10-25 ms; after a stall
#: the backlog is started over the next turns (every `checker.TICK`), not in one
TURN_MAX = 0.05
#: ... or in between, this many times what the rate allowed since the last call
TURN_CATCH_UP = 1.5
#: a round not started this share of its interval after it was due is skipped
MAX_WAIT = 0.5


@dataclass(eq=False, slots=True)
class Entry(Generic[T]):
    """One subject's place in the schedule."""

    item: T
    interval: float
    cost: int  # checks per round (targets)
    due: float
    running: bool = False
    removed: bool = False

    @property
    def max_wait(self) -> float:
        return self.interval * MAX_WAIT


class Schedule(Generic[T]):
    def __init__(self, max_per_second: float, max_in_flight: int, now: float) -> None:
        self.max_in_flight = max_in_flight
        self.bucket = TokenBucket(max_per_second, max(1.0, max_per_second * BUCKET), now)
        self._last_take = now
        self.stats = CheckStats()
        self._heap: list[tuple[float, int, Entry[T]]] = []
        self._order = itertools.count()  # ties in due time: first come, first served

    def configure(self, max_per_second: float, max_in_flight: int) -> None:
        self.bucket.configure(max_per_second, max(1.0, max_per_second * BUCKET))
        self.max_in_flight = max_in_flight

    def add(self, item: T, interval: float, cost: int, first_due: float) -> Entry[T]:
        entry = Entry(item, interval, cost, first_due)
        self._push(entry)
        return entry

    def remove(self, entry: Entry[T]) -> None:
        """Forget *entry*; a round of it still running ends without a next one."""
        entry.removed = True

    def __len__(self) -> int:
        """Entries waiting in the heap (removed ones included until they surface)."""
        return len(self._heap)

    def take(self, now: float) -> list[Entry[T]]:
        """The rounds to start now (their checks are counted in flight until `finished`)."""
        started: list[Entry[T]] = []
        stats = self.stats
        turn = 0
        per_turn = self.per_turn(now)
        self._last_take = now
        while self._heap:
            due, _, entry = self._heap[0]
            if entry.removed:
                self._pop()
                continue
            if due > now:
                break
            late = now - due
            if late > entry.max_wait:
                self._pop()
                self._skip(entry, now)
                continue
            # a round bigger than the whole cap may run alone
            if stats.in_flight and stats.in_flight + entry.cost > self.max_in_flight:
                break
            if turn and turn + entry.cost > per_turn:
                break
            if not self.bucket.take(entry.cost, now):
                break
            turn += entry.cost
            self._pop()
            entry.running = True
            stats.in_flight += entry.cost
            stats.peak_in_flight = max(stats.peak_in_flight, stats.in_flight)
            stats.started += entry.cost
            for _ in range(entry.cost):
                stats.lag.observe(late)
            stats.lag_max = max(stats.lag_max, late)
            started.append(entry)
        return started

    def per_turn(self, now: float) -> int:
        """How many checks a `take` at *now* may start."""
        since = min(max(TURN_MIN, TURN_CATCH_UP * (now - self._last_take)), TURN_MAX)
        return max(1, round(self.bucket.rate * since))

    def finished(self, entry: Entry[T], now: float) -> None:
        """*entry*'s round is over: its checks leave flight, and the next round is due one
        interval after this one was."""
        if not entry.running:
            return
        entry.running = False
        self.stats.in_flight -= entry.cost
        if entry.removed:
            return
        entry.due += entry.interval
        missed = self._missed(entry, now)
        if missed:
            entry.due += missed * entry.interval
            self.stats.skipped_busy += missed * entry.cost
        self._push(entry)

    def wakeup(self, now: float) -> float | None:
        """When `take` may have something to start or skip; None when nothing is scheduled.
        A round waiting for a free slot may start sooner, when one is `finished`. (After a
        `take` that stopped at its `per_turn`, the answer is now: the caller spaces turns.)"""
        while self._heap and self._heap[0][2].removed:
            self._pop()
        if not self._heap:
            return None
        due, _, entry = self._heap[0]
        if due > now:
            return due
        deadline = due + entry.max_wait
        if self.stats.in_flight and self.stats.in_flight + entry.cost > self.max_in_flight:
            return deadline
        return min(deadline, now + self.bucket.ready_in(entry.cost, now))

    def _missed(self, entry: Entry[T], now: float) -> int:
        """Rounds of *entry* already too late to start at *now*."""
        late = now - entry.due
        if late <= entry.max_wait:
            return 0
        return math.floor((late - entry.max_wait) / entry.interval) + 1

    def _skip(self, entry: Entry[T], now: float) -> None:
        missed = self._missed(entry, now)
        entry.due += missed * entry.interval
        self.stats.skipped_late += missed * entry.cost
        self._push(entry)

    def _push(self, entry: Entry[T]) -> None:
        heapq.heappush(self._heap, (entry.due, next(self._order), entry))

    def _pop(self) -> None:
        heapq.heappop(self._heap)
