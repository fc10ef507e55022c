"""The in-process figures of bench/bigconfig.py: config load, one verdict change, a reconcile.

    .venv/bin/python bench/biginprocess.py --config DIR/big.yaml [--budget 120] [--samples 20]

Run by bench/bigconfig.py in a child process (so a phase that does not end is cut off by a
timeout, and its memory goes with it); it prints one JSON line per figure, as it gets it.
`--config` is a config written by `tests.support.bigconfig.write` (its shell beside it).

1. **Config load**: `config.load.load` of the whole config (parse, validate, resolve).
2. **A decision** with nothing kept (as every answer after a health change): the
   balancer's `decide` for 200 wide IPs, for a client of region isp000, one by one.
3. **One verdict change.** A `Node` (the member ``n1``) holds a verdict from every member
   on every server (5 x 5,000 = 25,000, all up, except two sample sets below). They are
   merged while the node runs the config's shell (same group, no servers), then the node is
   reloaded with the whole config (one evaluation of everything: timed too, as
   `evaluate_all_s`). Then, `--samples` times each, alternately, one peer verdict is merged
   (`node.store.merge(record)`) and the node's health read back (`node.health.snapshot`,
   `node.health.generation`), timed together:
   - *flips*: a server seen up by n5 alone (n1..n4 see it down) is now seen down by n5:
     it becomes unavailable, and the health generation grows (kept decisions are dropped);
   - *no flip*: a server seen up by all five is seen down by n3: it stays available (any
     member seeing it up is enough); only its reason changes.
   Each sample checks that the change is visible in what it read; one that is not is
   counted (`not_visible`) and its time is still shown.
4. **A reconcile in-process.** A fresh node (the shell, then the whole config, no verdicts)
   and its `Replicator` on a fake reactor (`task.Clock`) receive 25,000 verdicts (5,000 of
   each member, as a restarted member pulls them) as Publish batches made by the sync codec,
   one batch at a time, merged through `Replicator.receive_in_slices` exactly as a peer's
   Publish is: a slice of records per reactor turn. Each turn (the first slice inside the
   call, then each `TurnClock.turn`: the calls due when it starts, as a reactor's iteration
   runs them, each followed by reading the health snapshot) is timed: the total, the number
   of turns and the longest one are what a real reactor would spend and stand still for,
   without the network's noise.

Every phase stops when `--budget` seconds are used up and says how far it got. Before each
timed phase what is alive is frozen out of the garbage collector's reach (`settle`), as the
node's heap keeper does after a slow full collection: else the collector, walking millions
of config objects again and again, would be what is measured.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from twisted.internet import task  # noqa: E402

from gtmcluster.config.load import load  # noqa: E402
from gtmcluster.config.model import Config  # noqa: E402
from gtmcluster.dnsdata.zone import TYPE_A  # noqa: E402
from gtmcluster.health.checker import MIN_OBSERVATION_TTL  # noqa: E402
from gtmcluster.lb.context import Client  # noqa: E402
from gtmcluster.node import Node  # noqa: E402
from gtmcluster.runtime import heap  # noqa: E402
from gtmcluster.state.record import Record, Version  # noqa: E402
from gtmcluster.sync import codec  # noqa: E402
from gtmcluster.sync.link import Link  # noqa: E402
from gtmcluster.sync.replicator import Replicator  # noqa: E402

NODE = "n1"
UP = {"up": True, "reason": "connected"}
DOWN = {"up": False, "reason": "connection refused"}


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def rss() -> int:
    """This process's resident memory, bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class TurnClock(task.Clock):
    """A fake reactor that runs one turn at a time: `turn` runs the calls due when it
    starts, and leaves those they schedule for the next turn, as the reactor's iteration
    does (`task.Clock.advance` would run those too, in the same call)."""

    def turn(self) -> int:
        now = self.seconds()
        due = [call for call in self.calls if call.getTime() <= now]
        for call in due:
            if call in self.calls:  # not cancelled by an earlier one
                self.calls.remove(call)
                call.called = 1
                call.func(*call.args, **call.kw)
        return len(due)


