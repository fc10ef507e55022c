"""Long walks done a slice at a time, so the reactor keeps answering meanwhile.

Some work must walk a whole table (the API's view of 5,000 servers, /metrics): written as a
generator that yields now and then (every few dozen items), it can run whole (`whole`, for
tools and tests) or a few milliseconds per reactor turn (`run`), so that no single turn
holds up DNS answers for long. The generator's return value is the result.

A step may also yield a Deferred: `run` waits for it (other turns go on meanwhile) and
goes on when it fires; a failure of it fails the run. (A reload's config is built while
its YAML still comes from a child process: `gtmcluster.config.source.yamlchild`.) `whole`
cannot wait, so steps run whole must not yield one.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any, Generic, TypeVar

from twisted.internet import defer

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


def run(steps: Steps[T], reactor: Any, budget: float = BUDGET) -> defer.Deferred[T]:
    """Run *steps* for about *budget* seconds per reactor turn; fires with the result."""
    running: _Run[T] = _Run(steps, reactor, budget)
    running.turn()
    return running.result


class _Run(Generic[T]):
    """One `run` under way. An object rather than a closure that schedules itself by name:
    that is a reference cycle, left to the garbage collector with all it holds (a reload's
    config under construction), and kept for good by a `gc.freeze` meanwhile."""

    def __init__(self, steps: Steps[T], reactor: Any, budget: float) -> None:
        self.steps = steps
        self.reactor = reactor
        self.budget = budget
        self.result: defer.Deferred[T] = defer.Deferred()

    def turn(self, _: object = None) -> None:
        deadline = time.perf_counter() + self.budget
        steps = self.steps
        try:
            while True:
                waited = next(steps)
                if waited is not None:
                    waited.addCallbacks(self.turn, self.result.errback)
                    return
                if time.perf_counter() >= deadline:
                    self.reactor.callLater(0, self.turn)
                    return
        except StopIteration as done:
            self.result.callback(done.value)
        except Exception:
            self.result.errback()
