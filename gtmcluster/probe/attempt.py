"""One run of one check: its start, its timeout, the single verdict and the clean-up.

Every check builds an `Attempt` first. Whatever happens next (a reply, a refusal, the
timeout, a cancelled Deferred), the first verdict wins; later ones are ignored. Before the
verdict's `Result` is delivered, the clean-ups registered with `Attempt.closing` run (close
the connection, stop listening, forget a pending echo) and the timer is cancelled, so a
finished check leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from gtmcluster.probe.base import Result

log = Logger()


def seconds(value: float) -> str:
    """``2`` -> ``"2s"``, ``0.5`` -> ``"0.5s"``."""
    return f"{value:g}s"


def show(data: bytes | str, limit: int = 32) -> str:
    """A short printable form of bytes or text for a reason: ``'ok'``, ``'\\x00abc…'``."""
    if isinstance(data, bytes):
        text = data[:limit].decode("latin-1")
    else:
        text = data[:limit]
    shown = repr(text)
    return shown + "…" if len(data) > limit else shown


class Attempt:
    """The verdict of one check run, decided once.

    `waiting_for` names what the check still waits for; the timeout's reason is
    ``no {waiting_for} within {timeout}s``, a failure, unless the check said with
    `expire_as` what the timeout means (a udp check that counts silence as up, a tcp check
    whose reply so far lacks the bytes it rejects).
    """

    def __init__(self, clock: IReactorTime, timeout: float, waiting_for: str = "reply") -> None:
        self._clock = clock
        self._start = clock.seconds()
        self._timeout = timeout
        self._cleanups: list[Callable[[], object]] = []
        self._done = False
        self.waiting_for = waiting_for
        self._expiry: tuple[bool, str] | None = None
        self.deferred: Deferred[Result] = Deferred(self._cancel)
        self._timer: IDelayedCall | None = clock.callLater(timeout, self._expire)

    @property
    def done(self) -> bool:
        return self._done

    def closing(self, cleanup: Callable[[], object]) -> None:
        """Run *cleanup* when the verdict is in (at once if it already is)."""
        if self._done:
            self._run(cleanup)
        else:
            self._cleanups.append(cleanup)

    def finish(self, ok: bool, reason: str, data: Mapping[str, float] | None = None) -> None:
        """Deliver the verdict, unless there already is one."""
        if self._done:
            return
        elapsed = self._clock.seconds() - self._start
        self._stop()
        self.deferred.callback(Result(ok, reason, elapsed, data))

    @property
    def timeout(self) -> float:
        return self._timeout

    def expire_as(self, ok: bool, reason: str) -> None:
        """The verdict the timeout gives from now on, instead of the failure
        ``no {waiting_for} within ...``."""
        self._expiry = (ok, reason)

    def _expire(self) -> None:
        if self._expiry is not None:
            self.finish(*self._expiry)
        else:
            self.finish(False, f"no {self.waiting_for} within {seconds(self._timeout)}")

    def _cancel(self, _: Deferred[Result]) -> None:
        # The caller gave up (the Deferred fails with CancelledError): release everything.
        self._stop()

    def _stop(self) -> None:
        self._done = True
        timer, self._timer = self._timer, None  # (a fired timer still refers to us: no cycle)
        if timer is not None and timer.active():
            timer.cancel()
        cleanups, self._cleanups = self._cleanups, []
        for cleanup in reversed(cleanups):
            self._run(cleanup)

    @staticmethod
    def _run(cleanup: Callable[[], object]) -> None:
        try:
            cleanup()
        except Exception:
            log.failure("cleaning up after a check")