class Versions:
    """Fresh versions per origin, as each member's hybrid clock would make them."""

    def __init__(self, clock: task.Clock):
        self.clock = clock
        self.logical: dict[str, int] = {}

    def next(self, origin: str) -> Version:
        n = self.logical.get(origin, 0) + 1
        self.logical[origin] = n
        return Version(int(self.clock.seconds() * 1000), n, origin)


def verdict(versions: Versions, vs: str, origin: str, value: dict[str, Any]) -> Record:
    clock = versions.clock
    return Record(f"obs/vs/{vs}/{origin}", value, versions.next(origin), MIN_OBSERVATION_TTL, clock.seconds())


def members_of(config: Config) -> list[str]:
    return [m.name for m in config.sync_group.members]


def one_verdict_change(big: Config, shell: Config, samples: int, budget: float) -> None:
    clock = task.Clock()
    clock.advance(time.time())
    versions = Versions(clock)
    members = members_of(big)
    servers = sorted(big.virtual_servers)
    flips = servers[:samples]
    steady = servers[samples : 2 * samples]
    node = Node(shell, NODE, clock.seconds)
    started = time.perf_counter()
    for vs in servers:
        for origin in members:
            value = DOWN if vs in flips and origin != members[-1] else UP
            node.store.merge(verdict(versions, vs, origin, value))
    emit(
        phase="verdict_change",
        step="filled",
        verdicts=len(servers) * len(members),
        seconds=time.perf_counter() - started,
    )
    settle()
    started = time.perf_counter()
    node.reload(big)
    snapshot = node.health.snapshot
    available = sum(1 for s in snapshot.vs.values() if s.available)
    emit(
        phase="verdict_change",
        step="evaluated",
        evaluate_all_s=time.perf_counter() - started,
        available=available,
        servers=len(servers),
        rss=rss(),
    )
    results: dict[str, list[float]] = {"flip": [], "no_flip": []}
    not_visible: dict[str, int] = {"flip": 0, "no_flip": 0}
    deadline = time.perf_counter() + budget
    for i in range(samples):
        for kind, vs, origin in (("flip", flips[i], members[-1]), ("no_flip", steady[i], members[2])):
            if time.perf_counter() > deadline:
                break
            before = node.health.snapshot.vs[vs]
            generation = node.health.generation
            record = verdict(versions, vs, origin, DOWN)
            t0 = time.perf_counter()
            node.store.merge(record)
            after = node.health.snapshot.vs[vs]
            now_generation = node.health.generation
            took = time.perf_counter() - t0
            results[kind].append(took)
            if kind == "flip":
                visible = not after.available and now_generation == generation + 1
            else:
                visible = after.available and after.reason != before.reason
            not_visible[kind] += 0 if visible else 1
            clock.advance(0.001)
    emit(
        phase="verdict_change",
        step="done",
        samples={k: len(v) for k, v in results.items()},
        median_ms={k: statistics.median(v) * 1000 for k, v in results.items() if v},
        max_ms={k: max(v) * 1000 for k, v in results.items() if v},
        not_visible=not_visible,
        complete=all(len(v) == samples for v in results.values()),
    )


def decide(big: Config, count: int = 200) -> None:
    """An answer's decision with nothing kept (every answer after a health change): the
    balancer's `decide` for *count* wide IPs, a client of region isp000 (topology prefers
    DC1), timed one by one."""
    clock = task.Clock()
    clock.advance(time.time())
    node = Node(big, NODE, clock.seconds)
    client_address = ipaddress.ip_address("127.77.0.1")
    client = Client(client_address, 32, client_address)
    names = sorted(big.wideips, key=str)[:count]
    times = []
    for name in names:
        t0 = time.perf_counter()
        node.balancer.decide(big.wideips[name], TYPE_A, client)
        times.append(time.perf_counter() - t0)
    emit(
        phase="decide",
        decisions=len(times),
        median_ms=statistics.median(times) * 1000,
        max_ms=max(times) * 1000,
        topology_records=len(big.topology.records),
    )


