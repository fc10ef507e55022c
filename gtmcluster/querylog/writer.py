"""The query log's queue, its file and the writer between them.

The answer paths do as little as they can: the transport (`dns.server`) appends one tuple
per query to a bounded `QueryQueue` (when the log is on; when it is off the only cost is
the check that it is None), with what the answer path returned of which wide IP decided
and how (`dns.responder.Answered`: the fast path's kept tally, the general path's
decision's).
Past `queue` entries waiting, a query is not queued but counted in
``QueryStats.query_log_dropped``: answering never waits for the log.

Every `FLUSH_INTERVAL` the `QueryLogWriter` takes up to `MAX_BATCH` queued entries,
encodes them on the reactor (`Encoder`: about 2 us a record, so a few milliseconds a
batch) and hands the frames to a thread of the reactor's pool, which writes them to the
`LogFile`; one write at a time, so records stay in order (encoding goes on meanwhile,
bounded like the queue), and a slow disk only makes the queue fill (and then drop), never
the reactor wait. Encoding in the thread as well was
measured to cost more CPU a static answer (bench/querylog.py, docs/query-log.md): the
thread and the reactor then trade the GIL back and forth.

The file itself, its rotation, whose files it may touch and how a full disk is met, are
`logfile.LogFile`'s. A write the file takes only in part (`logfile.Unwritten`: a full
disk, a file in the way the log did not write) counts what was written and what was lost
(``QueryStats.query_log_failed``), logs the reason once while it lasts (no traceback: it is
the disk or the folder, not a bug), and the next batch tries again.
"""

from __future__ import annotations

import functools
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from gtmcluster.config.dnsserver import QueryLog
from gtmcluster.querylog import dnstap
from gtmcluster.querylog.logfile import LogFile, Unwritten
from gtmcluster.runtime.reactors import Threads, to_pool
from gtmcluster.runtime.stats import QueryStats, Tally

log = Logger()

#: seconds between batches
FLUSH_INTERVAL = 0.1
#: entries encoded in one turn of the reactor at most (a few milliseconds); a longer queue
#: is taken in several turns, the next as soon as the previous batch is written
MAX_BATCH = 2000

#: a query as queued: (when it came, the client's (address, port, ...), our (address, port),
#: dnstap.UDP or dnstap.TCP, the query's bytes, the response's bytes or None, what decided)
Entry = tuple[float, tuple[Any, ...], tuple[str, int], int, bytes, bytes | None, Tally | None]


class QueryQueue:
    """The bounded queue the transports append to (`add`)."""

    def __init__(self, limit: int, stats: QueryStats, clock: Callable[[], float] = time.time):
        self.limit = limit
        self.stats = stats
        self.clock = clock
        self.entries: deque[Entry] = deque()

    def add(
        self,
        client: tuple[Any, ...],
        local: tuple[str, int],
        protocol: int,
        query: bytes,
        reply: bytes | None,
        note: Tally | None = None,
    ) -> None:
        """Queue the query *query* from *client* to *local*, its *reply* (None: none) and
        what decided it (*note*: a wide IP's `Tally`, None when none did)."""
        entries = self.entries
        if len(entries) >= self.limit:
            self.stats.query_log_dropped += 1
            return
        entries.append((self.clock(), client, local, protocol, query, reply, note))

    def take(self, limit: int | None = None) -> Sequence[Entry]:
        """What is queued, oldest first, *limit* entries at most (they leave the queue)."""
        entries = self.entries
        if limit is None or len(entries) <= limit:
            self.entries = deque()
            return entries
        popleft = entries.popleft
        return [popleft() for _ in range(limit)]


@functools.lru_cache(maxsize=4096)
def _packed(address: str) -> tuple[int, bytes]:
    return dnstap.packed(address)


@functools.lru_cache(maxsize=4096)
def _extra(note: Tally) -> bytes:
    wideip, pool, slot, method, members = note
    return dnstap.encode_extra(dnstap.Decided(wideip, pool, slot, method, members))


def record_of(entry: Entry, identity: bytes = b"", version: bytes = b"") -> dnstap.Record:
    """The dnstap record of a queued query (what `Encoder` writes for it)."""
    when, client, local, protocol, query, reply, note = entry
    family, query_address = _packed(client[0])
    _, response_address = _packed(local[0])
    seconds = int(when)
    moment = (seconds, min(int((when - seconds) * 1e9), 999_999_999))
    return dnstap.Record(
        type=dnstap.AUTH_QUERY if reply is None else dnstap.AUTH_RESPONSE,
        family=family,
        protocol=protocol,
        query_address=query_address,
        query_port=int(client[1]),
        response_address=response_address,
        response_port=int(local[1]),
        query_time=moment,
        query_message=query,
        # (answered as it came: the node answers a query in one go, in microseconds)
        response_time=None if reply is None else moment,
        response_message=reply,
        identity=identity,
        version=version,
        extra=b"" if note is None else _extra(note),
    )


