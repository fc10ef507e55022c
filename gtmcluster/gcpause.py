"""Pausing the cyclic garbage collector while a large long-lived structure is built.

Building a million objects that stay (reading a config of 5,000 servers and 20,000
topology records) triggers collections that examine the growing structure again and
again: 60% of the time such a config took to read. What such builders make holds no
garbage cycles, so they run with the collector paused (`collection_paused`), and
collections resume when they are done. (`gtmcluster.heap` keeps full collections short
once the structure is built.)

A structure built while the node runs (a config read again for a reload, in a thread) is
also frozen when it is done (`built_long_lived`): otherwise its million objects, young when
the collector resumes, are examined by the collections that follow in the reactor thread
until one full collection has moved them to the oldest generation (560 ms of standing
still at 5,000 servers, measured). A config holds no reference cycles, so the old one is
freed by reference counting once nothing uses it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from gtmcluster import gil

P = ParamSpec("P")
T = TypeVar("T")


class _Pauses:
    """How many pauses are under way, and whether the collector ran before the first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.was_enabled = True


_pauses = _Pauses()


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic collection meanwhile (in any thread); nested or concurrent pauses end when
    the last one ends, and leave the collector as it was before the first."""
    with _pauses.lock:
        _pauses.count += 1
        if _pauses.count == 1:
            _pauses.was_enabled = gc.isenabled()
            gc.disable()
    try:
        yield
    finally:
        with _pauses.lock:
            _pauses.count -= 1
            if _pauses.count == 0 and _pauses.was_enabled:
                gc.enable()


def built_long_lived(build: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`build(*args, **kwargs)` in a thread beside the reactor: with the collector paused,
    the GIL handed over often (`gil.yielding_often`), and, when it returns, everything then
    alive frozen before collections resume (see `gtmcluster.heap` for what freezing costs:
    cycles alive now that die later are never collected; a reload is rare, as freezes
    must be)."""
    with gil.yielding_often(), collection_paused():
        built = build(*args, **kwargs)
        gc.freeze()
        return built
