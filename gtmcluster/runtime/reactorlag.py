"""How long the reactor stands still: a stall probe.

Everything a node does runs in one thread, the reactor's: a DNS query that arrives while a
long piece of work runs (a health evaluation, a reconcile's merge, a big /metrics page, a
full garbage collection) waits until it ends. `ReactorLag` asks the reactor for a call every
`INTERVAL` (10 ms) and records how late each one comes: that lateness is how long the
reactor was busy elsewhere, so how long an answer could have waited.

It is a chain of `callLater`s, each due `interval` after the last one ran, rather than a
`LoopingCall`: a LoopingCall skips the calls a stall swallowed and runs at the next multiple
of its interval, so it cannot tell when the call it finally makes was due.

Kept for `/metrics` (`gtm_reactor_lag_*`): a histogram of the lateness of every call, the
largest since start, and the largest since the last scrape. A stall of `LOG_OVER` or more
is logged as well.
"""

from __future__ import annotations

from typing import Any

from twisted.application.service import Service
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from gtmcluster.runtime.stats import Histogram

log = Logger()

#: seconds between two calls of the probe
INTERVAL = 0.01
#: a call this late (seconds) or later is logged
LOG_OVER = 1.0
#: histogram buckets (seconds): a few ms is timer slack; 50 ms is an answer pause a client sees
LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


class ReactorLag(Service):
    """Measures how late the reactor runs a call due every *interval* seconds."""

    def __init__(self, clock: Any, interval: float = INTERVAL, log_over: float = LOG_OVER) -> None:
        self.clock = clock
        self.interval = interval
        self.log_over = log_over
        #: the lateness of every call (seconds)
        self.lag = Histogram(LAG_BUCKETS)
        #: the largest lateness since start
        self.max = 0.0
        self._recent = 0.0  # the largest since `take_recent`
        self._due = 0.0
        self._call: IDelayedCall | None = None

    def startService(self) -> None:
        super().startService()
        self._schedule()

    def stopService(self) -> Any:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        return super().stopService()

    def _schedule(self) -> None:
        self._due = self.clock.seconds() + self.interval
        self._call = self.clock.callLater(self.interval, self._tick)

    def _tick(self) -> None:
        self._call = None
        late = max(0.0, self.clock.seconds() - self._due)
        self.lag.observe(late)
        self.max = max(self.max, late)
        self._recent = max(self._recent, late)
        if late >= self.log_over:
            log.warn(
                "the reactor stood still for {ms:.0f} ms (DNS answers waited as long)",
                ms=late * 1000,
                event="reactor_stall",
            )
        if self.running:
            self._schedule()

    def take_recent(self) -> float:
        """The largest lateness since the last call of this (or since start), and start anew."""
        recent, self._recent = self._recent, 0.0
        return recent
