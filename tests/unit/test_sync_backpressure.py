"""What a member costs this node when it sends commands and reads nothing back, and the caps
on what a peer may send: write-side back-pressure (`sync.backpressure`: requests held while our
output waits unsent, a peer dropped when it stays so for `idle_timeout`), one SendAll at a
time, pushes paused at `MAX_OUTSTANDING` unanswered and while the output is blocked, and the
command rate.

gtm-a's side of a connection gtm-b dialled, past TLS and Hello, over a `StringTransport`
that acts as a TCP transport does towards a peer that does not read: it pauses the
producer registered with it once more than `BUFFER` bytes wait, and nothing ever drains
unless the test says so.
"""

from __future__ import annotations

import json

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import LogEvent, capturedLogs
from twisted.protocols import amp

from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store
from gtmcluster.sync import boxes, codec, peer, phases
from gtmcluster.sync.replicator import MAX_OUTSTANDING, Replicator
from tests.support.peerattack import parse_boxes

#: bytes a TCP transport buffers before it pauses its producer (Twisted's FileDescriptor.bufferSize)
BUFFER = 64 * 1024
IDLE = 30.0


class StalledTransport(StringTransport):
    """A transport to a peer that reads nothing: past `BUFFER` bytes written it pauses its
    producer, as a TCP transport does; `drain` lets what waits go out (and resumes it)."""

    def __init__(self, buffer: int = BUFFER) -> None:
        super().__init__()
        self.buffer = buffer
        self.stalled = False
        self.sent = b""  # what went out by `drain`

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.producer is not None and self.streaming and not self.stalled and len(self.value()) > self.buffer:
            self.stalled = True
            self.producer.pauseProducing()

    def drain(self) -> None:
        self.sent += self.value()
        self.clear()
        if self.stalled:
            self.stalled = False
            if self.producer is not None:
                self.producer.resumeProducing()


def box(**values: bytes) -> bytes:
    return bytes(amp.AmpBox({k.encode(): v for k, v in values.items()}).serialize())


class Connection:
    """gtm-a's side of an established connection gtm-b dialled; gtm-a holds `RECORDS`
    records of about a kilobyte (so a Pull of 60 of them is answered with ~60 KB)."""

    RECORDS = 300

    def __init__(self, buffer: int = BUFFER) -> None:
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.store = Store("gtm-a", self.clock.seconds)
        for i in range(self.RECORDS):
            self.store.put(f"k/{i}", "x" * 1000)
        self.replicator = Replicator(
            self.store,
            self.clock,
            node="gtm-a",
            group="g",
            datacenter="DC1",
            members=["gtm-a", "gtm-b"],
            config_digest="d",
            idle_timeout=IDLE,
        )
        self.proto = peer.PeerProtocol(self.replicator)
        self.transport = StalledTransport(buffer)
        self.proto.makeConnection(self.transport)
        self.proto.peer = "gtm-b"
        self.proto.phases.verified()
        self.proto._establish("DC2", 1, "d")
        self.clock.advance(0)  # announced: gtm-a sends a heartbeat and asks its Summary question
        self.transport.drain()

    def reconciled(self) -> None:
        """Answer gtm-a's first Summary question: gtm-b holds nothing (the round ends)."""
        (ask,) = [b[b"_ask"] for b in parse_boxes(self.transport.sent) if b.get(b"_command") == b"Summary"]
        self.send(box(_answer=ask, summary=codec.summary({})))
        assert not self.replicator.anti_entropy._reconciling

    def send(self, data: bytes) -> list[LogEvent]:
        with capturedLogs() as events:
            self.proto.dataReceived(data)
            self.clock.advance(0)
        return list(events)

    def answers(self) -> list[bytes]:
        """The tags of the answers that went out or wait to."""
        return [b[b"_answer"] for b in parse_boxes(self.transport.sent + self.transport.value()) if b"_answer" in b]


