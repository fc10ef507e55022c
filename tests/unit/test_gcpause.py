"""Building big structures beside the reactor (gtmcluster.gcpause, gtmcluster.gil): the
collector paused (nested and overlapping pauses restore it once), what was built frozen,
the GIL handed over often."""

from __future__ import annotations

import gc
import sys

import pytest

from gtmcluster import gil
from gtmcluster.gcpause import built_long_lived, collection_paused


def test_pauses_nest_and_restore_the_collector() -> None:
    """The collector is off inside every pause and on again only after the last one."""
    assert gc.isenabled()
    with collection_paused():
        assert not gc.isenabled()
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    """A pause never turns on a collector someone else turned off."""
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_what_a_long_lived_builder_made_is_frozen_before_collections_resume() -> None:
    """A config read for a reload is frozen: no collection in the reactor thread examines its
    objects afterwards (they would make one full collection stand still for all of them)."""
    frozen_before = gc.get_freeze_count()
    try:
        built = built_long_lived(lambda n: [[i] for i in range(n)], 10_000)
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen_before + 10_000
        assert not any(x is built[0] for x in gc.get_objects(2))  # not in the oldest generation either
    finally:
        gc.unfreeze()


def test_a_builder_that_fails_freezes_nothing() -> None:
    frozen_before = gc.get_freeze_count()

    def fails() -> None:
        raise ValueError("not a config")

    with pytest.raises(ValueError):
        built_long_lived(fails)
    assert gc.get_freeze_count() == frozen_before and gc.isenabled()


def test_a_long_lived_builder_hands_the_gil_over_often_and_restores_the_interval() -> None:
    """While a config is read beside the reactor, the switch interval is short (the reactor
    takes the GIL back quickly after each system call); afterwards it is what it was."""
    before = sys.getswitchinterval()
    seen = built_long_lived(sys.getswitchinterval)
    gc.unfreeze()
    assert seen == pytest.approx(gil.SHORT) and seen < before
    assert sys.getswitchinterval() == before
    with gil.yielding_often():
        with gil.yielding_often():
            pass
        assert sys.getswitchinterval() == pytest.approx(gil.SHORT)
    assert sys.getswitchinterval() == before
