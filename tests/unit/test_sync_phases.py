"""The phase objects of a peer connection (`sync.phases`): what each phase accepts and
refuses, what a whole box, a heartbeat's tick and the connection's end do in it, and where
each input takes it. First each phase against a connection that records what it is told
(`phases.Connection` is all a phase may use of one), then the same behaviour through a
real `sync.peer.PeerProtocol` on a string transport and a fake clock."""

from __future__ import annotations

import pytest
from twisted.internet.error import ConnectionLost
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import LogEvent, capturedLogs
from twisted.protocols import amp
from twisted.python.failure import Failure

from gtmcluster.state.store import Store
from gtmcluster.sync import peer, phases
from gtmcluster.sync.replicator import Replicator

ALL = [phases.HANDSHAKE, phases.HELLO, phases.ESTABLISHED, phases.CLOSED]
BEFORE_HELLOS = [phases.HANDSHAKE, phases.HELLO]


class Recorder:
    """A connection that records what its phase does to it."""

    def __init__(self, initiator: bool = False) -> None:
        self.initiator = initiator
        self.told: list[str] = []

    def violation(self, reason: str, graceful: bool = False, logged: bool = True) -> None:
        self.told.append(f"violation: {reason}")

    def alive(self) -> None:
        self.told.append("alive")

    def send_heartbeat(self) -> None:
        self.told.append("heartbeat")

    def schedule_heartbeat(self) -> None:
        self.told.append("next tick")

    def handshake_failed(self, reason: Failure) -> None:
        self.told.append(f"handshake failed: {reason.getErrorMessage()}")


# -- the transition table ------------------------------------------------------------------

TABLE = {
    (phases.HANDSHAKE, "verified"): phases.HELLO,
    (phases.HANDSHAKE, "agreed"): None,
    (phases.HANDSHAKE, "ended"): phases.CLOSED,
    (phases.HELLO, "verified"): None,
    (phases.HELLO, "agreed"): phases.ESTABLISHED,
    (phases.HELLO, "ended"): phases.CLOSED,
    (phases.ESTABLISHED, "verified"): None,
    (phases.ESTABLISHED, "agreed"): None,
    (phases.ESTABLISHED, "ended"): phases.CLOSED,
    (phases.CLOSED, "verified"): None,
    (phases.CLOSED, "agreed"): None,
    (phases.CLOSED, "ended"): phases.CLOSED,
}


@pytest.mark.parametrize(("start", "given"), list(TABLE), ids=[f"{p}-{i}" for p, i in TABLE])
def test_each_input_in_each_phase_moves_as_the_table_says(start: phases.Phase, given: str) -> None:
    """The whole table: an input it allows moves the connection on; any other raises
    and leaves it where it was."""
    machine = phases.Phases()
    machine.now = start
    expected = TABLE[(start, given)]
    if expected is None:
        with pytest.raises(phases.OutOfTurn, match=str(start)):
            getattr(machine, given)()
        assert machine.now is start
    else:
        getattr(machine, given)()
        assert machine.now is expected


def test_a_new_connection_starts_in_its_handshake() -> None:
    assert phases.Phases().now is phases.HANDSHAKE


def test_only_established_says_established_and_only_closed_says_closed() -> None:
    assert [p.established for p in ALL] == [False, False, True, False]
    assert [p.closed for p in ALL] == [False, False, False, True]


# -- each phase's behaviour ------------------------------------------------------------------


@pytest.mark.parametrize("phase", BEFORE_HELLOS, ids=str)
def test_before_the_hellos_only_a_hello_is_read(phase: phases.Phase) -> None:
    conn = Recorder()
    assert phase.admit(conn, b"Hello")
    assert conn.told == []
    assert not phase.admit(conn, b"Publish")
    assert not phase.admit(conn, None)
    assert conn.told == ["violation: command b'Publish' before Hello", "violation: command None before Hello"]


def test_an_established_connection_reads_every_command() -> None:
    conn = Recorder()
    assert all(phases.ESTABLISHED.admit(conn, c) for c in (b"Hello", b"Publish", b"Heartbeat", b"Nonsense"))
    assert conn.told == []  # (an unknown one is the dispatcher's to refuse, not the phase's)


def test_a_closed_connection_reads_nothing_and_drops_nothing_again() -> None:
    conn = Recorder()
    assert not phases.CLOSED.admit(conn, b"Hello")
    assert not phases.CLOSED.admit(conn, b"Publish")
    assert conn.told == []


@pytest.mark.parametrize("initiator", [False, True], ids=["responder", "initiator"])
def test_a_peers_hello_is_checked_only_in_the_hello_phase_by_the_side_that_did_not_dial(
    initiator: bool,
) -> None:
    taken = [p for p in ALL if p.takes_hello(initiator)]
    assert taken == ([] if initiator else [phases.HELLO])


def test_only_the_hello_phase_waits_for_the_answer_to_our_hello() -> None:
    assert [p for p in ALL if p.awaits_answer] == [phases.HELLO]


@pytest.mark.parametrize("phase", ALL, ids=str)
def test_a_whole_box_is_a_sign_of_life_only_once_established(phase: phases.Phase) -> None:
    conn = Recorder()
    phase.whole_box(conn)
    assert conn.told == (["alive"] if phase is phases.ESTABLISHED else [])


