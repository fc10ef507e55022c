"""Crash safety of the SQLite snapshot: the real writer killed with SIGKILL at random moments.

A writer process (tests/support/snapwriter.py) loads the snapshot the way a node does at
start, then saves generation after generation of changes the way a node does every
`snapshot_interval`, back to back, so that at nearly every instant a write is under way.
The test kills it with SIGKILL after a delay drawn from a seeded RNG, many times over, and
after each kill loads the file the node's way and compares it with the state the same
generations make in memory. It must be exactly the state after the last generation the
writer reported saved, or after the one it was writing (committed, but killed before it
could say so): never a mix of two, never an older one, never unreadable. The next writer
starts from whatever the file holds, so later kills also land while a writer rolls back
the write the previous kill cut short.

``GTM_CRASH_KILLS`` (default 100) and ``GTM_CRASH_SEED`` (default 8) change the run.
"""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gtmcluster.state import snapshot
from tests.support import snapwriter

pytestmark = pytest.mark.process

KILLS = int(os.environ.get("GTM_CRASH_KILLS", "100"))
SEED = int(os.environ.get("GTM_CRASH_SEED", "8"))
#: kill moments are drawn uniformly from this many seconds after the writer was forked:
#: its load (some 20 ms here) and then a few generations' writes (40-50 ms each on this
#: machine's disk, most of it waiting for fsync)
WINDOW = 0.15
ROOT = Path(__file__).resolve().parents[2]
#: where the kills landed (the summary the test prints)
LOADING = "killed while loading"
ROLLBACK = "of which while a cut write was still to roll back"
CUT = "killed inside a write's transaction (journal left behind)"
UNREPORTED = "killed after a commit, before the writer could report it"
BETWEEN = "killed between writes"


class Server:
    """The fork server of tests/support/snapwriter.py and the lines it and its writers print."""

    def __init__(self, proc: subprocess.Popen[bytes], errors: Path):
        self.proc = proc
        self.errors = errors
        self._buffer = b""

    def line(self, timeout: float = 30.0) -> str:
        """The next line printed (waiting at most *timeout* seconds for it)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            chunk = os.read(self.proc.stdout.fileno(), 65536) if ready else b""
            if not chunk:
                stderr = self.errors.read_text(errors="replace")
                raise AssertionError(f"no line from the writer within {timeout:g}s (it said: {stderr!r})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def expect(self, word: str) -> str:
        """The rest of the next line, which must start with *word*."""
        line = self.line()
        assert line.startswith(word + " "), f"expected {word!r}, got {line!r}; {self.errors.read_text()!r}"
        return line[len(word) + 1 :]

    def fork(self, start: int) -> int:
        """A writer that starts from generation *start*; its pid."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{start}\n".encode())
        self.proc.stdin.flush()
        return int(self.expect("pid"))


@contextmanager
def fork_server(directory: Path, seed: int, errors: Path) -> Iterator[Server]:
    with errors.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.snapwriter", str(directory), str(seed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=ROOT,
        )
    try:
        yield Server(proc, errors)
    finally:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()  # the server ends at the end of its input
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def copy_of(directory: Path, scratch: Path) -> Path:
    """The snapshot and its journal copied to *scratch*: reading the copy rolls back a write
    cut short there, and leaves the original for the next writer to roll back."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    for name in (snapshot.FILENAME, f"{snapshot.FILENAME}-journal"):
        if (directory / name).exists():
            shutil.copy2(directory / name, scratch / name)
    return scratch


def describe(copy: Path, model: snapwriter.Model, reported: int) -> str:
    """How the snapshot in *copy* differs from the two states it may be, for a failure message."""
    lines = []
    for generation in (reported, reported + 1):
        found = snapwriter.read(copy, generation)
        expected = model.state(generation)
        missing = sorted(set(expected) - set(found))
        extra = sorted(set(found) - set(expected))
        changed = sorted(k for k in set(found) & set(expected) if found[k] != expected[k])
        lines.append(
            f"vs generation {generation}: {len(missing)} missing {missing[:3]}, {len(extra)} extra {extra[:3]}, "
            f"{len(changed)} different {changed[:3]}"
        )
    return "\n".join(lines)


def test_sigkill_at_random_moments_leaves_the_last_committed_snapshot(tmp_path: Path) -> None:
    """After each of KILLS SIGKILLs at seeded random moments of loading and writing, the file
    loads (never set aside) into exactly the state after the last generation reported saved
    or the one after it; the next writer goes on from there. Among the kills, some cut a
    write short (the journal is left behind) and some land after a commit the writer had no
    time to report, so both sides of the commit point were hit."""
    directory = tmp_path / "state"
    path = directory / snapshot.FILENAME
    journal = Path(f"{path}-journal")
    rng = random.Random(SEED)
    model = snapwriter.Model(SEED)
    on_disk = 0  # the generation the file holds, as checked after the last kill
    outcomes: Counter[str] = Counter()
    with fork_server(directory, SEED, tmp_path / "writer.stderr") as server:
        for kill in range(KILLS):
            pid = server.fork(on_disk)
            delay = rng.uniform(0, WINDOW)
            forked = time.monotonic()
            # the writer prints as it goes: wait out the delay reading nothing, then kill
            time.sleep(max(0.0, forked + delay - time.monotonic()))
            os.kill(pid, signal.SIGKILL)
            reported, ready = on_disk, False
            while True:
                line = server.line()
                if line.startswith("gen "):
                    reported = int(line[4:])
                elif line.startswith("ready "):
                    ready = True
                    loaded = int(line[6:])
                    expected = len(model.state(on_disk))
                    assert loaded == expected, f"kill {kill}: the writer loaded {loaded} records, not {expected}"
                elif line.startswith("exit "):
                    status = int(line[5:])
                    break
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
                f"kill {kill}: the writer ended by itself (status {status}): {server.errors.read_text()!r}"
            )
            journal_left = journal.exists()
            copy = copy_of(directory, tmp_path / "check")
            # loaded at each generation's own time: a record that ended in between is not loaded
            if snapwriter.read(copy, reported) == model.state(reported):
                committed_unreported = False
            elif snapwriter.read(copy, reported + 1) == model.state(reported + 1):
                committed_unreported = True
            else:
                raise AssertionError(
                    f"kill {kill} (after {delay * 1000:.1f} ms): the snapshot holds neither generation "
                    f"{reported} nor {reported + 1}:\n{describe(copy, model, reported)}"
                )
            set_aside = sorted(p.name for p in directory.glob("*.bad-*"))
            assert not set_aside, f"kill {kill}: a killed write made the snapshot unreadable: {set_aside}"
            on_disk = reported + committed_unreported
            model.forget(on_disk)
            if not ready:
                outcomes[LOADING] += 1
                outcomes[ROLLBACK] += journal_left
            elif journal_left:
                outcomes[CUT] += 1
            elif committed_unreported:
                outcomes[UNREPORTED] += 1
            else:
                outcomes[BETWEEN] += 1
    summary = "; ".join(f"{what}: {outcomes[what]}" for what in (LOADING, ROLLBACK, CUT, UNREPORTED, BETWEEN))
    print(f"\n{KILLS} kills, {on_disk} generations written in all; {summary}")
    assert on_disk > 0, summary
    assert outcomes[CUT] > 0, summary
