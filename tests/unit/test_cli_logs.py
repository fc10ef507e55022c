"""`gtmcluster logs` through the nodes' APIs: --since, the lines' order across nodes, the
printed form (prefix, colour, tracebacks), resuming a node's log without repeats, holding
followed lines so nodes interleave by time, and the command and a follower against a fake
node (`nodeapi.open_stream` replaced: the HTTP side is tested in test_api_logs.py and the
process test)."""

from __future__ import annotations

import io
import json
import queue
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.cli import logs, nodeapi
from gtmcluster.cli.logs import Holder, Line, Printer, Resume, make_line
from gtmcluster.cli.main import main
from gtmcluster.config.load import load
from gtmcluster.config.model import Member
from gtmcluster.nodelog import record
from tests.support import configs

T0 = datetime(2026, 11, 30, 8, 32, 47, tzinfo=UTC)


def raw(node: str, seconds: float, message: str, level: str = "info") -> str:
    """A node's log line, *seconds* after T0."""
    fields = {
        "time": record.iso_time(T0.timestamp() + seconds),
        "node": node,
        "level": level,
        "system": "gtmcluster.test",
        "event": message,
        "message": message,
    }
    return json.dumps(fields, separators=(",", ":"))


def line(node: str, seconds: float, message: str) -> Line:
    made = make_line(node, raw(node, seconds, message))
    assert made is not None
    return made


def messages(lines: list[Line]) -> list[tuple[str, str]]:
    return [(x.node, json.loads(x.raw)["message"]) for x in lines]


# -- --since ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ago"),
    [
        ("30s", timedelta(seconds=30)),
        ("10m", timedelta(minutes=10)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1w", timedelta(weeks=1)),
        ("1h30m", timedelta(minutes=90)),
        ("1.5h", timedelta(minutes=90)),
        (" 5m ", timedelta(minutes=5)),
    ],
)
def test_since_durations(text: str, ago: timedelta) -> None:
    """A duration means that long before now."""
    assert logs.parse_since(text, T0) == T0 - ago


def test_since_times() -> None:
    """A time is taken as written; without an offset it is local time; a date is its midnight."""
    assert logs.parse_since("2026-11-30T08:32:47+0000", T0) == T0
    assert logs.parse_since("2026-11-30T08:32:47Z", T0) == T0
    assert logs.parse_since("2026-11-30T08:00", T0) == datetime(2026, 11, 30, 8, 0).astimezone()
    assert logs.parse_since("2026-11-30 08:00", T0) == datetime(2026, 11, 30, 8, 0).astimezone()
    assert logs.parse_since("2026-11-30", T0) == datetime(2026, 11, 30).astimezone()


@pytest.mark.parametrize("text", ["", "10", "10x", "m", "1h 30m", "yesterday", "2026-11-31"])
def test_since_rejects_other_text_clearly(text: str) -> None:
    """Anything else is refused with a message that shows both accepted forms."""
    with pytest.raises(ValueError, match=r"not a duration \(30s, 10m"):
        logs.parse_since(text, T0)


def test_since_goes_to_the_node_in_the_log_time_form() -> None:
    assert logs.log_time(logs.parse_since("10m", T0)) == "2026-11-30T08:22:47.000000Z"


# -- lines, resuming, holding -----------------------------------------------------------------


def test_heartbeats_and_foreign_lines_are_not_lines() -> None:
    assert make_line("n1", "") is None
    assert make_line("n1", "not json") is None
    assert make_line("n1", raw("n1", 0, "x")) is not None


def test_merge_orders_nodes_by_time_keeping_each_nodes_order() -> None:
    a = [line("n1", 0, "one"), line("n1", 2, "three")]
    b = [line("n2", 1, "two"), line("n2", 3, "four")]
    assert messages(logs.merge([a, b])) == [("n1", "one"), ("n2", "two"), ("n1", "three"), ("n2", "four")]


def test_resume_takes_each_line_once_across_a_reconnect() -> None:
    """Asked again with since= the last time seen, a node sends the lines at that time
    again: those already taken are skipped, new ones at that same time are not."""
    resume = Resume()
    first = [line("n1", 0, "a"), line("n1", 1, "b"), line("n1", 1, "c")]
    assert [resume.take(x) for x in first] == [True, True, True]
    assert resume.last == record.iso_time(T0.timestamp() + 1)
    again = [line("n1", 1, "b"), line("n1", 1, "c"), line("n1", 1, "d"), line("n1", 2, "e"), line("n1", 0, "a")]
    assert [resume.take(x) for x in again] == [False, False, True, True, False]


