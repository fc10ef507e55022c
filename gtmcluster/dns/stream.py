"""The TCP side of the DNS listeners (RFC 7766): a connection's length-prefixed queries
answered in order, its timeouts, the caps on connections (per listening address and per
source, `tcpclients`), and zone transfers (AXFR, IXFR) sent with back-pressure.

A connection is read only while its answers are taken: while Twisted's send buffer for
the client is full nothing is answered, not even requests already read, and a burst of
requests is answered `PER_TURN` per reactor turn. A zone transfer (`transfer.Outgoing`)
takes a slot (`xfrslots`: capped per source and in all, ``dns_server.transfer``;
REFUSED past the caps, as BIND refuses past ``transfers-out``), is sent a message at a
time as the client takes them, one per connection, and is cut when the client takes
nothing for ``stall_timeout``. `server.DNSService` puts the factory on the sockets, one
`ListenerFactory` per DNS address (each address has its own ``tcp_max_clients``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IAddress, IDelayedCall, IPushProducer, IReactorTime
from twisted.internet.protocol import Protocol, ServerFactory, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gtmcluster.config.dnsserver import TCP_MAX_PER_SOURCE, TransferLimits
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.responder import Responder
from gtmcluster.dns.tcpclients import SOURCE_CAP, Clients
from gtmcluster.dns.transfer import Outgoing
from gtmcluster.dns.xfrslots import TransferSlots
from gtmcluster.querylog import dnstap
from gtmcluster.querylog.writer import QueryQueue
from gtmcluster.runtime.slots import Held
from gtmcluster.runtime.sources import source_of

log = Logger()

_LENGTH = struct.Struct("!H")

#: requests one connection has answered per reactor turn at most: the rest wait for the
#: next turn, other connections and the UDP port being served in between (a pipelined
#: burst of zone transfer requests costs some 0.1 ms each, refused or not)
PER_TURN = 16

#: ``dns_server.transfer`` when a config does not say
DEFAULT_TRANSFER_LIMITS = TransferLimits()

#: a refusal for want of a transfer slot, or a connection closed for its source's cap, is
#: logged at most this often (seconds): the rest are counted in the next line
REFUSAL_LOG_INTERVAL = 60.0


@dataclass(eq=False)
class _Sending:
    """The zone transfer a connection is sending: its slot (`xfrslots`), its messages (None
    while it is being encoded), the request (until logged with the first message), and the
    deadline for the client to take what was sent."""

    slot: Held
    request: bytes | None
    messages: Iterator[bytes] | None = None
    deadline: IDelayedCall | None = None

    def end(self) -> None:
        """Give the slot back and stop the deadline (the transfer is sent or given up)."""
        self.slot.release()
        if self.deadline is not None and self.deadline.active():
            self.deadline.cancel()
        self.deadline = self.messages = None


@implementer(IPushProducer)
class DNSStreamProtocol(Protocol):
    """Answers length-prefixed queries over one TCP connection.

    Three clocks keep a connection from holding a slot for free: the idle timeout (reset by
    every byte, and by the client taking its answers), the message timeout (started by the
    first byte of a message and stopped only by its last, so trickling bytes does not
    extend it), and the factory's caps (`tcpclients`), which close a connection idle the
    longest: past ``tcp_max_per_source`` its source's own, past ``tcp_max_clients`` on its
    address that of the source holding the most there.

    Fairness: `PER_TURN` requests per reactor turn at most, the rest (not read further)
    in the next turn, so one client's pipelined burst cannot hold the reactor.

    Back-pressure: the protocol is the transport's producer. While Twisted's send buffer
    for the client is full (it is not reading its answers), nothing is answered, not even
    the requests already read, and the connection is not read; the idle timeout then
    closes it. A zone transfer (`transfer.Outgoing`) takes a slot (`xfrslots`: capped per
    source and in all, REFUSED past the caps), and its messages are made and
    written only while Twisted takes more: its memory is a message and the send buffer,
    whatever the zone's size. The connection reads no request while it sends a transfer
    (at most one in flight), and the transfer is cut when the client takes nothing for the
    factory's `stall_timeout`.
    """

    factory: DNSStreamFactory

    def __init__(self) -> None:
        self._buffer = b""
        #: the idle timeout's call, and when the connection was last active (`_reset_timer`)
        self._timer: IDelayedCall | None = None
        self._active = 0.0
        self._message_timer: IDelayedCall | None = None
        self.peer = ""
        #: the source it counts as for every cap (`sources.source_of` of *peer*)
        self.source = ""
        #: the DNS address it came to (`ListenerFactory`: its ``tcp_max_clients``)
        self.listener = ""
        #: the zone transfer being sent, if any: no request is read until it is
        self._sending: _Sending | None = None
        #: whether Twisted has paused us (the client is not reading its answers)
        self._held = False
        #: whether we told the transport to stop reading the connection (`_read_on`)
        self._unread = False
        #: the connection is going (closed by us, or lost)
        self._closing = False
        self._lost = False
        #: `_process` is running (a transfer begun inside it may end inside it too)
        self._processing = False
        #: the next reactor turn's answering of the requests left (`PER_TURN`), if due
        self._later: IDelayedCall | None = None
        self.addresses: tuple[tuple[str, int], tuple[str, int]] = (("", 0), ("", 0))

    def connectionMade(self) -> None:
        peer: Any = self.transport.getPeer()  # type: ignore[union-attr]
        self.peer = peer.host
        self.source = source_of(peer.host)
        host: Any = self.transport.getHost()  # type: ignore[union-attr]
        self.addresses = ((peer.host, peer.port), (host.host, host.port))  # for the query log
        self.factory.opened(self)
        self.transport.registerProducer(self, True)  # type: ignore[union-attr]
        self._reset_timer()

    def _reset_timer(self) -> None:
        """(Re)start the idle timeout; not while a transfer is sent (its deadline runs).

        The connection's one call is not moved on every read (a cancel and a new call
        each time): it notes when the connection was active, and the call, when it comes,
        waits on for what is left (`_idle`)."""
        clock = self.factory.clock
        if self._sending is not None or self._closing:
            if self._timer is not None and self._timer.active():
                self._timer.cancel()
            self._timer = None
            return
        now = self._active = clock.seconds()
        timer, timeout = self._timer, self.factory.idle_timeout
        if timer is not None and timer.getTime() > now + timeout:  # (a reload shortened it)
            timer.cancel()
            timer = None
        if timer is None:
            self._timer = clock.callLater(timeout, self._idle)

    def _idle(self) -> None:
        """The idle timeout's call: close the connection if it has been idle for the
        whole timeout, else wait for what is left of it."""
        clock = self.factory.clock
        left = self._active + self.factory.idle_timeout - clock.seconds()
        if left > 1e-9:
            self._timer = clock.callLater(left, self._idle)
            return
        self._timer = None
        self._expired("idle")

    def _expired(self, why: str) -> None:
        if why == "partial":
            self._message_timer = None
        elif why == "stalled":  # (a transfer's client took nothing for stall_timeout)
            log.info(
                "zone transfer to {peer} cut: nothing taken for {seconds:g} s",
                peer=self.peer,
                seconds=self.factory.stall_timeout,
            )
        self.factory.closed_by[why] += 1
        self._close(abort=True)

    def _close(self, abort: bool) -> None:
        self._closing = True
        if abort:
            self.transport.abortConnection()  # type: ignore[union-attr]
        else:
            self.transport.loseConnection()  # type: ignore[union-attr]

    def dataReceived(self, data: bytes) -> None:
        self._buffer = self._buffer + data if self._buffer else data
        self.factory.touched(self)
        self._reset_timer()
        self._process()

    def _process(self) -> None:
        """Answer the whole messages buffered, in order, while the client takes answers and
        no transfer is being sent; then read the connection on, or not (`_read_on`)."""
        if self._processing:
            return  # (a transfer begun and ended within the loop below: it goes on)
        self._processing = True
        try:
            completed = self._answer_buffered()
        finally:
            self._processing = False
        if self._closing:
            return
        timer = self._message_timer
        unfinished = self._unfinished()
        if timer is not None and (completed or not unfinished):
            timer.cancel()
            timer = self._message_timer = None
        if unfinished and timer is None:
            self._message_timer = self.factory.clock.callLater(self.factory.message_timeout, self._expired, "partial")
        self._read_on()

    def _answer_buffered(self) -> bool:
        """Answer the buffered messages while we may, `PER_TURN` at most (the rest in the
        next reactor turn); whether any was complete."""
        buffer = self._buffer
        size = len(buffer)
        at = 0  # (the messages are sliced out of the buffer once, the rest kept at the end)
        answered = 0
        factory = self.factory
        while at + 2 <= size and self._answering():
            end = at + 2 + (buffer[at] << 8 | buffer[at + 1])
            if end > size:
                break
            if answered == PER_TURN:
                self._later = factory.clock.callLater(0, self._next_turn)
                break
            answered += 1
            message = buffer[at + 2 : end]
            at = end
            if len(message) < 12:
                self._close(abort=False)
                break
            replies, decided = factory.fast.answer_stream(message, self.peer)
            if isinstance(replies, Outgoing):
                self._begin(message, replies)
                continue
            log = factory.log
            if log is not None:
                first = replies[0] if replies else None
                log.add(self.addresses[0], self.addresses[1], dnstap.TCP, message, first, decided)
            self._write(replies)
        if at:
            self._buffer = buffer[at:]
        return answered > 0

    def _answering(self) -> bool:
        """Whether requests are answered now: not while Twisted holds our answers, a
        transfer is being sent, or the next turn is awaited."""
        return self._sending is None and not self._held and not self._closing and self._later is None

    def _next_turn(self) -> None:
        self._later = None
        self._process()

    def _unfinished(self) -> bool:
        """Whether the buffer ends in a message begun and not finished while we read (when
        we do not, what is buffered waits on us, not on the client)."""
        buffer = self._buffer
        if not buffer or not self._answering():
            return False
        return len(buffer) < 2 or len(buffer) < 2 + _LENGTH.unpack_from(buffer)[0]

    def _read_on(self) -> None:
        """Read the connection only while its requests are answered (`_answering`): not
        while Twisted's send buffer is full, a transfer is being sent, or requests already
        read wait for the next turn."""
        if self._closing or self._lost:
            return
        unread = not self._answering()
        if unread != self._unread:  # (told the transport only when it changes)
            self._unread = unread
            if unread:
                self.transport.pauseProducing()  # type: ignore[union-attr]
            else:
                self.transport.resumeProducing()  # type: ignore[union-attr]

    def _write(self, replies: list[bytes]) -> None:
        write = self.transport.write  # type: ignore[union-attr]
        for reply in replies:
            write(len(reply).to_bytes(2, "big") + reply)

    # -- zone transfers ----------------------------------------------------------------------

    def _begin(self, request: bytes, outgoing: Outgoing) -> None:
        """Begin the transfer *outgoing* answering *request* if a slot is free, else refuse it."""
        slot = self.factory.slots.take(self.source)
        if slot is None:
            self.factory.refused(self.peer, self.source)
            reply = outgoing.refuse()
            queue = self.factory.log
            if queue is not None:
                queue.add(self.addresses[0], self.addresses[1], dnstap.TCP, request, reply)
            self._write([reply])
            return
        sending = self._sending = _Sending(slot, request)
        self._reset_timer()  # (stopped: the transfer's deadline runs instead)
        try:
            messages = outgoing.start()
        except Exception:
            log.failure("internal error beginning a zone transfer to {peer}", peer=self.peer)
            self._close(abort=True)
            return
        if isinstance(messages, defer.Deferred):  # (being encoded: the request is logged now)
            self._logged(sending, None)
            messages.addCallbacks(partial(self._encoded, sending), partial(self._not_encoded, sending))
        else:
            sending.messages = messages
            self._send()

    def _encoded(self, sending: _Sending, messages: Iterator[bytes]) -> None:
        if sending is not self._sending:
            return  # (the connection went meanwhile)
        sending.messages = messages
        self._send()
        self._process()

    def _not_encoded(self, sending: _Sending, failure: Failure) -> None:
        log.failure("internal error making a zone transfer for {peer}", failure, peer=self.peer)
        if sending is self._sending and not self._closing:
            self._close(abort=True)

    def _send(self) -> None:
        """Write the transfer's next messages while Twisted takes them (it pauses us when
        its send buffer is full); after the last, the slot goes back and reading resumes.
        Each call restarts the deadline: the client has taken what was sent before."""
        sending = self._sending
        if sending is None or sending.messages is None or self._closing:
            return
        if sending.deadline is not None and sending.deadline.active():
            sending.deadline.cancel()
        sending.deadline = self.factory.clock.callLater(self.factory.stall_timeout, self._expired, "stalled")
        while not self._held and not self._closing:
            try:
                message = next(sending.messages, None)
            except Exception:
                log.failure("internal error sending a zone transfer to {peer}", peer=self.peer)
                self._close(abort=True)
                return
            if message is None:
                self._sending = None
                sending.end()
                self._reset_timer()
                return
            self._logged(sending, message)
            self.transport.write(_LENGTH.pack(len(message)) + message)  # type: ignore[union-attr]

    def _logged(self, sending: _Sending, first: bytes | None) -> None:
        """Log the transfer's request to the query log (once) with its first message."""
        request, sending.request = sending.request, None
        queue = self.factory.log
        if request is not None and queue is not None:
            queue.add(self.addresses[0], self.addresses[1], dnstap.TCP, request, first)

    # IPushProducer: Twisted pauses us while the answers it buffers for this client pile up,
    # and resumes us once it has sent them all
    def pauseProducing(self) -> None:
        self._held = True
        if not self._closing:
            self._unread = True
            self.transport.pauseProducing()  # type: ignore[union-attr]

    def resumeProducing(self) -> None:
        self._held = False
        if self._closing or self._lost:
            return
        if self._sending is not None:
            self._send()
        else:
            self._reset_timer()  # (the client takes its answers: not idle)
        self.factory.touched(self)
        self._process()

    def stopProducing(self) -> None:
        pass  # the connection is going: connectionLost cleans up

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._lost = self._closing = True
        for timer in (self._timer, self._message_timer, self._later):
            if timer is not None and timer.active():
                timer.cancel()
        self._timer = self._message_timer = self._later = None
        sending, self._sending = self._sending, None
        if sending is not None:
            sending.end()
        self.factory.closed(self)


