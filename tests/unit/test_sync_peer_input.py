"""Malformed input from a peer (found by fuzzing, see fuzz/peer_stream.py): each is met
with a logged reason and a dropped connection, never an exception out of `dataReceived`
or a traceback in the log."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import LogEvent, capturedLogs
from twisted.protocols import amp
from twisted.python.failure import Failure

from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store
from gtmcluster.sync import codec, commands, peer, phases
from gtmcluster.sync.replicator import MERGE_SLICE, Replicator


def box(**values: bytes) -> bytes:
    return bytes(amp.AmpBox({k.encode(): v for k, v in values.items()}).serialize())


class Connection:
    """gtm-a's side of a connection gtm-b dialled, past TLS (and Hello when *established*)."""

    def __init__(self, established: bool = True) -> None:
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.store = Store("gtm-a", self.clock.seconds)
        for i in range(300):
            self.store.put(f"k/{i}", "x" * 300)
        self.replicator = replicator = Replicator(
            self.store,
            self.clock,
            node="gtm-a",
            group="g",
            datacenter="DC1",
            members=["gtm-a", "gtm-b"],
            config_digest="d",
        )
        self.proto = peer.PeerProtocol(replicator)
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)
        self.proto.peer = "gtm-b"
        self.proto.phases.verified()  # (its certificate checked: the Hello phase)
        if established:
            self.proto._establish("DC2", 1, "d")
            self.clock.advance(0)  # announced: gtm-a asks its Summary question (tag 1)

    def send(self, data: bytes) -> list[LogEvent]:
        with capturedLogs() as events:
            self.proto.dataReceived(data)
            self.clock.advance(1)
        return list(events)


def dropped_for(events: list[LogEvent]) -> list[str]:
    assert not [e for e in events if "log_failure" in e], "a traceback was logged"
    return [e["reason"] for e in events if e.get("event") == "peer_refused"]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (box(_command=b"Buckets", _ask=b"9", origin=b"\x9d"), "malformed Buckets command: UnicodeDecodeError"),
        (box(_command=b"Listing", _ask=b"9", origin=b"gtm-a"), "malformed Listing command: KeyError"),
        (
            box(
                _command=b"Hello",
                _ask=b"9",
                node=b"gtm-b",
                group=b"g",
                datacenter=b"D",
                version=b"one",
                min_version=b"1",
                config_digest=b"d",
            ),
            "malformed Hello command: ValueError",
        ),
        (box(_answer=b"77", summary=b"{}"), "an answer to no question (b'77')"),
        (box(_error=b"1"), "an error answer without its code and description"),
        (box(node=b"gtm-b"), "a box that is neither a command nor an answer"),
        (box(_command=b"Gossip", digest=b"1"), "unknown command b'Gossip'"),
    ],
    ids=["bad-utf8", "missing-argument", "not-a-number", "unknown-tag", "error-without-code", "empty", "unknown"],
)
def test_malformed_box_drops_the_peer_with_a_reason(data: bytes, reason: str) -> None:
    connection = Connection()
    events = connection.send(data)
    assert any(reason in r for r in dropped_for(events)), events
    assert connection.transport.disconnecting
    assert connection.proto.phase == phases.CLOSED


def test_boxes_after_the_drop_are_not_read() -> None:
    """Boxes already read with the malformed one are ignored once the peer is dropped."""
    connection = Connection()
    events = connection.send(box(_answer=b"77") + box(_command=b"Pull", _ask=b"5", keys=b'["k/1"]'))
    assert len(dropped_for(events)) == 1
    assert b"k/1" not in connection.transport.value()


def test_a_send_all_cut_by_the_connections_end_is_quiet() -> None:
    """The peer asks for every record, then goes away mid-stream: no traceback, no answer."""
    connection = Connection()
    connection.transport.clear()
    with capturedLogs() as events:
        connection.proto.dataReceived(box(_command=b"SendAll", _ask=b"5", origin=b"gtm-a"))
        assert b"Publish" in connection.transport.value()  # batches out, unanswered
        connection.proto.connectionLost(Failure(ConnectionDone()))
        connection.clock.advance(60)
    assert not [e for e in events if "log_failure" in e]
    assert b"_answer\x00\x015" not in connection.transport.value()


