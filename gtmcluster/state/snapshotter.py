"""The service that keeps the store on disk (`state.snapshot` is the file): it loads the
snapshot when the node starts, writes the keys changed since the last write every few
seconds, and once more at stop."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer, task, threads
from twisted.logger import Logger

from gtmcluster.state import snapshot
from gtmcluster.state.loading import Loading
from gtmcluster.state.record import Record
from gtmcluster.state.store import Store

log = Logger()


def _turns(make: Callable[[int], bool], count: int) -> Iterator[None]:
    """Steps of *count* rows each, until *make* says none are left."""
    while make(count):
        yield None


class Snapshotter(Service):
    """Loads the snapshot at start; writes it every `interval` seconds when changed, and at stop.

    With *later* (a key prefix: the path records), `load` reads everything else, and the
    records under *later* are read after the node starts answering (see `state.loading`);
    `when_loaded` fires once all of it is in the store (or the rest turned out damaged)."""

    def __init__(
        self,
        store: Store,
        directory: Path,
        reactor: Any,
        wall: Callable[[], float],
        interval: float = 10.0,
        later: str | None = None,
        settle: Callable[[], object] | None = None,
        cooperator: task.Cooperator | None = None,
    ):
        self.store = store
        self.path = directory / snapshot.FILENAME
        self.reactor = reactor
        self.wall = wall
        self.interval = interval
        self.later = later
        self.settle = settle  # called now and then while the later part loads (see state.loading)
        self.cooperator = cooperator
        self._dirty: set[str] = set()  # keys changed since the last write
        self._writing: defer.Deferred[Any] | None = None
        self._loop: task.LoopingCall | None = None
        #: the later part still being read, and who waits for the end of it
        self._loading: Loading | None = None
        self._loaded_at_start = 0
        self._waiting: list[defer.Deferred[None]] = []
        self.loaded = True
        #: records of the file skipped on loading, by (kind, reason) (see `Reader`)
        self.refused: Counter[tuple[str, str]] = Counter()
        store.subscribe(self._changed)

    def _changed(self, record: Record) -> None:
        self._dirty.add(record.key)

    def load(self) -> int:
        """Merge the snapshot into the store (all of it, or all but the records under
        `later`, which follow once the service runs); how many records came in now. A
        file that cannot be trusted is moved aside (see `set_aside`) and nothing is
        loaded: the node starts anyway, empty, and its peers send it their state when
        they connect."""
        interrupted = os.path.lexists(f"{self.path}-journal")
        reader = None
        try:
            reader = snapshot.Reader.open(self.path, self.later, self.wall, self.refused)
            loaded = 0 if reader is None else reader.first(self.store)
        except snapshot.Unreadable as e:
            if reader is not None:
                reader.close()
            reader = None
            self._set_aside(str(e), "starting with an empty store, which the sync group's peers fill")
            loaded = 0
        else:
            if interrupted:
                log.info(
                    "the snapshot write under way when the node stopped was rolled back: "
                    "{path} holds the write before it",
                    path=str(self.path),
                )
        self._dirty.clear()
        if reader is not None and not reader.done:
            self.loaded = False
            self._loaded_at_start = loaded
            self._loading = Loading(
                reader,
                self.store,
                self.reactor,
                self._is_writing,
                self._damaged,
                self._finished,
                self.settle,
                self.cooperator,
            )
            log.info(
                "read {count} records from {path}; answering while the other {rest} (under {later}) load",
                count=loaded,
                path=str(self.path),
                rest=reader.total,
                later=self.later,
                event="snapshot_loading",
            )
            return loaded
        if reader is not None:
            reader.close()
            self._say_skipped()
        if loaded:
            log.info("loaded {count} records from {path}", count=loaded, path=str(self.path), event="snapshot_loaded")
        return loaded

    def _say_skipped(self) -> None:
        """Log how many records loading skipped, by kind and reason (when any were)."""
        if not self.refused:
            return
        log.warn(
            "skipped {count} records of {path} that this version does not take ({detail}); the rest is loaded",
            count=sum(self.refused.values()),
            path=str(self.path),
            detail=", ".join(f"{kind} {reason}: {n}" for (kind, reason), n in sorted(self.refused.items())),
            event="snapshot_records_skipped",
        )

    @property
    def loading(self) -> dict[str, int] | None:
        """While the later part is read: rows read of those it held (for status)."""
        return None if self._loading is None else self._loading.progress

    def when_loaded(self) -> defer.Deferred[None]:
        """Fires once the whole snapshot is in the store (at once if it is)."""
        if self.loaded:
            return defer.succeed(None)
        waiter: defer.Deferred[None] = defer.Deferred()
        self._waiting.append(waiter)
        return waiter

    def _is_writing(self) -> bool:
        return self._writing is not None

    def _finished(self, count: int) -> None:
        loading, self._loading = self._loading, None
        took = 0.0 if loading is None else self.reactor.seconds() - loading.started
        log.info(
            "loaded {count} records from {path} ({later} ones in the {seconds:.1f} s after answering began)",
            count=self._loaded_at_start + count,
            path=str(self.path),
            later=count,
            seconds=took,
            event="snapshot_loaded",
        )
        self._say_skipped()
        self._done_loading()

    def _damaged(self, reason: str) -> None:
        """The part read after answering began is damaged: what was read stays; the file is
        moved aside, the next write saves the whole store to a new one, and the sync group's
        peers bring the rest when this node reconciles with them."""
        self._loading = None
        self._set_aside(
            reason,
            f"the {len(self.store)} records read stay, the sync group's peers bring the rest, "
            "and the next write saves the whole store to a new file",
        )
        self._dirty = {record.key for record in self.store.all_records()}
        self._done_loading()

    def _done_loading(self) -> None:
        self.loaded = True
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            waiter.callback(None)

    def _set_aside(self, reason: str, then: str) -> None:
        """Move the damaged file aside (on the reactor thread: a rename and a directory sync,
        once per damaged file) and say so, and what happens *then*."""
        try:
            moved = snapshot.set_aside(self.path, self.wall())
        except OSError as e:
            log.error(
                "state snapshot {path} is unreadable ({reason}) and could not be moved aside ({error}); {then}",
                path=str(self.path),
                reason=reason,
                error=str(e),
                then=then,
            )
            return
        log.warn(
            "state snapshot {path} is unreadable ({reason}): moved it aside to {moved}; {then}",
            path=str(self.path),
            reason=reason,
            moved=str(moved),
            then=then,
        )

    def startService(self) -> None:
        super().startService()
        if self._loading is not None:
            self._loading.start()
        self._loop = task.LoopingCall(self.save_if_changed)
        self._loop.clock = self.reactor
        self._loop.start(self.interval, now=False)

    def save_if_changed(self) -> defer.Deferred[Any] | None:
        if not self._dirty or self._writing is not None:
            return None
        return self.save()

    def save(self) -> defer.Deferred[Any]:
        """Write the keys changed since the last write (in a thread). The rows are made on
        the reactor's thread, `ROWS_PER_TURN` per turn when there are more (the whole
        store, after a damaged file was set aside, is millions of rows)."""
        dirty, self._dirty = self._dirty, set()
        data: list[snapshot.Row] = []
        deleted: list[str] = []
        keys = iter(dirty)

        def make(count: int) -> bool:
            """Rows of the next *count* keys; whether keys are left."""
            wall, local = self.wall(), self.store.clock()
            for key in itertools.islice(keys, count):
                record = self.store.raw(key)
                made = snapshot.row(record, wall, local) if record is not None else None
                if made is None:
                    deleted.append(key)
                else:
                    data.append(made)
            return len(data) + len(deleted) < len(dirty)

        def write_rows(_: object = None) -> defer.Deferred[Any]:
            return threads.deferToThreadPool(
                self.reactor,
                self.reactor.getThreadPool(),
                snapshot.write_beside,
                self.path,
                data,
                self.store.origin,
                deleted,
            )

        if len(dirty) <= snapshot.ROWS_PER_TURN:
            make(len(dirty))
            d = write_rows()
        else:
            d = self._row_cooperator().cooperate(_turns(make, snapshot.ROWS_PER_TURN)).whenDone()
            d.addCallback(write_rows)

        def done(result: Any) -> Any:
            self._writing = None
            return result

        def failed(failure: Any) -> None:
            self._dirty |= dirty  # try these again next time
            if snapshot.damaged(failure.value):
                # the file went bad under us: start a new one, with everything in it
                if self._loading is not None:  # and what was not read yet comes from peers
                    self._loading.stop()
                    self._damaged(str(failure.value))
                    return
                self._set_aside(str(failure.value), "the next write saves the whole store to a new file")
                self._dirty = {record.key for record in self.store.all_records()}
                return
            log.failure("could not write the state snapshot {path}", failure, path=str(self.path))

        d.addBoth(done)
        d.addErrback(failed)
        self._writing = d
        return d

    def _row_cooperator(self) -> task.Cooperator:
        """One step per reactor turn."""
        return task.Cooperator(
            terminationPredicateFactory=lambda: lambda: True, scheduler=lambda step: self.reactor.callLater(0, step)
        )

    def flush(self) -> defer.Deferred[bool]:
        """Write every change made so far now, without waiting for the interval; fires with
        whether it is on disk. A write in progress is waited for first (it may hold older
        values of the same keys). An acknowledged admin write waits for this: a node killed
        right after its answer must not come back without it."""

        def after_current(_: object) -> defer.Deferred[bool] | bool:
            if self._writing is not None:  # another write began meanwhile: wait for it too
                return self.flush()
            if not self._dirty:
                return True
            return self.save().addCallback(lambda written: written is not None)

        return self._after_current().addCallback(after_current)

    def _after_current(self) -> defer.Deferred[None]:
        """Fires when the write in progress (if any) is done, leaving its result alone."""
        if self._writing is None:
            return defer.succeed(None)
        waiter: defer.Deferred[None] = defer.Deferred()

        def done(result: Any) -> Any:
            waiter.callback(None)
            return result

        self._writing.addBoth(done)
        return waiter

    def stopService(self) -> defer.Deferred[Any]:
        super().stopService()
        if self._loading is not None:
            self._loading.stop()  # the records not read yet stay on disk, untouched
            self._loading = None
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        pending = self._writing if self._writing is not None else defer.succeed(None)
        return pending.addCallback(lambda _: self.save())
