"""What a member starts with under config sync (`groupconfig.shared.at_start`): the newest
bundle it holds rather than its own (older) file, with its own things from its own folder;
its own file when it holds none, when config sync is off, or when the bundle cannot run
here."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from twisted.internet import defer
from twisted.logger import capturedLogs

from gtmcluster.config.load import load
from gtmcluster.groupconfig import bundle
from gtmcluster.groupconfig.bundle import Bundle
from gtmcluster.groupconfig.shared import at_start
from gtmcluster.groupconfig.shelf import Shelf
from tests.support import configs
from tests.unit.test_api_config import sharing

SHOP = (b"shop", b"example", b"test")


@pytest.fixture
def raw(tmp_path: Path) -> dict[str, Any]:
    raw = configs.base()
    raw["sync_group"]["tls"] = {"ca": "own/ca.pem"}  # a member's own file, named relative to its folder
    return raw


def held(tmp_path: Path, raw: dict[str, Any], generation: int = 1) -> Bundle:
    """A bundle of *raw* with a wide IP more, held in n1's state folder."""
    changed = copy.deepcopy(raw)
    changed["virtual_servers"]["shop1"] = {"address": "10.0.1.10", "datacenter": "DC1"}
    changed["pools"]["shop"] = {"members": ["shop1"]}
    changed["wideips"]["shop.example.test"] = {"type": "A", "pools": ["shop"]}
    files = {
        "cluster.yaml": yaml.safe_dump(changed).encode(),
        "example.test.zone": configs.ZONE.encode(),
    }
    made = Bundle("cluster.yaml", files, generation, generation - 1, "n2", 1000.0)
    Shelf(tmp_path / "var" / "state" / "n1" / "bundles").put(made)
    return made


def test_without_a_bundle_the_member_runs_its_own_file(tmp_path: Path, raw: dict[str, Any]) -> None:
    path = configs.write(tmp_path, raw)
    local = load(path)
    start = at_start(local, str(path), "n1")
    assert start.config is local and start.header is None
    # its file's digest is noted: a SIGHUP to the same file publishes nothing
    assert start.shelf.local_digest() == bundle.make(path, 1, 0, "n1", 0.0).digest


def test_the_newest_bundle_held_runs_instead_of_an_older_file(tmp_path: Path, raw: dict[str, Any]) -> None:
    path = configs.write(tmp_path, raw)
    held(tmp_path, raw, 1)
    newest = held(tmp_path, raw, 2)
    with capturedLogs() as events:
        start = at_start(load(path), str(path), "n1")
    assert start.header == newest.header
    assert SHOP in start.config.wideips
    # the bundle's files from where it was written out; the member's own from its own folder
    assert start.config.path == start.shelf.config_path(newest.header)
    assert start.config.sync_group.tls.ca == tmp_path / "own" / "ca.pem"
    assert start.config.state_dir_for("n1") == tmp_path / "var" / "state" / "n1"
    said = [e for e in events if e.get("event") == "config_from_group"]
    assert len(said) == 1 and said[0]["generation"] == 2 and said[0]["publisher"] == "n2"


def test_a_file_changed_while_the_member_was_down_is_said_and_not_run(tmp_path: Path, raw: dict[str, Any]) -> None:
    path = configs.write(tmp_path, raw)
    at_start(load(path), str(path), "n1")  # its file's digest noted
    newest = held(tmp_path, raw)
    raw["pools"]["p"]["ttl"] = 77
    path = configs.write(tmp_path, raw)
    with capturedLogs() as events:
        start = at_start(load(path), str(path), "n1")
    assert start.header == newest.header
    said = next(e for e in events if e.get("event") == "config_from_group")
    assert "a SIGHUP or `gtmcluster config push` publishes it" in said["changed"]


def test_with_config_sync_off_the_file_runs(tmp_path: Path, raw: dict[str, Any]) -> None:
    raw["sync_group"]["config_sync"] = False
    path = configs.write(tmp_path, raw)
    held(tmp_path, raw)
    start = at_start(load(path), str(path), "n1")
    assert start.header is None and SHOP not in start.config.wideips


def test_a_bundle_that_cannot_run_here_leaves_the_file_running(tmp_path: Path, raw: dict[str, Any]) -> None:
    path = configs.write(tmp_path, raw)
    made = held(tmp_path, raw)
    shelf = Shelf(tmp_path / "var" / "state" / "n1" / "bundles")
    (shelf.folder(made.header) / "files" / "example.test.zone").unlink()  # its zone file gone
    with capturedLogs() as events:
        start = at_start(load(path), str(path), "n1")
    assert start.header is None and SHOP not in start.config.wideips
    assert any(e.get("event") == "config_bundle_unusable" for e in events)


