"""``GET /api/v1/logs?since=&lines=&follow=``: the node's own log, as its JSON lines.

- ``lines=N``: the last N lines (default `DEFAULT_LINES`; at most `reader.MAX_LINES`);
- ``since=TIME``: only lines at or after TIME (ISO 8601, UTC unless it has an offset), all
  of them up to ``reader.MAX_LINES`` unless ``lines`` is given too;
- ``follow=1``: after those, keep the response open and write each new line as the node
  logs it, and an empty line every `HEARTBEAT` seconds of silence (so a reader notices a
  dead connection); at most `MAX_FOLLOWERS` at once (503 beyond).

The answer is ``application/x-ndjson``. Reads of the files happen in a thread, on a
snapshot taken when the request came (`NodeLog.snapshot`), and following starts at that
same moment: no line is missed or sent twice. Memory is bounded: a follower whose client
reads too slowly (the connection's buffer full) has lines dropped, and is then sent one
line saying how many.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from twisted.internet import defer
from twisted.internet.interfaces import IPushProducer
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from twisted.web.server import Request
from zope.interface import implementer

from gtmcluster.api.server import ApiError, Stream
from gtmcluster.nodelog import reader, record
from gtmcluster.nodelog.writer import NodeLog

log = Logger()

T = TypeVar("T")
InThread = Callable[[Callable[[], T]], "defer.Deferred[T]"]

DEFAULT_LINES = 100
MAX_FOLLOWERS = 16
#: seconds of silence after which a follower is sent an empty line
HEARTBEAT = 15.0
#: lines logged while the files are read, kept for a follower until then
MAX_HELD = 10000
NDJSON = b"application/x-ndjson"
TRUE = ("1", "true", "yes")
FALSE = ("0", "false", "no", "")


def parse(args: Mapping[str, str]) -> tuple[str | None, int, bool]:
    """(since, lines, follow) from the query; ApiError 400 for bad values."""
    since: str | None = None
    if "since" in args:
        try:
            since = record.parse_time(args["since"])
        except ValueError:
            raise ApiError(400, "since: not a time (ISO 8601, such as 2026-12-01T15:00:00Z)") from None
    if "lines" in args:
        try:
            count = int(args["lines"])
        except ValueError:
            raise ApiError(400, f"lines: not a number: {args['lines'][:40]!r}") from None
        if not 0 <= count <= reader.MAX_LINES:
            raise ApiError(400, f"lines: must be 0 to {reader.MAX_LINES}")
    else:
        count = DEFAULT_LINES if since is None else reader.MAX_LINES
    follow_text = args.get("follow", "0").lower()
    if follow_text not in TRUE + FALSE:
        raise ApiError(400, "follow: give 1 or 0")
    return since, count, follow_text in TRUE


class Logs:
    """The route's handler: owns the count of followers."""

    def __init__(self, node_log: NodeLog | None, clock: Any, in_thread: InThread[list[str]]):
        self.node_log = node_log
        self.clock = clock
        self.in_thread = in_thread
        self.followers: set[LogStream] = set()

    def __call__(self, args: Mapping[str, str], parts: Mapping[str, str]) -> Stream:
        since, count, follow = parse(args)
        if self.node_log is None:
            raise ApiError(404, "this node keeps no log of its own")
        if follow and len(self.followers) >= MAX_FOLLOWERS:
            raise ApiError(503, f"already {MAX_FOLLOWERS} readers follow this node's log; try again later")
        stream = LogStream(self, self.node_log, since, count, follow)
        return Stream(stream.start)


@implementer(IPushProducer)
class LogStream:
    """One answer: the lines from the files, then (following) the new ones."""

    def __init__(self, owner: Logs, node_log: NodeLog, since: str | None, count: int, follow: bool):
        self.owner = owner
        self.node_log = node_log
        self.since = since
        self.count = count
        self.follow = follow
        self.request: Request | None = None
        self.live = False
        self.paused = False
        self.gone = False
        self.held: list[str] = []
        self.dropped = 0
        self.quiet = True
        self._unfollow: Callable[[], None] | None = None
        self._beat: LoopingCall | None = None

    def start(self, request: Request) -> None:
        self.request = request
        request.setHeader(b"content-type", NDJSON)
        request.setHeader(b"cache-control", b"no-store")
        if request.method == b"HEAD":
            request.finish()  # the headers only: nothing to read, nothing to follow
            return
        snapshot = self.node_log.snapshot()
        if self.follow:
            self.owner.followers.add(self)
            self._unfollow = self.node_log.follow(self.line)
            request.registerProducer(self, True)
        request.notifyFinish().addBoth(self._finished)

        def read() -> list[str]:
            try:
                return reader.history(snapshot, self.since, self.count)
            finally:
                snapshot.close()

        d = self.owner.in_thread(read)
        d.addCallbacks(self._history, self._failed)

    def _history(self, lines: list[str]) -> None:
        if self.gone or self.request is None:
            return
        self.request.write("".join(line + "\n" for line in lines).encode("utf-8"))
        if not self.follow:
            self.request.finish()
            return
        self.live = True
        held, self.held = self.held, []
        for line in held:
            self.line(line)
        self._beat = LoopingCall(self._heartbeat)
        self._beat.clock = self.owner.clock
        self._beat.start(HEARTBEAT, now=False)

    def _failed(self, failure: Failure) -> None:
        log.failure("reading the node's log for the API failed", failure)
        if not self.gone and self.request is not None:
            self._stop()
            if self.follow:
                self.request.unregisterProducer()
            self.request.finish()

    def line(self, line: str) -> None:
        """A line the node just logged."""
        if self.gone or self.request is None:
            return
        if not self.live:
            if len(self.held) < MAX_HELD:
                self.held.append(line)
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

    def _dropped_line(self) -> str:
        event = {
            "log_time": self.owner.clock.seconds(),
            "log_level": LogLevel.warn,
            "log_namespace": __name__,
            "log_format": "{count} lines not sent: this reader was too slow",
            "count": self.dropped,
        }
        return record.event_line(event, self.node_log.node, self.owner.clock.seconds())

    def _heartbeat(self) -> None:
        if self.quiet and not self.paused and self.request is not None and not self.gone:
            self.request.write(b"\n")
        self.quiet = True

    # IPushProducer: the connection's buffer is full / has room again / is gone
    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False

    def stopProducing(self) -> None:
        self._stop()

    def _stop(self) -> None:
        self.gone = True
        self.owner.followers.discard(self)
        if self._unfollow is not None:
            self._unfollow()
            self._unfollow = None
        if self._beat is not None and self._beat.running:
            self._beat.stop()
        self._beat = None

    def _finished(self, result: Any) -> None:
        self._stop()
