"""The rest of the snapshot, read while the node answers: path records in slices.

A full proximity table is millions of path records: read whole, a snapshot takes about a
minute to load. So the node reads every other record first (health verdicts, admin and
held states, persistence records, probe requests: what answers need) before it answers
(`snapshot.Reader.first`), and the path records afterwards, `SLICE` rows per reactor
turn, so DNS queries are answered in between. Meanwhile nothing sees the store without
the part still on disk:

- a key of that part that the store does not hold yet is read from the snapshot at once
  (a lookup in the key's index) when anything asks for it or merges it (`Store.missing`):
  a decision that needs the path of an LDNS whose slice is still to come reads the path
  the snapshot holds, and a record arriving from a peer meanwhile meets the saved one and
  the newer wins, as it would have in a store loaded whole. Answers are those of a node
  that has loaded everything;
- records come in with `Store.load`: no listener hears of them, so nothing loaded is
  relayed to peers, marked for the next snapshot write or reacted to one by one;
- whatever must see the whole store waits for `Snapshotter.when_loaded`: anti-entropy
  (comparing digests of a half-loaded store would pull or offer most of the table) and
  the feed of answering workers.

Slices are not read while a snapshot write is committing (readers and a committing writer
exclude each other in SQLite, and the reactor must not wait); a key looked up during one
waits for its commit, milliseconds. A slice or a lookup that finds the file damaged (SQLite
reports it, or a row is malformed) ends the load: what was read stays, the file is set
aside, and the group's peers bring the rest when the node reconciles (see `Snapshotter`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gtmcluster.state.store import Store

log = Logger()

#: rows of the later part read per step (1-3 ms of work on the development machine); steps
#: run one after another until `TURN` seconds have gone, then the reactor turns
SLICE = 100
TURN = 0.005
#: seconds between looks while a snapshot write is under way
WRITE_WAIT = 0.01
#: rows read between two calls of `settle` (the node collects garbage and freezes what the
#: load brought in, so no collection examines millions of records: see gtmcluster.runtime.heap)
SETTLE_ROWS = 5_000


class Damaged(Exception):
    """What is being read turned out damaged; the message says why."""


class Source(Protocol):
    """The part still to read (`snapshot.Reader`); its methods raise `Damaged`."""

    total: int  # rows it held at the start
    done_rows: int  # rows read
    done: bool  # every row read

    def next_slice(self, store: Store, count: int) -> int: ...

    def fetch(self, store: Store, key: str) -> bool: ...

    def close(self) -> None: ...


class Loading:
    """Reads *reader*'s later part into *store* across reactor turns, once `start`ed.

    *writing* says whether a snapshot write is under way; *damaged* is called (once, on a
    later turn) with the reason when the file turns out damaged (or reading fails in a way
    it should not: that is logged, and handled alike); *finished* is called with how many
    records the part brought in when every row is read. *settle* is called every
    `SETTLE_ROWS` rows, and *cooperator* runs the steps (by default `TURN` seconds of them
    per reactor turn)."""

    def __init__(
        self,
        reader: Source,
        store: Store,
        reactor: IReactorTime,
        writing: Callable[[], bool],
        damaged: Callable[[str], None],
        finished: Callable[[int], None],
        settle: Callable[[], object] | None = None,
        cooperator: task.Cooperator | None = None,
        rows: int = SLICE,
    ):
        self.reader = reader
        self.store = store
        self.reactor = reactor
        self.writing = writing
        self.damaged = damaged
        self.finished = finished
        self.settle = settle
        self.cooperator = cooperator or task.Cooperator(
            terminationPredicateFactory=lambda: _Timer(TURN), scheduler=lambda step: reactor.callLater(0, step)
        )
        self.rows = rows
        self.started = reactor.seconds()
        #: records the later part brought in: by slices, and by lookups ahead of them
        self.merged = 0
        self.fetched = 0
        self._task: task.CooperativeTask[Iterator[defer.Deferred[None] | None]] | None = None
        self._over = False
        store.missing = self.fetch

    @property
    def progress(self) -> dict[str, int]:
        """Rows of the later part read, of those it held when the node started."""
        total = self.reader.total
        return {"done": min(self.reader.done_rows, total), "total": total}

    def start(self) -> None:
        if not self._over and self._task is None:
            self._task = self.cooperator.cooperate(self._steps())
            self._task.whenDone().addErrback(lambda f: f.trap(task.TaskStopped))

    def stop(self) -> None:
        """Stop reading (the node stops): the file is closed, nothing more comes in."""
        self._end()

    def _end(self) -> None:
        self._over = True
        running, self._task = self._task, None
        if running is not None:
            with contextlib.suppress(task.TaskDone):
                running.stop()
        if self.store.missing == self.fetch:
            self.store.missing = None
        self.reader.close()

    def _steps(self) -> Iterator[defer.Deferred[None] | None]:
        unsettled = 0
        while True:
            if self.writing():
                yield task.deferLater(self.reactor, WRITE_WAIT, lambda: None)
                continue
            try:
                self.merged += self.reader.next_slice(self.store, self.rows)
            except Damaged as e:
                self._fail(str(e))
                return
            except Exception as e:
                log.failure("reading the snapshot's records failed")
                self._fail(f"reading it failed ({e!r})")
                return
            unsettled += self.rows
            if self.settle is not None and (unsettled >= SETTLE_ROWS or self.reader.done):
                unsettled = 0
                self.settle()
            if self.reader.done:
                break
            yield None
        self._task = None  # done: nothing to stop
        self._end()
        self.finished(self.merged + self.fetched)

    def fetch(self, key: str) -> None:
        """`Store.missing`: read *key* now if it is in the part still on disk."""
        if self._over:
            return
        try:
            if self.reader.fetch(self.store, key):
                self.fetched += 1
        except Exception as e:
            # called from inside a decision or a merge: the damage is handled on a later turn
            if not isinstance(e, Damaged):
                log.failure("reading {key} from the snapshot failed", key=key)
            self._end()
            self.reactor.callLater(0, self.damaged, str(e) if isinstance(e, Damaged) else f"reading it failed ({e!r})")

    def _fail(self, reason: str) -> None:
        self._task = None  # ending from inside the task
        self._end()
        self.damaged(reason)


class _Timer:
    """True once *seconds* have gone since it was made (Twisted's own cooperator uses a
    timer like it): the time of one reactor turn's steps."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def __call__(self) -> bool:
        return time.monotonic() >= self.end