def test_a_bundle_without_this_member_leaves_the_file_running(tmp_path: Path, raw: dict[str, Any]) -> None:
    path = configs.write(tmp_path, raw)
    other = copy.deepcopy(raw)
    other["sync_group"]["members"][0]["name"] = "n9"
    files = {"cluster.yaml": yaml.safe_dump(other).encode(), "example.test.zone": configs.ZONE.encode()}
    Shelf(tmp_path / "var" / "state" / "n1" / "bundles").put(Bundle("cluster.yaml", files, 1, 0, "n9", 1.0))
    with capturedLogs() as events:
        start = at_start(load(path), str(path), "n1")
    assert start.header is None
    assert any(e.get("event") == "config_bundle_unusable" and e.get("node") == "n1" for e in events)


def test_a_received_bundle_is_checked_in_the_thread_pool(tmp_path: Path, raw: dict[str, Any]) -> None:
    """`GroupConfig.vet`: the bundle's check (`bundle.check`, which splits each bundled zone
    that has an $INCLUDE into entries: some 0.17 s a megabyte) runs in the thread pool the
    service gives it, not in the reactor's thread; its answer is the check's."""
    raw["state_dir"] = str(tmp_path / "state")
    group = sharing(tmp_path / "member", raw).group_config
    assert group is not None
    pool: list[Callable[[], None]] = []

    def in_thread(work: Callable[[], Any]) -> defer.Deferred[Any]:
        done: defer.Deferred[Any] = defer.Deferred()
        pool.append(lambda: done.callback(work()))
        return done

    group.sync.in_thread = in_thread
    edit = tmp_path / "edit"
    configs.write(edit, raw, zone=configs.ZONE + "$INCLUDE hosts.inc\n")
    (edit / "hosts.inc").write_text("near IN A 192.0.2.8\n")
    honest = bundle.make(edit / "cluster.yaml", 1, 0, "n2", 1.0)
    assert sorted(honest.files) == ["cluster.yaml", "example.test.zone", "hosts.inc"]
    for files, expected in [
        (honest.files, []),
        (
            {**honest.files, "certs/n1.key": b"key"},
            [
                "cluster.yaml: (top level): certs/n1.key: the bundle carries a file its config does not name "
                "(refused: a bundle holds exactly the files its config names and their zones include)"
            ],
        ),
    ]:
        answers: list[list[str]] = []
        group.vet(Bundle("cluster.yaml", files, 1, 0, "n2", 1.0)).addCallback(answers.append)
        assert answers == [] and len(pool) == 1  # parsed; checked when the pool gets to it
        pool.pop()()
        assert answers == [expected]


def test_a_bundle_superseded_while_it_waits_to_run_never_runs(tmp_path: Path, raw: dict[str, Any]) -> None:
    """Two pushes at once (the CI race of test_two_pushes_at_once): this member is still
    publishing its own bundle when another member's of the same generation arrives; that
    one waits for the reload lock. By the time it gets it, this member's own, which wins
    (`bundle.newer`), is held: the one that lost is never run here (before, it ran for a
    moment, and its pusher saw every member run it and said it had won)."""
    raw["state_dir"] = str(tmp_path / "state")
    service = sharing(tmp_path / "member", raw)
    group = service.group_config
    assert group is not None
    changed = copy.deepcopy(raw)
    changed["wideips"]["shop.example.test"] = {"type": "A", "pools": ["p"]}
    files = {"cluster.yaml": yaml.safe_dump(changed).encode(), "example.test.zone": configs.ZONE.encode()}
    loser = Bundle("cluster.yaml", files, 1, 0, "n0", 1000.0)
    winner = Bundle("cluster.yaml", files, 1, 0, "n1", 1000.0)
    assert bundle.newer(loser.header, winner.header) == winner.header
    publishing: defer.Deferred[None] = defer.Deferred()

    async def publication() -> None:
        await publishing

    service.exclusive(publication)  # this member's own publication holds the reload lock
    group.shelf.put(loser)
    answers: list[list[str]] = []
    group.apply(loser.header).addCallback(answers.append)
    group.shelf.put(winner)  # its own publication ends by holding its bundle
    assert answers == []
    publishing.callback(None)
    assert answers == [[f"superseded by generation 1 ({winner.digest[:12]}) published by n1 before it ran"]]
    assert SHOP not in service.node.config.wideips  # the loser's config never ran


def test_a_bundle_still_the_newest_when_it_gets_the_lock_runs(tmp_path: Path, raw: dict[str, Any]) -> None:
    raw["state_dir"] = str(tmp_path / "state")
    service = sharing(tmp_path / "member", raw)
    group = service.group_config
    assert group is not None
    changed = copy.deepcopy(raw)
    changed["wideips"]["shop.example.test"] = {"type": "A", "pools": ["p"]}
    files = {"cluster.yaml": yaml.safe_dump(changed).encode(), "example.test.zone": configs.ZONE.encode()}
    taken = Bundle("cluster.yaml", files, 1, 0, "n0", 1000.0)
    group.shelf.put(taken)
    answers: list[list[str]] = []
    group.apply(taken.header).addCallback(answers.append)
    assert answers == [[]]
    assert SHOP in service.node.config.wideips