@pytest.mark.parametrize("phase", ALL, ids=str)
def test_a_heartbeats_tick_sends_one_and_ticks_again_only_once_established(phase: phases.Phase) -> None:
    """The ticks stop for good when the connection leaves established (dropped, before
    the transport says it is gone)."""
    conn = Recorder()
    phase.beat(conn)
    assert conn.told == (["heartbeat", "next tick"] if phase is phases.ESTABLISHED else [])


@pytest.mark.parametrize("phase", ALL, ids=str)
def test_an_end_in_the_handshake_is_a_tls_failure_and_no_other_is(phase: phases.Phase) -> None:
    """We refuse certificates and time out in the later phases, and say so then; an end
    in the handshake was OpenSSL's refusal, said when the connection goes."""
    conn = Recorder()
    reason = Failure(ConnectionLost("unknown ca"))
    phase.lost(conn, reason)
    expected = [f"handshake failed: {reason.getErrorMessage()}"]
    assert conn.told == (expected if phase is phases.HANDSHAKE else [])


# -- through a real connection ----------------------------------------------------------------


class Connection:
    """gtm-a's side of a connection gtm-b dialled (a string transport, a fake clock)."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.replicator = Replicator(
            Store("gtm-a", self.clock.seconds),
            self.clock,
            node="gtm-a",
            group="g",
            datacenter="DC1",
            members=["gtm-a", "gtm-b"],
            config_digest="d",
        )
        self.proto = peer.PeerProtocol(self.replicator)
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)

    def verified(self) -> None:
        self.proto.peer = "gtm-b"
        self.proto.phases.verified()

    def establish(self) -> None:
        self.verified()
        self.proto._establish("DC2", 1, "d")
        self.clock.advance(0)

    def send(self, **values: bytes) -> list[LogEvent]:
        data = bytes(amp.AmpBox({k.encode(): v for k, v in values.items()}).serialize())
        with capturedLogs() as events:
            self.proto.dataReceived(data)
            self.clock.advance(0)
        return list(events)

    def lose(self) -> list[LogEvent]:
        with capturedLogs() as events:
            self.proto.connectionLost(Failure(ConnectionLost("gone")))
        return list(events)


def refusals(events: list[LogEvent]) -> list[str]:
    return [e["reason"] for e in events if e.get("event") == "peer_refused"]


def tls_failures(events: list[LogEvent]) -> list[str]:
    return [e["reason"] for e in events if "TLS handshake failed" in e.get("log_format", "")]


@pytest.mark.parametrize("verified", [False, True], ids=["handshake", "hello"])
def test_a_command_before_the_hellos_drops_the_peer_unanswered(verified: bool) -> None:
    c = Connection()
    if verified:
        c.verified()
    events = c.send(_command=b"Changed", _ask=b"1")
    assert refusals(events) == ["command b'Changed' before Hello"]
    assert c.proto.phase is phases.CLOSED
    assert b"_answer" not in c.transport.value()


def test_a_second_hello_once_established_is_refused_and_closes_the_connection() -> None:
    c = Connection()
    c.establish()
    hello = {
        "_command": b"Hello",
        "_ask": b"7",
        "node": b"gtm-b",
        "group": b"g",
        "datacenter": b"DC2",
        "version": b"1",
        "min_version": b"1",
        "config_digest": b"d",
    }
    events = c.send(**hello)
    assert b"unexpected Hello" in c.transport.value()
    assert refusals(events) == ["an unexpected Hello"]
    assert c.proto.phase is phases.CLOSED


def test_once_dropped_a_connection_reads_nothing_more_and_stops_its_heartbeats() -> None:
    """Between our drop and the transport's word that the connection is gone, what the
    peer still sends is not read (not answered, not logged) and the heartbeat does not tick."""
    c = Connection()
    c.establish()
    interval = c.replicator.heartbeat_interval
    c.transport.clear()
    for _ in range(3):
        c.clock.advance(interval)
    assert c.transport.value().count(b"Heartbeat") >= 3  # (established: one a tick at least)
    with capturedLogs() as events:
        c.proto.violation("for the test")
    assert refusals(list(events)) == ["for the test"]
    c.transport.clear()
    assert refusals(c.send(_command=b"Changed", _ask=b"2")) == []
    c.clock.advance(interval * 5)
    assert c.transport.value() == b""
    with capturedLogs() as again:
        c.proto.violation("twice")
    assert refusals(list(again)) == []


def test_only_a_connection_lost_in_its_handshake_logs_a_tls_failure() -> None:
    in_handshake = Connection()
    said = tls_failures(in_handshake.lose())
    assert len(said) == 1 and said[0].endswith("gone."), said
    in_hello = Connection()
    in_hello.verified()
    assert refusals(in_hello.lose()) == []
    established = Connection()
    established.establish()
    assert refusals(established.lose()) == []
    dropped = Connection()  # (dropped in its handshake: said once, by the drop)
    dropped.proto.violation("certificate refused: for the test")
    assert tls_failures(dropped.lose()) == []
    assert {in_handshake.proto.phase, in_hello.proto.phase, established.proto.phase} == {phases.CLOSED}
