"""The query log's queue, file rotation and writer, on a fake clock with writes run in place."""

from __future__ import annotations

import random
import subprocess
from collections.abc import Iterator
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import dns.message
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet import defer, task
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs, formatEvent

from gtmcluster.config.addresses import HostPort
from gtmcluster.config.dnsserver import DNSServer, QueryLog
from gtmcluster.config.load import load
from gtmcluster.dns.server import DNSService
from gtmcluster.fanout.feed import add_counts, take_counts
from gtmcluster.node import Node
from gtmcluster.querylog import dnstap, read, writer
from gtmcluster.querylog.logfile import LogFile
from gtmcluster.querylog.writer import Entry, QueryLogWriter, QueryQueue
from gtmcluster.runtime import sockets
from gtmcluster.runtime.stats import QueryStats
from tests.conftest import require_tool
from tests.support import configs
from tests.support.dnsclient import query
from tests.support.twins import make_query
from tests.unit.test_server import connect, framed, free_port


def run_here(f: Any) -> defer.Deferred[None]:
    return defer.maybeDeferred(f)


def entry(n: int, note: Any = None) -> Entry:
    return (1000.0 + n, ("192.0.2.1", 1000 + n), ("127.0.0.1", 53), dnstap.UDP, b"q%d" % n, b"r%d" % n, note)


def records_in(path: Path) -> list[dnstap.Record]:
    return [dnstap.decode(r) for r in dnstap.read_frames(path.read_bytes()).records]


# -- the queue ------------------------------------------------------------------------------


def test_past_its_limit_the_queue_drops_and_counts() -> None:
    stats = QueryStats()
    queue = QueryQueue(3, stats, clock=lambda: 5.0)
    for n in range(5):
        queue.add(("192.0.2.1", n), ("127.0.0.1", 53), dnstap.UDP, b"q", b"r")
    assert [e[1][1] for e in queue.entries] == [0, 1, 2]
    assert stats.query_log_dropped == 2
    assert [e[1][1] for e in queue.take()] == [0, 1, 2]
    queue.add(("192.0.2.1", 9), ("127.0.0.1", 53), dnstap.UDP, b"q", None)
    assert len(queue.entries) == 1 and stats.query_log_dropped == 2


def test_a_note_goes_with_its_entry_only() -> None:
    queue = QueryQueue(10, QueryStats())
    tally = ("w.example", "p", "preferred", "topology", ("vs1",))
    queue.add(("192.0.2.1", 1), ("127.0.0.1", 53), dnstap.UDP, b"q", b"r", tally)
    queue.add(("192.0.2.1", 2), ("127.0.0.1", 53), dnstap.UDP, b"q", b"r")
    assert [e[6] for e in queue.take()] == [tally, None]
    queue.limit = 0
    queue.add(("192.0.2.1", 3), ("127.0.0.1", 53), dnstap.UDP, b"q", b"r", tally)  # dropped: its note too
    queue.limit = 10
    queue.add(("192.0.2.1", 4), ("127.0.0.1", 53), dnstap.UDP, b"q", b"r")
    assert [e[6] for e in queue.take()] == [None]


def test_an_entry_becomes_a_record() -> None:
    tally = ("w.example", "p", "preferred", "topology", ("vs1", "vs2"))
    e: Entry = (1700000000.5, ("::ffff:192.0.2.9", 4242, 0, 0), ("::", 53), dnstap.TCP, b"Q", b"R", tally)
    record = writer.record_of(e, b"n1", b"gtmcluster")
    assert record.type == dnstap.AUTH_RESPONSE
    assert (record.family, record.query_address, record.query_port) == (dnstap.INET, bytes([192, 0, 2, 9]), 4242)
    assert (record.response_address, record.response_port) == (bytes(16), 53)
    assert record.query_time == record.response_time == (1700000000, 500_000_000)
    assert (record.query_message, record.response_message, record.protocol) == (b"Q", b"R", dnstap.TCP)
    assert dnstap.parse_extra(record.extra) == dnstap.Decided("w.example", "p", "preferred", "topology", ("vs1", "vs2"))
    unanswered = writer.record_of((*e[:5], None, None))
    assert (unanswered.type, unanswered.response_message, unanswered.extra) == (dnstap.AUTH_QUERY, None, b"")


