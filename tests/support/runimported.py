"""Run every monitor of a config's virtual servers once, with the real reactor and the real
checks, and print the verdicts (for imported configs: what the monitors say of real servers).

    python -m tests.support.runimported CONFIG

The output is one JSON object: per monitored virtual server, ``up`` (by its monitor rule
over the checks' results) and each monitor's ``results`` (``[name, ok, reason]``). icmp
monitors use a pinger when this process may open one (else they fail saying why).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from twisted.internet import defer, task

from gtmcluster.config.load import load
from gtmcluster.probe.base import IcmpUnavailable, Result, Target
from gtmcluster.probe.icmp import IcmpPinger, open_pinger
from gtmcluster.probe.kinds import make_check


async def run(reactor: Any, config_path: str) -> dict[str, Any]:
    config = load(Path(config_path))
    servers = [vs for vs in config.virtual_servers.values() if vs.monitors and vs.address is not None]
    pinger: IcmpPinger | None = None
    if any(m.type == "icmp" for vs in servers for m in vs.monitors):
        try:
            pinger = open_pinger(reactor)
        except IcmpUnavailable:
            pinger = None
    runs: list[defer.Deferred[Result]] = []
    for vs in servers:
        assert vs.address is not None
        for monitor in vs.monitors:
            runs.append(make_check(monitor, reactor, pinger)(Target(vs.address, vs.port, f"virtual server {vs.name}")))
    results: list[Result] = await defer.gatherResults(runs)
    if pinger is not None:
        pinger.close()
    out: dict[str, Any] = {}
    for vs in servers:
        mine = [(m.name, results.pop(0)) for m in vs.monitors]
        up = sum(r.ok for _, r in mine) >= vs.monitor_rule.needed(len(mine))
        out[vs.name] = {"up": up, "results": [[name, r.ok, r.reason] for name, r in mine]}
    return out


def main(reactor: Any, config_path: str) -> defer.Deferred[None]:
    async def go() -> None:
        print(json.dumps(await run(reactor, config_path)))

    return defer.ensureDeferred(go())


if __name__ == "__main__":
    task.react(main, sys.argv[1:2])
