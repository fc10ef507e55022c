"""What differs between the reactor a node runs on and a test's, in one value: `Runtime`.

A node on the real reactor runs file work in the reactor's thread pool, cuts long work
into steps a few milliseconds per reactor turn, and spawns processes (the reload's YAML
child). A test's reactor (`twisted.internet.testing.MemoryReactorClock`, `task.Clock`)
has no thread pool and spawns nothing: the same work is done at once, in the calling
thread. The parts that care are handed a `Runtime` and ask it, never the reactor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from twisted.internet import defer, threads
from twisted.internet.interfaces import IReactorProcess, IReactorThreads, IReactorTime

from gtmcluster.runtime import slices

T = TypeVar("T")


@dataclass(frozen=True)
class Runtime:
    """The reactor's clock, and its thread pool and process spawning where it has them."""

    clock: IReactorTime
    #: runs work in a thread pool; None: work is done at once (a test's reactor)
    threads: IReactorThreads | None = None
    #: spawns processes; None: what a child would do is done in-process
    processes: IReactorProcess | None = None

    @classmethod
    def of(cls, reactor: Any) -> Runtime:
        """The runtime of *reactor*: the one place that asks a reactor what it provides."""
        return cls(
            reactor,
            reactor if IReactorThreads.providedBy(reactor) else None,
            reactor if IReactorProcess.providedBy(reactor) else None,
        )

    def in_thread(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """`f(*args)` in the reactor's thread pool (at once without one)."""
        if self.threads is None:
            return defer.maybeDeferred(f, *args)
        return threads.deferToThreadPool(self.threads, self.threads.getThreadPool(), f, *args)

    def in_turns(self, steps: slices.Steps[T]) -> defer.Deferred[T]:
        """*steps* run a few milliseconds per reactor turn (`slices.run`); at once where
        work is done at once (the steps are the same)."""
        if self.threads is None:
            return defer.succeed(slices.whole(steps))
        return slices.run(steps, self.clock)
