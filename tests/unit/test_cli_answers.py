"""The parts the CLI reads a node's answers with: `cli.terminal` (what is printed of a node's
words), `cli.shape` (the fields a command reads, checked first), `cli.bounded` (lines,
depth, and the deadline's threads and sockets). The hostile servers that drive them through
the commands are in test_cli_hostile_node.py and test_cli_hostile_logs.py."""

from __future__ import annotations

import io
import json
import os
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.api.groupconfig import MAX_PUSH
from gtmcluster.cli import admin, explain, ldns, nodeapi, stats, status
from gtmcluster.cli.bounded import MAX_DEPTH, AnswerError, LongLine, decode_json, depth_over, lines
from gtmcluster.cli.shape import ListOf, Malformed, MapOf, Maybe, Obj, Spec, check
from gtmcluster.cli.terminal import escape, escape_json_line, printable
from tests.support.hostileapi import (
    CONTROLS,
    RENDERED,
    STATUS,
    answer,
    hostile,
    member_at,
    mutated,
    trickle,
    whole,
)

# -- terminal ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "keep", "shown"),
    [
        ("plain text, ünïcode ok", "", "plain text, ünïcode ok"),
        ("\x1b]0;title\x07", "", "\\x1b]0;title\\x07"),
        ("a\nb\tc\rd", "", "a\\x0ab\\x09c\\x0dd"),
        ("a\nb\tc\rd", "\n\t", "a\nb\tc\\x0dd"),
        ("\x00\x7f\x80\x9b\x9f\xa0", "", "\\x00\\x7f\\x80\\x9b\\x9f\xa0"),
        ("abc\u202etxt.exe\u2066", "", "abc\\u202etxt.exe\\u2066"),
    ],
)
def test_escape_shows_controls_as_escapes(text: str, keep: str, shown: str) -> None:
    """C0, DEL, C1 and bidirectional controls become ``\\xNN``/``\\uNNNN``; what *keep*
    names stays; printable text (no-break space included) is left as it is."""
    assert escape(text, keep) == shown


@given(st.text())
def test_a_json_line_escaped_stays_the_same_json(text: str) -> None:
    """A JSON line holding any text, escaped for the terminal: no control character left,
    and it reads back as the same JSON."""
    line = json.dumps({"message": text}, ensure_ascii=False)
    shown = escape_json_line(line)
    assert not CONTROLS.search(shown)
    assert json.loads(shown) == {"message": text}


def test_printable_escapes_every_string_keys_included() -> None:
    value = {"a\x1b": ["b\x9b", 1, 2.5, None, True, {"c": "\n"}]}
    assert printable(value) == {"a\\x1b": ["b\\x9b", 1, 2.5, None, True, {"c": "\\x0a"}]}


# -- shape ---------------------------------------------------------------------------------

SPEC = Obj(
    {"name": str, "count": int, "rate": float, "up": bool, "any": object},
    optional={"peers": ListOf(Obj({"name": str})), "by": MapOf(Maybe(int))},
)
GOOD = {"name": "n", "count": 1, "rate": 0.5, "up": True, "any": [1], "extra": "let through"}


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ([], "the answer: not an object"),
        ({**GOOD, "name": 1}, "name: not text"),
        ({k: v for k, v in GOOD.items() if k != "count"}, "count: missing"),
        ({**GOOD, "count": True}, "count: not a whole number"),
        ({**GOOD, "count": 1.0}, "count: not a whole number"),
        ({**GOOD, "rate": "1"}, "rate: not a number"),
        ({**GOOD, "up": 1}, "up: not true or false"),
        ({**GOOD, "peers": {}}, "peers: not a list"),
        ({**GOOD, "peers": [{"name": "a"}, {}]}, "peers[1].name: missing"),
        ({**GOOD, "by": {"k": 1, "\x1bk": "x"}}, "by['\\x1bk']: not a whole number"),
        ({**GOOD, "by": {"k" * 100: "x"}}, f"by['{'k' * 40}...']: not a whole number"),
    ],
)
def test_check_says_where_and_what(value: Any, said: str) -> None:
    with pytest.raises(Malformed) as caught:
        check(value, SPEC)
    assert str(caught.value) == said


