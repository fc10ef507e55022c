"""`gtmcluster replay --state` next to a node: the snapshot is read from a copy in memory
(`replay.statecopy`), so the replay never changes the file (not even to roll back a write a
killed node left half done), never holds it locked longer than the copy, and gives up
clearly on a writer that keeps it locked."""

from __future__ import annotations

import ipaddress
import json
import os
import sqlite3
from pathlib import Path

import pytest

from gtmcluster.cli.main import main
from gtmcluster.lb.context import Client
from gtmcluster.lb.engine import Balancer
from gtmcluster.replay import statecopy
from gtmcluster.state import snapshot
from gtmcluster.state.persistence import PersistRecord, StorePersistence
from gtmcluster.state.store import Store
from tests.support import configs
from tests.unit.test_replay_cli import WHEN, WIDEIP, _wideip, record, write_log


def files(state: Path) -> dict[str, tuple[bytes, int]]:
    """The snapshot's files (it and its journal): bytes and modification time."""
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (state, Path(f"{state}-journal")) if os.path.lexists(p)
    }


def held_snapshot(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """Configs, a log and a snapshot in which 127.0.2.5 is held on vs2 by persistence:
    (base config, candidate config that moves region r2, log, snapshot)."""
    raw = configs.base()
    raw["wideips"][WIDEIP]["persistence"] = {"ttl": 3600}
    config = configs.write(tmp_path, raw)
    raw["topology"][1]["server"] = "datacenter DC1"
    new = configs.write(tmp_path, raw, name="new.yaml")
    log = write_log(tmp_path / "q.dnstap", record("127.0.2.5"), record("127.0.2.6"))
    store = Store("n1", lambda: float(WHEN))
    persisted = Balancer.persist_key(_wideip(config), 1, Client.from_ldns(ipaddress.ip_address("127.0.2.5")))
    assert persisted is not None
    StorePersistence(store).put(PersistRecord(persisted[0], "p", ("vs2",), WHEN - 60, 3600))
    state = tmp_path / "state.sqlite"
    snapshot.write(state, snapshot.rows(store, WHEN, WHEN), "n1")
    return config, new, log, state


def die_mid_write(state: Path) -> None:
    """A writer (a forked process) that deletes every record and writes many more, its
    changes spilled into the file before commit, then is gone: a -journal is left behind."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            db = sqlite3.connect(state, isolation_level=None)
            db.execute("PRAGMA cache_size=1")
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM records")
            db.executemany(
                "INSERT INTO records VALUES (?, ?, 0, 0, 'x', NULL)", [(f"junk{n}", "j" * 200) for n in range(5000)]
            )
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def test_a_write_its_node_left_unfinished_is_rolled_back_in_the_copy_never_in_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replay decides with the last committed state (127.0.2.5 stays held on vs2), and
    the snapshot and its journal are as the dead writer left them, byte for byte and mtime:
    rolling back is its node's to do when it starts."""
    config, new, log, state = held_snapshot(tmp_path)
    committed = state.read_bytes()
    die_mid_write(state)
    before = files(state)
    assert set(before) == {"state.sqlite", "state.sqlite-journal"} and before["state.sqlite"][0] != committed
    argv = ["replay", "--log", str(log), "--config", str(new), "--base", str(config), "--json", "--state", str(state)]
    assert main(argv) == 0
    assert [m["client"] for m in json.loads(capsys.readouterr().out)["moved"]] == ["127.0.2.6"]
    assert files(state) == before
    # (its node, starting, rolls it back: the committed state again)
    store = Store("n1", lambda: float(WHEN))
    assert snapshot.read(state, store, WHEN) == 1 and state.read_bytes() == committed


def test_a_replay_holds_no_lock_once_copied_and_changes_nothing(tmp_path: Path) -> None:
    """After the copy, a writer commits at once (no waiting at all) while the replay reads;
    the replay still sees the state it copied, and the file was not written by it."""
    _, _, _, state = held_snapshot(tmp_path)
    before = files(state)
    copy = statecopy.connect(state)
    assert files(state) == before
    rows = copy.execute("SELECT count(*) FROM records")
    writer = sqlite3.connect(state, timeout=0, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("DELETE FROM records")
    writer.execute("COMMIT")
    writer.close()
    assert rows.fetchone() == (1,)
    copy.close()


def test_a_writer_that_keeps_it_locked_past_the_wait_makes_the_replay_give_up_saying_so(tmp_path: Path) -> None:
    _, _, _, state = held_snapshot(tmp_path)
    writer = sqlite3.connect(state, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(snapshot.Unreadable, match=r"its writer held it locked for more than 0\.3 s"):
            statecopy.connect(state, lock_wait=0.3)
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_link_beside_the_snapshot_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, _, log, state = held_snapshot(tmp_path)
    target = tmp_path / "elsewhere"
    Path(f"{state}-journal").symlink_to(target)
    assert main(["replay", "--log", str(log), "--config", str(config), "--state", str(state)]) == 2
    assert "state.sqlite-journal is a symbolic link (never followed)" in capsys.readouterr().err
    assert not target.exists()
