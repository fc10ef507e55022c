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


_call_later = base.ReactorBase.callLater


def _timed_call_later(self: Any, delay: float, f: Any, *args: Any, **kw: Any) -> Any:
    def timed(*a: Any, **k: Any) -> Any:
        started = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            took = time.perf_counter() - started
            if took > SLOW:
                _say(f"call {_name(f)}", took)

    return _call_later(self, delay, timed, *args, **kw)


_with_logger = twisted_log.callWithLogger


def _timed_with_logger(logger: Any, func: Any, *args: Any, **kw: Any) -> Any:
    started = time.perf_counter()
    try:
        return _with_logger(logger, func, *args, **kw)  # type: ignore[no-untyped-call]
    finally:
        took = time.perf_counter() - started
        if took > SLOW:
            _say(f"I/O {logger!r:.100}", took)


_to_thread = threads.deferToThreadPool


def _timed_to_thread(reactor: Any, pool: Any, f: Any, *args: Any, **kw: Any) -> Any:
    def timed(*a: Any, **k: Any) -> Any:
        started = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            _say(f"thread {_name(f)} (beside the reactor)", time.perf_counter() - started)

    return _to_thread(reactor, pool, timed, *args, **kw)


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
