"""The DNS service's TCP transport: Twisted's TCP port and connection, with the answers a
read makes sent at the end of that read.

Twisted's connection buffers what its protocol writes, asks the reactor to watch the
socket for writing (an ``epoll_ctl``), sends in the next reactor turn when the socket is
writable, and stops watching (another ``epoll_ctl``): per read of queries, two system calls
and a turn of the reactor more than a send. A DNS connection answers in its read
(`stream.DNSStreamProtocol.dataReceived`), so `DNSConnection` sends then: what the
protocol wrote while the read ran goes out with one ``send`` as the read ends, and only
what the socket does not take is left to Twisted's own way (the reactor watches for
writing and sends the rest). Everything else is Twisted's: the send buffer and its
back-pressure (the producer is paused past 64 KiB waiting, resumed once all is sent),
``loseConnection``, ``abortConnection``, a client gone.

The connections are read from an epoll of their own (`ConnectionReads`, one per reactor,
the one descriptor the reactor watches for them): one reactor wakeup reads every connection
that has bytes, where the reactor would dispatch each on its own, as the UDP port reads
many datagrams per wakeup (`udpport`). Each read is Twisted's connection's `doRead`, and
what ends a connection ends it as the reactor would; pausing (back-pressure) and closing
take it out of the epoll, as they take a connection out of the reactor's.

The port is made as `IReactorSocket.adoptStreamPort` makes Twisted's (its classmethod
`_fromListeningDescriptor`, then `startListening`): a `PolledStreamPort`, or a
`DNSStreamPort` read by the reactor where there is no epoll; a reactor that is not a POSIX
one (a test's fake) gets its own `adoptStreamPort`.
"""

from __future__ import annotations

import contextlib
import select
import weakref
from typing import Any

from twisted.internet import tcp
from twisted.internet.interfaces import IListeningPort, IReadDescriptor
from twisted.internet.main import CONNECTION_DONE, CONNECTION_LOST
from twisted.python import log
from twisted.python.failure import Failure
from zope.interface import implementer

from gtmcluster.runtime.reactors import polls_descriptors

#: connections read per wakeup of `ConnectionReads` at most: with more ready, the UDP
#: port and the timers get their turn in between
PER_POLL = 128


class DNSConnection(tcp.Server):
    """A client's TCP connection that sends what a read's answers wrote as the read ends."""

    #: a read is running: the protocol's writes wait for its end
    _in_read = False
    #: the protocol wrote (or closed) during the read: send as it ends
    _write_due = False
    #: the last `doWrite` sent everything (it stopped writing)
    _drained = False

    def doRead(self) -> Any:
        self._in_read = True
        try:
            why = super().doRead()
        finally:
            self._in_read = False
        if not self._write_due:
            return why
        self._write_due = False
        if why is not None or not self.connected or self.disconnecting:
            super().startWriting()  # (a close or an error: Twisted's own way)
            return why
        self._drained = False
        why = self.doWrite()
        if why is None and not self._drained:
            super().startWriting()  # the socket took part of it: the reactor sends the rest
        return why

    def startWriting(self) -> None:
        if self._in_read:
            self._write_due = True
        else:
            super().startWriting()

    def stopWriting(self) -> None:
        self._write_due = False
        self._drained = True
        super().stopWriting()


class DNSStreamPort(tcp.Port):
    """Twisted's TCP port, its connections `DNSConnection`s."""

    transport = DNSConnection


class PolledConnection(DNSConnection):
    """A `DNSConnection` read by its port's `ConnectionReads` rather than by the reactor
    (written as any: what the socket does not take waits for the reactor)."""

    server: PolledStreamPort
    #: the descriptor it is watched under while it is read (-1: not read)
    polled = -1

    def startReading(self) -> None:
        self.server.reads.add(self)

    def stopReading(self) -> None:
        self.server.reads.remove(self)


