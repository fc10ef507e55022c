"""Waiting on a real process or socket: poll a condition until a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

STEP = 0.05


def until(
    check: Callable[[], T],
    timeout: float = 10.0,
    what: str = "condition",
    step: float = STEP,
    details: Callable[[], object] | None = None,
) -> T:
    """Return *check()*'s first truthy value; fail after *timeout* seconds saying *what* was
    awaited (and *details* of the last state)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            extra = f":\n{details()}" if details is not None else ""
            raise AssertionError(f"no {what} within {timeout:g}s{extra}")
        time.sleep(step)


def seconds_until(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    details: Callable[[], object] | None = None,
    step: float = STEP,
) -> float:
    """`until` *condition* holds; the seconds it took."""
    start = time.monotonic()
    until(condition, timeout, what, step, details)
    return time.monotonic() - start