def pull(ask: int, first: int = 0, count: int = 60) -> bytes:
    keys = json.dumps([f"k/{i}" for i in range(first, first + count)]).encode()
    return box(_command=b"Pull", _ask=str(ask).encode(), keys=keys)


def dropped_for(events: list[LogEvent]) -> list[str]:
    assert not [e for e in events if "log_failure" in e], "a traceback was logged"
    return [e["reason"] for e in events if e.get("event") == "peer_refused"]


# -- requests from a peer that does not read ----------------------------------------------------


def test_requests_from_a_peer_that_does_not_read_wait_instead_of_their_answers() -> None:
    """200 Pulls of ~60 KB answers each, in one read, from a peer that reads nothing: the
    node answers until its output blocks and holds the rest, so what it buffers stays near
    the transport's buffer size (on main it wrote all 200 answers, 12 MB, into it)."""
    c = Connection()
    events = c.send(b"".join(pull(100 + i) for i in range(200)))
    assert dropped_for(events) == []
    assert len(c.transport.value()) < BUFFER + codec.MAX_BATCH + 1024, len(c.transport.value())
    assert len(c.answers()) <= 2
    assert c.proto.blocked


def test_held_requests_are_answered_in_order_once_the_output_drains() -> None:
    """The requests held while blocked are answered once what waited went out, in the order
    they came, a few at a time as the output blocks again; nothing is lost."""
    c = Connection()
    c.send(b"".join(pull(100 + i) for i in range(20)))
    assert len(c.answers()) < 20
    for _ in range(40):
        c.transport.drain()
        c.clock.advance(0)
    assert c.answers() == [str(100 + i).encode() for i in range(20)]
    assert not c.proto.blocked and c.proto.phase == phases.ESTABLISHED


def test_a_peer_whose_output_stays_blocked_for_the_idle_timeout_is_dropped() -> None:
    """A peer that keeps sending heartbeats (so it is never silent) but reads nothing is
    dropped `idle_timeout` after its output blocked, with the reason logged; on main it was
    kept for as long as it kept sending."""
    c = Connection()
    c.send(pull(100) + pull(101))
    events: list[LogEvent] = []
    for _ in range(int(IDLE) - 1):
        c.clock.advance(1)
        events += c.send(box(_command=b"Heartbeat"))
    assert c.proto.phase == phases.ESTABLISHED
    with capturedLogs() as more:
        c.clock.advance(1.5)
    assert dropped_for(events + list(more)) == [f"not reading: what this node sends it has waited unsent for {IDLE:g}s"]
    assert c.proto.phase == phases.CLOSED


def test_more_than_max_held_bytes_of_requests_drops_the_peer() -> None:
    """Requests held beyond `MAX_HELD_BYTES` (Pulls of 2000 keys, ~20 KB each) drop the peer
    at once: what it can make this node hold is bounded whatever its rate."""
    from gtmcluster.sync import backpressure  # (here: the file runs against main, which has none)

    c = Connection()
    big = json.dumps([f"k/{i % Connection.RECORDS}/{'p' * 4}" for i in range(2000)]).encode()
    events = c.send(pull(100) + pull(101))
    count = backpressure.MAX_HELD_BYTES // len(big) + 2
    events += c.send(b"".join(box(_command=b"Pull", _ask=str(200 + i).encode(), keys=big) for i in range(count)))
    reasons = dropped_for(events)
    assert len(reasons) == 1 and "requests or 1048576 bytes of them wait" in reasons[0], reasons
    assert c.proto.phase == phases.CLOSED
    assert c.proto.outlet.held == 0 and c.proto.outlet.held_bytes == 0


