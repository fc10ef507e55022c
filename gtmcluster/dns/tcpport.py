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

The port is made as `IReactorSocket.adoptStreamPort` makes Twisted's (its classmethod
`_fromListeningDescriptor`, then `startListening`); a reactor that is not a POSIX one (a
test's fake) gets its own `adoptStreamPort`.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import tcp
from twisted.internet.interfaces import IListeningPort

from gtmcluster.runtime.reactors import polls_descriptors


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


def adopt_tcp(reactor: Any, fileno: int, family: int, factory: Any) -> IListeningPort:
    """Listen with *factory* on the bound TCP socket *fileno*: a `DNSStreamPort` on a real
    (POSIX) reactor, else (a test's fake) the reactor's own port."""
    if not polls_descriptors(reactor):
        port: IListeningPort = reactor.adoptStreamPort(fileno, family, factory)
        return port
    stream_port: DNSStreamPort = DNSStreamPort._fromListeningDescriptor(reactor, fileno, family, factory)
    stream_port.startListening()
    return stream_port
