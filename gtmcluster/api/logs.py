"""``GET /api/v1/logs?since=&lines=&follow=``: the node's own log, as its JSON lines.

- ``lines=N``: the last N lines (default `DEFAULT_LINES`; at most `reader.MAX_LINES`);
- ``since=TIME``: only lines at or after TIME (ISO 8601, UTC unless it has an offset), all
  of them up to ``reader.MAX_LINES`` unless ``lines`` is given too;
- ``follow=1``: after those, keep the response open and write each new line as the node
  logs it, and an empty line every `HEARTBEAT` seconds of silence (so a reader notices a
  dead connection).

The answer is ``application/x-ndjson``. Reads of the files happen in a thread, on a
snapshot taken when the request came (`NodeLog.snapshot`), and following starts at that
same moment: no line is missed or sent twice.

Memory and slots are bounded. The lines from the files are at most `MAX_ANSWER_BYTES` (the
newest that fit; a first ``warn`` line says older ones were left out), written a slice at a
time as the client reads. A follower whose client reads too slowly (the connection's buffer
full) has lines dropped, and is then sent one line saying how many; one whose client reads
nothing for ``api.limits.stall_timeout`` seconds is cut. Followers are counted apart for
clients with the token and without (``api.limits.followers``, ``followers_without_token``,
``followers_per_source``; 503 beyond), so readers without the token never take an
operator's place; and a follower without the token is ended after
``follow_without_token`` seconds with a line saying so (`gtmcluster logs -f` asks again).
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IPushProducer
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from twisted.web.server import Request
from zope.interface import implementer

from gtmcluster.api import sending
from gtmcluster.api.server import ApiError, Stream, source_key, token_shown
from gtmcluster.config.model import ApiLimits
from gtmcluster.nodelog import reader, record
from gtmcluster.nodelog.writer import Snapshot
from gtmcluster.runtime.slots import Caps, Held, Slots

log = Logger()

T = TypeVar("T")
InThread = Callable[[Callable[[], T]], "defer.Deferred[T]"]

DEFAULT_LINES = 100
#: seconds of silence after which a follower is sent an empty line
HEARTBEAT = 15.0
#: bytes of lines one answer takes from the files, at most (the newest that fit)
MAX_ANSWER_BYTES = 2 * 1024 * 1024
#: lines (and their bytes) logged while the files are read and sent, kept for a follower
#: until then
MAX_HELD = 10000
MAX_HELD_BYTES = 1024 * 1024
NDJSON = b"application/x-ndjson"
TRUE = ("1", "true", "yes")
FALSE = ("0", "false", "no", "")
#: lines= as the API takes it (ASCII digits: int() would read other scripts' digits too)
_COUNT = re.compile(r"[0-9]{1,9}")


#: which lines an answer keeps (None: all)
Keep = Callable[[str], bool] | None
#: (since, lines, follow, which lines) from a request's query
Query = tuple[str | None, int, bool, Keep]


class Source(Protocol):
    """Lines of a node that are read and followed: the node's log (`NodeLog`), its audit
    log (`nodelog.audit.AuditFile`)."""

    @property
    def node(self) -> str: ...

    def snapshot(self) -> Snapshot: ...

    def follow(self, listener: Callable[[str], None]) -> Callable[[], None]: ...


def query(args: Mapping[str, str], count_name: str = "lines", default: int = DEFAULT_LINES) -> Query:
    """(since, count, follow) from the query, and no filter; ApiError 400 for bad values.
    The count is given as *count_name* (*default* when neither it nor since is given)."""
    since: str | None = None
    if "since" in args:
        try:
            since = record.parse_time(args["since"])
        except (ValueError, OverflowError):  # (year 1 with an offset east of UTC overflows)
            raise ApiError(400, "since: not a time (ISO 8601, such as 2026-12-01T15:00:00Z)") from None
    if count_name in args:
        text = args[count_name].strip()
        if text.startswith("-") and _COUNT.fullmatch(text[1:]):
            raise ApiError(400, f"{count_name}: must be 0 to {reader.MAX_LINES}")
        if not _COUNT.fullmatch(text):
            raise ApiError(400, f"{count_name}: not a number: {args[count_name][:40]!r}")
        count = int(text)
        if not 0 <= count <= reader.MAX_LINES:
            raise ApiError(400, f"{count_name}: must be 0 to {reader.MAX_LINES}")
    else:
        count = default if since is None else reader.MAX_LINES
    follow_text = args.get("follow", "0").lower()
    if follow_text not in TRUE + FALSE:
        raise ApiError(400, "follow: give 1 or 0")
    return since, count, follow_text in TRUE, None


def _default_limits() -> ApiLimits:
    return ApiLimits()


class Logs:
    """The route's handler: owns the followers and their slots. *node_log*: the lines it
    reads (the node's log; the audit log, with *query_of* reading its own query, and *absent* what a
    node without them answers, 404)."""

    def __init__(
        self,
        node_log: Source | None,
        clock: Any,
        in_thread: InThread[tuple[list[str], bool]],
        limits: Callable[[], ApiLimits] = _default_limits,
        closed: Counter[str] | None = None,
        query_of: Callable[[Mapping[str, str]], Query] = query,
        absent: str = "this node keeps no log of its own",
    ):
        self.node_log = node_log
        self.query_of = query_of
        self.absent = absent
        self.clock = clock
        self.in_thread = in_thread
        self.limits = limits
        #: followers the node ended, by why: stalled, follow_time (the API's counter)
        self.closed: Counter[str] = closed if closed is not None else Counter()
        self.followers: set[LogStream] = set()
        #: followers of clients that showed the token (True) and that did not
        self.slots = {True: Slots(), False: Slots()}

    def __call__(self, args: Mapping[str, str], parts: Mapping[str, str]) -> Stream:
        since, count, follow, keep = self.query_of(args)
        if self.node_log is None:
            raise ApiError(404, self.absent)
        stream = LogStream(self, self.node_log, since, count, follow, keep)
        return Stream(stream.start, lasting=follow)

    def take(self, request: Request) -> Held:
        """A follower's slot for *request*; ApiError 503 when its kind holds every one."""
        shown = token_shown(request)
        source = source_key(request)
        limits = self.limits()
        total = limits.followers if shown else limits.followers_without_token
        why = self.slots[shown].take(source, Caps(total, limits.followers_per_source))
        if why is not None:
            kind = "with the token" if shown else "without the token"
            raise ApiError(
                503, f"already as many readers {kind} follow this node's log as it allows {why}; try again later"
            )
        return Held(self.slots[shown], source)


