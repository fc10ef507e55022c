"""Replies kept by their queries' exact bytes, and the fresh marks that let them be sent again.

A query seen before is answered by a lookup of its bytes after the ID (`FastPath.static_hits`,
`FastPath.wide_hits`); a wide IP reply only while its kept decision holds, which a fresh
mark (`lb.cache`) says without reading anything again, and whose end every change that
concerns it brings at once. The twins (a reference node on the general path, a fast node)
must give the same bytes throughout; the UDP port's read loop (`dns.udpport.DNSPort`)
answers the same on a real socket.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.config.dnsserver import RateLimit
from gtmcluster.dns import ratelimit
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.kept import WideHit
from gtmcluster.dns.udpport import DNSDatagramProtocol, DNSPort, adopt_udp
from gtmcluster.lb.cache import DecisionCache
from gtmcluster.lb.trace import Action, Decision
from gtmcluster.querylog import dnstap
from gtmcluster.querylog.writer import QueryQueue
from gtmcluster.state.record import Record, Version
from tests.support.twins import Twins, make_query

WIDEIP = "gslb.example.test"


def refuse(*args: object) -> Any:
    raise AssertionError(f"not answered from the kept replies: {args!r}")


def wide_hit(twins: Twins, query: bytes, source: str) -> WideHit:
    hit = twins.fast.wide_hits.get((query[2:], source))
    assert hit is not None, "no reply kept for this query"
    return hit


def persistent(raw: dict[str, Any]) -> None:
    raw["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}
    raw["wideips"][WIDEIP]["persistence"] = {"ttl": 100, "ipv4_prefix": 24}


def test_a_query_seen_before_is_answered_by_its_bytes(tmp_path: Path) -> None:
    """Static and wide IP replies, once kept, are sent again for the same bytes (any ID)
    without the parse, the decision lookup or the general path; a new spelling or client is
    looked up as before."""
    twins = Twins(tmp_path)
    static, wide = make_query("www.example.test"), make_query(WIDEIP, ecs=(1, 24, bytes([203, 0, 113])))
    for _ in range(3):
        twins.ask(static)
        twins.ask(wide, "127.0.1.9")
    assert static[2:] in twins.fast.static_hits
    assert wide_hit(twins, wide, "127.0.1.9").entry.fresh
    answer, cached = twins.fast.answer, twins.node.cached
    twins.fast.answer = refuse  # type: ignore[method-assign, assignment]
    twins.node.cached = refuse  # type: ignore[method-assign, assignment]
    hits = twins.node.stats.kept_hits
    for qid in (1, 0xFFFF):
        twins.ask(make_query("www.example.test", qid=qid))
        twins.ask(make_query(WIDEIP, qid=qid, ecs=(1, 24, bytes([203, 0, 113]))), "127.0.1.9")
    assert twins.node.stats.kept_hits == hits + 2  # (counted as the kept decisions' hits)
    assert dict(twins.node.stats.queries) == dict(twins.reference.stats.queries)
    assert dict(twins.node.stats.answered) == dict(twins.reference.stats.answered)
    with pytest.raises(AssertionError, match="not answered from the kept replies"):
        twins.fast.handle(make_query("WWW.example.test"), "127.0.1.9")
    with pytest.raises(AssertionError, match="not answered from the kept replies"):
        twins.fast.handle(wide, "127.0.1.10")  # another client: its own decision
    twins.fast.answer, twins.node.cached = answer, cached  # type: ignore[method-assign]


def test_a_record_read_changing_ends_the_kept_reply(tmp_path: Path) -> None:
    """The persistence record a kept decision read is rewritten: the reply kept with it is
    not sent again; the next one comes from the new record, on both nodes alike."""
    twins = Twins(tmp_path, persistent)
    query, source = make_query(WIDEIP), "198.51.100.8"
    first = [twins.ask(query, source) for _ in range(3)][-1]
    hit = wide_hit(twins, query, source)
    assert hit.entry.fresh
    key = "persist/gslb.example.test/1/198.51.100.0/24"
    record = twins.node.store.raw(key)
    assert record is not None
    other = "vs2" if record.value["members"] != ["vs2"] else "vs3"
    twins.both(lambda n: n.store.put(key, {"pool": "p", "members": [other]}, 100))
    assert not hit.entry.fresh
    after = twins.ask(query, source)
    assert after != first and after is not None and bytes([10, 0, int(other[2]), 1]) in after
    for _ in range(2):
        twins.ask(query, source)


def test_a_change_of_another_record_keeps_the_fresh_mark(tmp_path: Path) -> None:
    """Records nobody's kept decision read come and go (other clients' persistence, paths,
    verdicts of servers of no pool) and no kept reply loses its mark."""
    twins = Twins(tmp_path, persistent)
    query, source = make_query(WIDEIP), "198.51.100.8"
    for _ in range(3):
        twins.ask(query, source)
    hit = wide_hit(twins, query, source)
    twins.both(lambda n: n.store.put("persist/gslb.example.test/1/203.0.113.0/24", {"pool": "p", "members": ["vs3"]}))
    twins.both(lambda n: n.store.put("path/DC2/203.0.113.0/24", {"rtt": 0.01}))
    assert hit.entry.fresh
    twins.fast.answer = refuse  # type: ignore[method-assign, assignment]
    twins.ask(query, source)


def test_a_health_change_waiting_ends_the_kept_reply_on_its_turn(tmp_path: Path) -> None:
    """With the health tracker evaluating on later turns (as a running node does), a server
    disabled just now is still in the answers until the tracker's turn (an answer evaluates
    nothing: `health.tracker.STALE` bounds how long that is), and in none after it: the turn
    ends the wide IP's kept decision and reply."""
    twins = Twins(tmp_path)
    waiting: list[Callable[[], object]] = []
    for node in (twins.node, twins.reference):
        node.health.schedule = waiting.append
    query, source = make_query(WIDEIP), "127.0.1.9"
    for _ in range(3):
        assert bytes([10, 0, 1, 1]) in (twins.ask(query, source) or b"")
    hit = wide_hit(twins, query, source)
    twins.both(lambda n: n.store.put("admin/vs/vs1", {"state": "disabled"}))
    assert waiting and twins.node.health.urgent  # (evaluated on the next turn, not yet)
    assert bytes([10, 0, 1, 1]) in (twins.ask(query, source) or b"")
    assert hit.entry.fresh and twins.node.health.urgent
    while waiting:
        waiting.pop(0)()
    assert not hit.entry.fresh
    reply = twins.ask(query, source)
    assert reply is not None and bytes([10, 0, 1, 1]) not in reply