def test_check_lets_through_what_fits() -> None:
    check(GOOD, SPEC)
    check({**GOOD, "rate": 3, "peers": [], "by": {"a": None, "b": 2}}, SPEC)


def render_status(answer: Any) -> str:
    statuses = {"n1": answer, "n2": STATUS}
    status.summarize(statuses)
    shown = printable(statuses)
    return status.render(shown, {"n1": "DC1", "n2": "DC2"}, status.summarize(shown))


RENDERS: dict[str, tuple[Any, Spec, Any]] = {
    "status": (STATUS, status.STATUS, render_status),
    "explain": (RENDERED["explain"][1], explain.EXPLAINED, lambda a: explain.render(printable(a))),
    "ldns": (RENDERED["ldns"][1], ldns.TABLE, lambda a: ldns.render(printable(a))),
    "stats": (RENDERED["stats"][1], stats.STATS, lambda a: stats.render(printable(a))),
    "admin": (RENDERED["disable"][1], admin.CHANGED, lambda a: admin.render(printable(a))),
}


@pytest.mark.parametrize("command", RENDERS)
@settings(max_examples=300)
@given(data=st.data())
def test_an_answer_that_passes_its_check_always_renders(command: str, data: st.DataObject) -> None:
    """Whatever a node changes in an answer, the command either refuses it by its spec or
    renders it: never an exception while rendering, and nothing unescaped printed."""
    base, spec, render = RENDERS[command]
    value = data.draw(mutated(base))
    try:
        check(value, spec)
    except Malformed:
        return
    assert not CONTROLS.search(render(value))


# -- bounded -------------------------------------------------------------------------------


def test_lines_are_cut_at_the_limit_and_long_ones_measured() -> None:
    """Lines up to the limit (CR LF or LF) come whole; a longer one, ended or not, is a
    LongLine of its length, read to its end without being kept."""
    data = b"a" * 10 + b"\n" + b"b" * 10 + b"\r\n" + b"c" * 11 + b"\n" + b"d" * 300_000 + b"\n" + b"e\n" + b"f" * 12
    assert list(lines(io.BytesIO(data), 10)) == [
        b"a" * 10,
        b"b" * 10,
        LongLine(11),
        LongLine(300_000),
        b"e",
        LongLine(12),
    ]


def test_json_deeper_than_the_limit_is_refused_without_recursing() -> None:
    at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert decode_json(at_limit.encode()) is not None
    for deeper in ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), '{"a":' * 900 + "1" + "}" * 900):
        with pytest.raises(AnswerError, match="nested too deeply"):
            decode_json(deeper.encode())
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert depth_over(deep, MAX_DEPTH)


def test_the_bundle_cap_is_the_apis_largest_publication() -> None:
    assert nodeapi.MAX_BUNDLE == MAX_PUSH


def test_requests_leave_no_thread_and_no_descriptor_behind(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each request's deadline watchdog and its duplicate of the socket go with the
    request: 30 answered, 10 cut at their deadline, 10 refused for their shape."""
    monkeypatch.setattr(nodeapi, "DEADLINE", 0.3)
    threads, descriptors = threading.active_count(), len(os.listdir("/proc/self/fd"))
    with hostile(answer(STATUS)) as server:
        m = member_at(tmp_path, server.port)
        for _ in range(30):
            nodeapi.get(m, "/api/v1/status", fields=status.STATUS)
        for _ in range(10):
            with pytest.raises(nodeapi.Unreachable, match="unexpected answer"):
                nodeapi.get(m, "/api/v1/status", fields=ListOf(str))
    with hostile(trickle(whole(b"{}"), every=0.05)) as server:
        m = member_at(tmp_path, server.port)
        for _ in range(10):
            with pytest.raises(nodeapi.Unreachable, match=r"within 0\.3 s"):
                nodeapi.get(m, "/api/v1/status")
    assert (threading.active_count(), len(os.listdir("/proc/self/fd"))) == (threads, descriptors), [
        t.name for t in threading.enumerate()
    ]
