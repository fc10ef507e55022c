"""Anti-flap: raw pass/fail results in, an up/down verdict out.

From `unknown` the first result decides (so a fresh node learns quickly). After that an up
target goes down only after `down_after` failures in a row, and a down one comes up only
after `up_after` successes in a row; anything else leaves the verdict as it is, so an
alternating input never flips it.

    state    input    counts reach           next
    unknown  pass     -                      up
    unknown  fail     -                      down
    up       fail     failures = down_after  down
    down     pass     successes = up_after   up
"""

from __future__ import annotations

from dataclasses import dataclass

UP = "up"
DOWN = "down"
UNKNOWN = "unknown"


@dataclass(slots=True)
class Flap:
    up_after: int
    down_after: int
    state: str = UNKNOWN
    successes: int = 0
    failures: int = 0

    def feed(self, ok: bool) -> str | None:
        """Take one result; returns the new verdict when it changes, else None."""
        if ok:
            self.successes += 1
            self.failures = 0
        else:
            self.failures += 1
            self.successes = 0
        new = self.state
        if self.state == UNKNOWN:
            new = UP if ok else DOWN
        elif self.state == UP and self.failures >= self.down_after:
            new = DOWN
        elif self.state == DOWN and self.successes >= self.up_after:
            new = UP
        if new == self.state:
            return None
        self.state = new
        return new