def test_a_health_change_elsewhere_is_trusted(tmp_path: Path) -> None:
    """A change waiting for a server of no pool of this wide IP: the reply is sent again,
    and it stays fresh."""

    def two_wideips(raw: dict[str, Any]) -> None:
        raw["virtual_servers"]["vs4"] = {"address": "10.0.4.1", "datacenter": "DC1"}
        raw["pools"]["other"] = {"members": ["vs4"], "load_balancing": {"preferred": "topology"}}
        raw["wideips"]["other.example.test"] = {"pools": ["other"]}

    twins = Twins(tmp_path, two_wideips)
    waiting: list[Callable[[], object]] = []
    for node in (twins.node, twins.reference):
        node.health.schedule = waiting.append
    query, source = make_query(WIDEIP), "127.0.1.9"
    for _ in range(3):
        twins.ask(query, source)
    twins.both(lambda n: n.store.put("admin/vs/vs4", {"state": "disabled"}))
    twins.fast.answer = refuse  # type: ignore[method-assign, assignment]
    twins.ask(query, source)
    assert wide_hit(twins, query, source).entry.fresh


def test_records_loaded_in_bulk_end_the_fresh_marks_of_their_readers(tmp_path: Path) -> None:
    """A snapshot's records are loaded without telling the record listeners; the keys they
    changed end the fresh marks of the kept replies that read them, and the reply is checked
    in full again (and answers as the reference, which loaded the same); the marks of others
    stay, so loading a store slice by slice costs what the slices hold."""
    twins = Twins(tmp_path, persistent)
    query, source = make_query(WIDEIP), "198.51.100.8"
    for _ in range(3):
        twins.ask(query, source)
    hit = wide_hit(twins, query, source)
    key = "persist/gslb.example.test/1/198.51.100.0/24"
    held = twins.node.store.raw(key)
    assert held is not None
    other = "vs2" if held.value["members"] != ["vs2"] else "vs3"
    newer = Record(
        key, {"pool": "p", "members": [other]}, Version(held.wall_ms, held.logical + 1, held.origin), 100, held.born
    )
    other_query, other_source = make_query(WIDEIP), "203.0.113.8"
    for _ in range(3):
        twins.ask(other_query, other_source)
    elsewhere = wide_hit(twins, other_query, other_source)
    twins.both(lambda n: n.store.load([newer]))
    assert not hit.entry.fresh
    assert elsewhere.entry.fresh
    reply = twins.ask(query, source)
    assert reply is not None and bytes([10, 0, int(other[2]), 1]) in reply


