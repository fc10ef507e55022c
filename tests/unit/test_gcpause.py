"""The collector pause around big builders: nested and overlapping pauses restore it once."""

from __future__ import annotations

import gc

from gtmcluster.gcpause import collection_paused


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
