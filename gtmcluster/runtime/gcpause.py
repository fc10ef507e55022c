"""Pausing the cyclic garbage collector while a large long-lived structure is built.

Building a million objects that stay (reading a config of 5,000 servers and 20,000
topology records) triggers collections that examine the growing structure again and
again: 60% of the time such a config took to read. What such builders make holds no
garbage cycles, so they run with the collector paused (`collection_paused`), and
collections resume when they are done. (`gtmcluster.runtime.heap` keeps full collections short
once the structure is built.)

A structure built while the node runs (a config read again for a reload:
`gtmcluster.config.reload`) is also frozen when it is done: otherwise its million objects, young when
the collector resumes, are examined by the collections that follow in the reactor thread
until one full collection has moved them to the oldest generation (560 ms of standing
still at 5,000 servers, measured). A config holds no reference cycles, so the old one is
freed by reference counting once nothing uses it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


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