# -- the file and its rotation ------------------------------------------------------------


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    sizes=st.lists(st.integers(1, 300), min_size=1, max_size=60),
    batches=st.integers(1, 5),
    max_bytes=st.integers(100, 1500),
    keep=st.integers(0, 4),
)
def test_rotation_keeps_whole_files_under_the_size_with_the_newest_records(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], batches: int, max_bytes: int, keep: int
) -> None:
    """Each file is a whole Frame Streams file (rotated ones end with STOP) no larger than
    max_bytes unless it holds one record; together, oldest first, they hold the newest
    records written, in order, and the files past `keep` are gone."""
    path = tmp_path_factory.mktemp("log") / "q.dnstap"
    log = LogFile(path, max_bytes, keep)
    payloads = [bytes([n % 251]) * size for n, size in enumerate(sizes)]
    step = -(-len(payloads) // batches)
    for i in range(0, len(payloads), step):
        log.write([dnstap.data_frame(p) for p in payloads[i : i + step]])
    log.close()
    names = sorted(p.name for p in path.parent.iterdir())
    files = [path.with_name(f"q.dnstap.{n}") for n in range(keep, 0, -1)] + [path]
    files = [f for f in files if f.exists()]
    assert sorted(f.name for f in files) == names  # nothing past keep
    assert len(files) == min(keep, log.rotations) + 1
    seen: list[bytes] = []
    for f in files:
        frames = dnstap.read_frames(f.read_bytes())
        assert frames.stopped
        assert f.stat().st_size <= max_bytes or len(frames.records) == 1
        seen += frames.records
    assert seen == payloads[len(payloads) - len(seen) :]
    if keep >= log.rotations:
        assert seen == payloads


def test_a_previous_runs_file_is_rotated_away_not_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "q.dnstap"
    first = LogFile(path, 10_000, 2)
    first.write([dnstap.data_frame(b"old")])
    first.close()
    second = LogFile(path, 10_000, 2)
    second.write([dnstap.data_frame(b"new")])
    second.close()
    assert dnstap.read_frames((tmp_path / "q.dnstap.1").read_bytes()).records == [b"old"]
    assert dnstap.read_frames(path.read_bytes()).records == [b"new"]
    assert path.stat().st_mode & 0o777 == 0o640


def test_rotated_files_are_read_by_dnstap_read(tmp_path: Path) -> None:
    """BIND's reader takes every file, the current and the rotated ones."""
    require_tool("dnstap-read", "bind9-dnsutils")
    path = tmp_path / "q.dnstap"
    log = LogFile(path, 300, 3)
    entries = []
    for n in range(8):
        q = dns.message.make_query(f"n{n}.example.test", "A")
        entries.append((1000.0 + n, ("192.0.2.1", 1000 + n), ("127.0.0.1", 53), dnstap.UDP, q.to_wire(), None, None))
    log.write(writer.frames_of(entries))
    log.close()
    assert log.rotations >= 2
    seen = []
    for f in [path.with_name("q.dnstap.3"), path.with_name("q.dnstap.2"), path.with_name("q.dnstap.1"), path]:
        if f.exists():
            out = subprocess.run(["dnstap-read", str(f)], capture_output=True, text=True, check=True).stdout
            seen += [line.split()[-1] for line in out.splitlines()]
    assert seen == [f"n{n}.example.test/IN/A" for n in range(8 - len(seen), 8)]


# -- the writer -------------------------------------------------------------------------------


def make_writer(tmp_path: Path, queue: int = 100, run: Any = run_here) -> tuple[QueryLogWriter, task.Clock]:
    clock = task.Clock()
    settings = QueryLog(tmp_path / "q.dnstap", queue=queue, max_bytes=100_000, keep=2)
    w = QueryLogWriter(settings, QueryStats(), clock, run, identity="n1", wall=lambda: 1234.5)
    return w, clock


def test_the_writer_writes_what_is_queued_every_interval_and_closes_on_stop(tmp_path: Path) -> None:
    w, clock = make_writer(tmp_path)
    w.start()
    w.queue.add(("192.0.2.1", 1), ("127.0.0.1", 53), dnstap.UDP, b"q1", b"r1")
    assert not w.file.path.exists()
    clock.advance(writer.FLUSH_INTERVAL)
    assert [r.query_message for r in records_in(w.file.path)] == [b"q1"]
    assert w.stats.query_log_written == 1
    w.queue.add(("192.0.2.1", 2), ("127.0.0.1", 53), dnstap.UDP, b"q2", b"r2")
    w.stop()
    frames = dnstap.read_frames(w.file.path.read_bytes())
    assert frames.stopped
    assert [dnstap.decode(r).query_message for r in frames.records] == [b"q1", b"q2"]
    assert {dnstap.decode(r).identity for r in frames.records} == {b"n1"}
    assert w.stats.query_log_written == 2
    assert not clock.getDelayedCalls()


def test_a_slow_write_makes_the_queue_fill_and_drop_never_wait(tmp_path: Path) -> None:
    """One write at a time: while it is under way, what comes is encoded and waits for the
    next write (up to `queue` entries), then waits in the queue (up to `queue` entries), and
    past that is dropped and counted; then the rest is written, in order."""
    pending: list[tuple[Any, defer.Deferred[None]]] = []

    def slow(f: Any) -> defer.Deferred[None]:
        d: defer.Deferred[None] = defer.Deferred()
        pending.append((f, d))
        return d

    def add(numbers: range) -> None:
        for n in numbers:
            w.queue.add(("192.0.2.1", n), ("127.0.0.1", 53), dnstap.UDP, b"q%d" % n, b"r")

    w, clock = make_writer(tmp_path, queue=3, run=slow)
    w.start()
    add(range(2))
    clock.advance(writer.FLUSH_INTERVAL)
    assert len(pending) == 1  # q0 q1 being written
    add(range(2, 5))
    clock.advance(writer.FLUSH_INTERVAL)  # q2 q3 q4 encoded, waiting for the next write
    add(range(5, 10))  # q5 q6 q7 queued, q8 q9 dropped
    clock.advance(writer.FLUSH_INTERVAL * 3)
    assert len(pending) == 1 and len(w.queue.entries) == 3
    assert w.stats.query_log_dropped == 2
    f, d = pending.pop()
    f()
    d.callback(None)  # the next write (q2 q3 q4) starts at once
    assert len(pending) == 1
    clock.advance(writer.FLUSH_INTERVAL)  # q5 q6 q7 encoded meanwhile
    f, d = pending.pop()
    f()
    d.callback(None)
    f, d = pending.pop()
    f()
    d.callback(None)
    ports = [r.query_port for r in records_in(w.file.path)]
    assert ports == [0, 1, 2, 3, 4, 5, 6, 7]
    assert (w.stats.query_log_written, w.stats.query_log_dropped) == (8, 2)


def test_a_failed_write_is_counted_and_the_writer_goes_on(tmp_path: Path) -> None:
    """Records lost to a failed write are counted; the failure is logged once while it lasts
    (with its reason, no traceback), and its end too."""
    w, clock = make_writer(tmp_path)
    w.file.path.mkdir()  # the path is a directory: it is not the log's to rotate away
    (w.file.path / "x").touch()
    w.file.keep = 0
    w.start()
    with capturedLogs() as events:
        for n in range(2):
            w.queue.add(("192.0.2.1", n), ("127.0.0.1", 53), dnstap.UDP, b"q", b"r")
            clock.advance(writer.FLUSH_INTERVAL)
        assert (w.stats.query_log_failed, w.stats.query_log_written) == (2, 0)
        assert (w.file.path / "x").exists()
        (w.file.path / "x").unlink()
        w.file.path.rmdir()
        w.queue.add(("192.0.2.1", 2), ("127.0.0.1", 53), dnstap.UDP, b"q2", b"r2")
        clock.advance(writer.FLUSH_INTERVAL)
    assert [r.query_message for r in records_in(w.file.path)] == [b"q2"]
    texts = [formatEvent(e) for e in events]
    assert sum(f"{w.file.path} is not a regular file" in t and "not logged until it works" in t for t in texts) == 1
    assert sum("writing the query log" in t and "again" in t for t in texts) == 1
    assert not any(e.get("log_failure") for e in events)


# -- the transports and the answer paths --------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.socket = self
        self.sent: list[bytes] = []

    def sendto(self, data: bytes, addr: Any) -> None:
        self.sent.append(data)


@pytest.fixture
def logged(tmp_path: Path) -> Iterator[tuple[DNSService, Node, list[sockets.Listener]]]:
    raw = configs.base()
    raw["dns_server"]["query_log"] = {"path": "var/log/q.dnstap", "max_bytes": 1_000_000, "keep": 2, "queue": 1000}
    config = load(configs.write(tmp_path, raw))
    node = Node(config, "n1", clock=lambda: 0.0, rng=random.Random(1))
    node.ready = True
    listeners = sockets.bind([HostPort(ip_address("127.0.0.1"), free_port())])
    service = DNSService(
        MemoryReactorClock(), listeners, node.responder, 10, 100, query_log=config.dns_server.query_log, identity="n1"
    )
    assert service.query_log is not None
    service.query_log.run = run_here
    yield service, node, listeners
    for listener in listeners:
        listener.close()


def test_udp_and_tcp_queries_are_logged_with_what_decided(
    logged: tuple[DNSService, Node, list[sockets.Listener]],
) -> None:
    """The general path (first query), the fast path (the same query again, from the kept
    decision), a static name and TCP: each queued with its addresses and what decided."""
    service, node, _ = logged
    proto = service.udp[0]
    sent = Recorder()
    proto.transport = sent  # type: ignore[assignment]
    proto.startProtocol()
    ecs = (1, 24, bytes([198, 51, 100]))
    wideip_query = make_query("gslb.example.test", ecs=ecs)
    proto.datagramReceived(wideip_query, ("127.0.0.9", 4000))
    proto.datagramReceived(wideip_query, ("127.0.0.9", 4001))
    proto.datagramReceived(query("www.example.test"), ("127.0.0.9", 4002))
    proto.datagramReceived(query("www.example.test"), ("127.0.0.9", 4003))  # a template now
    tcp, transport = connect(service.tcp, "127.0.2.5")
    tcp.dataReceived(framed(query("gslb.example.test", qid=7)))
    assert node.stats.kept_hits >= 1  # the second UDP query came from the kept decision
    entries = list(service.query_log.queue.entries) if service.query_log else []
    assert [(e[1][1], e[3]) for e in entries] == [
        (4000, dnstap.UDP),
        (4001, dnstap.UDP),
        (4002, dnstap.UDP),
        (4003, dnstap.UDP),
        (40000, dnstap.TCP),
    ]
    decided = [e[6] for e in entries]
    # from an ECS-trusted resolver, the client subnet (r1) chose DC1; over TCP, 127.0.2.5 (r2) DC2
    assert decided[0] == decided[1] == ("gslb.example.test", "p", "preferred", "topology", ("vs1",))
    assert decided[2] is None and decided[3] is None
    assert decided[4] == ("gslb.example.test", "p", "preferred", "topology", ("vs2",))
    assert entries[0][4] == wideip_query and entries[0][5] == sent.sent[0]
    assert entries[4][2][1] == transport.getHost().port


def test_a_reload_to_another_path_closes_the_old_file_and_opens_the_new(
    logged: tuple[DNSService, Node, list[sockets.Listener]], tmp_path: Path
) -> None:
    service, node, _listeners = logged
    old = service.query_log
    assert old is not None
    proto = service.udp[0]
    proto.transport = Recorder()  # type: ignore[assignment]
    proto.startProtocol()
    service.startService()
    proto.datagramReceived(query("www.example.test"), ("127.0.0.9", 4000))
    # the same path, a smaller queue: the same writer, resized
    same = DNSServer(1232, 10.0, 100, query_log=QueryLog(old.settings.path, queue=200))
    service.configure(same)
    assert service.query_log is old and old.queue.limit == 200
    moved = DNSServer(1232, 10.0, 100, query_log=QueryLog(tmp_path / "elsewhere.dnstap"))
    service.prepare(moved, node.responder)()
    new = service.query_log
    assert new is not None and new is not old
    new.run = run_here
    assert dnstap.read_frames(old.settings.path.read_bytes()).stopped  # written out and closed
    assert len(records_in(old.settings.path)) == 1
    proto.datagramReceived(query("www.example.test"), ("127.0.0.9", 4001))
    service.configure(DNSServer(1232, 10.0, 100))  # off: the last entries written, closed
    assert service.query_log is None and proto.log is None and service.tcp.log is None
    assert [r.query_port for r in records_in(new.settings.path)] == [4001]
    assert dnstap.read_frames(new.settings.path.read_bytes()).stopped
    proto.datagramReceived(query("www.example.test"), ("127.0.0.9", 4002))
    # (nothing on the answer path holds the log: what decided a query goes with its answer)
    assert not new.queue.entries and [r.query_port for r in records_in(new.settings.path)] == [4001]
    service.stopService()


# -- reading it back ----------------------------------------------------------------------


def test_a_file_being_written_reads_up_to_its_last_whole_record(tmp_path: Path) -> None:
    """`querylog.read` takes the file of a running node (no STOP yet, perhaps a record cut)
    and prints a line per record with the extra field."""
    path = tmp_path / "q.dnstap"
    q = dns.message.make_query("gslb.example.test", "A")
    r = dns.message.make_response(q)
    tally = ("gslb.example.test", "p", "preferred", "topology", ("vs1",))
    entries: list[Entry] = [
        (1700000000.25, ("192.0.2.1", 5000), ("127.0.0.1", 53), dnstap.UDP, q.to_wire(), r.to_wire(), tally),
        (1700000001.0, ("2001:db8::1", 5001), ("::1", 53), dnstap.TCP, q.to_wire(), None, None),
    ]
    log = LogFile(path, 100_000, 1)
    log.write(writer.frames_of(entries))
    data = path.read_bytes()
    assert [r.query_port for r in read.records(data)] == [5000, 5001]
    assert [r.query_port for r in read.records(data[:-3])] == [5000]
    lines = [read.describe(r) for r in read.records(data)]
    assert lines == [
        "2023-11-14T22:13:20.250Z 192.0.2.1:5000 UDP gslb.example.test. A NOERROR"
        " [gtm1 wideip=gslb.example.test pool=p slot=preferred method=topology members=vs1]",
        "2023-11-14T22:13:21.000Z 2001:db8::1:5001 TCP gslb.example.test. A no response",
    ]
    with pytest.raises(dnstap.FrameError):
        list(read.records(b"\x00\x00\x00\x05hello"))


addresses = st.one_of(
    st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str), st.sampled_from(["127.0.0.1", "::1"])
)
notes = st.none() | st.tuples(
    st.text(min_size=1, max_size=20),
    st.text(max_size=10),
    st.sampled_from(["preferred", "alternate", ""]),
    st.text(max_size=10),
    st.lists(st.text(min_size=1, max_size=8), max_size=3).map(tuple),
)
entries_ = st.tuples(
    st.floats(0, 2**34 - 1, allow_nan=False),
    st.tuples(addresses, st.integers(0, 65535)),
    st.tuples(addresses, st.integers(0, 65535)),
    st.sampled_from([dnstap.UDP, dnstap.TCP]),
    st.binary(max_size=300),
    st.none() | st.binary(max_size=3000),
    notes,
)


