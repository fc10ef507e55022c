"""Query logs as `gtmcluster replay --log` and `python -m gtmcluster.querylog.read` read them:
a frame at a time, whatever the file's size (a replay under an address-space limit a little
above a small run's, counted allocations that do not grow with the queries); a cut file, a
huge frame length, a file that grows, is rotated or cut while read, a FIFO or a device: each
a declared error or a note, never a traceback or a hang."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from gtmcluster.cli.main import main
from gtmcluster.querylog import dnstap, read
from gtmcluster.replay import report
from gtmcluster.replay.queries import BadLog, Logs
from tests.support import configs, dnsclient

WHEN = 1_800_000_000
WIDEIP = "gslb.example.test"
#: a child that runs a command (the replay's or the reader's) under an address-space limit
#: (argv[1] bytes; 0: none) and tells its peak (VmPeak, kB) on stderr's last line
CHILD = """
import resource, runpy, sys
limit = int(sys.argv[1])
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
module, sys.argv = sys.argv[2], sys.argv[2:]
try:
    runpy.run_module(module, run_name="__main__")
finally:
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmPeak:"))
    print(peak.split()[1], file=sys.stderr)
"""
#: the room a large log's replay gets above a small log's peak
ROOM = 64 << 20


def frame(source: str = "127.0.2.5", at: int = WHEN, identity: bytes = b"", ecs: str | None = None) -> bytes:
    """A data frame: a query for the wide IP from *source*, with an *identity* field as long
    as wanted (a record of any size up to `dnstap.MAX_FRAME`)."""
    family, address = dnstap.packed(source)
    message = dnsclient.query(WIDEIP, "A", ecs=ecs)
    record = dnstap.Record(
        dnstap.AUTH_RESPONSE, family, dnstap.UDP, address, 40000, address, 53, (at, 0), message, identity=identity
    )
    return dnstap.data_frame(dnstap.encode(record))


def write_log(path: Path, *frames: bytes, stopped: bool = True) -> Path:
    path.write_bytes(dnstap.start_frame() + b"".join(frames) + (dnstap.STOP_FRAME if stopped else b""))
    return path


def large_log(path: Path, records: int, size: int) -> Path:
    """A log of *records* records of about *size* bytes each (written a frame at a time)."""
    big = frame(identity=b"x" * (size - 200))
    with path.open("wb") as out:
        out.write(dnstap.start_frame())
        for _ in range(records):
            out.write(big)
        out.write(dnstap.STOP_FRAME)
    return path


def child(limit: int, module: str, *argv: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run `python -m module argv` under an address-space *limit*: (its run, its peak in bytes)."""
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(limit), module, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = run.stderr.splitlines()
    peak = int(lines[-1]) * 1024 if lines and lines[-1].isdigit() else 0
    return run, peak


def replay_argv(log: Path, config: Path) -> list[str]:
    return ["replay", "--log", str(log), "--config", str(config), "--json"]


# -- memory -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_replay_of_a_large_log_needs_no_more_room_than_a_small_one(tmp_path: Path) -> None:
    """A 117 MB log (130 records of 900 KB) is replayed within 64 MiB of address space above
    what a one-query log's replay took: it is read a frame at a time. (Before issue 30 the
    replay read the whole file, then copied every record: MemoryError.)"""
    config = configs.write(tmp_path, configs.base())
    small = write_log(tmp_path / "small.dnstap", frame())
    run, baseline = child(0, "gtmcluster.cli.main", *replay_argv(small, config))
    assert run.returncode == 0 and baseline > 0, run.stderr
    large = large_log(tmp_path / "large.dnstap", 130, 900_000)
    assert large.stat().st_size > ROOM + (40 << 20)
    run, peak = child(baseline + ROOM, "gtmcluster.cli.main", *replay_argv(large, config))
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["queries"] == 130
    assert peak <= baseline + ROOM


@pytest.mark.slow
def test_the_reader_prints_a_large_log_without_holding_it(tmp_path: Path) -> None:
    """`python -m gtmcluster.querylog.read` too: the same 117 MB log, the same room."""
    small = write_log(tmp_path / "small.dnstap", frame())
    run, baseline = child(0, "gtmcluster.querylog.read", str(small))
    assert run.returncode == 0 and baseline > 0, run.stderr
    large = large_log(tmp_path / "large.dnstap", 130, 900_000)
    run, _ = child(baseline + ROOM, "gtmcluster.querylog.read", str(large))
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(run.stdout.splitlines()) == 130


