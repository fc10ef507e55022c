"""A stopping node ends within bounded time whatever its peers do, and writes its snapshot.

- `PeerService.stopService` asks every peer connection to close and aborts those still
  open `CLOSE_GRACE` seconds later (a peer that stopped reading never answers TLS's
  close_notify, and a dialled connection's `ClientService` waits for the close).
- `NodeService.stopService` waits for the snapshot and the answering workers (killed after
  their own timeout), and for the other parts at most `STOP_DEADLINE` seconds (those still
  stopping are logged).

Fake clocks (`MemoryReactorClock`) and recording transports; the real thing with a peer
stopped by SIGSTOP is tests/process/test_partition.py.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import capturedLogs
from twisted.python.failure import Failure

from gtmcluster.config.load import load
from gtmcluster.config.model import TLSFiles
from gtmcluster.node import Node
from gtmcluster.nodeservice import STOP_DEADLINE, NodeService
from gtmcluster.runtime.reactors import Runtime
from gtmcluster.state.store import Store
from gtmcluster.sync import certs
from gtmcluster.sync.peer import PeerProtocol
from gtmcluster.sync.replicator import Replicator
from gtmcluster.sync.service import CLOSE_GRACE, PeerService
from gtmcluster.sync.tls import load_credentials
from tests.support import configs


class PeerTransport(StringTransport):
    """A peer connection's transport: closes when asked if the peer answers (*answers*),
    and always when aborted; records which happened."""

    def __init__(self, proto: PeerProtocol, answers: bool):
        super().__init__()
        self.proto = proto
        self.answers = answers
        self.asked = self.aborted = False

    def loseConnection(self) -> None:
        self.asked = True
        if self.answers:
            self.proto.connectionLost(Failure(ConnectionDone()))

    def abortConnection(self) -> None:
        self.aborted = True
        self.proto.connectionLost(Failure(ConnectionLost()))


@pytest.fixture
def reactor() -> MemoryReactorClock:
    return MemoryReactorClock()


@pytest.fixture
def replicator(reactor: MemoryReactorClock) -> Replicator:
    store = Store("n1", reactor.seconds)
    return Replicator(
        store, reactor, node="n1", group="test", datacenter="DC1", members=["n1", "n2", "n3"], config_digest="d"
    )


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield sock
    sock.close()


@pytest.fixture
def peers(tmp_path: Path, reactor: MemoryReactorClock, replicator: Replicator, listener: socket.socket) -> PeerService:
    certs.init_ca(tmp_path)
    certs.issue(tmp_path, "n1")
    files = TLSFiles(tmp_path / "ca.pem", tmp_path / "n1.pem", tmp_path / "n1.key")
    service = PeerService(replicator, load_credentials(files, "n1"), listener, [], reactor)
    service.startService()
    return service


def connection(replicator: Replicator, answers: bool) -> PeerTransport:
    """An accepted peer connection (still in its handshake: the phase does not matter)."""
    proto = PeerProtocol(replicator)
    transport = PeerTransport(proto, answers)
    proto.makeConnection(transport)
    return transport


def test_peer_connections_that_close_are_not_aborted(
    peers: PeerService, replicator: Replicator, reactor: MemoryReactorClock
) -> None:
    """Connections that close when asked end the stop at once; nothing is aborted and no
    timer is left behind."""
    polite = [connection(replicator, answers=True) for _ in range(2)]
    stopped: list[object] = []
    peers.stopService().addCallback(stopped.append)
    assert stopped and all(t.asked and not t.aborted for t in polite)
    assert not replicator.connections
    assert not [c for c in reactor.getDelayedCalls() if c.active()]


def test_a_peer_connection_that_does_not_close_is_aborted_after_the_grace(
    peers: PeerService, replicator: Replicator, reactor: MemoryReactorClock
) -> None:
    """A connection whose peer never answers the close is aborted `CLOSE_GRACE` seconds
    after the stop began (logged), and only then does the stop finish."""
    polite = connection(replicator, answers=True)
    silent = connection(replicator, answers=False)
    stopped: list[object] = []
    with capturedLogs() as events:
        peers.stopService().addCallback(stopped.append)
        assert polite.asked and silent.asked and not silent.aborted and not stopped
        reactor.advance(CLOSE_GRACE - 0.01)
        assert not silent.aborted and not stopped
        reactor.advance(0.01)
    assert silent.aborted and not polite.aborted and stopped
    assert not replicator.connections
    (aborted,) = [e for e in events if e.get("event") == "peer_aborted"]
    assert aborted["count"] == 1


class Stopping(Service):
    """A part whose stop finishes when the test says (`finish`), or never."""

    def __init__(self, name: str):
        self.setName(name)
        self.done: defer.Deferred[None] = defer.Deferred()

    def stopService(self) -> defer.Deferred[None]:
        super().stopService()
        return self.done


@pytest.fixture
def node(tmp_path: Path, reactor: MemoryReactorClock, replicator: Replicator) -> NodeService:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    config = load(configs.write(tmp_path, raw))
    node = Node(config, "n1", reactor.seconds)
    return NodeService(node, replicator, reactor, str(config.path), runtime=Runtime.of(reactor))


def parts(top: NodeService, *names: str) -> dict[str, Stopping]:
    made = {name: Stopping(name) for name in names}
    for part in made.values():
        part.setServiceParent(top)
    return made


def test_the_stop_waits_for_other_parts_at_most_the_deadline(node: NodeService, reactor: MemoryReactorClock) -> None:
    """A part that does not finish stopping holds the node's stop `STOP_DEADLINE` seconds
    at most; it is named in the log."""
    made = parts(node, "snapshot", "stuck", "quick")
    node.snapshots = made["snapshot"]  # type: ignore[assignment]
    node.startService()
    stopped: list[object] = []
    with capturedLogs() as events:
        node.stopService().addCallback(stopped.append)
        made["snapshot"].done.callback(None)
        made["quick"].done.callback(None)
        reactor.advance(STOP_DEADLINE - 0.01)
        assert not stopped
        reactor.advance(0.01)
    assert stopped
    (late,) = [e for e in events if e.get("event") == "stop_deadline"]
    assert late["parts"] == "stuck"


@pytest.mark.parametrize("kept", ["snapshot", "workers"])
def test_the_stop_always_waits_for_the_snapshot_and_the_workers(
    node: NodeService, reactor: MemoryReactorClock, kept: str
) -> None:
    """The snapshot (the state must be on disk) and the answering workers (none may be left
    holding the DNS port; they are killed after their own timeout) are waited for past the
    deadline; when every part is done the stop ends at once, with no deadline left pending."""
    made = parts(node, "snapshot", "workers", "quick")
    node.snapshots = made["snapshot"]  # type: ignore[assignment]
    node.workers = made["workers"]  # type: ignore[assignment]
    node.startService()
    stopped: list[object] = []
    node.stopService().addCallback(stopped.append)
    made["quick"].done.callback(None)
    made["snapshot" if kept == "workers" else "workers"].done.callback(None)
    reactor.advance(STOP_DEADLINE * 4)
    assert not stopped
    made[kept].done.callback(None)
    assert stopped
    assert not [c for c in reactor.getDelayedCalls() if c.active()]