def test_a_cleared_cache_ends_the_kept_replies(tmp_path: Path) -> None:
    """The node becoming ready (measured methods start) clears the kept decisions: no reply
    kept from one of them is sent again."""
    twins = Twins(tmp_path)
    query, source = make_query(WIDEIP), "127.0.1.9"
    for _ in range(3):
        twins.ask(query, source)
    hit = wide_hit(twins, query, source)
    twins.both(lambda n: setattr(n, "ready", False))
    assert not hit.entry.fresh
    cache = twins.fast.decisions
    assert cache is not None and not cache.holds(hit.entry)
    twins.ask(query, source)


# -- the fresh indexes ------------------------------------------------------------------------


def decision() -> Decision:
    return Decision(Action.ANSWER, ttl=30)


def test_the_fresh_indexes_stay_bounded(tmp_path: Path) -> None:
    """Entries replaced while fresh stay indexed until their wide IP changes; past four times
    the entries held, the indexes are rebuilt from what is held, and what went is not fresh."""
    now = [0.0]
    held: dict[str, Record | None] = {}
    cache = DecisionCache(held.get, lambda: now[0], lambda w: 0, max_age=1.0, max_entries=10)
    gone = []
    for round_ in range(30):
        for i in range(5):
            cache.put(("w", 1, i), "w", decision(), (("k", None),), 0, now[0])
            entry = cache.entry(("w", 1, i))
            assert entry is not None and entry.fresh
            if round_ == 0:
                gone.append(entry)
        now[0] += 2.0  # every entry times out; the next round puts new ones
        assert cache._indexed <= 4 * 10 + 2
    assert not any(entry.fresh for entry in gone)
    cache.changed("k")
    assert entry is not None and not entry.fresh


# -- the UDP port --------------------------------------------------------------------------------


@pytest.fixture
def bound() -> Any:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.bind(("127.0.0.1", 0))
    client.settimeout(2)
    yield sock, client
    sock.close()
    client.close()


def serve(twins: Twins, sock: socket.socket) -> tuple[DNSPort, DNSDatagramProtocol]:
    proto = DNSDatagramProtocol(twins.fast)
    port = DNSPort._fromListeningDescriptor(MemoryReactorClock(), sock.fileno(), socket.AF_INET, proto, 4096)
    port.startListening()
    return port, proto


def exchange(port: DNSPort, client: socket.socket, queries: list[bytes]) -> list[bytes]:
    """Send *queries*, have the port read them all in one call, and read the replies."""
    address = port.socket.getsockname()
    for query in queries:
        client.sendto(query, address)
    port.doRead()
    return [client.recv(4096) for _ in queries]


