"""The DNS service's UDP transport: the protocol that answers a datagram through the fast
path (`DNSDatagramProtocol`), and its port: Twisted's, with the kept replies answered in its
read loop.

The hooks at the edge of the answer path are here: the query log (the protocol queues each
query with its reply and what decided it, which the fast path returns: `responder.Answered`)
and rate limiting (`FastPath.respond` asks the limiter before anything else).

`twisted.internet.udp.Port.doRead` reads datagrams until a quarter megabyte is read or the socket
is empty, and hands each to the protocol. Here the same loop first looks the datagram up
in the kept replies (`dns.kept`: `static_hits` by its bytes after the ID, `wide_hits` by
those and its source) and sends a hit straight back: one or two dict lookups, the ID put
in, one ``sendto`` (and, with the query log on, the entry queued as the protocol queues
it). What is not kept goes to the protocol as before, and so does every datagram while
rate limiting is on (each query takes a token first). The replies are the bytes
`FastPath.handle` gives for the same datagram
(`tests/unit/test_kept_replies.py` checks it on a real socket).

The port is made as `IReactorSocket.adoptDatagramPort` makes Twisted's (its classmethod
`_fromListeningDescriptor`, then `startListening`); a reactor that is not a POSIX one (a
test's fake) gets its own `adoptDatagramPort`.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from twisted.internet import udp
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import DatagramProtocol
from twisted.python import log

from gtmcluster.dns.fastpath import FastPath
from gtmcluster.querylog import dnstap
from gtmcluster.querylog.writer import QueryQueue
from gtmcluster.runtime.reactors import polls_descriptors

#: the largest query read over UDP: a query is a question and an OPT record, far below it
#: (a bigger datagram is cut and then refused as malformed); each read allocates this much
MAX_UDP_QUERY = 4096


class DNSDatagramProtocol(DatagramProtocol):
    """Answers UDP queries (through the fast path)."""

    noisy = False

    def __init__(self, fast: FastPath, local: tuple[str, int] = ("", 0)):
        self.fast = fast
        self._sendto: Any = None
        #: the query log's queue, None when it is off; and our address, for its entries
        self.log: QueryQueue | None = None
        self.local = local

    def startProtocol(self) -> None:
        # The port's own write checks the address and the errors on every reply; the
        # address is the one a datagram came from, so send straight on the socket.
        self._sendto = self.transport.socket.sendto  # type: ignore[union-attr]

    def datagramReceived(self, datagram: bytes, addr: Any) -> None:
        reply, decided, _ = self.fast.respond(datagram, addr[0])
        log = self.log
        if log is not None:
            log.add(addr, self.local, dnstap.UDP, datagram, reply, decided)
        if reply is not None:
            try:  # noqa: SIM105 - cheaper than contextlib.suppress on the answer path
                self._sendto(reply, addr)
            except OSError:
                pass  # a full send buffer or a client gone: UDP replies may be lost

    def answer_new(self, datagram: bytes, addr: Any) -> None:
        """Answer *datagram*, known not to be a kept reply, with rate limiting off
        (`udpport.DNSPort` looked it up already)."""
        reply, decided, _ = self.fast.answer(datagram, addr[0])
        log = self.log
        if log is not None:
            log.add(addr, self.local, dnstap.UDP, datagram, reply, decided)
        if reply is not None:
            self._sendto(reply, addr)  # (the port's loop takes an OSError)


#: errors of a read that only mean there is nothing (more) to read now
_NOTHING = frozenset((errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR, errno.ECONNREFUSED))


class DNSPort(udp.Port):
    """A UDP port whose read loop answers kept replies itself (see the module's doc)."""

    protocol: DNSDatagramProtocol

    def doRead(self) -> None:
        proto = self.protocol
        fast = proto.fast
        if fast.limiter is not None:
            super().doRead()  # (each query takes a token first, in the protocol)
            return
        queue = proto.log
        log_add = queue.add if queue is not None else None
        local = proto.local
        sock = self.socket
        recvfrom, sendto = sock.recvfrom, sock.sendto
        static_get, wide_get, still = fast.static_hits.get, fast.wide_hits.get, fast.still
        queries = fast.stats.queries
        new = proto.answer_new
        size = self.maxPacketSize
        v6 = self.addressFamily == socket.AF_INET6
        read = 0
        while read < self.maxThroughput:
            try:
                data, addr = recvfrom(size)
            except OSError as error:
                if error.errno in _NOTHING:
                    return
                raise
            read += len(data)
            if v6:
                addr = addr[:2]  # (as Twisted's port gives it: no flow or scope ID)
            try:
                tail = data[2:]
                static = static_get(tail)
                if static is not None:
                    queries[static[1]] += 1
                    reply = data[:2] + static[0]
                    if log_add is not None:
                        log_add(addr, local, dnstap.UDP, data, reply)
                elif (wide := wide_get((tail, addr[0]))) is not None and still(wide):
                    reply = data[:2] + wide.reply
                    if log_add is not None:
                        log_add(addr, local, dnstap.UDP, data, reply, wide.tally)
                else:
                    new(data, addr)
                    continue
                sendto(reply, addr)
            except OSError:
                pass  # a full send buffer or a client gone: UDP replies may be lost
            except Exception:
                log.err(None, "answering a UDP query")


def adopt_udp(reactor: Any, fileno: int, family: int, proto: DNSDatagramProtocol, max_size: int) -> IListeningPort:
    """Listen with *proto* on the bound UDP socket *fileno*: a `DNSPort` on a real (POSIX)
    reactor, else (a test's fake) the reactor's own port."""
    if not polls_descriptors(reactor):
        port: IListeningPort = reactor.adoptDatagramPort(fileno, family, proto, maxPacketSize=max_size)
        return port
    dns_port: DNSPort = DNSPort._fromListeningDescriptor(reactor, fileno, family, proto, maxPacketSize=max_size)
    dns_port.startListening()
    return dns_port
