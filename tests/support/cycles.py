"""Finding reference cycles a piece of code leaves behind (tests/unit/test_no_cycles.py)."""

from __future__ import annotations

import collections
import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_off() -> Iterator[list[str]]:
    """Run the block with the collector off; the list it yields gets, afterwards, the types
    of the cyclic garbage the block left (empty when it left none)."""
    gc.collect()
    gc.disable()
    left: list[str] = []
    try:
        yield left
    finally:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            counts = collections.Counter(type(o).__qualname__ for o in gc.garbage)
            left.extend(f"{n} {name}" for name, n in counts.most_common())
            gc.garbage.clear()
        finally:
            gc.set_debug(0)
            gc.enable()