def _traced_peak(argv: list[str], capsys: pytest.CaptureFixture[str]) -> int:
    """The most memory allocated at once (tracemalloc) above what was held before."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        assert main(argv) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    capsys.readouterr()
    return peak - before


def test_what_a_replay_holds_does_not_grow_with_the_queries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ten times the queries of the same ten clients: the replay's peak allocation is the
    same within 256 KiB (it keeps counts per client, never the queries: before issue 30
    every query, its two outcomes and the file's bytes were kept, some 4 MB more here)."""
    config = configs.write(tmp_path, configs.base())
    clients = [f"127.0.{n % 3 + 1}.{n}" for n in range(1, 11)]

    def log(name: str, count: int) -> Path:
        return write_log(tmp_path / name, *(frame(clients[i % 10], WHEN + i) for i in range(count)))

    few, many = log("few.dnstap", 500), log("many.dnstap", 5000)
    _traced_peak(replay_argv(few, config), capsys)  # (imports and caches first)
    small = _traced_peak(replay_argv(few, config), capsys)
    large = _traced_peak(replay_argv(many, config), capsys)
    assert large - small < 256 << 10, (small, large)


# -- hostile and damaged files ----------------------------------------------------------------


def test_a_huge_frame_length_is_refused_without_reading_it(tmp_path: Path) -> None:
    """A length field of 4 GB (or anything over `MAX_FRAME`, 1 MiB): a declared error naming
    where, before any of it is read; the reader prints the records before it, then exits 1."""
    for length in (0xFFFFFFFF, dnstap.MAX_FRAME + 1):
        log = write_log(tmp_path / "huge.dnstap", frame(), length.to_bytes(4, "big") + b"\0" * 64)
        with pytest.raises(BadLog, match=f"not a dnstap query log: a frame of {length} bytes at "), Logs([log]) as logs:
            logs.scan()
        run = subprocess.run(
            [sys.executable, "-m", "gtmcluster.querylog.read", str(log)], capture_output=True, text=True, check=False
        )
        assert run.returncode == 1 and len(run.stdout.splitlines()) == 1
        assert f"a frame of {length} bytes" in run.stderr and "Traceback" not in run.stderr


def test_a_frame_of_the_largest_size_is_read(tmp_path: Path) -> None:
    record = dnstap.decode(frame()[4:])
    size = dnstap.MAX_FRAME - 200
    while len(big := dnstap.encode(dnstap.Record(**{**record.__dict__, "identity": b"x" * size}))) != dnstap.MAX_FRAME:
        size += dnstap.MAX_FRAME - len(big)
    log = write_log(tmp_path / "big.dnstap", dnstap.data_frame(big))
    with read.LogFile(log) as f:
        assert [r.identity for r in map(dnstap.decode, f.frames())] == [b"x" * size]


