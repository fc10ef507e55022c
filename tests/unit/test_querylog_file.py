"""The query log's file (`querylog.logfile`): it writes, renames and removes only files it
wrote itself, inside its own folder, never through a symbolic link; and a full disk never
leaves a broken frame (what did not fit is counted, and writing goes on after a whole
frame when there is room again)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.logger import capturedLogs, formatEvent

from gtmcluster.querylog import dnstap, writer
from gtmcluster.querylog.logfile import START, LogFile, Unwritten
from tests.unit.test_querylog_writer import make_writer, records_in

VICTIM = b"an operator's own file, not a query log\n" * 20


def frames(start: int, count: int) -> list[bytes]:
    return [dnstap.data_frame(b"record %d" % n) for n in range(start, start + count)]


def payloads(path: Path) -> list[bytes]:
    return dnstap.read_frames(path.read_bytes()).records


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    made = tmp_path / "log"
    made.mkdir(mode=0o750)
    return made


class Disk:
    """A disk with *room* bytes left: a write takes what fits (a short write), then
    ENOSPC; the bytes that fit are really written."""

    def __init__(self, room: int):
        self.room = room

    def write(self, fd: int, data: memoryview) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = os.write(fd, data[: self.room])
        self.room -= n
        return n


# -- whose files ------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0, 2])
def test_a_foreign_file_at_the_path_is_never_removed_or_renamed(folder: Path, tmp_path: Path, keep: int) -> None:
    """The config named a file the log did not write (keep 0 removed it, keep >= 1 renamed
    it .1): it stays, byte for byte; nothing is written until it is moved away, and then
    the log goes on by itself."""
    victim = folder / "q.dnstap"
    victim.write_bytes(VICTIM)
    log = LogFile(victim, 10_000, keep, folder)
    for _ in range(2):
        with pytest.raises(Unwritten) as caught:
            log.write(frames(0, 3))
        assert caught.value.written == 0
        assert f"{victim} is not a query log file" in caught.value.reason
        assert "never replaces, renames or removes a file it did not write (move it away)" in caught.value.reason
    assert victim.read_bytes() == VICTIM
    assert sorted(folder.iterdir()) == [victim]
    victim.rename(tmp_path / "moved")
    assert log.write(frames(3, 2)) == 2
    log.close()
    assert payloads(victim) == [b"record 3", b"record 4"]
    assert (tmp_path / "moved").read_bytes() == VICTIM


def test_a_foreign_file_among_the_rotated_names_stops_the_rotation_with_nothing_moved(folder: Path) -> None:
    path = folder / "q.dnstap"
    for n in range(2):  # two runs: q.dnstap.1 and q.dnstap, both the log's
        run = LogFile(path, 10_000, 2, folder)
        run.write(frames(n, 1))
        run.close()
    victim = folder / "q.dnstap.2"  # where the oldest goes
    victim.write_bytes(VICTIM)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(Unwritten) as caught:
        LogFile(path, 10_000, 2, folder).write(frames(2, 1))
    assert f"{victim} is not a query log file" in caught.value.reason
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert payloads(path) == [b"record 1"] and payloads(folder / "q.dnstap.1") == [b"record 0"]


def test_a_file_that_begins_with_another_frame_streams_type_is_not_the_logs(folder: Path) -> None:
    path = folder / "q.dnstap"
    path.write_bytes(dnstap.start_frame(b"protobuf:other.Thing") + dnstap.data_frame(b"x"))
    with pytest.raises(Unwritten, match="is not a query log file"):
        LogFile(path, 10_000, 0, folder).write(frames(0, 1))
    assert payloads(path) == [b"x"]


@pytest.mark.parametrize("dangling", [False, True])
def test_a_link_at_the_path_is_never_followed(folder: Path, tmp_path: Path, dangling: bool) -> None:
    """A symbolic link at the path (to a file, or to nothing: O_CREAT would have made the
    target) is refused; the link and its target stay as they were."""
    target = tmp_path / "target"
    if not dangling:
        target.write_bytes(VICTIM)
    path = folder / "q.dnstap"
    path.symlink_to(target)
    with pytest.raises(Unwritten, match="is a symbolic link"):
        LogFile(path, 10_000, 1, folder).write(frames(0, 1))
    assert os.readlink(path) == str(target) and sorted(folder.iterdir()) == [path]
    if dangling:
        assert not os.path.lexists(target)
    else:
        assert target.read_bytes() == VICTIM


def test_a_link_at_a_rotated_name_is_never_followed(folder: Path, tmp_path: Path) -> None:
    path = folder / "q.dnstap"
    LogFile(path, 10_000, 1, folder).close()
    first = LogFile(path, 10_000, 1, folder)
    first.write(frames(0, 1))
    first.close()
    target = tmp_path / "target"
    target.write_bytes(VICTIM)
    (folder / "q.dnstap.1").symlink_to(target)
    with pytest.raises(Unwritten, match=r"q\.dnstap\.1 is a symbolic link"):
        LogFile(path, 10_000, 1, folder).write(frames(1, 1))
    assert target.read_bytes() == VICTIM and payloads(path) == [b"record 0"]


def test_a_linked_folder_below_the_logs_folder_is_never_followed(folder: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "q.dnstap").write_bytes(VICTIM)
    (folder / "sub").symlink_to(elsewhere)
    with pytest.raises(Unwritten, match=r"log/sub is a symbolic link \(never followed\)"):
        LogFile(folder / "sub" / "q.dnstap", 10_000, 0, folder).write(frames(0, 1))
    assert sorted(elsewhere.iterdir()) == [elsewhere / "q.dnstap"]
    assert (elsewhere / "q.dnstap").read_bytes() == VICTIM


def test_folders_below_are_made_private_and_one_others_may_write_in_is_refused(folder: Path) -> None:
    path = folder / "a" / "b" / "q.dnstap"
    log = LogFile(path, 10_000, 0, folder)
    assert log.write(frames(0, 1)) == 1
    log.close()
    assert (folder / "a").stat().st_mode & 0o777 == 0o750
    assert path.stat().st_mode & 0o777 == 0o640
    (folder / "a").chmod(0o770)
    with pytest.raises(Unwritten, match=r"log/a is writable by its group or others \(mode 0770\)"):
        LogFile(path, 10_000, 0, folder).write(frames(1, 1))
    folder.chmod(0o757)
    with pytest.raises(Unwritten, match=r"the query log's folder .*/log is writable by its group or others"):
        LogFile(path, 10_000, 0, folder).write(frames(1, 1))
    assert payloads(path) == [b"record 0"]


# -- a full disk ------------------------------------------------------------------------------


def test_a_full_disk_cuts_the_file_back_to_its_last_whole_frame_and_writing_goes_on(folder: Path) -> None:
    path = folder / "q.dnstap"
    log = LogFile(path, 100_000, 0, folder)
    disk = Disk(len(START) + 3 * len(frames(0, 1)[0]) + 5)  # three records and part of a fourth
    log.os_write = disk.write
    with pytest.raises(Unwritten) as caught:
        log.write(frames(0, 6))
    assert (caught.value.written, caught.value.reason) == (3, "the disk is full (No space left on device)")
    assert path.read_bytes() == START + b"".join(frames(0, 3))
    with pytest.raises(Unwritten) as caught:
        log.write(frames(6, 1))  # still full
    assert caught.value.written == 0
    disk.room = 10**6
    assert log.write(frames(7, 2)) == 2
    log.close()
    assert payloads(path) == [b"record %d" % n for n in (0, 1, 2, 7, 8)]
    assert dnstap.read_frames(path.read_bytes()).stopped


def test_a_start_frame_that_does_not_fit_leaves_no_file_and_a_stop_frame_no_part(folder: Path) -> None:
    path = folder / "q.dnstap"
    log = LogFile(path, 100_000, 0, folder)
    log.os_write = Disk(len(START) - 1).write
    with pytest.raises(Unwritten, match="the disk is full"):
        log.write(frames(0, 1))
    assert not os.path.lexists(path)
    disk = Disk(len(START) + len(frames(0, 1)[0]) + 3)
    log.os_write = disk.write
    assert log.write(frames(0, 1)) == 1
    log.close()  # the STOP frame does not fit: the file ends after its last whole record
    data = path.read_bytes()
    assert data == START + frames(0, 1)[0]
    assert not dnstap.read_frames(data).stopped and dnstap.read_frames(data).records == [b"record 0"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(1, 200), min_size=1, max_size=40),
    rooms=st.lists(st.integers(0, 3000), min_size=1, max_size=6),
    max_bytes=st.integers(100, 3000),
    keep=st.integers(0, 3),
)
def test_whatever_the_disk_takes_every_file_is_whole_frames_of_what_was_counted_written(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], rooms: list[int], max_bytes: int, keep: int
) -> None:
    """Batches written while the disk has a little room, or none, rotating as they go:
    every file holds whole frames only (none cut), together they hold exactly the frames
    `write` counted as written (the newest of them, where rotation removed old files), and
    a count of written plus lost is every frame."""
    folder = tmp_path_factory.mktemp("log")
    path = folder / "q.dnstap"
    log = LogFile(path, max_bytes, keep, folder)
    disk = Disk(0)
    log.os_write = disk.write
    data = [dnstap.data_frame(bytes([n % 251]) * size) for n, size in enumerate(sizes)]
    step = -(-len(data) // len(rooms))
    written: list[bytes] = []
    lost = 0
    for i, room in zip(range(0, len(data), step), rooms, strict=False):
        batch = data[i : i + step]
        disk.room = room
        try:
            n = log.write(batch)
        except Unwritten as e:
            n = e.written
        written += batch[:n]
        lost += len(batch) - n
        for f in folder.iterdir():
            dnstap.read_frames(f.read_bytes())  # raises FrameError on a cut frame
    disk.room = 10**9
    log.close()
    assert len(written) + lost == len(data)
    files = [path.with_name(f"q.dnstap.{n}") for n in range(keep, 0, -1)] + [path]
    seen = [r for f in files if f.exists() for r in dnstap.read_frames(f.read_bytes()).records]
    expected = [frame[4:] for frame in written]
    assert seen == expected[len(expected) - len(seen) :]
    if keep >= log.rotations:
        assert seen == expected


# -- the writer ---------------------------------------------------------------------------


def test_the_writer_counts_what_a_full_disk_lost_logs_it_once_and_goes_on(tmp_path: Path) -> None:
    w, clock = make_writer(tmp_path)
    w.start()
    add = lambda n: w.queue.add(("192.0.2.1", n), ("127.0.0.1", 53), dnstap.UDP, b"q%d" % n, b"r")  # noqa: E731
    add(0)
    clock.advance(writer.FLUSH_INTERVAL)
    one = len(w.file.path.read_bytes()) - len(START)  # one record's frame
    disk = Disk(2 * one + 7)
    w.file.os_write = disk.write
    with capturedLogs() as events:
        for n in range(1, 6):
            add(n)
        clock.advance(writer.FLUSH_INTERVAL)  # q1 q2 fit, q3 in part (cut back), q4 q5 not
        for n in range(6, 9):
            add(n)
            clock.advance(writer.FLUSH_INTERVAL)
        assert (w.stats.query_log_written, w.stats.query_log_failed) == (3, 6)
        disk.room = 10**6
        add(9)
        clock.advance(writer.FLUSH_INTERVAL)
    w.stop()
    assert [r.query_port for r in records_in(w.file.path)] == [0, 1, 2, 9]
    assert (w.stats.query_log_written, w.stats.query_log_failed) == (4, 6)
    texts = [formatEvent(e) for e in events]
    assert sum("the disk is full" in t and "gtm_query_log_failed_total" in t for t in texts) == 1
    assert sum("writing the query log" in t and "again" in t for t in texts) == 1
    assert not any(e.get("log_failure") for e in events)
