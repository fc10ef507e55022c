"""Fuzz target: a peer connection's byte stream (AMP boxes) once TLS is up.

Node gtm-a's `PeerProtocol` for a connection gtm-b dialled, gtm-b's certificate already
checked; the input is what gtm-b sends. Its first byte chooses whether the Hello exchange
is done (odd: established, and gtm-a's reconciliation has asked its Summary question, tag
``1``, so answers are read as well as commands) and how the rest is cut into reads (the
second byte: the size of each). Invariants: nothing raises out of `dataReceived`, no
traceback is logged (a malformed box is met with a logged reason and a dropped
connection, see `PeerProtocol.violation`), and closing the connection afterwards is clean.
"""

from __future__ import annotations

from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from fuzz.harness import Finding, no_tracebacks
from gtmcluster.state.store import Store
from gtmcluster.sync import peer
from gtmcluster.sync.replicator import Replicator


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    clock = Clock()
    clock.advance(1_000_000)
    store = Store("gtm-a", clock.seconds)
    for i in range(3):
        store.put(f"k/{i}", {"n": i})
    replicator = Replicator(
        store, clock, node="gtm-a", group="g", datacenter="DC1", members=["gtm-a", "gtm-b"], config_digest="d"
    )
    proto = peer.PeerProtocol(replicator)
    transport = StringTransport()
    with no_tracebacks():
        proto.makeConnection(transport)
        proto.peer = "gtm-b"
        proto.phases.verified()  # (its certificate checked: the Hello phase)
        if data[0] & 1:
            proto._establish("DC2", 1, "d")
            clock.advance(0)
        stream = data[2:]
        step = data[1] + 1
        for i in range(0, len(stream), step):
            if transport.disconnecting:
                break  # the connection is being closed: the reactor reads no more
            try:
                proto.dataReceived(stream[i : i + step])
            except Exception as e:
                raise Finding(f"dataReceived raised {type(e).__name__}: {e}") from e
        clock.advance(1)
        proto.connectionLost(Failure(ConnectionDone()))
        clock.advance(120)