def test_more_than_max_held_requests_drops_the_peer() -> None:
    """Small requests (a Buckets request is ~50 bytes, its answer 8 KiB) count one by one:
    the `MAX_HELD` + 1st held drops the peer (holding one costs ~2.4 KB whatever its size)."""
    from gtmcluster.sync import backpressure

    c = Connection()
    events = c.send(pull(100) + pull(101))
    count = backpressure.MAX_HELD
    asks = b"".join(box(_command=b"Buckets", _ask=str(200 + i).encode(), origin=b"gtm-a") for i in range(count))
    events += c.send(asks)
    assert dropped_for(events) == []
    events += c.send(box(_command=b"Buckets", _ask=b"9999", origin=b"gtm-a"))
    reasons = dropped_for(events)
    assert len(reasons) == 1 and f"more than {backpressure.MAX_HELD} requests" in reasons[0], reasons


def test_publishes_heartbeats_and_answers_are_read_while_the_output_is_blocked() -> None:
    """The socket is never paused for a blocked output (two honest members pushing to each
    other would each wait for the other): a Publish is merged and answered, a heartbeat
    taken, and the answer to our own question read, all while blocked."""
    c = Connection()
    c.send(pull(100) + pull(101))
    assert c.proto.blocked
    now = c.clock.seconds()
    records = [Record("admin/vs/v1", {"state": "drain"}, Version(int(now * 1000), 0, "gtm-b"), None, now)]
    ((batch, _),) = list(codec.batches(records, now))
    (ask,) = [b[b"_ask"] for b in parse_boxes(c.transport.sent) if b.get(b"_command") == b"Summary"]
    events = c.send(
        box(_command=b"Publish", _ask=b"7", records=batch)
        + box(_command=b"Heartbeat", digest=b"1-00")
        + box(_answer=ask, summary=codec.summary({}))
    )
    assert dropped_for(events) == []
    assert not c.replicator.anti_entropy._reconciling  # (the answer to our question was read)
    record = c.store.get("admin/vs/v1")
    assert record is not None and record.value == {"state": "drain"}
    assert b"7" in c.answers()
    assert c.replicator.peers["gtm-b"].digest == "1-00"


# -- what this node sends on its own ------------------------------------------------------------


def test_pushes_pause_while_the_output_is_blocked_and_the_peer_reconciles_once_it_drains() -> None:
    """A record written while the output to gtm-b is blocked is not pushed to it (gtm-b is
    marked behind); once the output drains, gtm-a reconciles with it (asks its Summary)."""
    c = Connection()
    c.reconciled()
    c.clock.advance(1)
    c.send(pull(100) + pull(101))
    c.transport.sent = b""
    c.store.put("k/new", "y")
    c.clock.advance(0)
    assert b"k/new" not in c.transport.value()
    assert c.replicator.peers["gtm-b"].behind and c.proto.blocked
    c.transport.drain()
    c.clock.advance(0)
    c.transport.drain()
    asked = [b.get(b"_command") for b in parse_boxes(c.transport.sent)]
    assert b"Summary" in asked, asked
    assert not c.replicator.peers["gtm-b"].behind


def test_pushes_to_a_peer_that_does_not_answer_stop_at_max_outstanding() -> None:
    """Pushes to a peer that reads but never answers stop at `MAX_OUTSTANDING` unanswered
    Publish commands (the peer is marked behind); once it answers them all it reconciles."""
    c = Connection()
    c.reconciled()
    c.transport.drain()
    c.transport.sent = b""
    for i in range(MAX_OUTSTANDING + 20):  # one batch each: a value of 40 KB per record
        c.store.put(f"big/{i}", "z" * 40_000)
        c.clock.advance(0)
        c.transport.drain()  # (it reads: the output never blocks)
    published = [b for b in parse_boxes(c.transport.sent) if b.get(b"_command") == b"Publish"]
    assert len(published) == MAX_OUTSTANDING
    assert c.proto.outstanding == MAX_OUTSTANDING
    assert c.replicator.peers["gtm-b"].behind
    c.transport.sent = b""
    c.send(b"".join(box(_answer=b[b"_ask"], merged=b"1") for b in published))
    c.transport.drain()
    asked = [b.get(b"_command") for b in parse_boxes(c.transport.sent)]
    assert asked.count(b"Summary") == 1, asked
    assert c.proto.outstanding == 0 and not c.replicator.peers["gtm-b"].behind


