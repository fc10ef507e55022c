"""Long walks done a slice at a time, so the reactor keeps answering meanwhile.

Some work must walk a whole table (the API's view of 5,000 servers, /metrics): written as a
generator that yields now and then (every few dozen items), it can run whole (`whole`, for
tools and tests) or a few milliseconds per reactor turn (`run`, a Twisted `Cooperator`), so
that no single turn holds up DNS answers for long. The generator's return value is the
result.

A step may also yield a Deferred: `run` waits for it (other turns go on meanwhile) and
goes on, in the turn after it fires; a failure of it fails the run. (A reload's config is
built while its YAML still comes from a child process: `gtmcluster.config.source.yamlchild`.)
`whole` cannot wait, so steps run whole must not yield one.

The turns are a Twisted `Cooperator`'s. What is left here is what it does not do: `whole`
(the same steps at once), the steps' return value (a Cooperator's task fires with the
iterator: `run` keeps the value the generator returned), and the first turn's share run in
the caller's turn (a Cooperator starts on the next one: a short walk, an API answer of a
small node, is done at once, as before).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any, Generic, TypeVar

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime

T = TypeVar("T")
#: what a step yields: None, or a Deferred to wait for (Any: a bare `yield` is a step)
Steps = Generator[Any, None, T]

#: seconds of work per reactor turn
BUDGET = 0.005


def whole(steps: Steps[T]) -> T:
    """Run *steps* to the end at once."""
    while True:
        try:
            waited = next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if waited is not None:
            raise RuntimeError("steps run whole waited for a Deferred")


def run(steps: Steps[T], reactor: IReactorTime, budget: float = BUDGET) -> defer.Deferred[T]:
    """Run *steps* for about *budget* seconds per reactor turn; fires with their return value.

    The first turn's share runs now, in the caller's turn (a short walk answers at once);
    the rest, if any, a `twisted.internet.task.Cooperator` of its own runs, a turn at a
    time, waiting for a Deferred a step yields."""
    capture: _Capture[T] = _Capture(steps)
    over = _Deadline(budget)
    try:
        for waited in capture:
            if waited is not None:
                result: defer.Deferred[T] = defer.Deferred()
                waited.addCallback(_cooperate, capture, reactor, budget).chainDeferred(result)
                return result
            if over():
                return _cooperate(None, capture, reactor, budget)
    except Exception:
        return defer.fail()
    return defer.succeed(capture.value)  # type: ignore[arg-type]


def _cooperate(_: object, capture: _Capture[T], reactor: IReactorTime, budget: float) -> defer.Deferred[T]:
    """The rest of *capture*'s steps, *budget* seconds of them per reactor turn."""
    cooperator = task.Cooperator(
        terminationPredicateFactory=lambda: _Deadline(budget), scheduler=lambda tick: reactor.callLater(0, tick)
    )
    return cooperator.coiterate(capture).addCallback(_value)


class _Capture(Generic[T]):
    """*steps* as an iterator that keeps their return value (a Cooperator drops it: its
    task fires with the iterator). An object, not a generator closing over a list: nothing
    here refers back to itself, so a finished run leaves no cycle for the collector (which
    a `gc.freeze` meanwhile would keep for good, with all it holds: a reload's config)."""

    def __init__(self, steps: Steps[T]) -> None:
        self.steps = steps
        self.value: T | None = None

    def __iter__(self) -> _Capture[T]:
        return self

    def __next__(self) -> Any:
        try:
            return next(self.steps)
        except StopIteration as done:
            self.value = done.value
            raise StopIteration from None


def _value(capture: _Capture[T]) -> T:
    return capture.value  # type: ignore[return-value]


class _Deadline:
    """True once *seconds* have gone since it was made: one turn's steps."""

    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def __call__(self) -> bool:
        return time.perf_counter() >= self.end