def test_well_formed_commands_still_answer() -> None:
    """The checks leave good boxes alone: a Pull is answered with the record."""
    connection = Connection()
    connection.transport.clear()
    events = connection.send(box(_command=b"Pull", _ask=b"5", keys=b'["k/1"]'))
    assert dropped_for(events) == []
    answer: Any = connection.transport.value()
    assert b"_answer" in answer and b"k/1" in answer
    assert commands.BY_NAME[b"Pull"] is commands.Pull


def test_a_refused_hello_sent_without_asking_is_logged_once_without_a_traceback() -> None:
    """A Hello with a bad protocol range and no _ask (found by fuzzing): the refusal is
    logged with its reason; AMP, with nobody to answer, logged a traceback too."""
    connection = Connection(established=False)
    hello = box(
        _command=b"Hello",
        node=b"gtm-b",
        group=b"g",
        datacenter=b"DC2",
        version=b"0",
        min_version=b"1",
        config_digest=b"d",
    )
    events = connection.send(hello)
    assert any("speaks protocol versions 1..0" in r for r in dropped_for(events)), events


def test_a_member_removed_during_its_handshake_is_dropped_by_the_reload() -> None:
    """Its certificate was checked while it was a member; a reload that removes it drops
    its connection still in Hello (on main its Hello went on to find no peer state)."""
    c = Connection(established=False)
    with capturedLogs() as events:
        c.replicator.reconfigure(["gtm-a"], "d2")
    assert c.proto.phase == phases.CLOSED
    assert dropped_for(list(events)) == ["no longer a member of the sync group"]
    assert c.replicator.check_hello("gtm-b", "gtm-b", "g", 2, 1) == "gtm-b is no longer a member of the sync group"


def test_a_member_removed_between_its_hello_and_its_announcement_is_dropped() -> None:
    """The answer to its Hello went out, and the reload came before the next turn, where
    the connection would join the peer's state: it is dropped there, no KeyError."""
    c = Connection(established=False)
    c.proto._establish("DC2", 2, "d")  # (announced in the next turn)
    c.replicator.peers.pop("gtm-b")  # as the reload's reconfigure leaves it ...
    c.replicator.members = frozenset({"gtm-a"})
    with capturedLogs() as events:
        c.clock.advance(0)
    assert c.proto.phase == phases.CLOSED
    assert dropped_for(list(events)) == ["no longer a member of the sync group"]
    assert not any(e.get("log_failure") for e in events)


def test_batches_delivered_in_one_read_are_merged_a_slice_a_turn() -> None:
    """Two Publish batches in one read (a connection resumed after a pause delivers what it
    buffered): the first merges its first slice at once, the second nothing in that read;
    the rest comes in later turns, and both are answered."""
    c = Connection()
    now = c.clock.seconds()
    batches = []
    for first in (0, 1000):
        records = [
            Record(f"admin/vs/v{i}", {"state": "drain"}, Version(1000 + i, 0, "gtm-b"), None, now)
            for i in range(first, first + 250)
        ]
        ((batch, _),) = list(codec.batches(records, now))
        batches.append(batch)
    held = len(c.store)
    c.proto.dataReceived(
        box(_command=b"Publish", _ask=b"7", records=batches[0])
        + box(_command=b"Publish", _ask=b"8", records=batches[1])
    )
    assert len(c.store) - held == MERGE_SLICE  # the first batch's first slice, none of the second's
    c.clock.advance(0)
    assert len(c.store) - held == 500
    answered = c.transport.value()
    assert b"_answer\x00\x017" in answered and b"_answer\x00\x018" in answered
