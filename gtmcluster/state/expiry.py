"""When the store's records with a TTL end: keys by expiry time, a few bytes per key.

A heap entry per record, (expiry, key, version), costs about a hundred bytes, and a key
rewritten before its expiry (a path measured again) left its old entry behind until the
old expiry. Here the far future is kept coarsely: keys in windows of `WIDTH` seconds, a
list of bare keys per window (8 bytes a key). When a window begins, its keys move into
an exact heap of (expiry, key), each at the expiry its record has by then, so the heap
holds only about one window's worth. Keys come out of `due` soonest first.

A window is opened ahead of its time, `STEP` keys at each call of `due` from `LEAD` seconds
before it begins (what is left moves when it begins): a member at 5,000 servers writes
25,000 verdicts every 30 s with a TTL of 90 s, so a window holds some 50,000 keys, and
opening it in one go held the reactor 50 ms once a minute.

The queue asks the store for a key's expiry when it needs it (`expiry_of`), so an entry
is a reminder to look at a key, not a copy of its record: the store checks what it holds
and, when the record still lives (it was rewritten with a later expiry), adds it again.
A record removed before its end (evicted for a bound) leaves its entry behind: the store
says so (`forget`), and a window that is half such entries is compacted, so a flood of
records evicted at once does not keep their keys until their TTL would have ended.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

#: seconds per window of the far future
WIDTH = 60.0
#: keys moved from the next window into the exact heap at each `due`, ...
STEP = 2000
#: ... from this many seconds before the window begins
LEAD = WIDTH / 2


class ExpiryQueue:
    def __init__(
        self, expiry_of: Callable[[str], float | None], width: float = WIDTH, step: int = STEP, lead: float = LEAD
    ):
        self._expiry_of = expiry_of  # when the record held at a key ends (None: it does not)
        self._width = width
        self._step = step
        self._lead = lead
        self._later: dict[int, list[str]] = {}  # window number -> keys due in it
        self._windows: list[int] = []  # heap of the window numbers in _later
        self._soon: list[tuple[float, str]] = []  # heap of (expiry, key) before _horizon
        self._horizon = float("-inf")  # where the windows not yet opened begin
        self._forgotten: dict[int, int] = {}  # window number -> entries of keys removed early

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

    def forget(self, at: float) -> None:
        """A key due at *at* was removed before then: its entry is stale (see the module)."""
        if at < self._horizon:
            return  # in the exact heap: about one window's worth, it empties soon
        window = int(at // self._width)
        keys = self._later.get(window)
        if keys is None:
            return
        stale = self._forgotten.get(window, 0) + 1
        if stale * 2 <= len(keys):
            self._forgotten[window] = stale
            return
        self._forgotten.pop(window, None)
        live = [key for key in dict.fromkeys(keys) if self._expiry_of(key) is not None]
        if live:
            self._later[window] = live
        else:
            del self._later[window]  # (its number stays in _windows: skipped when met)

    def due(self, now: float) -> list[str]:
        """Keys whose time has come by *now*, soonest first (a key may come more than once)."""
        width = self._width
        while self._windows and self._windows[0] * width <= now:
            window = heapq.heappop(self._windows)
            self._horizon = (window + 1) * width
            self._forgotten.pop(window, None)
            self._open(self._later.pop(window, []), self._horizon)
        if self._windows and self._windows[0] * width - self._lead <= now:
            window = self._windows[0]  # the next one, a step ahead of its time
            keys = self._later.get(window)
            if keys:
                self._open(keys[-self._step :], (window + 1) * width)
                del keys[-self._step :]
        out = []
        soon = self._soon
        while soon and soon[0][0] <= now:
            out.append(heapq.heappop(soon)[1])
        return out

    def _open(self, keys: list[str], end: float) -> None:
        """Move *keys* of a window ending at *end* into the exact heap, each at its record's
        end now (or on to a later window, when rewritten since with a later end)."""
        soon = self._soon
        for key in dict.fromkeys(keys):  # (a key rewritten in the window is in it again)
            at = self._expiry_of(key)
            if at is None:
                continue
            if at < end:
                heapq.heappush(soon, (at, key))
            else:
                self.add(key, at)

    def __len__(self) -> int:
        return len(self._soon) + sum(len(keys) for keys in self._later.values())
