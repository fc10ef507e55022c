"""What answering a query returns (`dns.responder.Answered`): the reply and what decided it.

The transports hand what decided it to the query log (a hook at the edge of the path);
every path must return the same for the same query: the general path, the fast path from a
kept decision, and the replies kept by their bytes.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.twins import Twins, make_query

WIDEIP = "gslb.example.test"


def test_every_path_returns_what_decided_a_wide_ip_answer(tmp_path: Path) -> None:
    twins = Twins(tmp_path)
    query, source = make_query(WIDEIP), "127.0.1.9"
    reply, decided, static = twins.reference.responder.answer(query, source)
    assert decided == (WIDEIP, "p", "preferred", "topology", ("vs1",)) and not static
    ways = []
    for _ in range(3):  # the general path, then the kept decision, then the reply kept by its bytes
        assert twins.fast.respond(query, source)[:2] == (reply, decided)
        ways.append((query[2:], source) in twins.fast.wide_hits)
    assert ways == [False, True, True]
    assert twins.fast.answer_stream(query, source) == (twins.reference.responder.handle_stream(query, source), decided)


def test_a_static_answer_says_so_and_names_no_decision(tmp_path: Path) -> None:
    twins = Twins(tmp_path)
    reply, decided, static = twins.reference.responder.answer(make_query("www.example.test"), "127.0.1.9")
    assert static and decided is None and reply is not None
    for _ in range(3):
        assert twins.fast.respond(make_query("www.example.test"), "127.0.1.9")[:2] == (reply, None)


def test_a_dropped_query_has_no_reply(tmp_path: Path) -> None:
    twins = Twins(tmp_path)
    response = bytearray(make_query("www.example.test"))
    response[2] |= 0x80  # QR: a response, never answered
    assert twins.reference.responder.answer(bytes(response), "127.0.1.9") == (None, None, False)
    assert twins.fast.respond(bytes(response), "127.0.1.9")[0] is None
