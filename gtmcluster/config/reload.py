"""Reading the config again while the node runs, without holding up its answers.

A reload of a big config (5,000 virtual servers, 20,000 topology records) is seconds of
work, and the reactor must keep answering DNS and running 1,000 health checks a second
meanwhile. Work in a thread beside it does not do: the two share the GIL, the reactor
gives it up at every system call (thousands a second) and waits for it each time (the
convoy effect: answers waited up to 384 ms during a reload, measured). So:

- the YAML is parsed in a child process (`yamlchild`), which sends it section by section
  as small pickles, read by the reactor (each loads in milliseconds); the child cuts the
  text at its top-level keys (`yamlsplit`) and composes each section in its turn, so the
  first come in 0.2 s rather than after the whole file is composed (0.8-1.1 s); a file
  it finds it cannot cut after all is read again whole;
- the model is built in the reactor thread itself, a few milliseconds per turn
  (`load.build` is steps: `gtmcluster.slices`), starting on the first sections while the
  child still parses the big ones, so nothing else contends and no turn is long;
- the collector is paused meanwhile, and what was built is frozen when done (see
  `gtmcluster.gcpause`: its million young objects would otherwise be examined by the
  collections that follow, a 560 ms full collection at 5,000 servers);
- the old config, once replaced, is freed a part per turn (`free_in_turns`): all at once,
  its million objects take 25-40 ms to deallocate.
"""

from __future__ import annotations

import gc
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from gtmcluster import slices
from gtmcluster.config.load import SECTION_ORDER, build, read_text
from gtmcluster.config.model import Config
from gtmcluster.config.yamlchild import Child
from gtmcluster.config.yamlsrc import Resplit
from gtmcluster.gcpause import collection_paused

log = Logger()

#: seconds of building per reactor turn: three times `slices.BUDGET`, as a reload is
#: about 1.5 s of work, and a busy member's turns (1,000 checks a second, answers) take
#: 10 ms of other work: at 5 ms a turn, the reload took 4.6-4.9 s; at 15 ms, XX s, and
#: no turn holds answers up beyond 25 ms
BUDGET = 0.015


def read(reactor: Any, path: str) -> defer.Deferred[Config]:
    """Read, check and build the config at *path* beside the running *reactor*; fails
    with `ConfigError` listing every problem."""

    async def reading() -> Config:
        text = read_text(path)  # (a few milliseconds for megabytes)
        with collection_paused():
            try:
                config = await building(text, split=True)
            except Resplit as e:
                log.info("{path} is read whole: {why}", path=path, why=e, event="config_read_whole")
                config = await building(text, split=False)
            gc.freeze()
        return config

    async def building(text: str, split: bool) -> Config:
        parsed = await Child(reactor, path, text, SECTION_ORDER, split).start()
        return await slices.run(build(path, parsed), reactor, BUDGET)

    return defer.ensureDeferred(reading())


def free_in_turns(reactor: Any, config: Config) -> None:
    """Let go of *config* (replaced: nothing else uses it) over the next reactor turns,
    its biggest parts one per turn, so that freeing it holds no turn long."""
    parts: list[object] = [
        config,  # first: the parts below are still held here
        config.wideips_of,
        config.wideips,
        config.pools,
        config.virtual_servers,
        config.topology,
        config.regions,
        config.zones,
    ]

    def drop() -> None:
        parts.pop(0)
        if parts:
            reactor.callLater(0, drop)

    reactor.callLater(0, drop)
