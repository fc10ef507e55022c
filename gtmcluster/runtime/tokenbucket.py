"""A token bucket: at most `rate` events a second on average, at most `capacity` at once.

Pure: the caller passes the time, so the bucket works with any clock (the reactor's, a
test's `task.Clock`).
"""

from __future__ import annotations

#: tokens short by less than this are there (sums of float time steps are not exact)
EPSILON = 1e-9


class TokenBucket:
    """Starts full; `rate` tokens a second flow in, up to `capacity`."""

    __slots__ = ("_at", "capacity", "rate", "tokens")

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self.tokens = capacity
        self._at = now

    def refill(self, now: float) -> float:
        """The tokens held at *now*."""
        if now > self._at:
            self.tokens = min(self.capacity, self.tokens + (now - self._at) * self.rate)
            self._at = now
        return self.tokens

    def take(self, n: float, now: float) -> bool:
        """Spend *n* tokens if there are that many at *now* (one more than the capacity
        never are: `n` is capped at the capacity, and the bucket runs into debt for the rest)."""
        if self.refill(now) < min(n, self.capacity) - EPSILON:
            return False
        self.tokens -= n
        return True

    def ready_in(self, n: float, now: float) -> float:
        """Seconds from *now* until `take(n)` would succeed."""
        short = min(n, self.capacity) - self.refill(now)
        return 0.0 if short <= EPSILON else short / self.rate

    def configure(self, rate: float, capacity: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self.tokens = min(self.tokens, capacity)