#: what an `Encoder` keeps at most of each kind of part before starting again
MAX_KEPT = 10_000


def _padded(n: int, size: int) -> bytes:
    """*n* as a protobuf varint of exactly *size* bytes (continuation bits on the leading
    ones: a longer form than needed, which protobuf readers take as the same number), so
    ports and seconds take the same room in every record."""
    out = bytearray()
    for _ in range(size - 1):
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    if n > 0x7F:
        raise ValueError(f"{n} does not fit {size} varint bytes")
    out.append(n)
    return bytes(out)


class Encoder:
    """Encodes queued entries as Frame Streams data frames of dnstap records, the records
    `record_of` describes (`dnstap.decode` reads them back the same), with the fields in
    another order and the port and seconds as fixed-size varints. This runs for every query
    logged, so a record is one `struct` pack: everything that is the same for the queries of
    one client address to one of our addresses, with one note and the same message sizes, is
    kept as the constant part of that pack (the frame and message lengths too), and only the
    messages, the port and the time are put in per query."""

    def __init__(self, identity: bytes = b"", version: bytes = b""):
        self.first = dnstap.head(identity, version)
        #: (client address, ours, transport, note, query size, reply size or -1) -> the pack
        #: and its constant parts
        self._shapes: dict[tuple[Any, ...], tuple[Callable[..., bytes], bytes, bytes]] = {}
        self._ports: dict[int, bytes] = {}
        self._second = -1
        self._times = (b"", b"")

    def _shape(self, key: tuple[Any, ...]) -> tuple[Callable[..., bytes], bytes, bytes]:
        client, local, protocol, note, query_size, reply_size = key
        family, query_address = _packed(client)
        kind = dnstap.AUTH_QUERY if reply_size < 0 else dnstap.AUTH_RESPONSE
        fixed = dnstap.fixed_fields(kind, family, protocol, query_address, _packed(local[0])[1], local[1])
        query_head = fixed + b"\x52" + dnstap.varint(query_size)  # 10 query_message
        reply_head = b"" if reply_size < 0 else b"\x72" + dnstap.varint(reply_size)  # 14 response_message
        # after the messages: query_port (4 bytes), query_time (7 + 4), response_time (7 + 4)
        tail = 4 + 11 + (11 if reply_size >= 0 else 0)
        message = len(query_head) + query_size + len(reply_head) + max(reply_size, 0) + tail
        outer = self.first + (dnstap.extra_field(_extra(note)) if note is not None else b"")
        outer += b"\x78\x01\x72" + dnstap.varint(message)  # 15 type MESSAGE, 14 message
        prefix = (len(outer) + message).to_bytes(4, "big") + outer + query_head
        if reply_size < 0:
            layout = struct.Struct(f"<{len(prefix)}s{query_size}s4s7sI")
        else:
            layout = struct.Struct(f"<{len(prefix)}s{query_size}s{len(reply_head)}s{reply_size}s4s7sI7sI")
        return layout.pack, prefix, reply_head

    def frames(self, entries: Iterable[Entry]) -> list[bytes]:
        shapes = self._shapes
        ports = self._ports
        out = []
        for when, client, local, protocol, query, reply, note in entries:
            key = (client[0], local, protocol, note, len(query), -1 if reply is None else len(reply))
            shape = shapes.get(key)
            if shape is None:
                if len(shapes) >= MAX_KEPT:
                    shapes.clear()
                shape = shapes[key] = self._shape(key)
            port = ports.get(client[1])
            if port is None:
                port = ports[client[1]] = b"\x30" + _padded(client[1], 3)  # 6 query_port
            seconds = int(when)
            if seconds != self._second:
                self._second = seconds
                at = _padded(seconds, 5)
                self._times = (b"\x40" + at + b"\x4d", b"\x60" + at + b"\x6d")  # 8/9, 12/13
            nanoseconds = int((when - seconds) * 1e9)  # (< 1e9: when - seconds < 1)
            pack, prefix, reply_head = shape
            if reply is None:
                out.append(pack(prefix, query, port, self._times[0], nanoseconds))
            else:
                query_time, response_time = self._times
                out.append(
                    pack(prefix, query, reply_head, reply, port, query_time, nanoseconds, response_time, nanoseconds)
                )
        return out


def frames_of(entries: Iterable[Entry], identity: bytes = b"", version: bytes = b"") -> list[bytes]:
    """The Frame Streams data frames of *entries*."""
    return Encoder(identity, version).frames(entries)


def in_pool(reactor: Threads) -> Callable[[Callable[[], None]], defer.Deferred[None]]:
    """Runs a call in the reactor's thread pool."""
    return lambda f: to_pool(reactor, f)