def reconcile(big: Config, shell: Config, budget: float) -> None:
    clock = TurnClock()
    clock.advance(time.time())
    versions = Versions(clock)
    members = members_of(big)
    node = Node(shell, NODE, clock.seconds)
    # as the node's service wires it: what records change is evaluated once per turn
    node.health.schedule = lambda flush: clock.callLater(0, flush)
    node.reload(big)
    replicator = Replicator(
        node.store,
        clock,
        node=NODE,
        group=big.sync_group.name,
        datacenter=node.member.datacenter,
        members=members,
        config_digest=big.digest,
    )
    # A stand-in for the peer's connection: the replicator reads only its name and state.
    channel = cast(Link, _Channel(members[1]))
    servers = sorted(big.virtual_servers)
    records = [verdict(versions, vs, origin, UP) for origin in members for vs in servers]
    # the peer's batches, encoded before the clock starts (the node only receives them)
    batches = [batch for batch, _ in codec.batches(records, clock.seconds())]
    settle()
    turns: list[float] = []
    merged = 0
    started = time.perf_counter()
    deadline = started + budget
    out_of_time = False
    for batch in batches:
        t0 = time.perf_counter()
        done = replicator.receive_in_slices(channel, batch, bulk=True)
        node.health.snapshot  # noqa: B018 - reading it is part of the turn (it may be computed lazily)
        turns.append(time.perf_counter() - t0)
        counted: list[int] = []
        done.addCallback(counted.append)
        while not counted:
            if time.perf_counter() > deadline:
                out_of_time = True
                break
            t0 = time.perf_counter()
            clock.turn()
            node.health.snapshot  # noqa: B018
            turns.append(time.perf_counter() - t0)
        if out_of_time:
            break
        merged += counted[0]
    total = time.perf_counter() - started
    held = node.store.kinds().get("obs", 0)
    ordered = sorted(turns)
    emit(
        phase="reconcile_inprocess",
        verdicts=len(records),
        merged=held,
        complete=not out_of_time and held == len(records),
        seconds=total,
        turns=len(turns),
        longest_turn_ms=ordered[-1] * 1000 if ordered else 0.0,
        p99_turn_ms=ordered[max(0, -(-len(ordered) * 99 // 100) - 1)] * 1000 if ordered else 0.0,
        turns_over_50ms=sum(1 for t in turns if t > 0.05),
        available=sum(1 for s in node.health.snapshot.vs.values() if s.available),
        rss=rss(),
    )


def settle() -> None:
    """Keep what is alive now out of later garbage collections, as a node does (its heap
    keeper freezes long-lived objects after a slow full collection: gtmcluster/runtime/heap.py);
    else every full collection walks the whole config, millions of objects, and the
    figures would be the collector's."""
    gc.collect()
    heap.freeze_now()


class _Channel:
    """What the replicator reads of a connection here (`sync.link.Link`): its name, and that
    it is established and not closed."""

    established = True
    closed = False

    def __init__(self, peer: str):
        self.peer = peer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, required=True, help="a config written by tests.support.bigconfig.write")
    p.add_argument("--budget", type=float, default=120.0, help="seconds each timed phase may take at most")
    p.add_argument("--samples", type=int, default=20, help="verdict changes of each kind")
    p.add_argument("--skip", default="", help="phases to leave out: decide, verdict_change, reconcile")
    args = p.parse_args()
    skip = set(args.skip.split(","))
    before = rss()
    started = time.perf_counter()
    big = load(args.config)
    emit(phase="config_load", seconds=time.perf_counter() - started, digest=big.digest, rss=rss(), rss_before=before)
    shell = load(args.config.with_name(f"shell-{args.config.name}"))
    settle()
    if "decide" not in skip:
        decide(big)
    if "verdict_change" not in skip:
        one_verdict_change(big, shell, args.samples, args.budget)
    if "reconcile" not in skip:
        reconcile(big, shell, args.budget)


if __name__ == "__main__":
    main()
