"""Write-side back-pressure of one peer connection (`sync.peer.PeerProtocol`): what it does
while the peer leaves what this node sends it unread.

`Outlet` is the push producer the connection registers with its transport, as Twisted
intends: the TCP transport pauses it when more than its buffer size (64 KiB) waits in the
node's own buffer, and resumes it once that has all gone to the kernel (whose socket buffer
holds what the peer has not read yet, up to a few MB). Written within one reactor turn,
64 KiB pauses it until the next; it stays paused while the kernel's buffer is full, that is
while the peer does not read. While paused, the output is *blocked*:

- the peer's requests whose answers can be large (`ASKS`) are held in arrival order and
  answered, in order, once the output drains (from the next reactor turn: a resume comes
  from inside the transport's write);
- the peer's other commands (a Publish, a Heartbeat: answers of a few bytes) and its
  answers to our questions are still read: the socket is never paused for this. Pausing it
  would deadlock two honest members that both push more than the other reads at that
  moment (each would wait for the other to read first);
- the connection's own pushes and SendAll streams wait (`when_writable`, and `blocked` for
  the replicator): they count on the peer's answers to stay bounded otherwise, and AMP's
  question tags are a counter a peer can answer without reading.

A peer whose output stays blocked for `idle_timeout`, or that makes this node hold more than
`MAX_HELD` requests (`MAX_HELD_BYTES` of them), is dropped. So a peer that asks and never
reads costs at most those held requests (about 2.4 KB of memory each, whatever their size),
the transport's buffer and the answer that filled it, and the kernel's socket buffer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTime
from twisted.protocols import amp
from zope.interface import implementer

#: the peer's requests whose answers can be large (up to `codec.MAX_BATCH`, or a stream of
#: batches): held, not answered, while the output to the peer is blocked
ASKS = frozenset({b"Summary", b"Buckets", b"Listing", b"Pull", b"SendAll", b"ConfigFetch"})
#: held requests, and bytes of them, beyond which the peer is dropped (an honest member has
#: one or two outstanding, a few more while it loads its snapshot). Holding one costs about
#: 2.4 KB of memory whatever its size (the box, the Deferred its answer goes to)
MAX_HELD = 1000
MAX_HELD_BYTES = 1024 * 1024


class Connection(Protocol):
    """What an `Outlet` needs of its connection."""

    @property
    def established(self) -> bool:
        """Past the Hellos and not closed."""

    @property
    def closed(self) -> bool:
        """Refused, dropped or lost."""

    def violation(self, reason: str) -> None:
        """Drop the peer for *reason* (logged)."""

    def answer_held(self, box: amp.AmpBox) -> Deferred[Any]:
        """Answer request *box*, held until now."""

    def output_drained(self) -> None:
        """The output drained and what was held is answered: pushes may resume."""


@implementer(IPushProducer)
class Outlet:
    """One connection's output, as its transport lets it go (see the module's docstring)."""

    def __init__(self, connection: Connection, clock: IReactorTime, idle_timeout: Callable[[], float]) -> None:
        self.connection = connection
        self.clock = clock
        self.idle_timeout = idle_timeout
        #: the transport holds more of our output than it wants
        self.blocked = False
        self._blocked_timer: IDelayedCall | None = None
        #: requests held while blocked, with their size and what their answers go to
        self._held: deque[tuple[amp.AmpBox, int, Deferred[Any]]] = deque()
        self.held_bytes = 0
        self._releasing: IDelayedCall | None = None
        self._writable: list[Deferred[None]] = []  # see `when_writable`

    @property
    def held(self) -> int:
        return len(self._held)

    # -- IPushProducer: what the transport tells -----------------------------------------

    def pauseProducing(self) -> None:
        if self.connection.closed or self.blocked:
            return
        self.blocked = True
        idle = self.idle_timeout()
        self._blocked_timer = self.clock.callLater(idle, self._blocked_too_long, idle)

    def resumeProducing(self) -> None:
        if not self.blocked:
            return
        self.blocked = False
        if self._blocked_timer is not None and self._blocked_timer.active():
            self._blocked_timer.cancel()
        self._blocked_timer = None
        if not self.connection.closed and self._releasing is None:
            self._releasing = self.clock.callLater(0, self._after_drain)

    def stopProducing(self) -> None:
        """The connection is going: its `connectionLost` calls `close`."""

    # -- the connection's side ------------------------------------------------------------

    def holds(self, command: bytes) -> bool:
        """Whether a request *command* is held rather than answered now (behind others held)."""
        return command in ASKS and (self.blocked or bool(self._held))

    def hold(self, box: amp.AmpBox, size: int) -> Deferred[Any]:
        """Keep request *box* (*size* bytes on the wire) until the output drains; its answer
        goes to the Deferred returned. Past the caps the peer is dropped (never answered)."""
        if len(self._held) >= MAX_HELD or self.held_bytes + size > MAX_HELD_BYTES:
            self.connection.violation(
                f"not reading: more than {MAX_HELD} requests or {MAX_HELD_BYTES} bytes of them wait "
                "while what this node sends it waits unsent"
            )
            return Deferred()
        answer: Deferred[Any] = Deferred()
        self._held.append((box, size, answer))
        self.held_bytes += size
        return answer

    def when_writable(self) -> Deferred[None]:
        """Fires once the output is not blocked (at once when it is not), or the connection ended."""
        if not self.blocked or self.connection.closed:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._writable.append(d)
        return d

    def drop_held(self) -> None:
        """Forget the requests held: the peer is dropped, they are never answered."""
        self._held.clear()
        self.held_bytes = 0

    def close(self) -> None:
        """The connection is gone: no timer left, nothing held, nothing waiting."""
        for timer in (self._blocked_timer, self._releasing):
            if timer is not None and timer.active():
                timer.cancel()
        self._blocked_timer = self._releasing = None
        self.drop_held()
        self._wake_writers()

    # -- inside ----------------------------------------------------------------------------

    def _blocked_too_long(self, idle: float) -> None:
        self._blocked_timer = None
        self.connection.violation(f"not reading: what this node sends it has waited unsent for {idle:g}s")

    def _after_drain(self) -> None:
        self._releasing = None
        while self._held and not self.blocked and self.connection.established:
            box, size, answer = self._held.popleft()
            self.held_bytes -= size
            self.connection.answer_held(box).chainDeferred(answer)
        if self.blocked or not self.connection.established:
            return  # (blocked again: the rest when it drains next time)
        self._wake_writers()
        self.connection.output_drained()

    def _wake_writers(self) -> None:
        waiting, self._writable = self._writable, []
        for d in waiting:
            d.callback(None)