def test_the_port_answers_kept_replies_as_the_fast_path(tmp_path: Path, bound: Any) -> None:
    """On a real socket the port's read loop sends, for every query (first seen, kept,
    malformed), the bytes the general path gives; the repeats come from the kept replies,
    but for a name the zone does not hold: never kept by its bytes, answered from its
    parent's negative answer (`dns.negative`)."""
    sock, client = bound
    twins = Twins(tmp_path)
    port, _ = serve(twins, sock)
    source = client.getsockname()[0]
    queries = [
        make_query("www.example.test", qid=7),
        make_query(WIDEIP, qid=8, ecs=(1, 24, bytes([203, 0, 113]))),
        make_query(WIDEIP, qid=9),
        make_query("nothing.example.test", qid=10, edns=True),
    ]
    for round_ in range(4):
        if round_ == 3:
            twins.general_path_off()
        replies = exchange(port, client, queries)
        assert replies == [twins.reference.responder.handle(q, source) for q in queries]
    assert queries[3][2:] not in twins.fast.static_hits
    twins.fast.answer = refuse  # type: ignore[method-assign, assignment]
    assert exchange(port, client, queries[:3]) == [twins.reference.responder.handle(q, source) for q in queries[:3]]
    malformed = make_query("www.example.test")[:-3]
    twins.fast.answer = FastPath.answer.__get__(twins.fast)  # type: ignore[method-assign]
    del twins.fast.responder.answer  # (the general path back)
    assert exchange(port, client, [malformed]) == [twins.reference.responder.handle(malformed, source)]
    port.stopListening()


def test_the_port_logs_kept_replies_as_the_protocol_does(tmp_path: Path, bound: Any) -> None:
    """With the query log on, the port's loop still answers from the kept replies, and queues
    each query with its reply as the protocol would; a wide IP's entry says what decided it."""
    sock, client = bound
    twins = Twins(tmp_path)
    queue = QueryQueue(100, twins.node.stats)
    twins.fast = FastPath(twins.node.responder)
    port, proto = serve(twins, sock)
    proto.log = queue
    queries = [make_query("www.example.test", qid=1), make_query(WIDEIP, qid=2)]
    for round_ in range(3):
        if round_ == 2:
            twins.fast.answer = refuse  # type: ignore[method-assign, assignment]
        replies = exchange(port, client, queries)
        entries = queue.take()
        assert [(e[4], e[5]) for e in entries] == list(zip(queries, replies, strict=True))
        assert entries[0][6] is None and entries[1][6] == ("gslb.example.test", "p", "preferred", "topology", ("vs3",))
        assert entries[1][1] == client.getsockname() and entries[1][3] == dnstap.UDP
    port.stopListening()


def test_the_port_leaves_rate_limited_queries_to_the_protocol(tmp_path: Path, bound: Any) -> None:
    """With rate limiting on, each query takes the limiter's step even when its reply is
    kept: past the rate, the client gets truncated replies or none."""
    sock, client = bound
    twins = Twins(tmp_path)
    clock = [0.0]
    limits = RateLimit(responses_per_second=1, window=1.0, slip=1)
    twins.fast.limiter = ratelimit.make(limits, lambda: clock[0], twins.node.stats)
    port, _ = serve(twins, sock)
    replies = exchange(port, client, [make_query("www.example.test", qid=i) for i in range(4)])
    assert [bool(r[2] & 0x02) for r in replies] == [False, True, True, True]  # TC once limited
    assert twins.node.stats.rate_slipped == 3
    port.stopListening()


def test_adopting_on_a_real_reactor_gives_the_dns_port(bound: Any, tmp_path: Path) -> None:
    """The service's sockets are read by a `DNSPort` on a real reactor (the fake reactors of
    other tests get their own port)."""
    from twisted.internet import reactor

    sock, _ = bound
    twins = Twins(tmp_path)
    port = adopt_udp(reactor, sock.fileno(), socket.AF_INET, DNSDatagramProtocol(twins.fast), 4096)
    try:
        assert isinstance(port, DNSPort)
    finally:
        port.stopListening()


# -- TCP ---------------------------------------------------------------------------------------


def test_tcp_answers_come_from_the_kept_decisions_too(tmp_path: Path) -> None:
    """Over TCP the fast path answers wide IPs from the kept decisions and static names from
    templates, with the whole answer (no size limit), the general path's bytes; nothing is
    kept by its exact bytes for UDP's sake."""
    twins = Twins(tmp_path)
    source = "127.0.1.9"
    queries = [
        make_query(WIDEIP),
        make_query(WIDEIP, ecs=(1, 24, bytes([203, 0, 113]))),
        make_query("www.example.test", edns=True),
        make_query("big.example.test", 16),  # (truncated over UDP, whole over TCP)
        make_query("nothing.example.test"),
    ]

    def both() -> None:
        for query in queries:
            expected = twins.reference.responder.handle_stream(query, source)
            assert isinstance(expected, list) and twins.fast.handle_stream(query, source) == expected
            assert len(expected) == 1 and not expected[0][2] & 0x02  # (one reply, TC=0)

    both()
    both()
    hits = twins.node.stats.kept_hits
    twins.general_path_off()
    both()
    assert twins.node.stats.kept_hits == hits + 2
    assert not twins.fast.static_hits and not twins.fast.wide_hits


