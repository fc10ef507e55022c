"""Run real LDNS path probes with the real reactor, in a process of their own, and print the samples.

The global reactor runs once per process, so tests that probe over real sockets run this
module as a subprocess (`run_paths` does it)::

    python -m tests.support.runpath '[{"address": "127.0.0.1", "protocols": ["dns_dot", "tcp"],
                                       "timeout": 0.5, "dns_port": 5353}]' [epoll|poll|select]

Each job is an address and the settings of one `PathProber` (``protocols``, ``timeout``,
optional ``udp_port``, ``dns_port`` and ``source``). All jobs run at once; when a job uses ``icmp``,
the node's `IcmpPinger` is opened first (``"pinger"`` in the output says which sockets it
has, or why there is none). The optional second argument names the reactor to install
(epoll by default; poll and select report socket errors differently).

The output is one JSON object: ``results`` (the `Sample` fields and ``elapsed``, monotonic
seconds from the probe's start to its sample, per job, in order), ``reactor`` (its class
name) and ``leftovers``: the timers and readers/writers the probes left in the reactor once
the samples were in and the reactor had a few turns to finish (should be none).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from twisted.internet import defer, task

from gtmcluster.probe.base import IcmpUnavailable
from gtmcluster.probe.icmp import IcmpPinger, open_pinger
from gtmcluster.probe.paths import PathProber, Sample
from tests.support.probeservers import ROOT

#: reactor turns allowed for closes to complete after the last result
SETTLE_TURNS = 20


def selectables(reactor: Any) -> set[Any]:
    return set(reactor.getReaders()) | set(reactor.getWriters())


async def timed(prober: PathProber, address: str) -> dict[str, Any]:
    start = time.monotonic()
    sample: Sample = await prober.probe(ipaddress.ip_address(address))
    return {**asdict(sample), "elapsed": time.monotonic() - start}


async def run(reactor: Any, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    await task.deferLater(reactor, 0, lambda: None)  # the reactor adds its signal wakers once running
    before = selectables(reactor)
    pinger: IcmpPinger | None = None
    pinger_text = "not opened"
    if any("icmp" in job["protocols"] for job in jobs):
        try:
            pinger = open_pinger(reactor)
            pinger_text = pinger.description
        except IcmpUnavailable as e:
            pinger_text = str(e)
    probers: list[PathProber] = []
    runs: list[defer.Deferred[dict[str, Any]]] = []
    for job in jobs:
        prober = PathProber(
            reactor,
            tuple(job["protocols"]),
            float(job.get("timeout", 0.5)),
            pinger,
            int(job.get("udp_port", 33434)),
            dns_port=int(job.get("dns_port", 53)),
            source=ipaddress.ip_address(job["source"]) if "source" in job else None,
        )
        probers.append(prober)
        runs.append(defer.ensureDeferred(timed(prober, job["address"])))
    results: list[dict[str, Any]] = await defer.gatherResults(runs)
    for prober in probers:
        prober.close()
    if pinger is not None:
        pinger.close()
    for _ in range(SETTLE_TURNS):
        if not reactor.getDelayedCalls() and not selectables(reactor) - before:
            break
        await task.deferLater(reactor, 0, lambda: None)
    return {
        "results": results,
        "pinger": pinger_text,
        "reactor": type(reactor).__name__,
        "leftovers": {
            "delayed_calls": [repr(c) for c in reactor.getDelayedCalls()],
            "selectables": [repr(s) for s in selectables(reactor) - before],
        },
    }


def main(reactor: Any, argument: str) -> defer.Deferred[None]:
    async def go() -> None:
        out = await run(reactor, json.loads(argument))
        print(json.dumps(out))

    return defer.ensureDeferred(go())


# --------------------------------------------------------------------------- for the tests


def path_job(address: str, *protocols: str, timeout: float = 0.5, **settings: Any) -> dict[str, Any]:
    """One probe for `run_paths`: *address* by *protocols* (``udp_port``, ``dns_port`` in *settings*)."""
    return {"address": address, "protocols": list(protocols), "timeout": timeout, **settings}


@dataclass(frozen=True)
class PathRun:
    results: list[dict[str, Any]]
    pinger: str
    reactor: str
    leftovers: dict[str, list[str]]

    def reasons(self) -> list[str]:
        return [r["reason"] for r in self.results]


def run_paths(*jobs: dict[str, Any], reactor: str = "epoll") -> PathRun:
    """Run *jobs* at once with the real *reactor* in a fresh process (this module)."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.runpath", json.dumps(list(jobs)), reactor],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if out.returncode != 0:
        raise AssertionError(f"runpath failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return PathRun(data["results"], data["pinger"], data["reactor"], data["leftovers"])


def install_reactor(name: str) -> None:
    """Install the named reactor (``epoll``, ``poll``, ``select``) before anything uses one."""
    if name == "epoll":
        from twisted.internet import epollreactor

        epollreactor.install()
    elif name == "poll":
        from twisted.internet import pollreactor

        pollreactor.install()
    elif name == "select":
        from twisted.internet import selectreactor

        selectreactor.install()
    else:
        raise SystemExit(f"unknown reactor {name!r}")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        install_reactor(sys.argv[2])
    task.react(main, sys.argv[1:2])