@given(st.lists(entries_, max_size=12), st.binary(max_size=20))
def test_the_encoder_writes_what_record_of_describes(entries: list[Entry], identity: bytes) -> None:
    """The encoder's flat records (fields in another order, fixed-size varints, kept parts
    reused between records) read back as `record_of` describes each entry."""
    encoder = writer.Encoder(identity, b"gtmcluster")
    for _ in range(2):  # the second time from what it kept
        frames = encoder.frames(entries)
        assert [dnstap.decode(f[4:]) for f in frames] == [writer.record_of(e, identity, b"gtmcluster") for e in entries]
        assert [int.from_bytes(f[:4], "big") for f in frames] == [len(f) - 4 for f in frames]


def test_a_backlog_is_taken_in_batches_one_after_the_other(tmp_path: Path) -> None:
    w, clock = make_writer(tmp_path, queue=10 * writer.MAX_BATCH)
    w.file.max_bytes = 10**7  # (one file)
    w.start()
    count = 2 * writer.MAX_BATCH + 5
    for n in range(count):
        w.queue.add(("192.0.2.1", n % 65536), ("127.0.0.1", 53), dnstap.UDP, b"q", b"r")
    batches: list[int] = []

    def counted(f: Any) -> defer.Deferred[None]:
        batches.append(len(w.queue.entries))
        return run_here(f)

    w.run = counted
    clock.advance(writer.FLUSH_INTERVAL)  # one batch, then the next at once (callLater(0))
    assert w.stats.query_log_written == 2 * writer.MAX_BATCH
    assert batches == [count - writer.MAX_BATCH, 5]  # what was left queued at each write
    clock.advance(writer.FLUSH_INTERVAL)  # the rest, fewer than a batch, at the next interval
    assert w.stats.query_log_written == count
    assert [r.query_port for r in records_in(w.file.path)] == list(range(count))


def test_a_workers_counts_of_its_log_reach_the_node_with_its_tally() -> None:
    """An answering worker writes its own file (dns_server.processes above 1); what it
    wrote, dropped and lost is added to the node's counters (the status, /metrics) with its
    tally every second, and starts again from zero there."""
    node, worker = QueryStats(), QueryStats()
    node.query_log_written, node.query_log_dropped = 5, 1
    worker.query_log_written, worker.query_log_dropped, worker.query_log_failed = 7, 3, 2
    add_counts(node, take_counts(worker))
    assert (node.query_log_written, node.query_log_dropped, node.query_log_failed) == (12, 4, 2)
    assert (worker.query_log_written, worker.query_log_dropped, worker.query_log_failed) == (0, 0, 0)
    add_counts(node, take_counts(worker))
    assert (node.query_log_written, node.query_log_dropped, node.query_log_failed) == (12, 4, 2)
