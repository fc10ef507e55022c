"""Building big structures beside the reactor (gtmcluster.runtime.gcpause, gtmcluster.runtime.gil): the
collector paused (nested and overlapping pauses restore it once), the GIL handed over often.
(A config read for a reload is frozen when built: test_config_reload.py.)"""

from __future__ import annotations

import gc
import sys

import pytest

from gtmcluster.runtime import gil
from gtmcluster.runtime.gcpause import collection_paused


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


def test_the_gil_is_handed_over_often_meanwhile_and_the_interval_restored() -> None:
    """While a thread works beside the reactor, the switch interval is short (the reactor
    takes the GIL back quickly after each system call); afterwards it is what it was."""
    before = sys.getswitchinterval()
    with gil.yielding_often():
        assert sys.getswitchinterval() == pytest.approx(gil.SHORT)
        assert sys.getswitchinterval() < before
    assert sys.getswitchinterval() == before
    with gil.yielding_often():
        with gil.yielding_often():
            pass
        assert sys.getswitchinterval() == pytest.approx(gil.SHORT)
    assert sys.getswitchinterval() == before
