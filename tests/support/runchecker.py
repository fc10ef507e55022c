"""Run the health checker with the real reactor and real tcp checks, in a process of its own,
and print what it did with file descriptors.

    python -m tests.support.runchecker '{"target": "hang", "servers": 2000, "interval": 2,
                                         "timeout": 1, "max_in_flight": 500, "seconds": 5}'

Every virtual server's monitor checks one port of 127.0.0.1 (the monitor's ``port``):
- ``hang``: a listener of this process with a backlog of 0 that never accepts. Once its
  queue holds one connection the kernel drops further SYNs, so connections to it are never
  made: a black hole on loopback, no root needed.
- ``refused``: a port nothing listens on.

The checker runs with ``max_in_flight`` as given (below what the monitors would need if
every check hung: the config check that refuses such a budget is bypassed on purpose) for
``seconds``, then stops. While it runs, ``/proc/self/fd`` is counted every 2 ms. The output
is one JSON object: the open descriptors before, at their peak and after the last check
ended; the checks' results (count, longest elapsed); the checker's statistics; and the
readers/writers left in the reactor.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, task

from gtmcluster.config.load import load
from gtmcluster.config.model import Health
from gtmcluster.config.monitoring import Monitor
from gtmcluster.health.checker import HealthChecker
from gtmcluster.probe.base import Check, Result, Target
from gtmcluster.probe.kinds import make_check
from gtmcluster.state.store import Store
from tests.support import configs

#: how often the descriptors are counted while the checker runs (seconds)
SAMPLE = 0.002


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def selectables(reactor: Any) -> set[Any]:
    return set(reactor.getReaders()) | set(reactor.getWriters())


async def run(reactor: Any, spec: dict[str, Any]) -> dict[str, Any]:
    await task.deferLater(reactor, 0, lambda: None)  # the reactor adds its signal wakers once running
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if spec["target"] == "hang":
        listener.listen(0)
    else:
        listener.close()  # refused: nothing listens there any more

    raw = configs.base()
    raw["monitors"] = {
        "m": {"type": "tcp", "interval": spec["interval"], "timeout": spec["timeout"], "port": port},
    }
    raw["virtual_servers"] = {
        f"vs{i}": {"address": "127.0.0.1", "port": 10000 + i, "datacenter": "DC1", "monitor": "m"}
        for i in range(spec["servers"])
    }
    raw["health"] = {"max_in_flight": 100000, "max_checks_per_second": 100000}
    raw["pools"] = {}
    raw["wideips"] = {}
    config = load(configs.write(Path(tempfile.mkdtemp(prefix="runchecker-")), raw))
    config = dataclasses.replace(config, health=Health(spec["max_in_flight"], float(spec.get("rate", 100000))))

    results: list[Result] = []
    running = 0
    peak_running = 0

    def factory(monitor: Monitor) -> Check:
        real = make_check(monitor, reactor)

        def check(target: Target) -> defer.Deferred[Result]:
            nonlocal running, peak_running
            running += 1
            peak_running = max(peak_running, running)

            def done(result: Result) -> Result:
                nonlocal running
                running -= 1
                results.append(result)
                return result

            return real(target).addCallback(done)

        return check

    before_selectables = selectables(reactor)
    base = fds()
    peak = base
    store = Store("n1", reactor.seconds)
    checker = HealthChecker(config, store, reactor, "n1", factory)

    def sample() -> None:
        nonlocal peak
        peak = max(peak, fds())

    sampler = task.LoopingCall(sample)
    sampler.clock = reactor
    sampler.start(SAMPLE)
    checker.startService()
    await task.deferLater(reactor, spec["seconds"], lambda: None)
    checker.stopService()
    while running:  # the last checks end by their timeout
        await task.deferLater(reactor, 0.01, lambda: None)
    sampler.stop()
    for _ in range(5):  # closing an established connection takes a turn
        await task.deferLater(reactor, 0, lambda: None)
    after = fds()
    if spec["target"] == "hang":
        listener.close()
    left = selectables(reactor) - before_selectables
    stats = checker.stats
    return {
        "base_fds": base,
        "peak_fds": peak,
        "after_fds": after,
        "checks": len(results),
        "reasons": sorted({r.reason for r in results}),
        "longest": max((r.elapsed for r in results), default=0.0),
        "peak_running": peak_running,
        "started": stats.started,
        "skipped_late": stats.skipped_late,
        "skipped_busy": stats.skipped_busy,
        "peak_in_flight": stats.peak_in_flight,
        "lag_max": stats.lag_max,
        "selectables": [repr(s) for s in left],
    }


def main(reactor: Any, spec_json: str) -> defer.Deferred[None]:
    async def go() -> None:
        print(json.dumps(await run(reactor, json.loads(spec_json))))

    return defer.ensureDeferred(go())


if __name__ == "__main__":
    task.react(main, sys.argv[1:])
