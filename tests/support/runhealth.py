"""Run the health checker of one node with the real reactor and real checks, in a process
of its own, until every monitored virtual server has this node's verdict from all of its
monitors; print those verdicts.

    python -m tests.support.runhealth CONFIG NODE [TIMEOUT]

The output is one JSON object: ``complete`` (whether every verdict came within TIMEOUT
seconds, default 10) and ``verdicts``: each monitored server's record value
(``{"up": ..., "reason": ...}``), by name.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from twisted.internet import defer, task

from gtmcluster.config.load import load
from gtmcluster.health.checker import HealthChecker
from gtmcluster.probe.kinds import make_check
from gtmcluster.state.store import Store

#: how often the records are looked at (seconds)
POLL = 0.05


async def run(reactor: Any, config_path: str, node: str, timeout: float) -> dict[str, Any]:
    config = load(Path(config_path))
    store = Store(node, reactor.seconds)
    checker = HealthChecker(config, store, reactor, node, lambda m: make_check(m, reactor))
    monitored = [vs.name for vs in config.virtual_servers.values() if vs.monitors]

    def verdicts() -> dict[str, Any]:
        out = {}
        for name in monitored:
            record = store.get(f"obs/vs/{name}/{node}")
            if record is not None:
                out[name] = record.value
        return out

    def complete(found: dict[str, Any]) -> bool:
        return len(found) == len(monitored) and not any("unknown (" in v["reason"] for v in found.values())

    checker.startService()
    deadline = reactor.seconds() + timeout
    while not complete(verdicts()) and reactor.seconds() < deadline:
        await task.deferLater(reactor, POLL, lambda: None)
    checker.stopService()
    found = verdicts()
    return {"complete": complete(found), "verdicts": found}


def main(reactor: Any, config_path: str, node: str, timeout: str = "10") -> defer.Deferred[None]:
    async def go() -> None:
        print(json.dumps(await run(reactor, config_path, node, float(timeout))))

    return defer.ensureDeferred(go())


if __name__ == "__main__":
    task.react(main, sys.argv[1:])
