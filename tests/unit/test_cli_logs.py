"""`gtmcluster logs`: timestamps, --since, entries and continuation lines, merging across
nodes, prefixes and colours, reading history across rotated files, and following files through
rotation, truncation and late creation (the poll step called directly, no sleeps)."""

from __future__ import annotations

import io
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.cli import logs
from gtmcluster.cli.logs import BEGINNING, Entry, EntryParser, FileTail, Follower, Printer
from gtmcluster.cli.main import main
from tests.support import configs

T0 = datetime(2026, 11, 30, 8, 32, 47, tzinfo=UTC)


def stamp(seconds: float) -> str:
    """The twistd timestamp *seconds* after T0."""
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S%z")


def line(seconds: float, text: str) -> str:
    return f"{stamp(seconds)} [gtmcluster.test#info] {text}"


def write(path: Path, *lines: str, mode: str = "a") -> None:
    with path.open(mode) as f:
        f.write("".join(f"{text}\n" for text in lines))


def texts(entries: list[Entry]) -> list[tuple[str, str]]:
    """(node, text after the log prefix of the first line) of each entry."""
    return [(e.node, e.lines[0].split("] ", 1)[-1]) for e in entries]


# -- timestamps and --since ------------------------------------------------------------------


def test_line_time_reads_twistd_timestamps() -> None:
    """twistd's `2026-11-30T08:32:47+0000` prefix is read as an aware time in its offset."""
    got = logs.line_time("2026-11-30T08:32:47+0000 [gtmcluster.service#info] ready")
    assert got == T0
    east = logs.line_time("2026-11-30T16:32:47+0800 [-] Site starting on 8053")
    assert east == T0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-30T08:32:47Z x", T0),
        ("2026-11-30T08:32:47.250+00:00 x", T0 + timedelta(milliseconds=250)),
        ("2026-11-30 08:32:47,5+0000 x", T0 + timedelta(milliseconds=500)),
        ("2026-11-30T08:32:47+0000", T0),
    ],
)
def test_line_time_accepts_other_iso_forms(text: str, expected: datetime) -> None:
    """Fractions, `Z`, `+00:00` and a space instead of `T` are timestamps too."""
    assert logs.line_time(text) == expected


def test_line_time_without_offset_is_local_time() -> None:
    """A timestamp without an offset means the machine's local time."""
    got = logs.line_time("2026-11-30T08:32:47 [x] y")
    assert got == datetime(2026, 11, 30, 8, 32, 47).astimezone()


@pytest.mark.parametrize(
    "text",
    [
        "\tTraceback (most recent call last):",
        '\t  File "x.py", line 1, in <module>',
        "builtins.ValueError: boom",
        "",
        "2026-11-30 is a date, not a log line",
        "2026-13-45T99:99:99+0000 [x] impossible date",
    ],
)
def test_line_time_is_none_for_continuation_lines(text: str) -> None:
    """Lines that do not start with a full valid timestamp continue the entry before them."""
    assert logs.line_time(text) is None


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


# -- entries and merging ---------------------------------------------------------------------


def test_continuation_lines_stay_with_their_entry() -> None:
    """A traceback's lines belong to the entry that starts it; the next timestamp starts anew."""
    parser = EntryParser("n1")
    lines = [
        line(0, "before"),
        line(1, "Unhandled error"),
        "\tTraceback (most recent call last):",
        '\t  File "x.py", line 1, in f',
        "\tbuiltins.ValueError: boom",
        line(2, "after"),
    ]
    done = list(parser.feed(lines))
    assert [e.lines for e in done] == [[lines[0]], lines[1:5]]
    assert [e.time for e in done] == [T0, T0 + timedelta(seconds=1)]
    last = parser.flush()
    assert [e.lines for e in last] == [[lines[5]]]
    assert parser.flush() == []


def test_continuation_split_across_feeds_stays_together() -> None:
    """Lines continuing an entry that arrive in a later read still join it until flushed."""
    parser = EntryParser("n1")
    assert list(parser.feed([line(0, "Unhandled error"), "\tTraceback"])) == []
    assert list(parser.feed(["\tValueError: boom"])) == []
    (entry,) = parser.flush()
    assert entry.lines == [line(0, "Unhandled error"), "\tTraceback", "\tValueError: boom"]


