"""`gtmcluster logs [-f]` when what answers at a member's API address is hostile: lines
trickled, a line of 1 MiB, more lines than a node ever sends, a line nested 20,000 deep, and
escape sequences in messages; with -f, a stream that trickles and never completes a line.
Each ends in one line naming the node (or a note, for a line left out), within the
deadline, and nothing reaches the terminal as a control sequence.

Against real local servers (`tests.support.hostileapi`), with deadlines set small; see
test_cli_hostile_node.py for the other commands."""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.cli import logs, nodeapi
from gtmcluster.config.load import load
from tests.support.hostileapi import (
    CONTROLS,
    DEADLINE,
    ESCAPES,
    SLACK,
    assert_escaped,
    cli,
    config_at,
    head,
    hostile,
    lines,
    quick,
    trickle,
)


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deadlines and caps small enough for a test."""
    quick(monkeypatch)


def log_line(n: int, message: Any, **more: Any) -> bytes:
    """A node's log line (its own layout: the time first, no spaces), at second *n*."""
    fields = {"time": f"2026-12-01T15:20:0{n}.000000Z", "node": "n1", "level": "info", "system": "test", "event": "e"}
    return json.dumps({**fields, "message": message, **more}, ensure_ascii=False, separators=(",", ":")).encode()


def test_logs_show_escape_sequences_escaped(tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]) -> None:
    """A log message with ESC and C1 sequences, in its level and system too, and a line of
    ours by its time but not JSON: shown escaped, a message's own newline kept under the
    node's prefix; --json escapes them as JSON does, so its lines stay JSON."""
    title, clear, bold = ESCAPES
    rows = [
        log_line(1, f"peer said {title}\nsecond line {bold}"),
        log_line(2, "x", level=f"info{clear}", system=f"s{bold}"),
        f'{{"time":"2026-12-01T15:20:02.500000Z", not JSON {clear}'.encode(),
        log_line(3, f"C1 inside JSON {bold}"),
    ]
    with hostile(lines(rows)) as server:
        path = str(config_at(tmp_path, server.port))
        code, out, err, _ = cli(["logs", "--config", path, "--no-color"], capsys)
        assert code == 0, err
        assert_escaped(out + err)
        assert out.splitlines()[1] == "n1 |     second line \\x9b1m"
        code, out, err, _ = cli(["logs", "--config", path, "--json"], capsys)
    assert code == 0 and not CONTROLS.search(out)
    assert json.loads(out.splitlines()[3])["message"] == f"C1 inside JSON {bold}"


def test_logs_leave_out_a_line_over_the_limit_and_say_so(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 1 MiB line is left out (never held whole), with a note; the lines around it show."""
    rows = [log_line(1, "before"), log_line(2, "x" * (1024 * 1024)), log_line(3, "after")]
    with hostile(lines(rows)) as server:
        code, out, err, _ = cli(["logs", "--config", str(config_at(tmp_path, server.port)), "--no-color"], capsys)
    assert code == 0, err
    assert [line.rsplit("] ", 1)[1] for line in out.splitlines()] == ["before", "after"]
    assert err == "gtmcluster logs: n1: left out a log line longer than 65,536 bytes\n"


def test_logs_of_more_lines_than_a_node_sends_are_refused(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """More lines than a node ever sends (`reader.MAX_LINES`, 100 here): one line, exit 1."""
    monkeypatch.setattr(logs, "MAX_LINES", 100, raising=False)
    with hostile(lines([log_line(1, f"m{n}") for n in range(1000)])) as server:
        code, out, err, _ = cli(["logs", "--config", str(config_at(tmp_path, server.port))], capsys)
    assert code == 1 and out == ""
    assert err == "gtmcluster logs: n1 sent more than the 100 lines a node sends at most\n"


def test_logs_of_a_trickling_node_end_at_the_deadline(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node's lines trickled a byte every 50 ms: `gtmcluster logs` ends at its deadline."""
    data = head(headers={"Content-Type": "application/x-ndjson"}) + b"\n".join(log_line(n, "m") for n in range(9))
    with hostile(trickle(data, every=0.05, after=len(head()) + 50)) as server:
        code, out, err, took = cli(["logs", "--config", str(config_at(tmp_path, server.port))], capsys)
    assert code == 1 and took < DEADLINE + SLACK, took
    assert (out, err) == ("", "gtmcluster logs: n1's log: sent no whole answer within 1.5 s\n")


def test_a_log_line_nested_too_deeply_is_shown_as_a_line(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line that is ours by its time but nests 20,000 deep: shown as the text it is."""
    deep = log_line(1, "m")[:-1] + b',"x":' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    with hostile(lines([deep, log_line(2, "after")])) as server:
        code, out, err, _ = cli(["logs", "--config", str(config_at(tmp_path, server.port)), "--no-color"], capsys)
    assert code == 0, err
    shown = out.splitlines()
    assert shown[0].startswith('n1 | {"time":"2026-12-01T15:20:01') and shown[1].endswith("] after")


def follow(config: Path, until: str, within: float) -> list[Any]:
    """Follow n1 of *config* until a note holding *until* comes (at most *within* seconds):
    the lines and notes that came."""
    loaded = load(config)
    inbox: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()
    follower = logs.NodeFollower(
        loaded.sync_group.members[0], {"follow": "1"}, nodeapi.Tokens(loaded, environ={}), inbox, stop
    )
    follower.start()
    came: list[Any] = []
    end = time.monotonic() + within
    try:
        while time.monotonic() < end:
            try:
                item = inbox.get(timeout=0.05)
            except queue.Empty:
                continue
            came.append(item)
            if isinstance(item, tuple) and until in (item[1] or ""):
                break
    finally:
        stop.set()
        follower.join(5)
    return came


def test_a_followed_node_that_trickles_is_dropped_after_the_idle_limit(tmp_path: Path, limits: None) -> None:
    """`logs -f`: a line, then bytes trickled every 50 ms and never a whole line: the
    follower drops the connection once no whole line came for `READ_TIMEOUT` (1.5 s here),
    says so, and asks again."""
    data = head(headers={"Content-Type": "application/x-ndjson"}) + log_line(1, "first") + b"\n" + b"x" * 1000
    with hostile(trickle(data, every=0.05, after=len(head()) + 200)) as server:
        start = time.monotonic()
        came = follow(config_at(tmp_path, server.port), "asking again", 3 * DEADLINE)
        took = time.monotonic() - start
    notes = [item[1] for item in came if isinstance(item, tuple)]
    assert [json.loads(x.raw)["message"] for x in came if isinstance(x, logs.Line)] == ["first"]
    assert notes and "sent no whole line for 1.5 s; asking again until it answers" in notes[0], notes
    assert took < 2 * DEADLINE + SLACK
