"""How many refused requests the audit log records: at most `RefusalBound.per_source` from
one source and `RefusalBound.in_all` in all per window of `RefusalBound.window` seconds;
the rest are counted, and told as one summary entry when the window ends.

A flood of wrong tokens (or of writes from a role that may not make them) so costs the
audit at most ``in_all + 1`` entries a minute, and cannot rotate the writes that were made
out of the kept files. Memory is bounded too: at most `RefusalBound.sources` sources are
counted apart in a window; refusals from others count in all only.

Pure: the caller gives the time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

#: the sources a summary names, the most refused first
NAMED = 5


@dataclass(frozen=True)
class LeftOut:
    """What a window left out: how many refusals, from how many sources, and the sources
    that had the most (source, count)."""

    since: float
    count: int
    sources: int
    most: list[tuple[str, int]]

    def describe(self) -> str:
        named = ", ".join(f"{source} {n}" for source, n in self.most)
        many = "source" if self.sources == 1 else "sources"
        return f"and {self.count} more refused requests not recorded one by one, from {self.sources} {many} ({named})"


class RefusalBound:
    """Which refusals are recorded one by one (see the module docstring)."""

    def __init__(self, per_source: int = 10, in_all: int = 200, window: float = 60.0, sources: int = 4096):
        self.per_source = per_source
        self.in_all = in_all
        self.window = window
        self.sources = sources
        #: when the current window began (None: none yet)
        self.start: float | None = None
        self._taken: Counter[str] = Counter()
        self._taken_all = 0
        self._left: Counter[str] = Counter()
        self._left_all = 0

    def ends(self) -> float | None:
        """When the current window ends (None: no window)."""
        return None if self.start is None else self.start + self.window

    def admit(self, source: str, now: float) -> bool:
        """Whether a refusal from *source* at *now* is recorded (else it is counted). Call
        `roll` first: a window that has ended is not counted in."""
        if self.start is None:
            self.start = now
        counted = source in self._taken or len(self._taken) < self.sources
        if self._taken_all < self.in_all and counted and self._taken[source] < self.per_source:
            self._taken[source] += 1
            self._taken_all += 1
            return True
        self._left_all += 1
        if source in self._left or len(self._left) < self.sources:
            self._left[source] += 1
        return False

    def roll(self, now: float) -> LeftOut | None:
        """End the window when its time is up: what it left out (None: nothing), and a new
        window begins with the next refusal."""
        ends = self.ends()
        if ends is None or now < ends:
            return None
        left = None
        if self._left_all:
            left = LeftOut(self.start or now, self._left_all, len(self._left), self._left.most_common(NAMED))
        self.start = None
        self._taken, self._taken_all = Counter(), 0
        self._left, self._left_all = Counter(), 0
        return left
