"""The heap keeper: freezes long-lived objects after a slow full collection, not before."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from twisted.internet import task

from gtmcluster.runtime.heap import CHECK_EVERY, HeapKeeper, unfrozen_old


class Reactor(task.Clock):
    """callFromThread queues; `run` runs what was queued (as the reactor's next turn);
    timers as a fake clock's (`now` is its time)."""

    def __init__(self) -> None:
        super().__init__()
        self.queued: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.rightNow = 1000.0

    @property
    def now(self) -> float:
        return self.rightNow

    @now.setter
    def now(self, value: float) -> None:
        self.rightNow = value

    def callFromThread(self, f: Callable[..., Any], *args: Any) -> None:
        self.queued.append((f, args))

    def run(self) -> None:
        queued, self.queued = self.queued, []
        for f, args in queued:
            f(*args)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.per_call = 0.0  # how much time passes between two readings

    def __call__(self) -> float:
        self.now += self.per_call
        return self.now


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Whatever a test freezes goes back to the collector afterwards."""
    yield
    gc.unfreeze()


def keeper(slow: float, took: float, cpu: float | None = None) -> tuple[HeapKeeper, Reactor]:
    """A keeper whose clocks say each full collection took *took* seconds (and *cpu* of CPU
    time, *took* by default)."""
    reactor, clock, cpu_clock = Reactor(), Clock(), Clock()
    clock.per_call = took
    cpu_clock.per_call = took if cpu is None else cpu
    k = HeapKeeper(reactor, slow=slow, clock=clock, cpu_clock=cpu_clock)
    k.startService()
    return k, reactor


def test_a_slow_full_collection_is_followed_by_a_freeze(unfrozen: None) -> None:
    """A real full collection (gc.collect) that the keeper's clock says took 80 ms: at the
    reactor's next turn everything alive is frozen, so an object made before is no longer
    among what the collector examines, and the keeper counts it."""
    k, reactor = keeper(slow=0.05, took=0.08)
    try:
        held = [object() for _ in range(10)]
        probe = [held]  # a tracked container
        gc.collect()
        assert k.full_collections >= 1 and k.longest == pytest.approx(0.08)
        assert any(o is probe for o in gc.get_objects())  # not frozen until the next turn
        reactor.run()
        assert k.freezes == 1
        assert k.frozen >= gc.get_freeze_count() > 0  # counted then (for /metrics); some died since
        assert not any(o is probe for o in gc.get_objects())
    finally:
        k.stopService()


def test_quick_collections_and_young_ones_freeze_nothing(unfrozen: None) -> None:
    k, reactor = keeper(slow=0.05, took=0.01)
    try:
        gc.collect()
        gc.collect(0)
        gc.collect(1)
        assert reactor.queued == [] and k.freezes == 0
        assert k.full_collections >= 1
    finally:
        k.stopService()


def test_one_freeze_for_several_slow_collections_before_the_reactor_turns(unfrozen: None) -> None:
    k, reactor = keeper(slow=0.05, took=0.1)
    try:
        gc.collect()
        gc.collect()
        assert len(reactor.queued) == 1
        reactor.run()
        assert k.freezes == 1
    finally:
        k.stopService()


def test_a_stopped_keeper_no_longer_watches(unfrozen: None) -> None:
    k, reactor = keeper(slow=0.0, took=0.1)
    k.stopService()
    gc.collect()
    assert reactor.queued == [] and k.full_collections == 0


def test_a_collection_slow_only_on_the_wall_freezes_nothing(unfrozen: None) -> None:
    """A collection that took long on the wall but little CPU (the machine was busy with
    other work) says nothing of the heap: no freeze, though the pause is still reported."""
    k, reactor = keeper(slow=0.05, took=0.3, cpu=0.01)
    try:
        gc.collect()
        assert reactor.queued == [] and k.longest == pytest.approx(0.3)
    finally:
        k.stopService()


def test_freezes_stay_rare_unless_a_collection_is_very_slow(unfrozen: None) -> None:
    """After a freeze, slow collections freeze again only a minute later (each freeze keeps
    the cycles then alive forever); one four times too slow freezes at once."""
    k, reactor = keeper(slow=0.05, took=0.08)
    try:
        gc.collect()
        reactor.run()
        assert k.freezes == 1
        reactor.now += 30
        gc.collect()
        assert reactor.queued == []
        reactor.now += 31
        gc.collect()
        reactor.run()
        assert k.freezes == 2
        k.cpu_clock.per_call = 0.25
        gc.collect()
        reactor.run()
        assert k.freezes == 3
    finally:
        k.stopService()


def test_the_oldest_generation_is_frozen_before_a_full_collection_of_it_gets_long(unfrozen: None) -> None:
    """Every CHECK_EVERY seconds the keeper counts the unfrozen objects of the oldest
    generation; above its bound it freezes at once, with no slow collection first (a member
    whose records are all replaced every 30 s grew 40-100 ms full collections between
    freezes a minute apart)."""
    counts = [10_000]
    reactor = Reactor()
    k = HeapKeeper(reactor, max_unfrozen=20_000, unfrozen=lambda: counts[0])
    k.startService()
    try:
        held = [object()]
        gc.collect()  # into the oldest generation
        reactor.advance(CHECK_EVERY)
        assert k.freezes == 0 and any(o is held for o in gc.get_objects())
        counts[0] = 25_000
        reactor.advance(CHECK_EVERY)
        assert k.freezes == 1 and k.frozen == 25_000
        assert not any(o is held for o in gc.get_objects())  # left out of collections now
    finally:
        k.stopService()
    assert reactor.getDelayedCalls() == []  # stopped counting


def test_the_count_is_of_the_oldest_generation(unfrozen: None) -> None:
    """The default count: objects a full collection has moved to the oldest generation are
    counted, frozen ones are not."""
    held = [[object()] for _ in range(1000)]
    gc.collect()
    before = unfrozen_old()
    assert before >= len(held)
    gc.freeze()
    assert unfrozen_old() < before - len(held) + 10
