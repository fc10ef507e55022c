"""Zone transfers on a TCP connection (`dns.stream.DNSStreamProtocol`), with back-pressure:
a transfer's messages are made as the client takes them, one transfer at a time per
connection, within caps per source address and in all (`dns.xfrslots`), and the
connection is cut when its client takes nothing for ``stall_timeout``. A connection's
requests are answered only while its client reads, a turn's worth at a time.

The transport is `tests.support.sendbuffer.SendBuffer`: it pauses the protocol past a
send buffer's worth of bytes and resumes it when the test takes them, as Twisted does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dns.message
import dns.rcode
import pytest
from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs

from gtmcluster.config.dnsserver import TransferLimits
from gtmcluster.dns.responder import Responder
from gtmcluster.dns.stream import PER_TURN, DNSStreamFactory, DNSStreamProtocol
from gtmcluster.dns.transfer import Transfers
from gtmcluster.dns.xfrslots import TransferSlots
from gtmcluster.runtime.stats import QueryStats
from tests.support.sendbuffer import SendBuffer, frames
from tests.unit.test_ixfr import BIG, stepper
from tests.unit.test_server import framed
from tests.unit.test_transfer import RING, read, records, request, transfer_config

#: a send buffer of 16 KiB: the 6,000-record zone (about 80 KiB) takes several
SIZE = 16384
#: the most a send buffer may hold: its size, and the message that went past it
BOUND = SIZE + 2 + 65535
WHOLE = 19 + 6000 + 1


def _no_wideips(*args: Any) -> Any:
    raise AssertionError("no wide IP is asked here")


def factory_of(
    tmp_path: Path,
    tsig: bool = False,
    limits: TransferLimits | None = None,
    cooperate: Any = None,
    allow: list[str] | None = None,
) -> DNSStreamFactory:
    """A TCP listener for a node serving the 6,000-record zone with ``transfer`` (to
    127.0.0.0/8, or *allow*)."""
    extra = {} if allow is None else {"allow": allow}
    config = transfer_config(tmp_path, tsig=tsig, zone=BIG, **extra)
    transfers = Transfers(config.zones, config.transfers, cooperate=cooperate)
    responder = Responder(config.zones, {}, _no_wideips, stats=QueryStats(), transfers=transfers)
    if limits is None:
        return DNSStreamFactory(responder, Clock(), 10, 100)
    return DNSStreamFactory(responder, Clock(), 10, 100, 5.0, limits)


def connect(
    factory: DNSStreamFactory, host: str = "127.0.0.1", size: int = SIZE
) -> tuple[DNSStreamProtocol, SendBuffer]:
    transport = SendBuffer(host, size)
    proto = factory.buildProtocol(transport.getPeer())
    transport.protocol = proto
    proto.makeConnection(transport)
    return proto, transport


def clock_of(factory: DNSStreamFactory) -> Clock:
    clock = factory.clock
    assert isinstance(clock, Clock)
    return clock


def turns(clock: Any) -> None:
    """Run the reactor turns due now (the requests left for the next turn)."""
    for _ in range(10_000):
        if not any(call.getTime() <= clock.seconds() for call in clock.getDelayedCalls()):
            return
        clock.advance(0)
    raise AssertionError("turns without end")


def one_turn(clock: Any) -> None:
    """Run the calls due now, not those they add (a reactor runs those in its next turn;
    `Clock.advance` would run them too)."""
    due = [call for call in clock.getDelayedCalls() if call.getTime() <= clock.seconds()]
    for call in due:
        if call.active():
            func, args, kw = call.func, call.args, call.kw
            call.cancel()
            func(*args, **kw)


def by_id(data: bytes) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for wire in frames(data):
        out.setdefault(int.from_bytes(wire[:2], "big"), []).append(wire)
    return out


def test_a_transfer_is_made_as_the_client_takes_it(tmp_path: Path) -> None:
    """Eight AXFRs pipelined: the node sends one transfer at a time, each message only
    once the client has taken the send buffer, and reads the next request only after; so
    the bytes waiting never pass a send buffer and a message (the eight: 640 KB)."""
    factory = factory_of(tmp_path)
    proto, transport = connect(factory)
    queries = [request(ring=None) for _ in range(8)]
    assert len({q.id for q in queries}) == 8
    proto.dataReceived(b"".join(framed(q.to_wire()) for q in queries))
    assert transport.most <= BOUND, transport.most
    assert transport.held and transport.producerState == "paused"  # (not read meanwhile)
    assert factory.slots.in_flight == 1
    data = b""
    for _ in range(1000):
        data += transport.take()
        turns(factory.clock)
        assert factory.slots.in_flight <= 1
        if not transport.value():
            break
    got = by_id(data)
    assert sorted(got) == sorted(q.id for q in queries)
    for query in queries:
        assert len(records(read(got[query.id], query, ring=None))) == WHOLE
    assert len(data) > 8 * 80_000
    assert transport.most <= BOUND, transport.most
    assert factory.slots.in_flight == 0 and transport.producerState == "producing"


def test_requests_wait_while_the_client_does_not_read(tmp_path: Path) -> None:
    """Queries pipelined by a client that reads nothing: answered until Twisted's send
    buffer is full, then not even those already read are, until the client reads."""
    factory = factory_of(tmp_path)
    proto, transport = connect(factory, size=1024)
    queries = [dns.message.make_query(f"host{i}.example.test", "A") for i in range(200)]
    proto.dataReceived(b"".join(framed(q.to_wire()) for q in queries))
    turns(factory.clock)
    waiting = frames(transport.value())
    assert 0 < len(waiting) < 30 and transport.held
    assert transport.producerState == "paused"
    answers: list[bytes] = []
    for _ in range(1000):
        answers += frames(transport.take())
        turns(factory.clock)
        if len(answers) == len(queries):
            break
    assert [dns.message.from_wire(a).id for a in answers] == [q.id for q in queries]
    assert transport.most <= 1024 + 200, transport.most


def test_a_turn_answers_a_bounded_number_of_requests(tmp_path: Path) -> None:
    """A burst of pipelined requests is answered PER_TURN at a time, one reactor turn
    after another (the UDP port and other connections are served in between); the
    connection is not read until the burst is answered."""
    factory = factory_of(tmp_path)
    proto, transport = connect(factory)
    queries = [dns.message.make_query("www.example.test", "A") for _ in range(2 * PER_TURN + 3)]
    proto.dataReceived(b"".join(framed(q.to_wire()) for q in queries))
    assert len(frames(transport.value())) == PER_TURN
    assert transport.producerState == "paused"
    one_turn(factory.clock)
    assert len(frames(transport.value())) == 2 * PER_TURN
    one_turn(factory.clock)
    assert len(frames(transport.value())) == len(queries)
    assert transport.producerState == "producing"


def test_a_client_that_takes_nothing_is_cut_after_the_stall_timeout(tmp_path: Path) -> None:
    """A transfer whose client stops reading holds its slot for stall_timeout, then the
    connection is cut and the slot given back; the idle timeout (10 s) does not cut a
    transfer, and a client taking its messages slowly, each within the deadline, gets the
    whole zone however long it takes."""
    factory = factory_of(tmp_path, limits=TransferLimits(stall_timeout=30))
    proto, transport = connect(factory)
    proto.dataReceived(framed(request(ring=None).to_wire()))
    assert transport.held and factory.slots.in_flight == 1
    with capturedLogs() as events:
        clock_of(factory).advance(29)
        assert transport.connected  # (past the idle timeout: a transfer is not idle)
        clock_of(factory).advance(2)
    assert not transport.connected
    assert factory.closed_by["stalled"] == 1 and factory.slots.in_flight == 0
    assert [e["log_format"] for e in events] == ["zone transfer to {peer} cut: nothing taken for {seconds:g} s"]

    slow, slow_transport = connect(factory, "127.0.0.2")
    query = request(ring=None)
    slow.dataReceived(framed(query.to_wire()))
    data = b""
    while slow_transport.value():
        clock_of(factory).advance(25)
        data += slow_transport.take()
    assert len(records(read(frames(data), query, ring=None))) == WHOLE
    assert slow_transport.connected and factory.closed_by["stalled"] == 1


def test_caps_refuse_past_max_per_source_and_max_in_flight(tmp_path: Path) -> None:
    """One transfer per source and two in all: a second from the same source is refused,
    a first from another begins, a third source is refused (all in flight); REFUSED is
    signed as the request was (RFC 8945 5.3), counted, and logged once, not per request.
    A slot given back lets the source in again."""
    factory = factory_of(tmp_path, tsig=True, limits=TransferLimits(max_in_flight=2, max_per_source=1))
    stats = factory.responder.stats

    def ask(host: str) -> tuple[DNSStreamProtocol, SendBuffer, Any]:
        proto, transport = connect(factory, host)
        query = request()
        proto.dataReceived(framed(query.to_wire()))
        return proto, transport, query

    with capturedLogs() as events:
        _, first, first_query = ask("127.0.0.1")
        refusals = []
        for host in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
            _, transport, query = ask(host)
            if host != "127.0.0.2":
                refusals.append((transport, query))
    assert factory.slots.in_flight == 2 and factory.slots.by_source == {"127.0.0.1": 1, "127.0.0.2": 1}
    assert factory.slots.refused == {"source": 1, "total": 1}
    for transport, query in refusals:
        (wire,) = frames(transport.value())
        refused = dns.message.from_wire(wire, keyring=RING, request_mac=query.mac)
        assert refused.rcode() == dns.rcode.REFUSED and refused.had_tsig and not refused.answer
        assert transport.connected and transport.producerState == "producing"  # (it may ask again)
    assert stats.queries[("", "AXFR", "REFUSED", "transfer")] == 2
    warnings = [e for e in events if e["log_level"] == LogLevel.warn]
    assert len(warnings) == 1 and warnings[0]["peer"] == "127.0.0.1"
    data = b""
    while first.value():
        data += first.take()
    assert len(records(read(frames(data), first_query))) == WHOLE
    assert factory.slots.by_source == {"127.0.0.2": 1}
    _, again, query = ask("127.0.0.1")
    assert factory.slots.by_source == {"127.0.0.1": 1, "127.0.0.2": 1}
    assert dns.message.from_wire(frames(again.value())[0], keyring=RING, request_mac=query.mac).answer


def test_max_per_source_counts_an_ipv6_64_as_one_source(tmp_path: Path) -> None:
    """A secondary asking from a new address of its IPv6 /64 on each connection meets
    max_per_source as one source: the third is REFUSED and counted as the source's cap;
    another /64 begins its transfer. (On main each address had max_per_source of its own.)"""
    limits = TransferLimits(max_in_flight=10, max_per_source=2)
    factory = factory_of(tmp_path, limits=limits, allow=["2001:db8::/32"])
    transports = []
    with capturedLogs() as events:
        for host in ("2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3", "2001:db8:1:3::1"):
            proto, transport = connect(factory, host)
            proto.dataReceived(framed(request(ring=None).to_wire()))
            transports.append(transport)
    assert factory.slots.in_flight == 3
    assert factory.slots.by_source == {"2001:db8:1:2::/64": 2, "2001:db8:1:3::/64": 1}
    assert factory.slots.refused == {"source": 1, "total": 0}
    assert dns.message.from_wire(frames(transports[2].value())[0]).rcode() == dns.rcode.REFUSED
    assert all(dns.message.from_wire(frames(transports[i].value())[0]).answer for i in (0, 1, 3))
    (warning,) = [e for e in events if e["log_level"] == LogLevel.warn]
    assert warning["peer"] == "2001:db8:1:2:ffff::3" and warning["source"] == "2001:db8:1:2::/64"
    assert warning["theirs"] == 2


def test_a_connection_lost_gives_its_slot_back_even_while_its_transfer_is_made(tmp_path: Path) -> None:
    """A transfer's slot goes back when its connection goes: while its messages are sent,
    and while it is still being encoded (the encoding then finishes for nobody)."""
    clock, cooperator = stepper()
    factory = factory_of(tmp_path, cooperate=cooperator.cooperate)
    proto, transport = connect(factory)
    proto.dataReceived(framed(request(ring=None).to_wire()))
    assert factory.slots.in_flight == 1 and transport.value() == b""  # (being encoded)
    transport.loseConnection()
    assert factory.slots.in_flight == 0
    for _ in range(100):
        clock.advance(1)
    assert transport.value() == b""
    other, other_transport = connect(factory)
    other.dataReceived(framed(request(ring=None).to_wire()))  # (the encoding kept: sent at once)
    assert other_transport.held and factory.slots.in_flight == 1
    other_transport.loseConnection()
    assert factory.slots.in_flight == 0


def test_new_caps_apply_to_new_transfers(tmp_path: Path) -> None:
    """A reload's caps (`configure_transfers`): transfers in flight keep their slots, a new
    request meets the new caps."""
    factory = factory_of(tmp_path)
    for host in ("127.0.0.1", "127.0.0.2"):
        proto, _ = connect(factory, host)
        proto.dataReceived(framed(request(ring=None).to_wire()))
    factory.configure_transfers(TransferLimits(max_in_flight=1, max_per_source=1, stall_timeout=5))
    assert factory.slots.in_flight == 2 and factory.stall_timeout == 5
    proto, transport = connect(factory, "127.0.0.3")
    proto.dataReceived(framed(request(ring=None).to_wire()))
    assert dns.message.from_wire(frames(transport.value())[0]).rcode() == dns.rcode.REFUSED


def test_slots_count_in_all_and_per_source() -> None:
    slots = TransferSlots(max_in_flight=3, max_per_source=2)
    a1, a2, b = slots.take("a"), slots.take("a"), slots.take("b")
    assert a1 is not None and a2 is not None and b is not None
    assert slots.take("a") is None and slots.take("c") is None
    assert slots.refused == {"source": 0, "total": 2}  # (the total is checked first)
    b.release()
    assert slots.take("a") is None and slots.refused["source"] == 1
    a1.release()
    a1.release()  # (once only)
    assert slots.in_flight == 1 and slots.by_source == {"a": 1}
    a2.release()
    assert slots.in_flight == 0 and slots.by_source == {}


@pytest.mark.parametrize("kind", ["AXFR", "IXFR"])
def test_ixfr_goes_the_same_way(tmp_path: Path, kind: str) -> None:
    """An IXFR that is the whole zone (a serial the journal does not hold) is sent as an
    AXFR is: within the send buffer, one at a time."""
    factory = factory_of(tmp_path)
    proto, transport = connect(factory)
    queries = [request(kind, ring=None, serial=0 if kind == "IXFR" else None) for _ in range(3)]
    proto.dataReceived(b"".join(framed(q.to_wire()) for q in queries))
    data = b""
    for _ in range(1000):
        data += transport.take()
        turns(factory.clock)
        if not transport.value():
            break
    got = by_id(data)
    assert all(len(records(read(got[q.id], q, ring=None))) == WHOLE for q in queries)
    assert transport.most <= BOUND