@implementer(IReadDescriptor)
class ConnectionReads:
    """The DNS connections' reads, polled together: an epoll of their own, which the reactor
    watches as one descriptor. One reactor wakeup reads every connection that has bytes
    (`PER_POLL` at most, the rest in the next turn: the epoll hands back the ready
    connections in turn), where the reactor would dispatch each on its own (its logging
    context, its checks) as it does the listening port's accepts and the UDP port's reads.
    A connection's read and its outcomes are Twisted's: `doRead` as the reactor calls it,
    and a read that ends the connection (the client gone, an error, a close within the
    read) ends it as the reactor does (`_lost`). Writing is not watched here: what a read's
    answers do not send at once waits for the reactor (`DNSConnection`). One per reactor
    (`reads_for`): every DNS address's connections in one poll."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self._poll = select.epoll()
        #: descriptor -> the connection read there
        self._connections: dict[int, PolledConnection] = {}
        self._watched = False

    def fileno(self) -> int:
        return self._poll.fileno()

    def logPrefix(self) -> str:
        return "DNS TCP reads"

    def __len__(self) -> int:
        return len(self._connections)

    def reading(self, connection: PolledConnection) -> bool:
        """Whether *connection* is read now (not paused, not closed)."""
        return connection.polled >= 0 and self._connections.get(connection.polled) is connection

    def add(self, connection: PolledConnection) -> None:
        """Read *connection* (Twisted's ``startReading``); nothing if it is read already."""
        fd = connection.fileno()
        held = self._connections.get(fd)
        if held is connection or fd < 0:
            return
        if held is not None:  # (closed without being told: its descriptor is another's now)
            self._forget(held)
        try:
            self._poll.register(fd, select.EPOLLIN)
        except FileExistsError:  # (the old one's registration: the kernel drops it only at close)
            self._poll.modify(fd, select.EPOLLIN)
        self._connections[fd] = connection
        connection.polled = fd
        if not self._watched:
            self._watched = True
            self.reactor.addReader(self)

    def remove(self, connection: PolledConnection) -> None:
        """Stop reading *connection* (Twisted's ``stopReading``); nothing if it is not read."""
        if self._connections.get(connection.polled) is connection:
            self._forget(connection)

    def _forget(self, connection: PolledConnection) -> None:
        del self._connections[connection.polled]
        with contextlib.suppress(OSError, ValueError):  # (closed: the kernel dropped it)
            self._poll.unregister(connection.polled)
        connection.polled = -1

    def doRead(self) -> None:
        """Read every connection with bytes (or gone), as the reactor would one by one."""
        connections = self._connections
        try:
            events = self._poll.poll(0, min(len(connections), PER_POLL) or 1)
        except InterruptedError:
            return
        for fd, event in events:
            connection = connections.get(fd)
            if connection is None:
                continue  # (closed or paused by an earlier read of this loop)
            if event & select.EPOLLIN:
                try:
                    why = connection.doRead()
                except BaseException as error:  # as the reactor: logged, the connection ends
                    why = error
                    log.err()
                if why:
                    self._lost(connection, why)
            else:  # (hung up or an error, nothing left to read: as the reactor, done)
                self._lost(connection, CONNECTION_DONE)

    def _lost(self, connection: PolledConnection, why: BaseException) -> None:
        """End *connection* for *why*, as the reactor ends a descriptor whose read returned
        it (`PosixReactorBase._disconnectSelectable`: a clean close is a half-close only
        for a half-closeable protocol, which a DNS one is not)."""
        self.remove(connection)
        self.reactor.removeWriter(connection)
        connection.connectionLost(Failure(why))

    def connectionLost(self, reason: Failure) -> None:
        """The reactor lets go of every descriptor (it is stopping): the connections end
        with it, as its own would."""
        self._watched = False
        for connection in list(self._connections.values()):
            self._lost(connection, CONNECTION_LOST)


_reads: weakref.WeakKeyDictionary[Any, ConnectionReads] = weakref.WeakKeyDictionary()


def reads_for(reactor: Any) -> ConnectionReads:
    """The `ConnectionReads` of *reactor* (made at the first call)."""
    reads = _reads.get(reactor)
    if reads is None:
        reads = _reads[reactor] = ConnectionReads(reactor)
    return reads


class PolledStreamPort(DNSStreamPort):
    """A `DNSStreamPort` whose connections are read by *reactor*'s `ConnectionReads`."""

    transport = PolledConnection
    reads: ConnectionReads

    def startListening(self) -> None:
        self.reads = reads_for(self.reactor)
        super().startListening()


def adopt_tcp(reactor: Any, fileno: int, family: int, factory: Any) -> IListeningPort:
    """Listen with *factory* on the bound TCP socket *fileno*: a `PolledStreamPort` on a real
    (POSIX) reactor (a `DNSStreamPort` where there is no epoll), else (a test's fake) the
    reactor's own port."""
    if not polls_descriptors(reactor):
        port: IListeningPort = reactor.adoptStreamPort(fileno, family, factory)
        return port
    kind = PolledStreamPort if hasattr(select, "epoll") else DNSStreamPort
    stream_port: DNSStreamPort = kind._fromListeningDescriptor(reactor, fileno, family, factory)
    stream_port.startListening()
    return stream_port
