"""Handing the GIL over often while a thread works beside the reactor (a reload whose YAML
child could not start parses in a thread: `gtmcluster.config.source.yamlchild`).

The reactor thread releases the GIL at every system call (a socket made, connected, closed
for a health check; a datagram read or sent) and must take it back afterwards. While
another thread runs Python code, taking it back waits for that thread to hand it over,
which CPython asks it to do after the switch interval (5 ms by default). The reactor makes
thousands of such calls a second, so a thread reading a big config made it stand still for
a second at a time (the convoy effect; measured at 5,000 servers with 1,000 checks a
second: a 1.0 s stall during a reload, 0.12-0.17 s with a 0.1 ms interval).

`yielding_often` shortens the interval while such work runs; the work itself takes a little
longer (the reload of that config: 4 s -> 4.5 s).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: the switch interval (seconds) while a thread works beside the reactor
SHORT = 0.0001


class _Shortened:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.before = sys.getswitchinterval()


_shortened = _Shortened()


@contextmanager
def yielding_often(interval: float = SHORT) -> Iterator[None]:
    """The switch interval is *interval* meanwhile (in the whole process); overlapping uses
    restore the one before the first when the last ends."""
    with _shortened.lock:
        _shortened.count += 1
        if _shortened.count == 1:
            _shortened.before = sys.getswitchinterval()
            sys.setswitchinterval(min(interval, _shortened.before))
    try:
        yield
    finally:
        with _shortened.lock:
            _shortened.count -= 1
            if _shortened.count == 0:
                sys.setswitchinterval(_shortened.before)