# -- SendAll ------------------------------------------------------------------------------------


def test_a_second_send_all_while_one_is_under_way_drops_the_peer() -> None:
    """An honest member asks for one SendAll at a time; a second one on the same
    connection while the first streams (on main: a second stream, and a third ...) drops
    the peer."""
    c = Connection(buffer=2**30)  # (it reads what comes, and answers no Publish of the stream)
    events = c.send(box(_command=b"SendAll", _ask=b"5", origin=b"gtm-a"))
    assert dropped_for(events) == []
    assert any(b.get(b"_command") == b"Publish" for b in parse_boxes(c.transport.value()))
    events = c.send(box(_command=b"SendAll", _ask=b"6", origin=b"gtm-a"))
    assert dropped_for(events) == ["asked for a second SendAll while one is under way"]


def test_send_all_streams_one_after_another_are_fine() -> None:
    """A SendAll asked after the last one was answered is served."""
    c = Connection()
    for ask in (b"5", b"6"):
        c.send(box(_command=b"SendAll", _ask=ask, origin=b"gtm-a"))
        for _ in range(10):
            sent = parse_boxes(c.transport.value())
            c.transport.drain()
            c.send(b"".join(box(_answer=b[b"_ask"], merged=b"1") for b in sent if b.get(b"_command") == b"Publish"))
        assert ask in c.answers()
    assert c.proto.phase == phases.ESTABLISHED


def test_a_send_all_stream_waits_while_the_output_is_blocked() -> None:
    """No batch of a SendAll stream is written while the output is blocked; it goes on once
    the output drains."""
    c = Connection()
    c.send(pull(100) + pull(101))
    before = len(c.transport.value())
    c.proto.send_all("gtm-a")  # (as the responder does once the held request is released)
    c.clock.advance(0)
    assert len(c.transport.value()) == before
    assert c.proto.blocked
    c.transport.drain()
    c.clock.advance(0)
    assert any(b.get(b"_command") == b"Publish" for b in parse_boxes(c.transport.value()))


# -- the command rate ---------------------------------------------------------------------------


def heartbeats(count: int) -> bytes:
    return box(_command=b"Heartbeat") * count


def test_a_burst_of_rate_burst_commands_passes_and_one_more_drops_the_peer() -> None:
    """`RATE_BURST` (4000) commands at once are taken; the next one, in the same instant,
    drops the peer for going over `MAX_COMMAND_RATE`."""
    c = Connection()
    burst = int(boxes.RATE_BURST)
    assert dropped_for(c.send(heartbeats(burst))) == []
    assert c.proto.phase == phases.ESTABLISHED
    assert dropped_for(c.send(heartbeats(1))) == [f"more than {boxes.MAX_COMMAND_RATE:g} commands per second"]


def test_a_steady_rate_just_under_the_cap_is_never_dropped() -> None:
    """95 % of `MAX_COMMAND_RATE` for a minute (a tenth of a second's worth at a time)."""
    c = Connection()
    per_step = int(boxes.MAX_COMMAND_RATE * 0.95 / 10)
    events: list[LogEvent] = []
    for _ in range(600):
        c.clock.advance(0.1)
        events += c.send(heartbeats(per_step))
    assert dropped_for(events) == []
    assert c.proto.phase == phases.ESTABLISHED


