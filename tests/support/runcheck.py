"""Run real checks with the real reactor, in a process of their own, and print the results.

The global reactor runs once per process, so tests that check real sockets run this module
as a subprocess::

    python -m tests.support.runcheck '[{"monitor": {"type": "tcp", "timeout": 1},
                                        "address": "127.0.0.1", "port": 8080}]'

Each job is a monitor (its ``type``, ``timeout``, optional ``port`` and the fields of its
check settings, as in `gtmcluster.config.model`) and a target; ``"general": true`` makes a
tcp or plain http check use Twisted's client instead of a bare socket; ``"again_after": S``
checks again S seconds after the first result and reports the second (a load source's
counters give rates from the second check on). All jobs run at once. The
output is one JSON object: ``results`` (``ok``, ``reason``, ``elapsed``, load ``data`` per job, in order)
and ``leftovers``: the timers and readers/writers the checks left in the reactor once the
results were in and the reactor had a few turns to finish closing sockets (should be none).
"""

from __future__ import annotations

import ipaddress
import json
import sys
from pathlib import Path
from typing import Any

import dns.rcode
import dns.rdatatype
from twisted.internet import defer, task

from gtmcluster.config.monitoring import (
    Check,
    DnsCheck,
    HttpCheck,
    IcmpCheck,
    LoadSource,
    Monitor,
    Sample,
    TcpCheck,
    UdpCheck,
)
from gtmcluster.probe.base import Check as Checker
from gtmcluster.probe.base import Result, Target
from gtmcluster.probe.http import HttpChecker
from gtmcluster.probe.icmp import IcmpPinger, open_pinger
from gtmcluster.probe.kinds import make_check
from gtmcluster.probe.tcp import TcpChecker

#: reactor turns allowed for closes to complete after the last result
SETTLE_TURNS = 20


def settings(kind: str, fields: dict[str, Any]) -> Check:
    """Check settings from JSON-friendly fields (text for bytes, names for DNS codes)."""
    f = dict(fields)
    for key in ("send", "expect"):
        if isinstance(f.get(key), str):
            f[key] = f[key].encode()
    if kind == "tcp":
        return TcpCheck(**f)
    if kind in ("http", "https"):
        if "expect_status" in f:
            f["expect_status"] = tuple(f["expect_status"])
        if f.get("ca_file"):
            f["ca_file"] = Path(f["ca_file"])
        if f.get("load"):
            f["load"] = load_source(f["load"])
        return HttpCheck(tls=kind == "https", **f)
    if kind == "udp":
        return UdpCheck(**f)
    if kind == "dns":
        if isinstance(f.get("query_type"), str):
            f["query_type"] = int(dns.rdatatype.from_text(f["query_type"]))
        if isinstance(f.get("expect_rcode"), str):
            f["expect_rcode"] = int(dns.rcode.from_text(f["expect_rcode"]))
        if f.get("expect_address"):
            f["expect_address"] = ipaddress.ip_address(f["expect_address"])
        return DnsCheck(**f)
    if kind == "icmp":
        return IcmpCheck()
    raise SystemExit(f"unknown monitor type {kind!r}")


def load_source(fields: dict[str, Any]) -> LoadSource:
    """A `LoadSource` from JSON: samples as [metric, {label: value}] pairs."""
    f = dict(fields)
    for figure in ("connections", "capacity", "packets", "bytes"):
        if figure in f:
            f[figure] = tuple(Sample(name, tuple(sorted(labels.items()))) for name, labels in f[figure])
    return LoadSource(**f)


def monitor(spec: dict[str, Any]) -> Monitor:
    fields = {k: v for k, v in spec.items() if k not in ("type", "timeout", "port")}
    kind = spec["type"]
    timeout = float(spec.get("timeout", 1.0))
    return Monitor("m", kind, max(timeout, 1.0), timeout, 1, 1, settings(kind, fields), port=spec.get("port"))


def selectables(reactor: Any) -> set[Any]:
    return set(reactor.getReaders()) | set(reactor.getWriters())


async def run(reactor: Any, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    await task.deferLater(reactor, 0, lambda: None)  # the reactor adds its signal wakers once running
    before = selectables(reactor)
    pinger: IcmpPinger | None = None
    if any(job["monitor"]["type"] == "icmp" for job in jobs):
        pinger = open_pinger(reactor)
    runs: list[defer.Deferred[Result]] = []
    for job in jobs:
        m = monitor(job["monitor"])
        check: Checker
        if job.get("general") and isinstance(m.check, TcpCheck):
            check = TcpChecker(m.check, reactor, m.timeout, m.port, bare=False)
        elif job.get("general") and isinstance(m.check, HttpCheck):
            check = HttpChecker(m.check, reactor, m.timeout, m.port, bare=False)
        else:
            check = make_check(m, reactor, pinger)
        address = ipaddress.ip_address(job["address"])
        target = Target(address, int(job.get("port", 0)), "test target")
        if job.get("again_after"):  # (load counters: the second check gives their rates)
            runs.append(check(target).addCallback(_again, reactor, job["again_after"], check, target))
        else:
            runs.append(check(target))
    results: list[Result] = await defer.gatherResults(runs)
    if pinger is not None:
        pinger.close()
    for _ in range(SETTLE_TURNS):
        if not reactor.getDelayedCalls() and not selectables(reactor) - before:
            break
        await task.deferLater(reactor, 0, lambda: None)
    return {
        "results": [
            {"ok": r.ok, "reason": r.reason, "elapsed": r.elapsed, "data": dict(r.data) if r.data else None}
            for r in results
        ],
        "leftovers": {
            "delayed_calls": [repr(c) for c in reactor.getDelayedCalls()],
            "selectables": [repr(s) for s in selectables(reactor) - before],
        },
    }


def _again(_: Result, reactor: Any, delay: float, check: Checker, target: Target) -> defer.Deferred[Result]:
    later: defer.Deferred[None] = task.deferLater(reactor, delay, lambda: None)
    return later.addCallback(lambda _: check(target))


def main(reactor: Any, argument: str) -> defer.Deferred[None]:
    async def go() -> None:
        out = await run(reactor, json.loads(argument))
        print(json.dumps(out))

    return defer.ensureDeferred(go())


if __name__ == "__main__":
    task.react(main, sys.argv[1:2])