def test_a_cut_file_is_replayed_to_its_last_whole_record_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = configs.write(tmp_path, configs.base())
    whole = write_log(tmp_path / "q.dnstap", frame("127.0.1.5"), frame("127.0.2.5"), stopped=False)
    data = whole.read_bytes()
    whole.write_bytes(data + frame("127.0.3.5")[:-7])
    assert main(replay_argv(whole, config)) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["queries"] == 2
    assert found["notes"] == [
        f"{whole}: read to its last whole record (byte {len(data)}); the {len(frame('127.0.3.5')) - 7} bytes"
        " after it are not a whole record (one being written, or the file was cut)"
    ]
    assert main(replay_argv(whole, config)[:-1]) == 0
    assert f"  note: {whole}: read to its last whole record" in capsys.readouterr().out
    run = subprocess.run(
        [sys.executable, "-m", "gtmcluster.querylog.read", str(whole)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0 and len(run.stdout.splitlines()) == 2
    assert run.stderr.startswith(f"{whole}: read to its last whole record")


def test_a_file_that_grows_while_read_is_read_as_it_was_when_opened(tmp_path: Path) -> None:
    """What is written after the file was opened is not read (a note says how much), and the
    second reading reads exactly what the first did, however the file grew meanwhile."""
    log = write_log(tmp_path / "q.dnstap", frame("127.0.1.5", WHEN), stopped=False)
    with read.LogFile(log) as f:
        with log.open("ab") as out:
            out.write(frame("127.0.2.5", WHEN + 5))
        reader = f.frames()
        assert len(list(reader)) == 1
        assert f.notes(reader) == [
            f"{log}: {len(frame('127.0.2.5'))} bytes were written to it after it was opened; only its first"
            f" {f.size} are read"
        ]
    with Logs([log]) as logs:
        logs.scan()
        with log.open("ab") as out:
            out.write(frame("127.0.3.5", WHEN + 9) + frame("127.0.3.6", WHEN + 9)[:9])
        assert [str(q.ldns) for q in logs.queries()] == ["127.0.1.5", "127.0.2.5"]
        assert logs.last_time == WHEN + 5


def test_a_file_rotated_between_the_readings_is_read_from_what_was_opened(tmp_path: Path) -> None:
    """The node renames (keep >= 1) or removes (keep: 0) the file and starts a new one: the
    replay reads the file it opened, both times."""
    log = write_log(tmp_path / "q.dnstap", frame("127.0.1.5"), frame("127.0.2.5"))
    with Logs([log]) as logs:
        logs.scan()
        log.rename(tmp_path / "q.dnstap.1")
        write_log(log, frame("127.0.3.5"))
        assert [str(q.ldns) for q in logs.queries()] == ["127.0.1.5", "127.0.2.5"]
    with Logs([log]) as logs:
        logs.scan()
        log.unlink()
        assert [str(q.ldns) for q in logs.queries()] == ["127.0.3.5"]


def test_a_file_cut_or_rewritten_between_the_readings_is_refused(tmp_path: Path) -> None:
    frames = [frame("127.0.1.5"), frame("127.0.2.5"), frame("127.0.2.6")]
    for change in ("cut", "rewritten"):
        log = write_log(tmp_path / f"{change}.dnstap", *frames)
        with Logs([log]) as logs:
            logs.scan()
            size = log.stat().st_size
            with log.open("r+b") as f:
                f.truncate(size - 30)
                if change == "rewritten":  # one record longer than the three were
                    f.seek(0)
                    f.write(dnstap.start_frame() + frame(identity=b"x" * size))
            with pytest.raises(BadLog, match=f"{change}.dnstap: changed while it was read"):
                list(logs.queries())


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_log_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """A FIFO (no writer: an open() would block for ever), /dev/zero (endless) or a folder
    named as --log: exit 2, "not a regular file", within the child's timeout and its room.
    (Before issue 30: the FIFO blocked the replay, /dev/zero filled its memory.)"""
    config = configs.write(tmp_path, configs.base())
    small = write_log(tmp_path / "small.dnstap", frame())
    _, baseline = child(0, "gtmcluster.cli.main", *replay_argv(small, config))
    path = {"fifo": tmp_path / "fifo", "device": Path("/dev/zero"), "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    run, _ = child(baseline + ROOM, "gtmcluster.cli.main", *replay_argv(path, config), timeout=20)
    assert run.returncode == 2, run.stderr[-2000:]
    assert re.match(
        rf"gtmcluster replay: {re.escape(str(path))}: cannot read the query log: not a regular file", run.stderr
    )
    assert "Traceback" not in run.stderr
    run, _ = child(baseline + ROOM, "gtmcluster.querylog.read", str(path), timeout=20)
    assert run.returncode == 1 and f"{path}: not a regular file" in run.stderr and "Traceback" not in run.stderr


# -- what a replay keeps ----------------------------------------------------------------------


def test_clients_beyond_max_clients_count_in_the_shares_not_in_the_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-clients 2: the first two clients (in log order) are listed; the third's queries
    still count in the shares, and the report says how many were left out of the lists."""
    raw = configs.base()
    config = configs.write(tmp_path, raw)
    raw["topology"][1]["server"] = "datacenter DC1"
    moved = configs.write(tmp_path, raw, name="new.yaml")
    log = write_log(
        tmp_path / "q.dnstap", frame("127.0.2.7"), frame("127.0.2.5"), frame("127.0.2.6"), frame("127.0.2.7")
    )
    argv = ["replay", "--log", str(log), "--config", str(moved), "--base", str(config), "--json"]
    assert main([*argv, "--max-clients", "2"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [(m["client"], m["queries"]) for m in found["moved"]] == [("127.0.2.5", 1), ("127.0.2.7", 2)]
    assert found["wideips"][WIDEIP]["datacenters"]["DC1"]["after"] == 4
    assert found["clients"] == {"followed": 2, "max": 2, "queries_not_followed": 1}
    assert found["notes"] == [
        "only the first 2 clients are followed (--max-clients): the 1 queries of later clients count in the"
        " shares and the agreement, not in the lists of clients"
    ]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["clients"] == {
        "followed": 3,
        "max": report.MAX_CLIENTS,
        "queries_not_followed": 0,
    }
    for bad in ("0", "-1", "many"):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--max-clients", bad])
        assert exit_.value.code == 2
        assert "--max-clients" in capsys.readouterr().err


def test_as_many_files_as_a_node_keeps_are_replayed_under_a_low_open_file_limit(tmp_path: Path) -> None:
    """Every file stays open between the two readings: with a soft limit of 128 open files,
    300 files (a node keeps up to 1,001) are replayed, the limit raised toward the hard one."""
    config = configs.write(tmp_path, configs.base())
    logs = [write_log(tmp_path / f"q.dnstap.{n}", frame(f"127.0.2.{n % 250 + 1}", WHEN + n)) for n in range(300)]
    argv = [a for log in logs for a in ("--log", str(log))]
    code = (
        "import resource, sys; from gtmcluster.cli.main import main;"
        " resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]));"
        " sys.exit(main(sys.argv[1:]))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, "replay", "--config", str(config), "--json", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["queries"] == 300


def test_a_report_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`gtmcluster replay --json | head -c 10`: exit 0, no traceback (the report, 2,000 clients
    that move, is larger than a pipe holds)."""
    raw = configs.base()
    raw["regions"]["r2"].append("10.0.0.0/8")
    config = configs.write(tmp_path, raw)
    raw["topology"][1]["server"] = "datacenter DC1"
    moved = configs.write(tmp_path, raw, name="new.yaml")
    subnets = [f"10.{n >> 8}.{n & 255}.0/24" for n in range(2000)]
    log = write_log(tmp_path / "q.dnstap", *(frame("127.0.0.1", ecs=subnet) for subnet in subnets))
    argv = ["replay", "--log", str(log), "--config", str(moved), "--base", str(config), "--json"]
    with subprocess.Popen(
        [sys.executable, "-m", "gtmcluster.cli.main", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as run:
        assert run.stdout is not None and run.stderr is not None
        assert run.stdout.read(10) == b'{\n "agreem'[:10]
        run.stdout.close()
        err = run.stderr.read().decode()
        assert run.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "Broken pipe" not in err


def test_the_files_of_a_nodes_processes_are_merged_in_time_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``read --merge``: the node's file and its workers' (each in time order) read as one
    stream in query time order, every record once; equal times keep the files' order; a
    fault in one file is named, after the records before it (exit 1); a file still being
    written is read to its last whole record, with its note."""
    node = write_log(tmp_path / "q.dnstap", frame("127.0.1.1", WHEN), frame("127.0.1.2", WHEN + 4))
    w1 = write_log(tmp_path / "q.w1.dnstap", frame("127.0.2.1", WHEN + 1), frame("127.0.2.2", WHEN + 4))
    w2 = write_log(tmp_path / "q.w2.dnstap", frame("127.0.3.1", WHEN + 2), frame("127.0.3.2", WHEN + 3), stopped=False)
    w2.write_bytes(w2.read_bytes() + frame("127.0.3.3", WHEN + 9)[:-3])
    assert read.main(["--merge", str(node), str(w1), str(w2)]) == 0
    captured = capsys.readouterr()
    clients = [line.split()[1].split(":")[0] for line in captured.out.splitlines()]
    assert clients == ["127.0.1.1", "127.0.2.1", "127.0.3.1", "127.0.3.2", "127.0.1.2", "127.0.2.2"]
    assert captured.err.startswith(f"{w2}: read to its last whole record")
    broken = write_log(
        tmp_path / "q.w3.dnstap", frame("127.0.4.1", WHEN + 1), dnstap.data_frame(b"\xff" * 9), frame("127.0.4.2")
    )
    assert read.main(["--merge", str(node), str(broken)]) == 1
    captured = capsys.readouterr()
    assert [line.split()[1].split(":")[0] for line in captured.out.splitlines()] == ["127.0.1.1", "127.0.4.1"]
    assert captured.err.startswith(f"{broken}: ")
    assert read.main(["--merge", str(node), str(tmp_path / "missing")]) == 1
    assert capsys.readouterr().err.startswith(f"{tmp_path / 'missing'}: ")
