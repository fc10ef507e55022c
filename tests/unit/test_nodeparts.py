"""A reload over the node's list of parts (`nodeparts.Reconfigurable`,
`nodeservice.NodeService.switching`): prepare all, then commit all, or none. A part whose
prepare fails leaves every part (the answer path too) on the old config; the commits run
only once every part has prepared, in the order of the list; a commit that fails (a bug)
does not keep the others from committing, and is named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.node import Node
from gtmcluster.nodeparts import Reload
from gtmcluster.nodeservice import NodeService, NotTaken, PartlyTaken
from gtmcluster.runtime.reactors import Runtime
from gtmcluster.sync.replicator import Replicator
from tests.support import configs


class Part:
    """A part that notes what it was asked, in *journal*, and fails where told."""

    def __init__(self, label: str, journal: list[str], prepare_fails: bool = False, commit_fails: bool = False):
        self.label = label
        self.journal = journal
        self.prepare_fails = prepare_fails
        self.commit_fails = commit_fails
        self.running: Config | None = None
        self.seen: Reload | None = None

    def prepare(self, reload: Reload) -> Callable[[], object]:
        self.journal.append(f"prepare {self.label}")
        self.seen = reload
        if self.prepare_fails:
            raise ValueError("no room")
        new = reload.config

        def commit() -> None:
            self.journal.append(f"commit {self.label}")
            if self.commit_fails:
                raise RuntimeError("a bug")
            self.running = new

        return commit


def raw(tmp_path: Path, ttl: int) -> dict[str, Any]:
    r = configs.base()
    r["state_dir"] = str(tmp_path / "state")
    r["pools"]["p"]["ttl"] = ttl
    return r


def service(tmp_path: Path, parts: list[Part]) -> NodeService:
    config = load(configs.write(tmp_path, raw(tmp_path, 30)))
    reactor = MemoryReactorClock()
    node = Node(config, "n1", reactor.seconds)
    replicator = Replicator(
        node.store, reactor, node="n1", group="test", datacenter="DC1", members=["n1"], config_digest=config.digest
    )
    top = NodeService(node, replicator, reactor, str(config.path), parts=parts, runtime=Runtime.of(reactor))
    top.read_config = lambda path, own_dir: defer.succeed(load(path, own_dir))
    configs.write(tmp_path, raw(tmp_path, 17))  # what a reload reads
    return top


def test_every_part_prepares_before_any_commits_and_all_commit_in_order(tmp_path: Path) -> None:
    journal: list[str] = []
    parts = [Part(label, journal) for label in ("a", "b", "c")]
    top = service(tmp_path, parts)
    old = top.node.config
    new = load(top.config_path)
    top.switch(new)
    assert journal == ["prepare a", "prepare b", "prepare c", "commit a", "commit b", "commit c"]
    assert all(p.running is new for p in parts)
    assert top.node.config is new and top.node.generation == 2
    seen = parts[0].seen
    assert seen is not None and seen.old is old and seen.config is new
    assert seen.answers.config is new, "the parts prepare from the new answer path"


@pytest.mark.parametrize("failing", ["a", "b", "c"])
def test_a_part_whose_prepare_fails_leaves_every_part_on_the_old_config(tmp_path: Path, failing: str) -> None:
    journal: list[str] = []
    parts = [Part(label, journal, prepare_fails=label == failing) for label in ("a", "b", "c")]
    top = service(tmp_path, parts)
    old, responder = top.node.config, top.node.responder
    with pytest.raises(NotTaken) as refused:
        top.switch(load(top.config_path))
    assert refused.value.part == failing
    assert str(refused.value) == f"{failing} cannot take the new config: ValueError: no room"
    assert not [line for line in journal if line.startswith("commit")]
    assert journal[-1] == f"prepare {failing}", "no part after the failing one prepares"
    assert all(p.running is None for p in parts)
    assert top.node.config is old and top.node.responder is responder and top.node.generation == 1


def test_a_reload_refused_by_a_part_says_why_and_the_old_config_keeps_serving(tmp_path: Path) -> None:
    journal: list[str] = []
    top = service(tmp_path, [Part("a", journal), Part("b", journal, prepare_fails=True)])
    old = top.node.config
    problems: list[list[str]] = []
    top.reload().addCallback(problems.append)
    assert problems == [[f"{top.config_path}: b cannot take the new config: ValueError: no room"]]
    assert top.node.config is old and "commit a" not in journal


def test_a_commit_that_fails_is_named_and_the_others_still_commit(tmp_path: Path) -> None:
    journal: list[str] = []
    parts = [Part(label, journal, commit_fails=label == "b") for label in ("a", "b", "c")]
    top = service(tmp_path, parts)
    new = load(top.config_path)
    with pytest.raises(PartlyTaken, match=r"^b failed to switch"):
        top.switch(new)
    assert journal[3:] == ["commit a", "commit b", "commit c"]
    assert parts[0].running is new and parts[1].running is None and parts[2].running is new
    assert top.node.config is new
