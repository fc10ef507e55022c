"""What the fuzz targets share: the rule they check.

The rule: a surface given bad input raises its one declared error (or answers as its
contract says), never anything else, and never logs a traceback. A target raises `Finding`
when an invariant breaks; any other exception escaping a target is a finding too
(atheris stops, prints it and saves the input under the artifact prefix).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

from twisted.logger import ILogObserver, LogEvent, formatEvent, globalLogPublisher


class Finding(AssertionError):
    """An invariant the surface broke for this input."""


@contextmanager
def no_tracebacks() -> Iterator[list[LogEvent]]:
    """Fail (with the first one) when the code run under it logs a failure, that is a
    traceback: bad input must be met with a clear error. Yields the events logged."""
    events: list[LogEvent] = []
    observer = cast(ILogObserver, events.append)
    globalLogPublisher.addObserver(observer)
    try:
        yield events
    finally:
        globalLogPublisher.removeObserver(observer)
    for event in events:
        failure = event.get("log_failure")
        if failure is not None:
            raise Finding(f"a traceback was logged: {formatEvent(event)}\n{failure.getTraceback()}")
