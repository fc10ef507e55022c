"""The node's answering workers: started, fed, counted, restarted, stopped.

With ``dns_server.processes: N`` the node answers UDP on its own sockets and starts N - 1
workers (`worker`), each with its own UDP socket per DNS address, bound by the node before
it dropped privileges (SO_REUSEPORT: the kernel spreads queries over the N sockets). Each
worker gets the node's records (all of them, then every change), who the observers are and
whether the node is ready; it sends back what its decisions ask for (written here) and its
counters (added to the node's).

Until a worker holds the node's whole state, the node reads the worker's sockets itself
(it covers them), so no query is answered from part of the state: the worker begins to
answer when it hears the state (`feed.State`), which comes after every record. The feed
begins once the node has loaded its whole snapshot (see `state.loading`). A worker that
exits is covered the same way until it is restarted (after 1 s, and then longer while it
keeps failing) and fed again. Stopping the node stops the workers (SIGTERM, SIGKILL after
`STOP_TIMEOUT`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer, error, task
from twisted.internet.protocol import Factory, ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.udpport import MAX_UDP_QUERY, DNSDatagramProtocol, adopt_udp
from gtmcluster.fanout import feed
from gtmcluster.node import Node
from gtmcluster.nodeparts import Reload
from gtmcluster.querylog.writer import QueryQueue
from gtmcluster.runtime.reactors import Supervising
from gtmcluster.runtime.sockets import Listener
from gtmcluster.state.record import Record
from gtmcluster.sync import codec

log = Logger()

FIRST_RESTART = 1.0
MAX_RESTART = 30.0
#: a worker that ran this long has its restart delay reset
STEADY = 60.0
#: a worker still running this long after SIGTERM gets SIGKILL (within the node's own stop
#: bound, `nodeservice.STOP_DEADLINE`: a worker left behind would hold the DNS port)
STOP_TIMEOUT = 2.0
#: records read from the store per turn of the reactor while feeding a new worker
FEED_CHUNK = 2000


class _Output(ProcessProtocol):
    """A worker's process: its output goes to the node's log; its end is reported."""

    def __init__(self, index: int, ended: Callable[[int, Failure], object]):
        self.index = index
        self.ended = ended
        self.exited: defer.Deferred[None] = defer.Deferred()
        self._partial = b""

    def errReceived(self, data: bytes) -> None:
        self._partial += data
        *lines, self._partial = self._partial.split(b"\n")
        for line in lines:
            if line.strip():
                log.warn("worker {index}: {line}", index=self.index, line=line.decode(errors="replace"))

    outReceived = errReceived

    def processEnded(self, reason: Failure) -> None:
        self.exited.callback(None)
        self.ended(self.index, reason)


class _Slot:
    """One worker: its sockets (one per DNS address), its process, its feed."""

    def __init__(self, index: int, sockets: list[tuple[socket.socket, socket.AddressFamily]]):
        self.index = index
        self.sockets = sockets
        self.process: Any = None
        self.output: _Output | None = None
        self.side: feed.NodeSide | None = None
        #: every record held has been sent to the worker (it hears it is ready after that)
        self.fed = False
        self.started = 0.0
        self.delay = FIRST_RESTART
        self.answered = 0
        #: batches of records sent to the worker that it has not yet said it holds
        self.unacknowledged = 0
        #: the node's own ports on this worker's sockets while it is down
        self.covering: list[Any] = []
        self.restart: Any = None


class Workers(Service):
    """The node's answering worker processes, one per slot, each on every DNS listener's
    share of sockets."""

    label = "answering workers"

    def __init__(
        self,
        node: Node,
        listeners: list[Listener],
        reactor: Supervising,
        config_path: str,
        own_dir: Path | None,
        fast_path: Callable[[], FastPath],
        observers: Callable[[], frozenset[str]],
        loaded: Callable[[], defer.Deferred[None]] = lambda: defer.succeed(None),
        query_log: Callable[[], QueryQueue | None] = lambda: None,
    ):
        self.node = node
        self.reactor = reactor
        self.config_path = config_path
        self.own_dir = own_dir  # the node's own base folder when config_path is a bundle's
        self.fast_path = fast_path  # the node's own fast path, for covering a worker's sockets
        self.observers = observers
        self.loaded = loaded  # fires once the node's store holds its whole snapshot
        #: the node's own query log queue (None: off), for the queries it answers for a worker
        self.query_log = query_log
        count = len(listeners[0].workers) if listeners else 0
        self.slots = [
            _Slot(i + 1, [(listener.workers[i], listener.family) for listener in listeners]) for i in range(count)
        ]
        self._outbox: list[Record] = []
        self._flush: Any = None
        node.store.subscribe(self._changed)
        node.ready_listeners.append(lambda ready: self.send_state())

    # -- processes ---------------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        for slot in self.slots:
            self._cover(slot)
            self._spawn(slot)

    def _cover(self, slot: _Slot) -> None:
        """Answer on *slot*'s sockets here (its worker is not answering)."""
        if slot.covering:
            return
        fast = self.fast_path()
        for sock, family in slot.sockets:
            proto = DNSDatagramProtocol(fast, tuple(sock.getsockname()[:2]))
            proto.log = self.query_log()  # (in the node's own file)
            slot.covering.append(adopt_udp(self.reactor, sock.fileno(), family, proto, MAX_UDP_QUERY))

    def _uncover(self, slot: _Slot) -> None:
        for port in slot.covering:
            port.stopListening()
        slot.covering = []

    def _spawn(self, slot: _Slot) -> None:
        slot.restart = None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = [sock.fileno() for sock, _ in slot.sockets]
        child: dict[int, int | str] = {0: "w", 1: "r", 2: "r"}
        udp_fds = []
        for n, fd in enumerate(fds):
            child[3 + n] = fd
            udp_fds.append(3 + n)
        feed_fd = 3 + len(fds)
        child[feed_fd] = theirs.fileno()
        argv = [
            sys.executable,
            "-m",
            "gtmcluster.fanout.worker",
            "--config",
            self.config_path,
            "--own-dir",
            str(self.own_dir or ""),
            "--node",
            self.node.member.name,
            "--index",
            str(slot.index),
            "--udp-fds",
            ",".join(map(str, udp_fds)),
            "--feed-fd",
            str(feed_fd),
        ]
        output = _Output(slot.index, self._ended)
        slot.output = output
        slot.process = self.reactor.spawnProcess(output, sys.executable, argv, env=dict(os.environ), childFDs=child)
        slot.started = self.reactor.seconds()
        theirs.close()

        def build() -> feed.NodeSide:
            side = feed.NodeSide(lambda ops: self._carry(slot, ops), lambda counts: self._tally(slot, counts))
            side.on_connect = lambda s: self._connected(slot, s)
            side.on_lost = lambda s: self._lost(slot, s)
            return side

        self.reactor.adoptStreamConnection(ours.fileno(), socket.AF_UNIX, Factory.forProtocol(build))
        ours.close()
        log.info("answering worker {index} started (pid {pid})", index=slot.index, pid=slot.process.pid)

    def _ended(self, index: int, reason: Failure) -> None:
        slot = self.slots[index - 1]
        slot.process = None
        if not self.running:
            return
        ran = self.reactor.seconds() - slot.started
        if ran >= STEADY:
            slot.delay = FIRST_RESTART
        status = reason.value.exitCode if isinstance(reason.value, error.ProcessTerminated) else 0
        signal = getattr(reason.value, "signal", None)
        log.warn(
            "answering worker {index} exited ({how}) after {ran:.1f} s; its queries are answered here "
            "until it is restarted in {delay:g} s",
            index=index,
            how=f"signal {signal}" if signal else f"status {status}",
            ran=ran,
            delay=slot.delay,
            event="worker_exited",
        )
        self._cover(slot)
        slot.restart = self.reactor.callLater(slot.delay, self._spawn, slot)
        slot.delay = min(MAX_RESTART, slot.delay * 2)

    def stopService(self) -> defer.Deferred[None]:
        super().stopService()
        waits = []
        for slot in self.slots:
            if slot.restart is not None and slot.restart.active():
                slot.restart.cancel()
            self._uncover(slot)
            if slot.process is not None and slot.output is not None:
                waits.append(self._stop(slot))
        for slot in self.slots:
            for sock, _ in slot.sockets:
                sock.close()
        return defer.gatherResults(waits).addCallback(lambda _: None)

    def _stop(self, slot: _Slot) -> defer.Deferred[None]:
        assert slot.output is not None
        exited = slot.output.exited
        try:
            slot.process.signalProcess("TERM")
        except error.ProcessExitedAlready:
            return defer.succeed(None)

        def kill() -> None:
            if slot.process is not None:
                with contextlib.suppress(error.ProcessExitedAlready):
                    slot.process.signalProcess("KILL")

        timer = self.reactor.callLater(STOP_TIMEOUT, kill)
        exited.addBoth(lambda _: timer.cancel() if timer.active() else None)
        return exited

    # -- the feed ---------------------------------------------------------------------------

    def _connected(self, slot: _Slot, side: feed.NodeSide) -> None:
        slot.side = side
        slot.fed = False
        # Every record held (once the snapshot is loaded whole: records loaded are not
        # news that goes out as changes), a batch per turn of the reactor (a full table is
        # millions of records, seconds of encoding); changes meanwhile go out as they
        # happen, and the worker keeps the newest version of each. Then the state: the
        # worker answers, and hears whether the node is ready, only once it holds what the
        # node held.
        self.loaded().addCallback(lambda _: task.cooperate(self._feed_all(slot, side)))

    def _feed_all(self, slot: _Slot, side: feed.NodeSide) -> Iterator[None]:
        records = self.node.store.all_records()
        while chunk := list(itertools.islice(records, FEED_CHUNK)):
            if slot.side is not side:
                return  # the worker went away
            now = self.reactor.seconds()
            for batch, _ in codec.batches([r for r in chunk if r.live(now)], now):
                self._send_batch(slot, side, batch)
            yield None
        if slot.side is side:
            slot.fed = True

            def answering(_: object) -> None:
                if slot.side is side:
                    self._uncover(slot)  # the worker has taken every record in: it answers now

            self._send_state(side).addCallback(answering)

    def _lost(self, slot: _Slot, side: feed.NodeSide) -> None:
        if slot.side is side:
            slot.side = None

    def _changed(self, record: Record) -> None:
        if not record.live(self.reactor.seconds()):
            return  # an expiry: every worker expires on its own
        if not any(slot.side is not None for slot in self.slots):
            return
        self._outbox.append(record)
        if self._flush is None:
            self._flush = self.reactor.callLater(0, self._send_records)

    def _send_records(self) -> None:
        self._flush = None
        records, self._outbox = self._outbox, []
        latest = {r.key: r for r in records}.values()
        for batch, _ in codec.batches(latest, self.reactor.seconds()):
            for slot in self.slots:
                if slot.side is not None:
                    self._send_batch(slot, slot.side, batch)

    def _send_batch(self, slot: _Slot, side: feed.NodeSide, batch: bytes) -> None:
        """Send one batch of records; the slot counts it until the worker says it holds it
        (or the feed is lost)."""
        slot.unacknowledged += 1

        def done(_: object) -> None:
            slot.unacknowledged -= 1

        side.callRemote(feed.Records, batch=batch).addBoth(done)

    def send_state(self) -> None:
        """Tell every worker whose verdicts count and whether the node is ready."""
        for slot in self.slots:
            if slot.side is not None and slot.fed:
                self._send_state(slot.side)

    def _send_state(self, side: feed.NodeSide) -> defer.Deferred[Any]:
        """Fires once the worker has taken the state in (and every record sent before it)."""
        observers = sorted(self.observers())
        sent: defer.Deferred[Any] = side.callRemote(feed.State, observers=observers, ready=self.node.ready)
        return sent.addErrback(lambda _: None)

    def prepare(self, reload: Reload) -> Callable[[], None]:
        """The part of a reload that is the workers' (`nodeparts.Reconfigurable`): once the
        node has switched, they read its new config (see `reload`)."""
        path, own_dir = str(reload.config.path), reload.own_dir
        return lambda: self.reload(path, own_dir)

    def reload(self, path: str, own_dir: Path | None) -> None:
        """Have every worker read the config (checked by the node already) again, and a
        worker started later read it (*own_dir*: *path* is a bundle's, see `config.load.build`)."""
        self.config_path, self.own_dir = path, own_dir
        for slot in self.slots:
            if slot.side is None:
                continue

            def done(answer: dict[str, Any], index: int = slot.index) -> None:
                if answer["problems"]:
                    log.error(
                        "answering worker {index} refused the reload: {problems}",
                        index=index,
                        problems="; ".join(answer["problems"]),
                    )

            slot.side.callRemote(feed.Reload, path=path, own_dir=str(own_dir or "")).addCallbacks(done, lambda _: None)

    def _carry(self, slot: _Slot, ops: bytes) -> None:
        try:
            wanted = feed.read_ops(ops, self.reactor.seconds())
        except (ValueError, KeyError, TypeError, IndexError, json.JSONDecodeError) as e:
            log.error("answering worker {index} sent a bad Carry: {e}", index=slot.index, e=e)
            return
        for op in wanted:
            if isinstance(op, feed.RumId):
                self.node.record_rum_id(op.ident, op.ldns, op.ecs)
            else:
                self.node.carry_out(*op)

    def _tally(self, slot: _Slot, counts: bytes) -> None:
        try:
            slot.answered += feed.add_counts(self.node.stats, counts)
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
            log.error("answering worker {index} sent a bad Tally: {e}", index=slot.index, e=e)

    def describe(self) -> list[dict[str, Any]]:
        """Each worker as the status API shows it."""
        now = self.reactor.seconds()
        return [
            {
                "worker": slot.index,
                "pid": slot.process.pid if slot.process is not None else None,
                "running": slot.process is not None and slot.side is not None,
                "up_for": round(now - slot.started, 3) if slot.process is not None else None,
                "answered": slot.answered,
                "covered_by_node": bool(slot.covering),
                # changes the node holds that this worker does not hold yet: batches sent
                # and not acknowledged, and the changes of this turn not sent yet
                "record_batches_behind": (slot.unacknowledged + (1 if self._outbox else 0))
                if slot.side is not None
                else None,
            }
            for slot in self.slots
        ]

    @property
    def running_workers(self) -> int:
        return sum(1 for slot in self.slots if slot.process is not None and slot.side is not None)
