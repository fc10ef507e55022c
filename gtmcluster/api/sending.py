"""Writing an answer at the pace its client reads.

An answer body is written a slice (`SLICE` bytes) at a time, and only while the connection
takes more: `Sender` is a push producer, paused by the connection when its buffer is full
and resumed when it has room again. A body held in memory is held once (not copied into
the connection's buffer whole), and a body from a file (a config bundle) is read a slice
at a time as it is sent, so a client that does not read costs the node one slice, not the
body.

A client that reads nothing at all would still hold its connection, and so its slot, for
ever: `StallWatch` cuts a connection whose answer has been paused for `stall` seconds on
end (``api.limits.stall_timeout``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IDelayedCall, IPushProducer
from twisted.logger import Logger
from zope.interface import implementer

log = Logger()

#: bytes written per turn of the producer (what a client that does not read costs)
SLICE = 64 * 1024

CallLater = Callable[..., IDelayedCall]


def abort(transport: Any) -> None:
    """Close *transport* now, dropping what it has not sent."""
    if transport is not None:
        (getattr(transport, "abortConnection", None) or transport.loseConnection)()


def cut(request: Any) -> None:
    """Abort *request*'s connection (its client stopped reading)."""
    abort(getattr(getattr(request, "channel", None), "transport", None))


class StallWatch:
    """Calls *cut* once an answer has been paused for *stall* seconds on end."""

    def __init__(self, call_later: CallLater, stall: float, on_stall: Callable[[], None]):
        self.call_later = call_later
        self.stall = stall
        self.on_stall = on_stall
        self._timer: IDelayedCall | None = None

    def paused(self) -> None:
        if self._timer is None:
            self._timer = self.call_later(self.stall, self._fire)

    def resumed(self) -> None:
        self.stop()

    def stop(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _fire(self) -> None:
        self._timer = None
        self.on_stall()


@implementer(IPushProducer)
class Sender:
    """Writes the bytes *read* gives (``read(n)``: up to n bytes, b"" at the end) to
    *request*, a slice at a time while its connection takes them, then finishes it; *done*
    runs once at the end however it ends (to close a file). Its connection is cut after
    *stall* seconds paused (*on_stall* is told)."""

    def __init__(
        self,
        request: Any,
        read: Callable[[int], bytes],
        call_later: CallLater,
        stall: float,
        on_stall: Callable[[], None] = lambda: None,
        done: Callable[[], None] = lambda: None,
    ):
        self.request = request
        self.read = read
        self.done = done
        self.paused = False
        self.finished = False
        self.watch = StallWatch(call_later, stall, self._stalled)
        self._on_stall = on_stall

    def start(self) -> None:
        self.request.registerProducer(self, True)
        self.request.notifyFinish().addBoth(self._gone)
        self._pump()

    def _pump(self) -> None:
        while not self.paused and not self.finished:
            try:
                data = self.read(SLICE)
            except OSError as e:
                log.warn("an API answer could not be read to its end: {why}", why=str(e), event="api_answer_unread")
                self._end()
                cut(self.request)
                return
            if not data:
                self._end()
                self.request.unregisterProducer()
                self.request.finish()
                return
            self.request.write(data)

    def _end(self) -> None:
        if not self.finished:
            self.finished = True
            self.watch.stop()
            self.done()

    def _stalled(self) -> None:
        if not self.finished:
            self._on_stall()
            self._end()
            cut(self.request)

    def _gone(self, result: Any) -> None:
        """The request finished, or its connection went."""
        self._end()

    # IPushProducer: the connection's buffer is full / has room again / is gone
    def pauseProducing(self) -> None:
        self.paused = True
        if not self.finished:
            self.watch.paused()

    def resumeProducing(self) -> None:
        self.paused = False
        self.watch.resumed()
        self._pump()

    def stopProducing(self) -> None:
        self._end()
