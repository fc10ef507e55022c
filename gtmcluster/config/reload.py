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
  (`load.build` is steps: `gtmcluster.runtime.slices`), starting on the first sections while the
  child still parses the big ones, so nothing else contends and no turn is long;
- the collector is paused meanwhile, and what was built is frozen when done (see
  `gtmcluster.runtime.gcpause`: its million young objects would otherwise be examined by the
  collections that follow, a 560 ms full collection at 5,000 servers);
- the old config, once replaced, is freed a part per turn (`free_in_turns`): all at once,
  its million objects take 25-40 ms to deallocate.
"""

from __future__ import annotations

import gc
from pathlib import Path

from twisted.internet import defer
from twisted.logger import Logger

from gtmcluster.config.load import SECTION_ORDER, build, read_text
from gtmcluster.config.model import Config
from gtmcluster.config.problems import ConfigError
from gtmcluster.config.source.yamlchild import MEMORY, Child, Memory, Parsed
from gtmcluster.config.source.yamlsrc import Resplit
from gtmcluster.runtime import slices
from gtmcluster.runtime.gcpause import collection_paused
from gtmcluster.runtime.reactors import Reloading, Time, as_time

log = Logger()


def read(reactor: Reloading, path: str, own_dir: Path | None = None) -> defer.Deferred[Config]:
    """Read, check and build the config at *path* beside the running *reactor* (*own_dir*:
    *path* is a bundle's, see `load.build`); fails with `ConfigError` listing every problem."""

    async def reading() -> Config:
        text = read_text(path)  # (a few milliseconds for megabytes)
        with collection_paused():
            try:
                config, parsed = await _building(reactor, path, own_dir, text, split=True, memory=MEMORY)
            except Resplit as e:
                log.info("{path} is read whole: {why}", path=path, why=e, event="config_read_whole")
                config, parsed = await _building(reactor, path, own_dir, text, split=False, memory=None)
            MEMORY.keep(parsed)
            gc.freeze()
        return config

    return defer.ensureDeferred(reading())


async def _building(
    reactor: Reloading, path: str, own_dir: Path | None, text: str, split: bool, memory: Memory | None
) -> tuple[Config, Parsed]:
    """The config of *text*, built beside *reactor* from what its YAML child parsed (at
    module level: a nested function that calls itself is a reference cycle, and the
    `gc.freeze` after a reload would keep it for good)."""
    child = Child(reactor, path, text, SECTION_ORDER, split, memory)
    parsed = await child.start()
    try:
        return await slices.run(build(path, parsed, own_dir), as_time(reactor)), parsed
    except ConfigError:
        if not parsed.reused:
            raise
    # a problem, and sections taken from memory have no lines: again, all read
    return await _building(reactor, path, own_dir, text, split, None)


def free_in_turns(reactor: Time, config: Config) -> None:
    """Let go of *config* (replaced: nothing else uses it) over the next reactor turns,
    its biggest parts one per turn, so that freeing it holds no turn long."""
    parts: list[object] = [
        config,  # first: the parts below are still held here
        config.wideips_of,
        config.wideips,
        config.wideip_names,
        config.pools,
        config.virtual_servers,
        config.topology,
        config.regions,
        config.zones,
    ]

    reactor.callLater(0, _drop_one, reactor, parts)


def _drop_one(reactor: Time, parts: list[object]) -> None:
    """One part let go of, the next in the next turn (a module-level function: a nested one
    that schedules itself by name would be a reference cycle holding *parts*)."""
    parts.pop(0)
    if parts:
        reactor.callLater(0, _drop_one, reactor, parts)
