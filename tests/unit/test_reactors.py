"""`reactors.Runtime`: what differs between the real reactor and a test's, asked once.
On a reactor without a thread pool (a test's) work is done at once, steps all in one go,
and nothing is spawned; on one with a thread pool, work goes to the pool and steps run a
few milliseconds per reactor turn."""

from __future__ import annotations

from typing import Any

from twisted.internet import task
from twisted.internet.selectreactor import SelectReactor
from twisted.internet.testing import MemoryReactorClock
from twisted.python.threadpool import ThreadPool

from gtmcluster.runtime.reactors import Runtime, polls_descriptors
from gtmcluster.runtime.slices import Steps


def steps(log: list[int]) -> Steps[None]:
    for i in range(3):
        log.append(i)
        yield


def test_a_test_reactor_has_no_threads_nor_processes_and_does_the_work_at_once() -> None:
    clock = MemoryReactorClock()
    runtime = Runtime.of(clock)
    assert runtime.clock is clock and runtime.threads is None and runtime.processes is None
    done: list[Any] = []
    runtime.in_thread(lambda a, b: a + b, 2, 3).addCallback(done.append)
    assert done == [5]
    log: list[int] = []
    runtime.in_turns(steps(log)).addCallback(done.append)
    assert log == [0, 1, 2] and done == [5, None]


class SyncPool(ThreadPool):
    """A thread pool that runs each job at once, in the calling thread."""

    def callInThreadWithCallback(self, onResult: Any, func: Any, *args: Any, **kw: Any) -> None:
        onResult(True, func(*args, **kw))


class Threaded(task.Clock):
    """A clock with a thread pool (what `Runtime.in_thread` uses of `IReactorThreads`)."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = SyncPool()
        self.pooled = 0

    def getThreadPool(self) -> ThreadPool:
        self.pooled += 1
        return self.pool

    def callFromThread(self, f: Any, *args: Any, **kw: Any) -> None:
        f(*args, **kw)


def test_a_reactor_with_threads_gets_the_pool_and_turns() -> None:
    clock = Threaded()
    runtime = Runtime(clock, threads=clock)  # type: ignore[arg-type]
    done: list[Any] = []
    runtime.in_thread(lambda: 7).addCallback(done.append)
    assert done == [7] and clock.pooled == 1
    log: list[int] = []
    runtime.in_turns(steps(log)).addCallback(done.append)  # slices.run: steps per turn
    for _ in range(5):
        clock.advance(0)
    assert log == [0, 1, 2] and done == [7, None]


def test_only_a_reactor_that_polls_descriptors_watches_our_sockets() -> None:
    """The bare-socket probes (`probe.bare`) want a reactor polling real descriptors; a
    test's memory reactor or clock gets the general path."""
    real = SelectReactor.__new__(SelectReactor)  # (its class is the answer: nothing opened)
    assert polls_descriptors(real)
    assert not polls_descriptors(MemoryReactorClock()) and not polls_descriptors(task.Clock())