def test_leading_continuation_lines_sort_before_everything() -> None:
    """A file that starts mid-traceback (rotated mid-event) keeps those lines as an entry of
    their own, older than any timestamp."""
    parser = EntryParser("n1")
    done = list(parser.feed(["\tValueError: boom", line(0, "next")]))
    assert [(e.time, e.lines) for e in done] == [(BEGINNING, ["\tValueError: boom"])]


def entries(node: str, *pairs: tuple[float, str]) -> list[Entry]:
    parser = EntryParser(node)
    out = list(parser.feed(line(s, t) for s, t in pairs))
    return out + parser.flush()


def test_merge_orders_nodes_by_time() -> None:
    """Entries of all nodes come in timestamp order; equal times keep the nodes' order, and
    each node's own entries keep their file order."""
    n1 = entries("n1", (0, "a"), (2, "c"), (2, "d"), (5, "g"))
    n2 = entries("n2", (1, "b"), (2, "e"), (4, "f"))
    n3 = entries("n3", (-1, "first"), (9, "last"))
    got = texts(logs.merge([n1, n2, n3]))
    assert got == [
        ("n3", "first"),
        ("n1", "a"),
        ("n2", "b"),
        ("n1", "c"),
        ("n1", "d"),
        ("n2", "e"),
        ("n2", "f"),
        ("n1", "g"),
        ("n3", "last"),
    ]


def test_merge_compares_times_across_offsets() -> None:
    """Nodes logging in different time zones are merged by the instant, not the text."""
    east = timezone(timedelta(hours=8))
    n1 = [Entry("n1", T0 + timedelta(seconds=10), ["late"])]
    n2 = [Entry("n2", (T0 + timedelta(seconds=5)).astimezone(east), ["early"])]
    assert [e.node for e in logs.merge([n1, n2])] == ["n2", "n1"]


# -- output ----------------------------------------------------------------------------------


def test_prefix_is_the_node_padded_to_the_longest_name() -> None:
    """Every line of an entry, continuation lines too, carries its node's padded prefix."""
    out = io.StringIO()
    printer = Printer(["n1", "gtm-cmcc"], out, color=False)
    printer.write([Entry("n1", T0, ["first", "\tcontinued"]), Entry("gtm-cmcc", T0, ["second"])])
    assert out.getvalue().splitlines() == [
        "n1       | first",
        "n1       | \tcontinued",
        "gtm-cmcc | second",
    ]


def test_colours_are_per_node_and_stable() -> None:
    """With colour each node's prefix has its own ANSI colour, chosen by its place in the
    config's member list so a node keeps its colour whichever nodes are shown; the text of
    the line is left as it is."""
    members = ["n1", "n2", "n3"]
    all_nodes = Printer(members, io.StringIO(), color=True, palette_order=members)
    only_n3 = Printer(["n3"], io.StringIO(), color=True, palette_order=members)
    prefixes = [all_nodes.format(Entry(n, T0, ["x"])) for n in members]
    assert len(set(prefixes)) == 3
    for prefix in prefixes:
        assert prefix.startswith("\x1b[") and prefix.endswith(f"{logs.RESET} x\n")
    assert only_n3.format(Entry("n3", T0, ["x"])) == prefixes[2]
    plain = Printer(members, io.StringIO(), color=False).format(Entry("n2", T0, ["x"]))
    assert plain == "n2 | x\n"
    assert "\x1b" not in plain


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


# -- history ---------------------------------------------------------------------------------


def test_history_counts_entries_not_lines(tmp_path: Path) -> None:
    """--lines N keeps the last N entries, a traceback counting as one with all its lines."""
    path = tmp_path / "n1.log"
    write(path, line(0, "a"), line(1, "b"), line(2, "boom"), "\tTraceback", "\tValueError", line(3, "c"))
    got = logs.history(FileTail(path), "n1", None, 2)
    assert [e.lines for e in got] == [[line(2, "boom"), "\tTraceback", "\tValueError"], [line(3, "c")]]
    assert logs.history(FileTail(path), "n1", None, 0) == []
    assert len(logs.history(FileTail(path), "n1", None, None)) == 4


def test_history_since(tmp_path: Path) -> None:
    """--since keeps the entries at or after that time, however many."""
    path = tmp_path / "n1.log"
    write(path, *(line(s, f"at {s}") for s in range(10)))
    got = logs.history(FileTail(path), "n1", T0 + timedelta(seconds=7), None)
    assert texts(got) == [("n1", "at 7"), ("n1", "at 8"), ("n1", "at 9")]
    both = logs.history(FileTail(path), "n1", T0 + timedelta(seconds=3), 2)
    assert texts(both) == [("n1", "at 8"), ("n1", "at 9")]