class QueryLogWriter:
    """Every `FLUSH_INTERVAL` encodes what is queued, `MAX_BATCH` entries a turn of the
    reactor, and has the frames written to the file by *run* (a thread of the reactor's pool;
    tests run it in place), one write at a time. Encoding goes on while a write is under way
    (what it encodes waits for the next write, which takes it all), so a slow round trip to
    the thread does not slow the log down; the encoded frames waiting are bounded like the
    queue (``queue`` entries), and past that the queue is not taken from and fills."""

    #: encode the records in the writing thread (True) or on the reactor before handing the
    #: frames over (False); bench/querylog.py measures both: on the reactor cost less for static
    #: answers (the thread holds the GIL for the encoding, and trades it with the reactor)
    encode_in_thread = False

    def __init__(
        self,
        settings: QueryLog,
        stats: QueryStats,
        clock: IReactorTime,
        run: Callable[[Callable[[], None]], defer.Deferred[None]],
        identity: str = "",
        wall: Callable[[], float] = time.time,
    ):
        self.settings = settings
        self.stats = stats
        self.clock = clock
        self.run = run
        #: (used on the reactor, or with encode_in_thread by one write at a time)
        self.encoder = Encoder(identity.encode(), b"gtmcluster")
        self.queue = QueryQueue(settings.queue, stats, wall)
        self.file = LogFile(settings.path, settings.max_bytes, settings.keep, settings.dir)
        #: batches taken from the queue, waiting for the next write (encoded unless
        #: encode_in_thread), and how many entries they hold
        self._pending: list[Any] = []
        self._pending_count = 0
        self._busy: defer.Deferred[None] | None = None
        self._loop: task.LoopingCall | None = None
        self._next: Any = None  # the next turn's flush, while there is a backlog
        #: why the last write failed (logged once while it lasts), None when it did not
        self._failing: str | None = None

    def reconfigure(self, settings: QueryLog) -> None:
        """Take *settings* of the same path: the sizes apply from the next query (the file's
        from its next write)."""
        self.settings = settings
        self.queue.limit = settings.queue
        self.file.max_bytes = settings.max_bytes
        self.file.keep = settings.keep

    def start(self) -> None:
        loop = self._loop = task.LoopingCall(self.flush)
        loop.clock = self.clock
        loop.start(FLUSH_INTERVAL, now=False).addErrback(lambda f: log.failure("query log writer stopped", f))

    def flush(self) -> None:
        """Encode a batch of what is queued (the next batch in the next turn, while there is
        a backlog) and start a write, unless one is under way."""
        self._next = None
        queue = self.queue
        if queue.entries and self._pending_count < self.settings.queue:
            self._take(None if self.encode_in_thread else MAX_BATCH)
            if len(queue.entries) >= MAX_BATCH and self._loop is not None:
                self._next = self.clock.callLater(0, self.flush)
        self._write()

    def _take(self, limit: int | None) -> None:
        entries = self.queue.take(limit)
        self._pending.append(entries if self.encode_in_thread else self.encoder.frames(entries))
        self._pending_count += len(entries)

    def _write(self) -> None:
        if self._busy is not None or not self._pending:
            return
        batches, self._pending = self._pending, []
        count, self._pending_count = self._pending_count, 0
        encoder, file, in_thread = self.encoder, self.file, self.encode_in_thread
        written = [0]  # (frames in the file so far, counted by the thread)

        def write() -> None:
            for batch in batches:
                frames = encoder.frames(batch) if in_thread else batch
                try:
                    written[0] += file.write(frames)
                except Unwritten as e:
                    written[0] += e.written
                    raise

        def done(result: object) -> None:
            self._busy = None
            self.stats.query_log_written += written[0]
            if isinstance(result, Failure):
                self.stats.query_log_failed += count - written[0]
                self._failed(result, count - written[0])
            elif self._failing is not None:
                log.info("writing the query log {path} again", path=str(file.path), event="query_log_resumed")
                self._failing = None
            self._write()  # what was encoded meanwhile

        busy = self._busy = self.run(write)
        busy.addBoth(done)

    def _failed(self, failure: Failure, lost: int) -> None:
        """Log why a write failed: once while the same reason lasts (a full disk, a file in
        the way), with a traceback only for what is not the disk's or the folder's doing."""
        if not isinstance(failure.value, Unwritten):
            if self._failing != "?":
                log.failure(
                    "writing the query log {path} (queries are lost until it works)", failure, path=str(self.file.path)
                )
            self._failing = "?"
            return
        reason = failure.value.reason
        if reason != self._failing:
            log.error(
                "writing the query log {path}: {reason}; queries are not logged until it works "
                "(counted in gtm_query_log_failed_total)",
                path=str(self.file.path),
                reason=reason,
                lost=lost,
                event="query_log_failed",
            )
        self._failing = reason

    @defer.inlineCallbacks
    def stop(self) -> Any:
        """Write what is queued and close the file (with its STOP frame)."""
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None
        if self._next is not None and self._next.active():
            self._next.cancel()
        self._next = None
        while self.queue.entries:
            self._take(None)
        self._write()
        while self._busy is not None:
            yield self._busy
        yield self.run(self.file.close)
