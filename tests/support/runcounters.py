"""Read a link's counters over HTTP with the real reactor, in a process of its own, as a
node's link traffic poller does (`probe.httpcounters`), for tests.

    python -m tests.support.runcounters '{"source": {...}, "reads": 2, "pause": 0.5, "timeout": 2}'

The source is `config.monitoring.HttpCounterSource` as JSON: url, format, and received/sent
(lists of [metric, {labels}]) or proxy/server. Between two readings, when "poke" names a
URL, it is fetched (traffic through the link). Prints one JSON line: each reading's
counters, or its failure's reason.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any

from twisted.internet import defer, task, threads

from gtmcluster.config.monitoring import HttpCounterSource, LoadSource, Sample
from gtmcluster.probe.httpcounters import HttpCounterReader


def source_of(spec: dict[str, Any]) -> HttpCounterSource:
    def samples(items: list[Any]) -> tuple[Sample, ...]:
        return tuple(Sample(name, tuple(sorted(labels.items()))) for name, labels in items)

    load = LoadSource(
        spec.get("format", "prometheus"), proxy=spec.get("proxy", ""), server=spec.get("server", "FRONTEND")
    )
    return HttpCounterSource(spec["url"], load, samples(spec.get("received", [])), samples(spec.get("sent", [])))


async def run(reactor: Any, job: dict[str, Any]) -> None:
    reader = HttpCounterReader(reactor, source_of(job["source"]), job.get("timeout", 2.0))
    out: list[dict[str, Any]] = []
    for i in range(job.get("reads", 1)):
        if i and job.get("poke"):
            await threads.deferToThread(lambda: urllib.request.urlopen(job["poke"], timeout=5).read())
        if i and job.get("pause"):
            await task.deferLater(reactor, job["pause"], lambda: None)
        try:
            got = await reader.read()
            out.append({"in": got.in_octets, "out": got.out_octets})
        except Exception as e:
            out.append({"error": str(e)})
    print(json.dumps(out))


def main() -> None:
    job = json.loads(sys.argv[1])
    task.react(lambda reactor: defer.ensureDeferred(run(reactor, job)))


if __name__ == "__main__":
    main()