def test_history_reaches_into_rotated_files(tmp_path: Path) -> None:
    """When the current file does not go back far enough, NODE.log.1, .2 ... are read too,
    oldest entries first, and no further than needed."""
    path = tmp_path / "n1.log"
    write(path.with_name("n1.log.2"), line(0, "r2-a"), line(1, "r2-b"))
    write(path.with_name("n1.log.1"), line(2, "r1-a"), line(3, "r1-b"))
    write(path, line(4, "cur-a"))
    got = logs.history(FileTail(path), "n1", None, 4)
    assert [t for _, t in texts(got)] == ["r2-b", "r1-a", "r1-b", "cur-a"]
    since = logs.history(FileTail(path), "n1", T0 + timedelta(seconds=1), None)
    assert [t for _, t in texts(since)] == ["r2-b", "r1-a", "r1-b", "cur-a"]
    enough = logs.history(FileTail(path), "n1", T0 + timedelta(seconds=4), None)
    assert [t for _, t in texts(enough)] == ["cur-a"]
    # .1 reaches back far enough: .2 is not read (its entry would be recent enough to show)
    write(path.with_name("n1.log.2"), line(2, "never read"), mode="w")
    recent = logs.history(FileTail(path), "n1", T0 + timedelta(seconds=2), None)
    assert [t for _, t in texts(recent)] == ["r1-a", "r1-b", "cur-a"]


def test_history_leaves_the_tail_ready_to_follow(tmp_path: Path) -> None:
    """After the history the tail continues exactly where it stopped: a partial last line
    is kept for following (or taken at once when not following)."""
    path = tmp_path / "n1.log"
    write(path, line(0, "a"))
    with path.open("a") as f:
        f.write(line(1, "half"))
    tail = FileTail(path)
    assert texts(logs.history(tail, "n1", None, 10)) == [("n1", "a")]
    with path.open("a") as f:
        f.write(" done\n")
    assert tail.poll() == [line(1, "half done")]
    tail.close()
    again = FileTail(path)
    write(path, line(2, "unfinished"))
    with path.open("a") as f:
        f.write(line(3, "no newline"))
    got = logs.history(again, "n1", None, 10, partial=True)
    assert [t for _, t in texts(got)][-1] == "no newline"


# -- following -------------------------------------------------------------------------------


def test_tail_returns_only_complete_new_lines(tmp_path: Path) -> None:
    """Each poll returns what was appended since the previous one, whole lines only."""
    path = tmp_path / "n1.log"
    write(path, "one")
    tail = FileTail(path)
    assert tail.poll() == ["one"]
    assert tail.poll() == []
    with path.open("a") as f:
        f.write("two\nthr")
    assert tail.poll() == ["two"]
    with path.open("a") as f:
        f.write("ee\n")
    assert tail.poll() == ["three"]
    tail.close()


def test_tail_follows_rotation(tmp_path: Path) -> None:
    """twistd's rotation: X.log renamed to X.log.1 and a new X.log opened. What was still
    written to the old file is read before the new file, which is read from its start."""
    path = tmp_path / "n1.log"
    write(path, "old 1")
    tail = FileTail(path)
    assert tail.poll() == ["old 1"]
    with path.open("a") as f:
        f.write("old 2\nold partial")
    path.rename(tmp_path / "n1.log.1")
    # renamed away, nothing in its place yet: keep reading the old file
    assert tail.poll() == ["old 2"]
    with (tmp_path / "n1.log.1").open("a") as f:
        f.write(" end\nold 3\n")
    write(path, "new 1", "new 2")
    assert tail.poll() == ["old partial end", "old 3", "new 1", "new 2"]
    write(path, "new 3")
    assert tail.poll() == ["new 3"]
    write(tmp_path / "n1.log.1", "late in the old file")
    assert tail.poll() == []  # the old file is no longer followed
    tail.close()


def test_tail_rotation_that_leaves_an_unfinished_line(tmp_path: Path) -> None:
    """An unfinished last line of the rotated file is not lost: it comes out at the switch."""
    path = tmp_path / "n1.log"
    path.write_text("complete\nhalf")
    tail = FileTail(path)
    assert tail.poll() == ["complete"]
    path.rename(tmp_path / "n1.log.1")
    write(path, "fresh")
    assert tail.poll() == ["half", "fresh"]
    tail.close()