def ask_stream(twins: Twins, query: bytes, source: str) -> bytes:
    """*query* over TCP on both nodes: the fast node's one reply, the general path's bytes."""
    expected = twins.reference.responder.handle_stream(query, source)
    got = twins.fast.handle_stream(query, source)
    assert isinstance(expected, list) and got == expected, f"fast {got!r}\ngeneral {expected!r}"
    assert len(got) == 1
    return got[0]


def test_tcp_replies_are_kept_by_their_bytes_apart_from_udps(tmp_path: Path) -> None:
    """Over TCP a query seen before is answered by its bytes as over UDP, from replies kept
    apart (with no size limit: `big` is whole over TCP, truncated over UDP), the general
    path's bytes with any ID; UDP's kept replies are neither read nor filled by TCP."""
    twins = Twins(tmp_path)
    source = "127.0.1.9"
    queries = [
        make_query(WIDEIP),
        make_query(WIDEIP, ecs=(1, 24, bytes([203, 0, 113]))),
        make_query("www.example.test", edns=True),
        make_query("big.example.test", 16),
    ]
    for _ in range(2):
        for query in [*queries, make_query("nothing.example.test")]:
            ask_stream(twins, query, source)
    assert not twins.fast.static_hits and not twins.fast.wide_hits
    # (an absent name is answered from the negative answer kept for its parent, never kept
    # by its bytes: tests/unit/test_random_names.py)
    assert len(twins.fast.stream_static_hits) == 2 and len(twins.fast.stream_wide_hits) == 2
    answer, cached = twins.fast.answer, twins.node.cached
    twins.fast.answer = refuse  # type: ignore[method-assign, assignment]
    twins.node.cached = refuse  # type: ignore[method-assign, assignment]
    hits = twins.node.stats.kept_hits
    for qid in (1, 0xFFFF):
        for query in queries:
            ask_stream(twins, qid.to_bytes(2, "big") + query[2:], source)
    assert twins.node.stats.kept_hits == hits + 4  # (the wide IP's two, twice)
    assert dict(twins.node.stats.queries) == dict(twins.reference.stats.queries)
    with pytest.raises(AssertionError, match="not answered from the kept replies"):
        twins.fast.handle_stream(queries[0], "127.0.1.10")  # another client: its own decision
    twins.fast.answer, twins.node.cached = answer, cached  # type: ignore[method-assign]
    big = queries[3]
    udp = twins.ask(big, source)  # (over UDP: truncated, from UDP's own)
    assert udp is not None and udp[2] & 0x02 and not ask_stream(twins, big, source)[2] & 0x02


def test_a_change_ends_a_tcp_reply_kept_by_its_bytes(tmp_path: Path) -> None:
    """A TCP reply kept by its bytes holds while its decision does: a server disabled is
    in no answer over TCP after the health tracker's turn (an answer evaluates nothing:
    `health.tracker.STALE` bounds the wait), on both nodes alike."""
    twins = Twins(tmp_path)
    waiting: list[Callable[[], object]] = []
    for node in (twins.node, twins.reference):
        node.health.schedule = waiting.append
    query, source = make_query(WIDEIP), "127.0.1.9"
    for _ in range(3):
        assert bytes([10, 0, 1, 1]) in ask_stream(twins, query, source)
    hit = twins.fast.stream_wide_hits[(query[2:], source)]
    twins.both(lambda n: n.store.put("admin/vs/vs1", {"state": "disabled"}))
    assert bytes([10, 0, 1, 1]) in ask_stream(twins, query, source)  # (not evaluated yet)
    while waiting:
        waiting.pop(0)()
    assert not hit.entry.fresh
    assert bytes([10, 0, 1, 1]) not in ask_stream(twins, query, source)