@implementer(IPushProducer)
class LogStream:
    """One answer: the lines from the files, then (following) the new ones."""

    def __init__(self, owner: Logs, node_log: Source, since: str | None, count: int, follow: bool, keep: Keep = None):
        self.owner = owner
        self.node_log = node_log
        self.keep = keep
        self.since = since
        self.count = count
        self.follow = follow
        self.request: Request | None = None
        #: the lines from the files, as still to be sent
        self.pending: io.BytesIO | None = None
        self.live = False
        self.paused = False
        self.gone = False
        self.held: list[str] = []
        self.held_bytes = 0
        self.dropped = 0
        self.quiet = True
        self.slot: Held | None = None
        self.watch: sending.StallWatch | None = None
        self._unfollow: Callable[[], None] | None = None
        self._beat: LoopingCall | None = None
        self._time_up: IDelayedCall | None = None

    def start(self, request: Request) -> None:
        head = request.method == b"HEAD"
        if self.follow and not head:
            self.slot = self.owner.take(request)  # (ApiError 503 before anything is written)
        self.request = request
        request.setHeader(b"content-type", NDJSON)
        request.setHeader(b"cache-control", b"no-store")
        if head:
            request.finish()  # the headers only: nothing to read, nothing to follow
            return
        limits = self.owner.limits()
        clock = self.owner.clock
        self.watch = sending.StallWatch(clock.callLater, limits.stall_timeout, self._stalled)
        snapshot = self.node_log.snapshot()
        if self.follow:
            self.owner.followers.add(self)
            self._unfollow = self.node_log.follow(self.line)
            if not token_shown(request) and limits.follow_without_token:
                self._time_up = clock.callLater(limits.follow_without_token, self._end_following)
        request.registerProducer(self, True)
        request.notifyFinish().addBoth(self._finished)

        def read() -> tuple[list[str], bool]:
            try:
                return reader.within(snapshot, self.since, self.count, MAX_ANSWER_BYTES, self.keep)
            finally:
                snapshot.close()

        d = self.owner.in_thread(read)
        d.addCallbacks(self._history, self._failed)

    def _history(self, read: tuple[list[str], bool]) -> None:
        if self.gone or self.request is None:
            return
        lines, cut = read
        text = "".join(line + "\n" for line in lines)
        if cut:
            note = self._note(
                "older lines not sent: one answer holds at most {limit} bytes of lines (ask with a later since=)",
                limit=MAX_ANSWER_BYTES,
            )
            text = note + "\n" + text
        self.pending = io.BytesIO(text.encode("utf-8"))
        del lines, text
        self.request.write(b"")  # the status and headers, lines or not
        self._pump()

    def _pump(self) -> None:
        """Send what is left of the lines from the files while the connection takes it;
        then finish, or go on following."""
        pending = self.pending
        while pending is not None and not self.paused and not self.gone and self.request is not None:
            data = pending.read(sending.SLICE)
            if data:
                self.request.write(data)
                continue
            self.pending = pending = None
            if not self.follow:
                self._close()
                return
            self._go_live()

    def _go_live(self) -> None:
        self.live = True
        held, self.held, self.held_bytes = self.held, [], 0
        for line in held:
            self.line(line)
        self._beat = LoopingCall(self._heartbeat)
        self._beat.clock = self.owner.clock
        self._beat.start(HEARTBEAT, now=False)

    def _failed(self, failure: Failure) -> None:
        log.failure("reading the node's log for the API failed", failure)
        if not self.gone and self.request is not None:
            self._close()

    def _close(self) -> None:
        """Finish the answer now."""
        request = self.request
        self._stop()
        if request is not None:
            request.unregisterProducer()
            request.finish()

    def line(self, line: str) -> None:
        """A line the node just logged."""
        if self.gone or self.request is None or (self.keep is not None and not self.keep(line)):
            return
        if not self.live:
            size = len(line) + 1
            if len(self.held) < MAX_HELD and self.held_bytes + size <= MAX_HELD_BYTES:
                self.held.append(line)
                self.held_bytes += size
            else:
                self.dropped += 1
            return
        if self.paused:
            self.dropped += 1
            return
        if self.dropped:
            self.request.write(self._dropped_line().encode("utf-8") + b"\n")
            self.dropped = 0
        self.quiet = False
        self.request.write(line.encode("utf-8") + b"\n")

    def _note(self, text: str, **fields: Any) -> str:
        """A warn line of this answer's own (*text*: a log format with *fields*)."""
        now = self.owner.clock.seconds()
        event = {"log_time": now, "log_level": LogLevel.warn, "log_namespace": __name__, "log_format": text, **fields}
        return record.event_line(event, self.node_log.node, now)

    def _dropped_line(self) -> str:
        return self._note("{count} lines not sent: this reader was too slow", count=self.dropped)

    def _heartbeat(self) -> None:
        if self.quiet and not self.paused and self.request is not None and not self.gone:
            self.request.write(b"\n")
        self.quiet = True

    def _end_following(self) -> None:
        """A follower without the token has followed as long as it may: say so and end."""
        self._time_up = None
        if self.gone or self.request is None:
            return
        self.owner.closed["follow_time"] += 1
        seconds = self.owner.limits().follow_without_token
        self.request.write(
            self._note(
                "following ends: a reader without the API token follows for {seconds:g} s at most; "
                "ask again, or give the token",
                seconds=seconds,
            ).encode("utf-8")
            + b"\n"
        )
        self._close()

    def _stalled(self) -> None:
        """The client read nothing for stall_timeout seconds: cut its connection."""
        if self.gone or self.request is None:
            return
        self.owner.closed["stalled"] += 1
        request = self.request
        self._stop()
        sending.cut(request)

    # IPushProducer: the connection's buffer is full / has room again / is gone
    def pauseProducing(self) -> None:
        self.paused = True
        if self.watch is not None and not self.gone:
            self.watch.paused()

    def resumeProducing(self) -> None:
        self.paused = False
        if self.watch is not None:
            self.watch.resumed()
        self._pump()

    def stopProducing(self) -> None:
        self._stop()

    def _stop(self) -> None:
        self.gone = True
        self.pending = None
        self.held = []
        self.owner.followers.discard(self)
        if self.slot is not None:
            self.slot.release()
        if self._unfollow is not None:
            self._unfollow()
            self._unfollow = None
        if self._beat is not None and self._beat.running:
            self._beat.stop()
        self._beat = None
        if self.watch is not None:
            self.watch.stop()
        if self._time_up is not None and self._time_up.active():
            self._time_up.cancel()
        self._time_up = None

    def _finished(self, result: Any) -> None:
        self._stop()