def test_tail_follows_truncation(tmp_path: Path) -> None:
    """A file truncated in place (copytruncate) is read again from its start."""
    path = tmp_path / "n1.log"
    write(path, "a long first line", "and a second one")
    tail = FileTail(path)
    assert len(tail.poll()) == 2
    with path.open("w") as f:
        f.write("short\n")
    assert tail.poll() == ["short"]
    tail.close()


def test_tail_waits_for_a_file_that_does_not_exist_yet(tmp_path: Path) -> None:
    """A missing file gives nothing (no error); once created it is read from its start, and
    a file deleted and created again is picked up the same way."""
    path = tmp_path / "n3.log"
    tail = FileTail(path)
    assert tail.poll() == []
    assert not tail.is_open
    write(path, "hello")
    assert tail.poll() == ["hello"]
    path.unlink()
    assert tail.poll() == []
    write(path, "again")
    assert tail.poll() == ["again"]
    tail.close()


def test_follower_merges_nodes_and_keeps_tracebacks_whole(tmp_path: Path) -> None:
    """Each poll gives the entries completed since the previous one, merged by time; an entry
    is held until its node writes the next one or a poll finds nothing new, so a traceback
    written in two pieces is printed as one."""
    n1, n2 = tmp_path / "n1.log", tmp_path / "n2.log"
    write(n1, line(0, "n1 first"))
    follower = Follower({"n1": FileTail(n1), "n2": FileTail(n2)})
    assert follower.poll() == []  # n1's entry may still be continued
    assert texts(follower.poll()) == [("n1", "n1 first")]
    write(n1, line(3, "n1 second"), line(5, "n1 boom"), "\tTraceback")
    write(n2, line(1, "n2 first"), line(4, "n2 second"))
    assert texts(follower.poll()) == [("n2", "n2 first"), ("n1", "n1 second")]
    write(n1, "\tValueError: boom")
    assert texts(follower.poll()) == [("n2", "n2 second")]
    (boom,) = follower.poll()
    assert boom.lines == [line(5, "n1 boom"), "\tTraceback", "\tValueError: boom"]
    os.rename(n2, tmp_path / "n2.log.1")
    write(n2, line(6, "n2 after rotation"))
    assert follower.poll() == []
    assert texts(follower.poll()) == [("n2", "n2 after rotation")]
    follower.close()


# -- the command -----------------------------------------------------------------------------


def config_file(tmp_path: Path, log_dir: str = "logs", members: tuple[str, ...] = ("n1", "n2", "gtm-cmcc")) -> Path:
    """A config whose sync group has *members* and whose log_dir is *log_dir*."""
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
    config["log_dir"] = log_dir
    return configs.write(tmp_path, config)


def test_command_merges_and_prefixes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command prints the nodes' last entries merged by time, each line prefixed, no
    colour when not on a terminal, and notes a node that has no log file yet."""
    path = config_file(tmp_path)
    (tmp_path / "logs").mkdir()
    write(tmp_path / "logs" / "n1.log", line(0, "one"), line(2, "three"), "\tmore of three")
    write(tmp_path / "logs" / "n2.log", line(1, "two"), line(3, "four"))
    assert main(["logs", "--config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"n1       | {line(0, 'one')}",
        f"n2       | {line(1, 'two')}",
        f"n1       | {line(2, 'three')}",
        "n1       | \tmore of three",
        f"n2       | {line(3, 'four')}",
    ]
    assert "no log file" in err and "gtm-cmcc" in err
    assert main(["logs", "--config", str(path), "--lines", "1", "n2"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"n2 | {line(3, 'four')}"]


def test_command_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown nodes, a missing log directory, no log files and a bad --since exit 1 with a
    one-line reason."""
    path = config_file(tmp_path)
    assert main(["logs", "--config", str(path)]) == 1
    assert "log directory" in capsys.readouterr().err
    (tmp_path / "logs").mkdir()
    assert main(["logs", "--config", str(path)]) == 1
    assert "none of the log files exist" in capsys.readouterr().err
    write(tmp_path / "logs" / "n1.log", line(0, "x"))
    assert main(["logs", "--config", str(path), "n1", "n9", "bogus"]) == 1
    err = capsys.readouterr().err
    assert "not a member" in err and "n9, bogus" in err and "members: n1, n2, gtm-cmcc" in err
    assert main(["logs", "--config", str(path), "--since", "soon"]) == 1
    assert "--since 'soon'" in capsys.readouterr().err