def test_a_steady_rate_just_over_the_cap_is_dropped_once_the_burst_is_spent() -> None:
    """At 105 % of `MAX_COMMAND_RATE` the burst allowance drains by 100 commands a second:
    the peer is dropped after about `RATE_BURST` / 100 = 40 s, not before 35 s."""
    c = Connection()
    per_step = int(boxes.MAX_COMMAND_RATE * 1.05 / 10)
    excess = per_step * 10 - boxes.MAX_COMMAND_RATE
    events: list[LogEvent] = []
    steps = 0
    while c.proto.phase != phases.CLOSED and steps < 1000:
        c.clock.advance(0.1)
        events += c.send(heartbeats(per_step))
        steps += 1
    seconds = steps / 10
    assert boxes.RATE_BURST / excess - 5 <= seconds <= boxes.RATE_BURST / excess + 1, seconds
    assert dropped_for(events) == [f"more than {boxes.MAX_COMMAND_RATE:g} commands per second"]


# -- two honest members over pipes of finite size -----------------------------------------------


class Pipe(StringTransport):
    """One end of a connection whose bytes cross only as fast as the other end reads: what
    is written waits here, the producer registered is paused past `BUFFER` and resumed once
    all of it went across; `cross` moves up to *size* bytes when the other end is reading
    (its protocol has not paused its transport)."""

    def __init__(self) -> None:
        super().__init__()
        self.other: Pipe | None = None
        self.receiver: peer.PeerProtocol | None = None
        self.stalled = False

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.producer is not None and not self.stalled and len(self.value()) > BUFFER:
            self.stalled = True
            self.producer.pauseProducing()

    def cross(self, size: int) -> bool:
        assert self.other is not None and self.other.receiver is not None
        if self.other.producerState == "paused" or not self.value():
            return False
        data = self.value()
        self.clear()
        self.io.write(data[size:])
        self.other.receiver.dataReceived(data[:size])
        if not self.value() and self.stalled:
            self.stalled = False
            if self.producer is not None:
                self.producer.resumeProducing()
        return True


def test_two_members_pushing_to_each_other_faster_than_they_read_converge() -> None:
    """gtm-a and gtm-b each write 3000 records of 2 KB at once, over a connection that moves
    16 KB per step each way: both outputs block, and both keep reading (the peer's answers
    and Publishes), so nothing waits on the other for ever; no one is dropped, and they end
    with the same state. Had a blocked output paused reading, both would wait for the other
    to read first, until the idle timeout dropped the connection."""
    clock = Clock()
    clock.advance(1_000_000)
    names = ["gtm-a", "gtm-b"]
    stores = {n: Store(n, clock.seconds) for n in names}
    protos: dict[str, peer.PeerProtocol] = {}
    pipes = {n: Pipe() for n in names}
    pipes["gtm-a"].other, pipes["gtm-b"].other = pipes["gtm-b"], pipes["gtm-a"]
    for n in names:
        replicator = Replicator(
            stores[n], clock, node=n, group="g", datacenter=n, members=names, config_digest="d", idle_timeout=IDLE
        )
        protos[n] = peer.PeerProtocol(replicator)
        pipes[n].receiver = protos[n]
        protos[n].makeConnection(pipes[n])
    with capturedLogs() as events:
        for n, other in (("gtm-a", "gtm-b"), ("gtm-b", "gtm-a")):
            protos[n].peer = other
            protos[n].phases.verified()
            protos[n]._establish(other, 1, "d")
        clock.advance(0)
        for i in range(3000):
            for n in names:
                stores[n].put(f"admin/vs/{n}-{i}", {"state": "drain", "note": "v" * 2000})
        blocked = set()
        for _ in range(20_000):
            moved = [pipes[n].cross(16_384) for n in names]
            blocked |= {n for n in names if protos[n].blocked}
            clock.advance(0.001)
            if not any(moved) and stores["gtm-a"].digest() == stores["gtm-b"].digest():
                break
    assert blocked == set(names), "the test did not block both outputs"
    assert dropped_for(list(events)) == []
    assert len(stores["gtm-a"]) == len(stores["gtm-b"]) == 6000
    assert stores["gtm-a"].digest() == stores["gtm-b"].digest()
