"""The node's real snapshot writer in child processes, for the kill -9 test
(tests/process/test_snapshot_kill.py).

``python -m tests.support.snapwriter DIR SEED`` is a small fork server. It imports
everything once; then, for each line ``START`` it reads, it forks a *writer* that

- prints ``pid PID``;
- loads the snapshot in DIR into an empty store with `Snapshotter.load` (the node's
  restart path, which rolls back a write cut short) and prints ``ready COUNT``;
- then, for generation START + 1, START + 2, ... applies that generation's changes to the
  store (`apply`) and saves them with `Snapshotter.save` (the node's write path: the keys
  changed since the last save, in one transaction), printing ``gen N`` once the save has
  returned, until it is killed.

When the writer has ended the server prints ``exit STATUS`` (as `os.waitpid` gives it). A
forked writer starts in about a millisecond where a new interpreter takes a fifth of a
second, so a hundred kills take seconds. The server itself never opens the database.

Generation N's changes are a pure function of (SEED, N), and the store's clock stands at
`time_of(N)` while they are made, so the state after generations 1..N (keys, values,
versions, expiry times) is the same in every process that applies them: the test applies
them in memory (`Model`) and compares that with what the file holds after each kill.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

from gtmcluster.state import snapshot
from gtmcluster.state.snapshotter import Snapshotter
from gtmcluster.state.store import Store
from tests.support.inline import InlineThreads

ORIGIN = "writer"
KEYS = 1000
#: the clock of generation N is BASE + N * STEP seconds: binary fractions, so every
#: version, age and expiry time is exact in floating point whatever the process
BASE = 1_000_000.0
STEP = 0.125
TTL = 86_400.0
SHORT_TTL = 16 * STEP

Rows = dict[str, snapshot.Row]


def time_of(generation: int) -> float:
    return BASE + generation * STEP


class Clock:
    """The store's clock (and the wall clock): the time of the generation being made."""

    def __init__(self) -> None:
        self.now = time_of(0)

    def __call__(self) -> float:
        return self.now


def apply(store: Store, clock: Clock, seed: int, generation: int) -> None:
    """Generation *generation*: the records whose TTL has ended go (so a save also deletes
    rows), then 50 to 400 puts and deletions over `KEYS` keys, values of up to 400 bytes,
    some with a TTL of `SHORT_TTL` (gone 16 generations later) or `TTL`."""
    clock.now = time_of(generation)
    store.expire()
    rng = random.Random(seed * 1_000_003 + generation)
    for _ in range(rng.randint(50, 400)):
        key = f"admin/vs/k{rng.randrange(KEYS)}"
        roll = rng.random()
        if roll < 0.2:
            store.delete(key)
        else:
            value = {"state": "enabled", "g": generation, "pad": "x" * rng.randint(0, 400)}
            store.put(key, value, SHORT_TTL if roll < 0.3 else TTL if roll < 0.45 else None)


def state_of(store: Store, clock: Clock) -> Rows:
    """What the store holds, as the snapshot's rows by key (expiry as clock time)."""
    return {r[0]: r for r in snapshot.rows(store, clock.now, clock.now)}


class Model:
    """The state after each generation, made in memory by the same `apply`."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.clock = Clock()
        self.store = Store(ORIGIN, self.clock)
        self.at = 0
        self._states: dict[int, Rows] = {0: {}}

    def state(self, generation: int) -> Rows:
        """The state after *generation* (one at or after the oldest not `forget`-ten)."""
        known = self._states.get(generation)
        if known is not None:
            return known
        assert generation > self.at, f"generation {generation} was forgotten (the model is at {self.at})"
        while self.at < generation:
            self.at += 1
            apply(self.store, self.clock, self.seed, self.at)
        made = self._states[generation] = state_of(self.store, self.clock)
        return made

    def forget(self, before: int) -> None:
        """Drop the states of generations before *before* (they are not asked for again)."""
        for generation in [g for g in self._states if g < before]:
            del self._states[generation]


def read(directory: Path, generation: int) -> Rows:
    """The state in the snapshot file, loaded the node's way (`snapshot.read`) at the time
    of *generation*."""
    clock = Clock()
    clock.now = time_of(generation)
    store = Store(ORIGIN, clock)
    snapshot.read(directory / snapshot.FILENAME, store, clock.now)
    return state_of(store, clock)


def say(line: str) -> None:
    """One line to the test, in one write (atomic on a pipe)."""
    os.write(1, (line + "\n").encode())


def write_from(directory: Path, seed: int, start: int) -> None:
    """The writer: load the snapshot, then write generation after generation."""
    say(f"pid {os.getpid()}")
    reactor = InlineThreads()
    clock = Clock()
    clock.now = time_of(start)
    store = Store(ORIGIN, clock)
    snaps = Snapshotter(store, directory, reactor, clock)
    loaded = snaps.load()
    say(f"ready {loaded}")
    generation = start
    while True:
        generation += 1
        apply(store, clock, seed, generation)
        saved: list[object] = []
        snaps.save().addCallback(saved.append)  # the inline pool has run the write already
        if not isinstance(saved[0], int):  # the count written; None when the write failed
            raise RuntimeError(f"the save of generation {generation} failed")
        say(f"gen {generation}")


def serve(directory: Path, seed: int) -> None:
    while line := sys.stdin.readline():
        start = int(line)
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                write_from(directory, seed, start)
            except BaseException as e:
                os.write(2, f"writer failed: {e!r}\n".encode())
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        say(f"exit {status}")


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]))
