"""The node's own log (gtmcluster.nodelog): one JSON line per event with its fields, written
to log_dir/NODE.jsonl by a service observing a log publisher (no twistd --logfile involved),
rotated by size with a bounded number of files kept; read back by count and by time from a
snapshot; and the journal's priority prefixes."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

from twisted.logger import Logger, LogLevel, LogPublisher
from twisted.python.failure import Failure

from gtmcluster.nodelog import journal, reader, record
from gtmcluster.nodelog.writer import NodeLog, log_path

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def started(tmp_path: Path, **kwargs: object) -> tuple[NodeLog, Logger, LogPublisher]:
    publisher = LogPublisher()
    node_log = NodeLog(tmp_path / "log", "gtm-cnc", lambda: T0, publisher, **kwargs)  # type: ignore[arg-type]
    node_log.startService()
    return node_log, Logger(namespace="gtmcluster.sync.service", observer=publisher), publisher


def emit(publisher: LogPublisher, when: float, text: str, level: LogLevel = LogLevel.info, **fields: object) -> None:
    """An event as a Logger makes it, at a chosen time (a Logger stamps the real clock)."""
    publisher(
        {
            "log_time": when,
            "log_level": level,
            "log_namespace": "gtmcluster.sync.service",
            "log_format": text,
            **fields,
        }
    )


def lines_of(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_event_is_one_line_with_its_fields(tmp_path: Path) -> None:
    """A structured event becomes one JSON line: UTC time with microseconds, node, level,
    system (the logger's namespace), event (the template) and message (formatted); a
    failure's traceback stays inside the one line; debug events are left out; the log
    directory is made (mode 0750) when missing."""
    node_log, log, publisher = started(tmp_path)
    emit(publisher, T0 + 0.25, "peer {peer} up", peer="gtm-tel")
    log.debug("noise {n}", n=1)
    try:
        raise ValueError("boom")
    except ValueError:
        log.failure("checking {vs} failed", Failure(), vs="vs-a")
    log.warn("slow")
    node_log.stopService()
    path = log_path(tmp_path / "log", "gtm-cnc")
    assert (path.parent.stat().st_mode & 0o777) == 0o750
    raw = path.read_text().splitlines()
    assert len(raw) == 3
    first, second, third = (json.loads(line) for line in raw)
    assert list(first) == list(record.FIELDS)
    assert first == {
        "time": "2027-01-15T08:00:00.250000Z",
        "node": "gtm-cnc",
        "level": "info",
        "system": "gtmcluster.sync.service",
        "event": "peer {peer} up",
        "message": "peer gtm-tel up",
    }
    assert second["level"] == "critical" and second["event"] == "checking {vs} failed"
    assert second["message"].startswith("checking vs-a failed\nTraceback") and "ValueError: boom" in second["message"]
    assert third["level"] == "warn" and third["message"] == "slow"
    assert record.line_time(raw[0]) == "2027-01-15T08:00:00.250000Z"


def test_the_file_rotates_by_size_and_keeps_a_few(tmp_path: Path) -> None:
    """Past max_bytes the file is renamed .1 (older ones shift) and at most `keep` rotated
    files are kept; every line stays whole and the newest lines are in the current file."""
    node_log, _, publisher = started(tmp_path, max_bytes=1000, keep=2)
    for i in range(60):
        emit(publisher, T0 + i, "event number {i:03d}", i=i)
    node_log.stopService()
    path = log_path(tmp_path / "log", "gtm-cnc")
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["gtm-cnc.jsonl", "gtm-cnc.jsonl.1", "gtm-cnc.jsonl.2"]
    for p in path.parent.iterdir():
        assert p.stat().st_size < 1000 + 300  # rotated before the write that would pass the size
        assert all(r["node"] == "gtm-cnc" for r in lines_of(p))
    numbers = [int(r["message"][-3:]) for p in (Path(f"{path}.2"), Path(f"{path}.1"), path) for r in lines_of(p)]
    assert numbers == list(range(numbers[0], 60)) and numbers[0] > 0  # contiguous, oldest gone


def test_history_by_count_and_since_across_rotated_files(tmp_path: Path) -> None:
    """The last N lines come from the rotated files too when the current one holds fewer;
    since= keeps lines at or after the time; a snapshot reads only what was written when it
    was taken, and a follower gets exactly the lines after it."""
    node_log, _, publisher = started(tmp_path, max_bytes=800, keep=5)
    for i in range(30):
        emit(publisher, T0 + i, "n {i:03d}", i=i)
    snap = node_log.snapshot()
    followed: list[str] = []
    node_log.follow(followed.append)
    emit(publisher, T0 + 100, "after the snapshot")

    def numbers(lines: list[str]) -> list[int]:
        return [int(json.loads(line)["message"][-3:]) for line in lines]

    assert len(snap.files) > 2
    assert numbers(reader.history(snap, None, 25)) == list(range(5, 30))
    assert numbers(reader.history(snap, record.iso_time(T0 + 27), 100)) == [27, 28, 29]
    assert numbers(reader.history(snap, record.iso_time(T0 + 27), 2)) == [28, 29]
    assert reader.history(snap, None, 0) == []
    snap.close()
    assert [json.loads(line)["message"] for line in followed] == ["after the snapshot"]
    node_log.stopService()


def test_parse_time_normalises_to_the_line_format() -> None:
    """since= accepts Z, offsets and naive (UTC) times, and compares as the lines' times do."""
    assert record.parse_time("2027-01-15T08:00:00Z") == "2027-01-15T08:00:00.000000Z"
    assert record.parse_time("2027-01-15T09:00:00+01:00") == "2027-01-15T08:00:00.000000Z"
    assert record.parse_time("2027-01-15 08:00:00.5") == "2027-01-15T08:00:00.500000Z"


def test_a_node_log_that_cannot_be_written_says_so_and_keeps_following(tmp_path: Path) -> None:
    """log_dir under a file: the service still starts, logs one error, and followers still
    get lines."""
    (tmp_path / "file").write_text("")
    publisher = LogPublisher()
    seen: list[dict[str, object]] = []
    publisher.addObserver(seen.append)  # type: ignore[arg-type]
    node_log = NodeLog(tmp_path / "file" / "log", "n1", lambda: T0, publisher)
    node_log.startService()
    assert node_log.problem is not None and "cannot write" in node_log.problem
    assert any("not written" in str(e.get("log_format")) for e in seen)
    lines: list[str] = []
    node_log.follow(lines.append)
    Logger(observer=publisher).info("still here")
    assert json.loads(lines[0])["message"] == "still here"
    node_log.stopService()


def test_journal_lines_carry_sd_daemon_priorities() -> None:
    """Under JOURNAL_STREAM each line starts with its priority (<3> error, <4> warn, <6>
    info, <7> debug), every line of a traceback too; without it twistd's text goes to stdout."""
    out = io.StringIO()
    publisher = LogPublisher()
    observer = journal.observer({"JOURNAL_STREAM": "8:1234"})
    assert isinstance(observer, journal.JournalObserver)
    observer.out = out
    publisher.addObserver(observer)
    log = Logger(namespace="gtmcluster.health", observer=publisher)
    log.error("vs {vs} down", vs="vs-a")
    log.warn("w")
    log.info("i")
    log.debug("d")
    log.error("two\nlines")
    assert out.getvalue().splitlines() == [
        "<3>[gtmcluster.health] vs vs-a down",
        "<4>[gtmcluster.health] w",
        "<6>[gtmcluster.health] i",
        "<7>[gtmcluster.health] d",
        "<3>[gtmcluster.health] two",
        "<3>[gtmcluster.health] lines",
    ]
    assert not isinstance(journal.observer({}), journal.JournalObserver)
    assert record.PRIORITY[LogLevel.critical.name] == 2


def test_an_event_logged_in_another_thread_is_written_from_the_reactor_thread(tmp_path: Path) -> None:
    """Followers write to connections: an event from a thread (a snapshot write, a config
    read) goes through callFromThread, and is written and sent only when that runs."""
    publisher = LogPublisher()
    calls: list[tuple[Any, ...]] = []
    node_log = NodeLog(tmp_path, "n1", lambda: T0, publisher, call_from_thread=lambda *a: calls.append(a))
    node_log.startService()
    followed: list[str] = []
    node_log.follow(followed.append)
    worker = threading.Thread(target=emit, args=(publisher, T0 + 1, "from a thread"))
    worker.start()
    worker.join()
    assert followed == [] and log_path(tmp_path, "n1").read_text() == ""
    [(function, line)] = calls
    function(line)  # what the reactor does with it
    assert [json.loads(x)["message"] for x in followed] == ["from a thread"]
    assert json.loads(log_path(tmp_path, "n1").read_text())["time"] == record.iso_time(T0 + 1)
    node_log.stopService()


def test_a_long_message_is_cut_to_its_first_and_last_characters(tmp_path: Path) -> None:
    """A message of 1 MiB (a peer's 64 KiB name, a config problem quoting a value) becomes
    a line of under 64 KiB that parses, keeping the message's first and last characters and
    saying how many were left out; its followers get the same line."""
    node_log, log, _ = started(tmp_path)
    followed: list[str] = []
    node_log.follow(followed.append)
    name = "a" * (512 * 1024) + "-" + "z" * (512 * 1024)
    log.warn("Hello claims to be {node}", node=name)
    node_log.stopService()
    raw = log_path(tmp_path / "log", "gtm-cnc").read_bytes()
    assert raw.count(b"\n") == 1 and len(raw) < 64 * 1024
    line = json.loads(raw)
    kept_head = record.MAX_MESSAGE - record.TAIL
    left_out = len("Hello claims to be ") + len(name) - record.MAX_MESSAGE
    assert line["message"] == (
        f"Hello claims to be {name[: kept_head - 19]} ... {left_out} more characters ... {'z' * record.TAIL}"
    )
    assert followed == [raw.decode().rstrip("\n")]


def test_a_long_traceback_keeps_what_failed(tmp_path: Path) -> None:
    """A traceback past the cap keeps its last lines: the exception and its message."""
    node_log, log, _ = started(tmp_path)
    try:
        raise ValueError("x" * 100_000 + " the end")
    except ValueError:
        log.failure("reading failed", Failure())
    node_log.stopService()
    (line,) = lines_of(log_path(tmp_path / "log", "gtm-cnc"))
    assert line["message"].startswith("reading failed\nTraceback (most recent call last):")
    assert line["message"].endswith(" the end") and " more characters ... " in line["message"]
    assert len(line["message"]) <= record.MAX_MESSAGE + 40


def test_a_message_of_control_characters_stays_within_its_bytes(tmp_path: Path) -> None:
    """Control characters take six bytes each in JSON: such a message is cut further, so
    that its JSON form is at most MAX_MESSAGE_BYTES."""
    node_log, log, _ = started(tmp_path)
    log.info("{text}", text="\x01" * 16_000)
    log.info("{text}", text="\U0001f600" * 200_000)  # four bytes each in UTF-8
    node_log.stopService()
    raw = log_path(tmp_path / "log", "gtm-cnc").read_bytes().splitlines()
    assert len(raw) == 2
    for line in raw:
        message = json.loads(line)["message"]
        assert " more characters ... " in message
        assert len(json.dumps(message, ensure_ascii=False).encode()) <= record.MAX_MESSAGE_BYTES
        assert len(line) < 64 * 1024


def test_text_that_is_not_valid_unicode_is_written_escaped_not_lost(tmp_path: Path) -> None:
    """A file name of bytes that are not UTF-8 (a lone surrogate in Python's text) cannot be
    written as UTF-8: the event is written with a backslash escape rather than dropped."""
    node_log, log, _ = started(tmp_path)
    log.error("cannot read {path}", path="/etc/gtm/\udcffile")
    node_log.stopService()
    assert [line["message"] for line in lines_of(log_path(tmp_path / "log", "gtm-cnc"))] == [
        "cannot read /etc/gtm/\\udcffile"
    ]


def test_journal_lines_of_a_long_message_are_cut_too() -> None:
    out = io.StringIO()
    publisher = LogPublisher()
    publisher.addObserver(journal.JournalObserver(out))
    Logger(namespace="gtmcluster.sync", observer=publisher).warn("{name}", name="n" * 1_000_000)
    assert len(out.getvalue()) < record.MAX_MESSAGE + 100