def test_holder_lets_lines_out_in_time_order_after_the_hold() -> None:
    """A line is held HOLD seconds; a later-arriving line of another node that is older in
    time still comes out before it."""
    holder = Holder(hold=0.5)
    holder.add(line("n1", 2, "late in time"), now=10.0)
    holder.add(line("n2", 1, "earlier in time"), now=10.3)
    assert holder.due(10.4) == []
    assert messages(holder.due(10.5)) == [("n2", "earlier in time"), ("n1", "late in time")]
    holder.add(line("n1", 5, "x"), now=11.0)
    holder.add(line("n2", 6, "y"), now=11.0)
    assert messages(holder.due(11.0, everything=True)) == [("n1", "x"), ("n2", "y")]
    assert holder.next_due() is None


# -- output ----------------------------------------------------------------------------------


def test_printed_form_prefix_time_level_system_and_traceback_lines() -> None:
    """Each line: the node padded to the longest name, a bar, the UTC time to the
    millisecond, level, system, message; a traceback's lines each under the prefix; --json
    prints the node's line as it is."""
    out = io.StringIO()
    printer = Printer(["n1", "gtm-cmcc"], out, color=False)
    printer.write([line("n1", 0.25, "first\nTraceback:\n  boom"), line("gtm-cmcc", 1, "second")])
    assert out.getvalue().splitlines() == [
        "n1       | 2026-11-30T08:32:47.250Z info  [gtmcluster.test] first",
        "n1       |     Traceback:",
        "n1       |       boom",
        "gtm-cmcc | 2026-11-30T08:32:48.000Z info  [gtmcluster.test] second",
    ]
    raw_out = io.StringIO()
    Printer(["n1"], raw_out, color=False, raw=True).write([line("n1", 0, "x")])
    assert raw_out.getvalue() == raw("n1", 0, "x") + "\n"


def test_colours_are_per_node_and_stable() -> None:
    """With colour each node's prefix has its own ANSI colour, chosen by its place in the
    config's member list so a node keeps its colour whichever nodes are shown."""
    members = ["n1", "n2", "n3"]
    all_nodes = Printer(members, io.StringIO(), color=True, palette_order=members)
    only_n3 = Printer(["n3"], io.StringIO(), color=True, palette_order=members)
    prefixes = [all_nodes.prefixes[n] for n in members]
    assert len(set(prefixes)) == 3
    for prefix in prefixes:
        assert prefix.startswith("\x1b[") and prefix.endswith(logs.RESET)
    assert only_n3.prefixes["n3"] == prefixes[2]
    assert Printer(members, io.StringIO(), color=False).prefixes["n2"] == "n2 |"


class FakeTerminal(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("tty", "no_color", "environ", "expected"),
    [
        (True, False, {}, True),
        (False, False, {}, False),
        (True, True, {}, False),
        (True, False, {"NO_COLOR": "1"}, False),
        (True, False, {"NO_COLOR": ""}, True),
    ],
)
def test_colour_only_on_a_terminal(tty: bool, no_color: bool, environ: dict[str, str], expected: bool) -> None:
    """Colour on a terminal; never when piped, with --no-color, or with a non-empty NO_COLOR."""
    assert logs.use_color(no_color, FakeTerminal(tty), environ) is expected


# -- against fake nodes ------------------------------------------------------------------------


def config_file(tmp_path: Path, members: tuple[str, ...] = ("n1", "n2", "gtm-cmcc")) -> Path:
    config: dict[str, Any] = configs.base("127.0.0.1")
    first = config["sync_group"]["members"][0]
    config["sync_group"]["members"] = [
        {
            **first,
            "name": name,
            "peer": f"127.0.0.{i + 2}:4353",
            "dns": [f"127.0.0.{i + 2}:5353"],
            "api": f"127.0.0.{i + 2}:8053",
        }
        for i, name in enumerate(members)
    ]
    return configs.write(tmp_path, config)


