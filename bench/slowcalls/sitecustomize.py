"""Log what holds a node's reactor: put this folder on PYTHONPATH of a `twistd gtm`
(`PYTHONPATH=bench/slowcalls twistd ...`, or of a benchmark, whose children inherit it).

Python imports ``sitecustomize`` at start, before the node's code. This one times every
reactor call (`callLater`), I/O handler (`log.callWithLogger`, which the epoll reactor runs
each ready descriptor under), call into the thread pool and garbage collection, and logs
each one longer than ``GTM_SLOW_MS`` (default 15) milliseconds with its name, to standard
error (the node's log once twistd has started): the reactor's stalls, by cause. It is how
the stalls of issue 12 were found (docs/performance.md, "A large configuration"); it costs
two clock reads per call, so it is not for production.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

from twisted.internet import base, threads
from twisted.python import log as twisted_log

SLOW = float(os.environ.get("GTM_SLOW_MS", "15")) / 1000


def _say(what: str, took: float) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} SLOW {took * 1000:.0f} ms {what}\n")
    sys.stderr.flush()


def _name(f: Any) -> str:
    return f"{getattr(f, '__module__', '')}.{getattr(f, '__qualname__', repr(f))}"


def _timed(f: Any, what: str, always: bool = False) -> Any:
    """*f*, saying how long each call took when over `SLOW` (or *always*)."""

    def timed(*args: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        try:
            return f(*args, **kw)
        finally:
            took = time.perf_counter() - started
            if always or took > SLOW:
                _say(what, took)

    return timed


_call_later = base.ReactorBase.callLater


def _timed_call_later(self: Any, delay: float, f: Any, *args: Any, **kw: Any) -> Any:
    return _call_later(self, delay, _timed(f, f"call {_name(f)}"), *args, **kw)


_with_logger = twisted_log.callWithLogger


def _timed_with_logger(logger: Any, func: Any, *args: Any, **kw: Any) -> Any:
    return _timed(_with_logger, f"I/O {logger!r:.100}")(logger, func, *args, **kw)


_to_thread = threads.deferToThreadPool


def _timed_to_thread(reactor: Any, pool: Any, f: Any, *args: Any, **kw: Any) -> Any:
    return _to_thread(reactor, pool, _timed(f, f"thread {_name(f)} (beside the reactor)", always=True), *args, **kw)


_collecting: list[float] = []


def _gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _collecting[:] = [time.perf_counter()]
    elif _collecting:
        took = time.perf_counter() - _collecting.pop()
        if took > SLOW:
            _say(f"garbage collection of generation {info['generation']}", took)


base.ReactorBase.callLater = _timed_call_later  # type: ignore[method-assign,assignment]
twisted_log.callWithLogger = _timed_with_logger
threads.deferToThreadPool = _timed_to_thread  # type: ignore[assignment]
gc.callbacks.append(_gc)
