"""Waiting on a real process or socket: poll a condition until a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

STEP = 0.05


def until(check: Callable[[], T], timeout: float = 10.0, what: str = "condition", step: float = STEP) -> T:
    """Return *check()*'s first truthy value; fail after *timeout* seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout:g}s")
        time.sleep(step)
