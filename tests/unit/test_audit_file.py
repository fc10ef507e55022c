"""The audit file (`nodelog.audit`): one whole JSON line per entry, time first (the node
log's reader reads it back), rotated by size with a cap of files kept; a write that fails
(a full device, a file size limit hit half way through a line) raises AuditError and
leaves no part of the line behind, and the file is written again once it can be."""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path

import pytest

from gtmcluster.nodelog import audit, reader
from gtmcluster.nodelog.audit import AuditError, AuditFile, audit_path

T0 = 1_800_000_000.0


def entry(n: int = 0, who: str = "alice") -> dict[str, object]:
    return {
        "origin": "n1",
        "id": f"n1-{n:012x}",
        "who": who,
        "role": "operator",
        "proof": "token",
        "source": "192.0.2.7",
        "route": "POST /api/v1/admin/datacenter/DC1/disable",
        "change": "disable data center DC1 (maintenance)",
        "result": "applied",
        "status": 200,
        "message": "",
    }


def test_an_entry_is_one_line_time_first_with_its_fields(tmp_path: Path) -> None:
    f = AuditFile(tmp_path, "n1", lambda: T0)
    line = f.write(entry())
    assert line.startswith('{"time":"2027-01-15T08:00:00.000000Z","node":"n1","origin":"n1",')
    assert list(json.loads(line)) == ["time", *audit.FIELDS[:-1]]  # ("detail" only when given)
    assert audit_path(tmp_path, "n1").read_text() == line + "\n"
    assert audit_path(tmp_path, "n1") == tmp_path / "audit" / "n1.jsonl"
    # long or undecodable text is shortened and escaped, never a broken line
    odd = f.write({**entry(), "change": "x" * 5000, "who": "b\udcffd"})
    parsed = audit.parse_entry(odd)
    assert parsed is not None and parsed["change"].endswith("(4000 more characters)") and parsed["who"] == "b\\udcffd"
    # the node log's reader reads it, by time
    snapshot = f.snapshot()
    assert reader.history(snapshot, "2027-01-15T08:00:00.000000Z", 10) == [line, odd]
    snapshot.close()


def test_the_file_rotates_by_size_and_keeps_at_most_keep_files(tmp_path: Path) -> None:
    f = AuditFile(tmp_path, "n1", lambda: T0, max_bytes=1000, keep=3)
    lines = [f.write(entry(n)) for n in range(40)]
    folder = tmp_path / "audit"
    assert sorted(p.name for p in folder.iterdir()) == ["n1.jsonl", "n1.jsonl.1", "n1.jsonl.2", "n1.jsonl.3"]
    assert all(p.stat().st_size < 1000 + 400 for p in folder.iterdir())
    snapshot = f.snapshot()
    kept = reader.history(snapshot, None, 1000)
    snapshot.close()
    assert kept == lines[-len(kept) :] and len(kept) < 40  # the oldest went with their file


def test_a_full_device_refuses_the_entry_and_the_log_comes_back(tmp_path: Path) -> None:
    path = audit_path(tmp_path, "n1")
    path.parent.mkdir()
    path.symlink_to("/dev/full")  # every write: ENOSPC
    f = AuditFile(tmp_path, "n1", lambda: T0)
    with pytest.raises(AuditError, match="No space left on device"):
        f.write(entry())
    assert f.counts == {"written": 0, "failed": 1} and f.problem is not None
    path.unlink()  # room again: the next entry opens the file anew
    f.write(entry(1))
    assert f.problem is None and len(path.read_text().splitlines()) == 1


def test_a_file_size_limit_hit_mid_line_leaves_no_part_of_it(tmp_path: Path) -> None:
    f = AuditFile(tmp_path, "n1", lambda: T0)
    first = f.write(entry())
    size = audit_path(tmp_path, "n1").stat().st_size
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 40, hard))  # (Python ignores SIGXFSZ: EFBIG)
    try:
        with pytest.raises(AuditError, match="too large"):
            f.write(entry(1))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert audit_path(tmp_path, "n1").read_text() == first + "\n"  # the 40 bytes taken back
    second = f.write(entry(2))
    assert audit_path(tmp_path, "n1").read_text() == first + "\n" + second + "\n"


def test_a_folder_that_cannot_be_made_refuses(tmp_path: Path) -> None:
    (tmp_path / "audit").write_text("a file where the folder goes")
    f = AuditFile(tmp_path, "n1", lambda: T0)
    with pytest.raises(AuditError):
        f.write(entry())
    os.unlink(tmp_path / "audit")
    f.write(entry())


def test_followers_get_each_line_as_written(tmp_path: Path) -> None:
    f = AuditFile(tmp_path, "n1", lambda: T0)
    seen: list[str] = []
    stop = f.follow(seen.append)
    line = f.write(entry())
    stop()
    f.write(entry(1))
    assert seen == [line]
