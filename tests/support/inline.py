"""A reactor stand-in whose thread pool runs work at once, for deterministic tests of code
that writes in a thread (the snapshot writer)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import task


class InlineThreads:
    """A fake clock plus a 'thread pool' that runs each call at once, on the caller's thread."""

    def __init__(self) -> None:
        self.clock = task.Clock()
        self.ran = 0

    def getThreadPool(self) -> InlineThreads:
        return self

    def callInThreadWithCallback(
        self, on_result: Callable[[bool, Any], None], f: Callable[..., Any], *a: Any, **kw: Any
    ) -> None:
        self.ran += 1
        try:
            result = f(*a, **kw)
        except Exception as e:  # delivered as a failure, as the real pool does
            on_result(False, e)
        else:
            on_result(True, result)

    def callFromThread(self, f: Callable[..., Any], *a: Any, **kw: Any) -> None:
        f(*a, **kw)

    def seconds(self) -> float:
        return self.clock.seconds()

    def callLater(self, *a: Any, **kw: Any) -> Any:
        return self.clock.callLater(*a, **kw)
