"""Whether a peer connection has been heard from lately: silent once no whole box came for
`heartbeat_timeout`, heard again with the next one. A silent connection stays open, but the
peer's verdicts stop counting while every connection to it is silent (`sync.peerstate`).

The timer is not moved on every box: it looks at `last_heard` when it fires and waits again
for what is left. A deadline that passed is confirmed one reactor turn later, after the
reactor has read its sockets: a node whose own reactor was busy past the deadline (a long
turn) reads the heartbeats waiting for it before judging.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime


class Silence:
    """One connection's silence. *timeout*: the heartbeat timeout now (a reload may change
    it); *watching*: whether the connection is still one to judge (established); *changed*:
    called when it goes silent or is heard again."""

    def __init__(
        self,
        clock: IReactorTime,
        timeout: Callable[[], float],
        watching: Callable[[], bool],
        changed: Callable[[], None],
    ) -> None:
        self.clock = clock
        self.timeout = timeout
        self.watching = watching
        self.changed = changed
        #: when the last whole box came in
        self.last_heard = 0.0
        #: nothing heard for the timeout
        self.silent = False
        self._timer: IDelayedCall | None = None

    def start(self, at: float) -> None:
        """The connection is established at *at*: as if a box came then."""
        self.last_heard = at
        self._watch(self.timeout())

    def heard(self) -> None:
        """A whole box came in."""
        self.last_heard = self.clock.seconds()
        if self.silent:
            self.silent = False
            self._watch(self.timeout())
            self.changed()

    def stop(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _watch(self, delay: float) -> None:
        self._timer = self.clock.callLater(delay, self._check, False)

    def _check(self, confirming: bool) -> None:
        self._timer = None
        if not self.watching() or self.silent:
            return
        left = self.last_heard + self.timeout() - self.clock.seconds()
        if left > 0:
            self._watch(left)
        elif not confirming:
            self._timer = self.clock.callLater(0, self._check, True)
        else:
            self.silent = True
            self.changed()
