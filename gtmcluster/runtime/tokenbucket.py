"""A token bucket: at most `rate` events a second on average, at most `capacity` at once;
and `Buckets`, one per key for a bounded number of keys.

Pure: the caller passes the time, so the bucket works with any clock (the reactor's, a
test's `task.Clock`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

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


class Buckets(Generic[K]):
    """A token bucket per key (`rate` a second, up to `capacity`), for at most `size` keys:
    past it the least recently used is forgotten (counted in `forgotten`), so a key seen
    again starts full. A cap in all, where one is wanted, is a bucket of its own beside it."""

    def __init__(self, rate: float, capacity: float, size: int) -> None:
        self.rate = rate
        self.capacity = capacity
        self.size = size
        self._buckets: OrderedDict[K, TokenBucket] = OrderedDict()
        self.forgotten = 0

    def __len__(self) -> int:
        return len(self._buckets)

    def bucket(self, key: K, now: float) -> TokenBucket:
        """*key*'s bucket, made full when it has none, now the most recently used."""
        buckets = self._buckets
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = TokenBucket(self.rate, self.capacity, now)
            self._bound()
        else:
            buckets.move_to_end(key)
        return bucket

    def take(self, key: K, now: float, n: float = 1) -> bool:
        """Spend *n* of *key*'s tokens, if it has them at *now*."""
        return self.bucket(key, now).take(n, now)

    def configure(self, rate: float, capacity: float, size: int) -> None:
        """New rates and bound (a reload): the buckets kept take them, the bound at once."""
        self.rate, self.capacity, self.size = rate, capacity, size
        for bucket in self._buckets.values():
            bucket.configure(rate, capacity)
        self._bound()

    def _bound(self) -> None:
        while len(self._buckets) > self.size:
            self._buckets.popitem(last=False)
            self.forgotten += 1
