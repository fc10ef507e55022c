"""Long walks done a slice at a time, so the reactor keeps answering meanwhile.

Some work must walk a whole table (the API's view of 5,000 servers, /metrics): written as a
generator that yields now and then (every few dozen items), it can run whole (`whole`, for
tools and tests) or a few milliseconds per reactor turn (`run`), so that no single turn
holds up DNS answers for long. The generator's return value is the result.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any, TypeVar

from twisted.internet import defer

T = TypeVar("T")
Steps = Generator[None, None, T]

#: seconds of work per reactor turn
BUDGET = 0.005


def whole(steps: Steps[T]) -> T:
    """Run *steps* to the end at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def run(steps: Steps[T], reactor: Any, budget: float = BUDGET) -> defer.Deferred[T]:
    """Run *steps* for about *budget* seconds per reactor turn; fires with the result."""
    result: defer.Deferred[T] = defer.Deferred()

    def turn() -> None:
        deadline = time.perf_counter() + budget
        try:
            while True:
                next(steps)
                if time.perf_counter() >= deadline:
                    reactor.callLater(0, turn)
                    return
        except StopIteration as done:
            result.callback(done.value)
        except Exception:
            result.errback()

    turn()
    return result