class FakeNodes:
    """Stands in for `nodeapi.open_stream`: each node's answers in turn (lines, or an
    exception to raise), and what each was asked."""

    def __init__(self, answers: dict[str, list[list[str] | Exception]]):
        self.answers = answers
        self.asked: list[tuple[str, dict[str, str]]] = []
        self.lock = threading.Lock()

    def __call__(
        self,
        m: Member,
        path: str,
        params: dict[str, str],
        tokens: Any,
        timeout: float = 5.0,
        read_timeout: float | None = None,
        deadline: float | None = None,
        idle: float | None = None,
    ) -> Any:
        assert path == "/api/v1/logs"
        with self.lock:
            self.asked.append((m.name, dict(params)))
            queue_ = self.answers.get(m.name) or [nodeapi.Unreachable(f"cannot reach {m.name}")]
            answer = queue_.pop(0) if len(queue_) > 1 else queue_[0]
        if isinstance(answer, Exception):
            raise answer
        return io.BytesIO("".join(x + "\n" for x in answer).encode())


def test_command_merges_prefixes_and_names_a_node_it_could_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every member is asked (lines=20 by default, or what --lines/--since say); lines are
    merged by time; a node that cannot be reached is named on stderr and makes the exit
    status 1, the others still shown."""
    fake = FakeNodes(
        {
            "n1": [[raw("n1", 0, "one"), raw("n1", 2, "three")]],
            "n2": [[raw("n2", 1, "two"), "", raw("n2", 3, "four")]],
        }
    )
    monkeypatch.setattr(nodeapi, "open_stream", fake)
    path = config_file(tmp_path)
    assert main(["logs", "--config", str(path)]) == 1
    out, err = capsys.readouterr()
    assert [x.split(" | ")[0].strip() + " " + x.rsplit("] ", 1)[1] for x in out.splitlines()] == [
        "n1 one",
        "n2 two",
        "n1 three",
        "n2 four",
    ]
    assert "cannot reach gtm-cmcc" in err
    assert sorted(fake.asked) == [("gtm-cmcc", {"lines": "20"}), ("n1", {"lines": "20"}), ("n2", {"lines": "20"})]
    fake.asked.clear()
    assert main(["logs", "--config", str(path), "--since", "2026-11-30T08:32:48Z", "--lines", "5", "n2"]) == 0
    assert fake.asked == [("n2", {"since": "2026-11-30T08:32:48.000000Z", "lines": "5"})]


def test_command_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown nodes and a bad --since exit 1 with a one-line reason."""
    path = config_file(tmp_path)
    assert main(["logs", "--config", str(path), "n1", "n9", "bogus"]) == 1
    err = capsys.readouterr().err
    assert "not a member" in err and "n9, bogus" in err and "members: n1, n2, gtm-cmcc" in err
    assert main(["logs", "--config", str(path), "--since", "soon"]) == 1
    assert "--since 'soon'" in capsys.readouterr().err


def test_a_follower_resumes_after_its_node_went_away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection ends (the node stopped), the node is unreachable for a while, then
    answers: it is asked again with since= its last line's time and follow=1, the lines it
    repeats are skipped, and the loss and the return are each noted once; a refusal
    (wrong token) ends the follower."""
    fake = FakeNodes(
        {
            "n1": [
                [raw("n1", 0, "a"), raw("n1", 1, "b")],
                nodeapi.Unreachable("cannot reach n1"),
                nodeapi.Unreachable("cannot reach n1"),
                [raw("n1", 1, "b"), raw("n1", 5, "after restart")],
                nodeapi.CliError("n1 refused the bearer token"),
            ]
        }
    )
    monkeypatch.setattr(nodeapi, "open_stream", fake)
    monkeypatch.setattr(logs, "RETRY", (0.0,))
    config = load(config_file(tmp_path))
    inbox: queue.Queue[Any] = queue.Queue()
    follower = logs.NodeFollower(config.member("n1"), {"lines": "20", "follow": "1"}, Any, inbox, threading.Event())  # type: ignore[arg-type]
    follower.run()  # returns at the refusal
    items = []
    while not inbox.empty():
        items.append(inbox.get())
    shown = [json.loads(x.raw)["message"] for x in items if isinstance(x, Line)]
    notes = [x for x in items if not isinstance(x, Line)]
    assert shown == ["a", "b", "after restart"]
    assert [kind for kind, _ in notes] == ["note", "note", "note", "fatal"]
    assert "asking again" in notes[0][1] and "reading its log again" in notes[1][1]
    since = record.iso_time(T0.timestamp() + 1)
    assert [p for _, p in fake.asked] == [
        {"lines": "20", "follow": "1"},
        {"since": since, "follow": "1"},
        {"since": since, "follow": "1"},
        {"since": since, "follow": "1"},
        {"since": record.iso_time(T0.timestamp() + 5), "follow": "1"},
    ]