class DNSStreamFactory(ServerFactory[DNSStreamProtocol]):
    """The TCP connections of all the DNS addresses: their caps (`connections`: per address
    and per source) and timeouts, and the zone transfers they send (`slots`,
    `stall_timeout`: ``dns_server.transfer``). Each listening socket gets its own
    `ListenerFactory` (`on`); connections built here directly count as on address ""."""

    noisy = False

    def __init__(
        self,
        responder: Responder,
        clock: IReactorTime,
        idle_timeout: float,
        max_clients: int,
        message_timeout: float = 5.0,
        transfer: TransferLimits = DEFAULT_TRANSFER_LIMITS,
        max_per_source: int = TCP_MAX_PER_SOURCE,
    ):
        self.responder = responder
        #: answers as over UDP, from the same templates and kept decisions (the service
        #: gives its own; by itself, one of its own without rate limiting)
        self.fast = FastPath(responder)
        self.clock = clock
        self.idle_timeout = idle_timeout
        self.message_timeout = message_timeout
        #: open connections, least recently active first, capped per DNS address
        #: (*max_clients*) and per source (*max_per_source*)
        self.connections: Clients[DNSStreamProtocol] = Clients(max_clients, max_per_source)
        #: the zone transfers in flight, capped per source and in all
        self.slots = TransferSlots(transfer.max_in_flight, transfer.max_per_source)
        #: seconds a transfer's client may take nothing before it is cut
        self.stall_timeout = transfer.stall_timeout
        #: the query log's queue, None when it is off
        self.log: QueryQueue | None = None
        #: connections closed by the node, by why: silent, a message unfinished, evicted
        #: by its address's cap, closed by its own source's cap, a zone transfer's client
        #: taking nothing
        self.closed_by = {"idle": 0, "partial": 0, "evicted": 0, SOURCE_CAP: 0, "stalled": 0}
        #: refusals for want of a transfer slot not yet logged, and when one was last logged
        self._refusals = 0
        self._refusal_logged: float | None = None
        #: the same for connections closed for their source's cap
        self._over_source = 0
        self._over_source_logged: float | None = None

    @property
    def max_clients(self) -> int:
        """``tcp_max_clients``: connections on one DNS address at most."""
        return self.connections.max_per_listener

    @property
    def max_per_source(self) -> int:
        """``tcp_max_per_source``: connections from one source (`sources.source_of`) at most."""
        return self.connections.max_per_source

    def configure_clients(self, max_clients: int, max_per_source: int) -> None:
        """Take a new config's caps (open connections stay; the next to come meets them)."""
        self.connections.max_per_listener = max_clients
        self.connections.max_per_source = max_per_source

    def on(self, address: str) -> ListenerFactory:
        """The factory for the listening socket on *address*."""
        return ListenerFactory(self, address)

    def configure_transfers(self, limits: TransferLimits) -> None:
        """Take a new config's transfer limits (the transfers in flight keep their slots)."""
        self.slots.max_in_flight = limits.max_in_flight
        self.slots.max_per_source = limits.max_per_source
        self.stall_timeout = limits.stall_timeout

    def refused(self, peer: str, source: str) -> None:
        """Log a transfer to *peer* (of *source*) refused for want of a slot: the first, then
        at most one line per `REFUSAL_LOG_INTERVAL` (a client may ask thousands of times),
        with the count."""
        self._refusals += 1
        now = self.clock.seconds()
        if self._refusal_logged is not None and now - self._refusal_logged < REFUSAL_LOG_INTERVAL:
            return
        slots = self.slots
        log.warn(
            "zone transfer to {peer} refused: {in_flight} transfers in flight (max_in_flight {total}), "
            "{theirs} to {source} (max_per_source {per_source}); {count} refused since the last such line",
            peer=peer,
            source=source,
            in_flight=slots.in_flight,
            total=slots.max_in_flight,
            theirs=slots.by_source.get(source, 0),
            per_source=slots.max_per_source,
            count=self._refusals,
        )
        self._refusals = 0
        self._refusal_logged = now

    def buildProtocol(self, addr: IAddress | None) -> DNSStreamProtocol:
        proto = DNSStreamProtocol()
        proto.factory = self
        return proto

    def opened(self, proto: DNSStreamProtocol) -> None:
        """Hold *proto*, closing what the caps say must make way (`Clients.add`)."""
        for victim, why in self.connections.add(proto, proto.listener, proto.source):
            self.closed_by[why] += 1
            if why == SOURCE_CAP:
                self._over_source_cap(proto.source)
            victim._close(abort=True)

    def _over_source_cap(self, source: str) -> None:
        """Log a connection closed for its source's cap: the first, then at most one line per
        `REFUSAL_LOG_INTERVAL` with the count (a source may open thousands)."""
        self._over_source += 1
        now = self.clock.seconds()
        if self._over_source_logged is not None and now - self._over_source_logged < REFUSAL_LOG_INTERVAL:
            return
        log.warn(
            "TCP DNS source {source} opened more than tcp_max_per_source ({cap}) connections: "
            "its own idle the longest closed; {count} closed so since the last such line",
            source=source,
            cap=self.connections.max_per_source,
            count=self._over_source,
            event="dns_tcp_source_cap",
        )
        self._over_source = 0
        self._over_source_logged = now

    def touched(self, proto: DNSStreamProtocol) -> None:
        self.connections.touch(proto)

    def closed(self, proto: DNSStreamProtocol) -> None:
        self.connections.remove(proto)


class ListenerFactory(ServerFactory[DNSStreamProtocol]):
    """One listening socket's factory: its connections are the shared `DNSStreamFactory`'s,
    counted against *address*'s ``tcp_max_clients``."""

    noisy = False

    def __init__(self, shared: DNSStreamFactory, address: str):
        self.shared = shared
        self.address = address

    def buildProtocol(self, addr: IAddress | None) -> DNSStreamProtocol:
        proto = self.shared.buildProtocol(addr)
        proto.listener = self.address
        return proto
