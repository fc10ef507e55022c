"""When the store's records with a TTL end: keys by expiry time, a few bytes per key.

A heap entry per record, (expiry, key, version), costs about a hundred bytes, and a key
rewritten before its expiry (a path measured again) left its old entry behind until the
old expiry. Here the far future is kept coarsely: keys in windows of `WIDTH` seconds, a
list of bare keys per window (8 bytes a key). When a window begins, its keys move into
an exact heap of (expiry, key), each at the expiry its record has by then, so the heap
holds only about one window's worth. Keys come out of `due` soonest first.

The queue asks the store for a key's expiry when it needs it (`expiry_of`), so an entry
is a reminder to look at a key, not a copy of its record: the store checks what it holds
and, when the record still lives (it was rewritten with a later expiry), adds it again.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

#: seconds per window of the far future
WIDTH = 60.0


class ExpiryQueue:
    def __init__(self, expiry_of: Callable[[str], float | None], width: float = WIDTH):
        self._expiry_of = expiry_of  # when the record held at a key ends (None: it does not)
        self._width = width
        self._later: dict[int, list[str]] = {}  # window number -> keys due in it
        self._windows: list[int] = []  # heap of the window numbers in _later
        self._soon: list[tuple[float, str]] = []  # heap of (expiry, key) before _horizon
        self._horizon = float("-inf")  # where the windows not yet opened begin

    def add(self, key: str, at: float) -> None:
        """Have *key* come out of `due` once the time is *at* (then the store looks at it)."""
        if at < self._horizon:
            heapq.heappush(self._soon, (at, key))
            return
        window = int(at // self._width)
        keys = self._later.get(window)
        if keys is None:
            keys = self._later[window] = []
            heapq.heappush(self._windows, window)
        keys.append(key)

    def due(self, now: float) -> list[str]:
        """Keys whose time has come by *now*, soonest first (a key may come more than once)."""
        while self._windows and self._windows[0] * self._width <= now:
            window = heapq.heappop(self._windows)
            self._horizon = (window + 1) * self._width
            for key in self._later.pop(window):
                at = self._expiry_of(key)
                if at is not None:
                    self.add(key, at)
        out = []
        soon = self._soon
        while soon and soon[0][0] <= now:
            out.append(heapq.heappop(soon)[1])
        return out

    def __len__(self) -> int:
        return len(self._soon) + sum(len(keys) for keys in self._later.values())
