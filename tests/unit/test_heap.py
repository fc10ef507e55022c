"""The heap keeper: freezes long-lived objects after a slow full collection, not before."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gtmcluster.heap import HeapKeeper


class Reactor:
    """callFromThread queues; `run` runs what was queued (as the reactor's next turn)."""

    def __init__(self) -> None:
        self.queued: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

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


def keeper(slow: float, took: float) -> tuple[HeapKeeper, Reactor]:
    reactor, clock = Reactor(), Clock()
    clock.per_call = took
    k = HeapKeeper(reactor, slow=slow, clock=clock)
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
        assert gc.get_freeze_count() > 0
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
