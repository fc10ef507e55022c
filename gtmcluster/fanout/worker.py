"""An answering worker: answers UDP queries on its own sockets from a copy of the node's state.

    python -m gtmcluster.fanout.worker --config FILE --node NAME --index N \\
        --udp-fds 3,4 --feed-fd 5

The node starts it (see `supervisor`) with one UDP socket per DNS address, bound with
SO_REUSEPORT next to the node's own, and one end of the feed. It builds the same `Node` from
the same config, fills its store from the feed, and answers through the same fast and
general paths, so it answers as the node does. What its decisions ask for (persistence,
probes) and the one-use names it answered (`dns.rumnames`) go to the node, which writes
them; its counters go to the node every second. It has no health checks, no prober, no
peers, no API: the node does all that. When the feed closes (the node stopped or died) it
exits.

With ``dns_server.query_log`` it logs the queries it answers itself, to a file of its own
(`logfile.worker_path`: ``queries.w1.dnstap`` beside the node's ``queries.dnstap``), with
its own queue, writer and rotation, as the node's `DNSService` does; what it wrote, dropped
and lost goes to the node with its other counters; a reload turns it on, off or to another
file; stopping (SIGTERM, or the feed closing) writes what is queued and the STOP frame.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
from pathlib import Path
from typing import Any

from twisted.internet import defer, task
from twisted.internet.protocol import Factory
from twisted.logger import (
    FilteringLogObserver,
    Logger,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)

from gtmcluster.config import reload as config_reload
from gtmcluster.config.dnsserver import QueryLog
from gtmcluster.config.load import load
from gtmcluster.config.problems import ConfigError
from gtmcluster.dns import ratelimit
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.udpport import MAX_UDP_QUERY, DNSDatagramProtocol, adopt_udp
from gtmcluster.fanout import feed
from gtmcluster.node import Node
from gtmcluster.querylog.logfile import worker_path
from gtmcluster.querylog.writer import QueryLogWriter, in_pool
from gtmcluster.runtime.reactors import Answering, as_time
from gtmcluster.state.persistence import PersistRecord
from gtmcluster.sync import codec

log = Logger()

TALLY_INTERVAL = 1.0
TICK_INTERVAL = 1.0


class Worker:
    def __init__(self, node: Node, reactor: Answering, config_path: str, index: int = 1):
        self.node = node
        self.index = index
        self.reactor = reactor
        self.config_path = config_path
        self.observers: frozenset[str] = frozenset([node.member.name])
        node.health.schedule = lambda flush: reactor.callLater(0, flush)
        node.health.observers = lambda: self.observers
        node.health.writes = False
        node.delegate = self._carry
        node.rum_delegate = self._carry_rum_id
        self.protocols: list[DNSDatagramProtocol] = []
        #: the UDP sockets, answered on from the first `State` (sent once every record is here)
        self._fds: list[int] = []
        #: this process's own rate limiter (the kernel sends a client's queries to one process)
        self.limiter = ratelimit.make(node.config.dns_server.rate_limit, reactor.seconds, node.stats)
        self.side: feed.WorkerSide | None = None
        #: this worker's query log (its own file), None when dns_server.query_log is off
        self.query_log = self._query_log(node.config.dns_server.query_log, None)
        self._loops = [
            task.LoopingCall(self._tally),
            task.LoopingCall(node.tick),
        ]

    def answer_on(self, fds: list[int]) -> None:
        """Answer on *fds* once the node has sent its whole state (until then it answers
        on them itself)."""
        self._fds = fds

    def _answer(self) -> None:
        fds, self._fds = self._fds, []
        fast = FastPath(self.node.responder, self.limiter)
        for fd in fds:
            sock = socket.socket(fileno=fd)
            family = sock.family
            proto = DNSDatagramProtocol(fast, tuple(sock.getsockname()[:2]))  # (the node's DNS address)
            proto.log = self.query_log.queue if self.query_log is not None else None
            adopt_udp(self.reactor, sock.fileno(), family, proto, MAX_UDP_QUERY)
            sock.close()  # the reactor holds its own duplicate
            self.protocols.append(proto)

    def connect(self, fd: int) -> None:
        def build() -> feed.WorkerSide:
            side = feed.WorkerSide(self._records, self._state, self._reload, self._lost)
            self.side = side
            return side

        sock = socket.socket(fileno=fd)
        self.reactor.adoptStreamConnection(sock.fileno(), socket.AF_UNIX, Factory.forProtocol(build))
        sock.close()
        for loop, interval in zip(self._loops, (TALLY_INTERVAL, TICK_INTERVAL), strict=True):
            loop.clock = as_time(self.reactor)
            loop.start(interval, now=False)
        if self.query_log is not None:
            self.query_log.start()

    # -- the query log -----------------------------------------------------------------------

    def _query_log(self, settings: QueryLog | None, current: QueryLogWriter | None) -> QueryLogWriter | None:
        """This worker's writer for *settings* (None when off): *current* when it writes the
        same file, else a new one (not started)."""
        if settings is None:
            return None
        own = dataclasses.replace(settings, path=worker_path(settings.path, self.index))
        if current is not None and current.settings.path == own.path:
            current.reconfigure(own)
            return current
        clock = as_time(self.reactor)
        return QueryLogWriter(own, self.node.stats, clock, in_pool(self.reactor), self.node.member.name)

    def _log_to(self, settings: QueryLog | None) -> None:
        """Log to what *settings* (a new config's) say: on, off or to another file."""
        old = self.query_log
        writer = self.query_log = self._query_log(settings, old)
        if writer is old:
            return
        for proto in self.protocols:
            proto.log = writer.queue if writer is not None else None
        if old is not None:
            old.stop().addErrback(lambda f: log.failure("closing the query log", f))
        if writer is not None:
            writer.start()

    def close_log(self) -> defer.Deferred[None] | None:
        """Write what is queued and close the file (the reactor is stopping)."""
        writer, self.query_log = self.query_log, None
        for proto in self.protocols:
            proto.log = None
        if writer is None:
            return None
        done: defer.Deferred[None] = writer.stop()
        return done.addErrback(lambda f: log.failure("closing the query log", f))

    # -- from the node ---------------------------------------------------------------------

    def _records(self, batch: bytes) -> None:
        store = self.node.store
        for record in codec.decode(batch, self.reactor.seconds()):
            store.merge(record)

    def _state(self, observers: list[str], ready: bool) -> None:
        self.observers = frozenset(observers)
        self.node.health.observers_changed()
        self.node.ready = ready
        if self._fds:
            self._answer()  # the first State: every record is here

    def _reload(self, path: str, own_dir: str | None) -> defer.Deferred[dict[str, Any]]:
        async def reload() -> dict[str, Any]:
            try:
                config = await config_reload.read(self.reactor, path, Path(own_dir) if own_dir else None)
            except ConfigError as e:
                return {"problems": [str(p) for p in e.problems]}
            self.node.reload(config)
            self.limiter = ratelimit.update(
                self.limiter, config.dns_server.rate_limit, self.reactor.seconds, self.node.stats
            )
            fast = FastPath(self.node.responder, self.limiter)
            for proto in self.protocols:
                proto.fast = fast
            self._log_to(config.dns_server.query_log)
            return {"problems": []}

        return defer.ensureDeferred(reload())

    def _lost(self) -> None:
        if self.reactor.running:
            self.reactor.stop()  # the node is gone: so are we

    # -- to the node -----------------------------------------------------------------------

    def _carry(self, persist: PersistRecord | None, probe: str | None, subnet: str | None) -> None:
        if self.side is not None:
            self.side.callRemote(feed.Carry, ops=feed.carry_ops(persist, probe, subnet))

    def _carry_rum_id(self, ident: str, ldns: str, ecs: str) -> None:
        if self.side is not None:
            self.side.callRemote(feed.Carry, ops=feed.rum_id_ops(ident, ldns, ecs))

    def _tally(self) -> None:
        if self.side is not None:
            self.side.callRemote(feed.Tally, counts=feed.take_counts(self.node.stats))


def parse_fds(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gtmcluster-worker", description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--own-dir", default="", help="the node's own base folder, when --config is a bundle's")
    parser.add_argument("--node", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--udp-fds", type=parse_fds, required=True)
    parser.add_argument("--feed-fd", type=int, required=True)
    args = parser.parse_args(argv)

    from twisted.internet.epollreactor import EPollReactor
    from twisted.internet.main import installReactor

    reactor = EPollReactor()  # (what epollreactor.install does, the reactor kept typed)
    installReactor(reactor)

    # Warnings and errors go to stderr, which the node copies into its log.
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.warn)
    globalLogBeginner.beginLoggingTo(
        [FilteringLogObserver(textFileLogObserver(sys.stderr), [predicate])], redirectStandardIO=False
    )
    try:
        config = load(args.config, Path(args.own_dir) if args.own_dir else None)
    except ConfigError as e:
        print(f"worker {args.index}: the config has problems:\n{e}", file=sys.stderr)
        return 1
    node = Node(config, args.node, reactor.seconds)
    worker = Worker(node, reactor, args.config, args.index)
    worker.answer_on(args.udp_fds)
    worker.connect(args.feed_fd)
    # (SIGTERM from the node, or the feed closing, stops the reactor: the log is closed first)
    reactor.addSystemEventTrigger("before", "shutdown", worker.close_log)
    reactor.run()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
