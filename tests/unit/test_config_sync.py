"""Config sync between members (`sync.configsync`): bundles offered, fetched, kept, relayed
and run, over the real protocol and TLS in memory (`support.cluster.MemoryCluster`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.logger import capturedLogs

from gtmcluster.groupconfig import bundle
from gtmcluster.groupconfig.bundle import Bundle, Header
from gtmcluster.groupconfig.shelf import Shelf
from gtmcluster.sync import configsync
from gtmcluster.sync.configsync import ConfigSync
from tests.support.cluster import MemoryCluster


class Members:
    """A MemoryCluster whose members keep bundles; running one is recorded (and refused by
    the members named in `refuse`)."""

    def __init__(self, tmp_path: Path, names: list[str]):
        self.cluster = MemoryCluster(names, tmp_path / "certs")
        self.tmp_path = tmp_path
        self.syncs: dict[str, ConfigSync] = {}
        self.runs: dict[str, list[int]] = {name: [] for name in names}
        self.refuse: dict[str, list[str]] = {}
        for name in names:
            self.attach(name)

    def attach(self, name: str) -> ConfigSync:
        sync = ConfigSync(self.cluster.replicators[name], Shelf(self.tmp_path / name / "bundles"))
        self.cluster.replicators[name].config = sync

        def apply(header: Header, sync: ConfigSync = sync, name: str = name) -> defer.Deferred[list[str]]:
            if name in self.refuse:
                return defer.succeed(self.refuse[name])
            self.runs[name].append(header.generation)
            sync.ran(header, "config-" + header.digest[:8])
            return defer.succeed([])

        sync.apply = apply
        self.syncs[name] = sync
        return sync

    def publish(self, name: str, generation: int, text: str, extra: dict[str, bytes] | None = None) -> Bundle:
        files = {"gtm.yaml": text.encode(), **(extra or {})}
        made = Bundle("gtm.yaml", files, generation, generation - 1, name, 1_000_000.0 + generation)
        self.syncs[name].take(made)
        self.cluster.settle()
        return made

    def held(self) -> dict[str, tuple[int, str] | None]:
        return {n: (s.held.generation, s.held.publisher) if s.held else None for n, s in self.syncs.items()}

    def running(self) -> dict[str, int]:
        return {n: s.running.generation for n, s in self.syncs.items()}


@pytest.fixture
def trio(tmp_path: Path) -> Members:
    return Members(tmp_path, ["gtm-a", "gtm-b", "gtm-c"])


def test_a_bundle_published_on_one_member_is_held_and_run_by_all(trio: Members) -> None:
    trio.cluster.connect("gtm-a", "gtm-b")
    trio.cluster.connect("gtm-a", "gtm-c")
    trio.publish("gtm-a", 1, "one: 1\n")
    assert trio.held() == dict.fromkeys(trio.syncs, (1, "gtm-a"))
    assert trio.running() == dict.fromkeys(trio.syncs, 1)
    # each member knows what the others run
    view = trio.syncs["gtm-a"].views["gtm-c"]
    assert (view.generation, view.config_digest) == (1, trio.syncs["gtm-c"].running.config_digest)
    assert all(s.settled for s in trio.syncs.values())


def test_a_member_that_reaches_one_peer_gets_it_relayed(trio: Members) -> None:
    trio.cluster.connect("gtm-a", "gtm-b")
    trio.cluster.connect("gtm-b", "gtm-c")
    made = trio.publish("gtm-a", 1, "relayed: true\n")
    assert trio.syncs["gtm-c"].shelf.load(trio.syncs["gtm-c"].held).files == made.files  # type: ignore[arg-type]
    assert trio.runs["gtm-c"] == [1]


def test_a_member_that_was_away_gets_only_the_newest_when_it_connects(trio: Members) -> None:
    trio.cluster.connect("gtm-a", "gtm-b")
    trio.publish("gtm-a", 1, "first: 1\n")
    trio.publish("gtm-b", 2, "second: 2\n")
    assert trio.held()["gtm-c"] is None
    trio.cluster.connect("gtm-c", "gtm-a")
    assert trio.held()["gtm-c"] == (2, "gtm-b")
    assert trio.runs["gtm-c"] == [2]  # not generation 1 on the way


def test_two_publications_of_one_generation_end_the_same_everywhere(trio: Members) -> None:
    # two members publish generation 3 apart, then meet: the greater publisher's wins
    trio.publish("gtm-a", 3, "from: a\n")
    trio.publish("gtm-c", 3, "from: c\n")
    trio.cluster.connect("gtm-a", "gtm-b")
    trio.cluster.connect("gtm-b", "gtm-c")
    assert trio.held() == dict.fromkeys(trio.syncs, (3, "gtm-c"))
    assert trio.runs["gtm-a"] == [3, 3]  # its own, then the winner
    assert trio.syncs["gtm-a"].running.digest == trio.syncs["gtm-c"].running.digest


def test_a_member_that_cannot_run_a_bundle_keeps_relays_and_says_it(trio: Members) -> None:
    trio.refuse["gtm-b"] = ["gtm-b's dns address changed: restart the node to apply it"]
    trio.cluster.connect("gtm-a", "gtm-b")
    trio.cluster.connect("gtm-b", "gtm-c")
    trio.publish("gtm-a", 1, "moved: true\n")
    assert trio.held()["gtm-b"] == (1, "gtm-a")
    assert trio.running()["gtm-b"] == 0
    assert trio.runs["gtm-c"] == [1]  # relayed by b all the same
    view = trio.syncs["gtm-a"].views["gtm-b"]
    assert view.refused is not None and view.refused.generation == 1
    assert "restart the node" in view.reasons[0]
    assert trio.syncs["gtm-b"].settled  # refused is settled: it answers with what it runs


@pytest.mark.parametrize(
    ("text", "extra", "reason"),
    [
        # a key and a CA the config never names (issue 30, defect 5)
        (
            "x: 1\n",
            {"keys/evil-ca.pem": b"-----BEGIN CERTIFICATE-----\n"},
            "gtm.yaml: (top level): keys/evil-ca.pem: the bundle carries a file its config does not name",
        ),
        ("api: {token: 0123456789abcdef01}\n", {}, "gtm.yaml: api.token: an inline token is not published"),
        (
            '"zones": [{origin: a.test, file: /etc/hostname}]\n',
            {},
            "gtm.yaml: zones[0].file: /etc/hostname: an absolute path cannot be shared",
        ),
        (
            "zones: [{origin: a.test, file: a.zone}]\n",
            {"a.zone": b"$INCLUDE hosts.inc\n"},
            "gtm.yaml: zones[0].file: a.zone:1: cannot read the included file hosts.inc",
        ),
        ("x: [\n", {}, "gtm.yaml: (top level): YAML syntax"),
    ],
)
def test_a_bundle_received_that_breaks_the_rules_is_neither_kept_nor_relayed(
    trio: Members, text: str, extra: dict[str, bytes], reason: str
) -> None:
    """gtm-a holds such a bundle (an older or hostile member's): gtm-b fetches it, checks
    it before keeping it, refuses it and says why; gtm-c, behind gtm-b, never sees it."""
    trio.cluster.connect("gtm-a", "gtm-b")
    trio.cluster.connect("gtm-b", "gtm-c")
    made = trio.publish("gtm-a", 1, text, extra)
    b = trio.syncs["gtm-b"]
    assert trio.held() == {"gtm-a": (1, "gtm-a"), "gtm-b": None, "gtm-c": None}
    assert trio.runs["gtm-b"] == [] and not (b.shelf.directory.exists() and any(b.shelf.directory.iterdir()))
    assert b.refused is not None and b.refused[0] == made.header
    assert b.refused[1][0].startswith(reason), b.refused
    view = trio.syncs["gtm-a"].views["gtm-b"]
    assert view.refused == made.header and view.reasons[0].startswith(reason)
    assert b.settled and trio.cluster.replicators["gtm-b"].connected_names() == ["gtm-a", "gtm-c"]


def test_a_refused_bundle_is_tried_again_on_demand_and_runs_once_mended(trio: Members) -> None:
    trio.refuse["gtm-b"] = ["sync group TLS: cannot read certs/gtm-b.pem"]
    trio.cluster.connect("gtm-a", "gtm-b")
    trio.publish("gtm-a", 1, "x: 1\n")
    b = trio.syncs["gtm-b"]
    assert b.refused is not None and b.running.generation == 0
    assert b.retry() is not None  # still refused: said again
    assert b.refused is not None and "cannot read" in b.refused[1][0]
    del trio.refuse["gtm-b"]  # the certificate put in place
    problems: list[list[str]] = []
    retried = b.retry()
    assert retried is not None
    retried.addCallback(problems.append)
    trio.cluster.settle()
    assert problems == [[]] and b.refused is None and b.running.generation == 1
    assert trio.syncs["gtm-a"].views["gtm-b"].generation == 1 and trio.syncs["gtm-a"].views["gtm-b"].refused is None
    assert b.retry() is None  # nothing refused: nothing to try


def test_a_bundle_bigger_than_one_message_is_fetched_in_parts(trio: Members) -> None:
    zone = b"".join(b"host%d IN A 192.0.2.%d\n" % (i, i % 250) for i in range(20_000))
    assert len(zone) > 5 * configsync.CHUNK
    trio.cluster.connect("gtm-a", "gtm-b")
    made = trio.publish("gtm-a", 1, "zones: [{file: big.zone}]\n", {"big.zone": zone})
    assert trio.syncs["gtm-b"].shelf.load(made.header).files["big.zone"] == zone


def test_a_peer_that_sends_another_bundle_than_it_offered_is_dropped(trio: Members) -> None:
    made = trio.publish("gtm-a", 1, "honest: true\n")
    shelf = trio.syncs["gtm-a"].shelf
    other = Bundle("gtm.yaml", {"gtm.yaml": b"forged: true\n"}, 1, 0, "gtm-a", 1.0)
    (shelf.folder(made.header) / "bundle.json").write_bytes(bundle.encode(other))
    trio.cluster.connect("gtm-b", "gtm-a")
    assert trio.held()["gtm-b"] is None
    assert trio.cluster.replicators["gtm-b"].connected_names() == []


def test_an_offer_that_cannot_be_fetched_is_not_asked_for_again_and_again(trio: Members) -> None:
    made = trio.publish("gtm-a", 1, "gone: soon\n")
    a = trio.syncs["gtm-a"]
    shutil.rmtree(a.shelf.folder(made.header))  # held, as far as gtm-a knows, but unreadable
    asked: list[int] = []
    serve = a.fetch_answer

    def counting(*args: Any) -> dict[str, Any]:
        asked.append(1)
        return serve(*args)

    a.fetch_answer = counting  # type: ignore[method-assign,assignment]
    trio.cluster.connect("gtm-b", "gtm-a")
    trio.cluster.advance(5)
    assert len(asked) == 1 and trio.held()["gtm-b"] is None
    assert trio.syncs["gtm-b"].settled  # it does not wait for what it cannot have
    assert trio.cluster.replicators["gtm-b"].connected_names() == ["gtm-a"]  # not a violation
    a.tell()  # gtm-a says something new: asked again
    trio.cluster.settle()
    assert len(asked) == 2


def test_a_fetch_the_peer_never_answers_is_given_up_at_the_deadline(trio: Members) -> None:
    """A member that offers a bundle and holds back its ConfigFetch answer (heartbeats going)
    stalls the fetch no longer than FETCH_PART_TIMEOUT: then it is logged as failed, and
    what the member says next is fetched anew."""
    made = trio.publish("gtm-a", 1, "x: 1\n")
    a = trio.syncs["gtm-a"]
    serve = a.fetch_answer
    a.fetch_answer = lambda *args: defer.Deferred()  # type: ignore[method-assign,assignment]
    b = trio.syncs["gtm-b"]
    with capturedLogs() as events:
        trio.cluster.connect("gtm-b", "gtm-a")
        trio.cluster.advance(configsync.FETCH_PART_TIMEOUT - 1)
        assert b._fetching == made.header and trio.held()["gtm-b"] is None
        trio.cluster.advance(2)
    assert b._fetching is None and trio.held()["gtm-b"] is None
    assert [e["generation"] for e in events if e.get("event") == "config_fetch_failed"] == [1]
    assert trio.cluster.replicators["gtm-b"].connected_names() == ["gtm-a"]
    a.fetch_answer = serve
    a.tell()
    trio.cluster.settle()
    assert trio.held()["gtm-b"] == (1, "gtm-a")


def test_an_offer_from_a_publisher_outside_the_group_is_not_fetched(trio: Members) -> None:
    a = trio.syncs["gtm-a"]
    trio.cluster.connect("gtm-a", "gtm-b")
    stranger = Bundle("gtm.yaml", {"gtm.yaml": b"x: 1\n"}, 9, 8, "intruder", 1.0)
    a.shelf.put(stranger)
    a.tell()
    trio.cluster.settle()
    assert trio.held()["gtm-b"] is None


def test_nothing_is_fetched_or_run_with_config_sync_off(trio: Members) -> None:
    trio.syncs["gtm-b"].enabled = False
    trio.cluster.connect("gtm-a", "gtm-b")
    trio.publish("gtm-a", 1, "x: 1\n")
    assert trio.held()["gtm-b"] is None and trio.runs["gtm-b"] == []
    assert trio.syncs["gtm-b"].settled


@settings(max_examples=25, deadline=None)
@given(
    publications=st.lists(
        st.tuples(st.sampled_from(["gtm-a", "gtm-b", "gtm-c"]), st.integers(1, 5), st.integers(0, 3)),
        min_size=1,
        max_size=6,
    ),
    links=st.permutations([("gtm-a", "gtm-b"), ("gtm-b", "gtm-c"), ("gtm-a", "gtm-c")]),
)
def test_the_newest_bundle_wins_on_every_member_whatever_the_order(
    tmp_path_factory: pytest.TempPathFactory,
    publications: list[tuple[str, int, int]],
    links: list[tuple[str, str]],
) -> None:
    members = Members(tmp_path_factory.mktemp("group"), ["gtm-a", "gtm-b", "gtm-c"])
    made = [members.publish(name, generation, f"v: {variant}\n") for name, generation, variant in publications]
    for a, b in links[:2]:  # two links join all three, in any order
        members.cluster.connect(a, b)
    newest = None
    for one in made:
        newest = bundle.newer(newest, one)
    assert newest is not None
    for name, sync in members.syncs.items():
        assert sync.held == newest.header, name
        assert sync.running.digest == newest.digest, name


def test_a_bundle_superseded_while_it_is_being_run_is_not_refused(trio: Members) -> None:
    """Two members publish one generation at once (the CI race of test_two_pushes_at_once):
    gtm-b is still reading gtm-a's bundle when gtm-c's, which wins, arrives. The folder it
    reads is not removed under it, and no refusal is said for the one that lost."""
    b = trio.syncs["gtm-b"]
    pending: list[tuple[Header, defer.Deferred[list[str]]]] = []

    def slow(header: Header) -> defer.Deferred[list[str]]:
        d: defer.Deferred[list[str]] = defer.Deferred()
        pending.append((header, d))
        return d

    b.apply = slow
    trio.publish("gtm-a", 3, "from: a\n")
    trio.publish("gtm-c", 3, "from: c\n")
    trio.cluster.connect("gtm-a", "gtm-b")
    ((first, reading),) = pending
    assert first.publisher == "gtm-a"
    trio.cluster.connect("gtm-b", "gtm-c")
    assert b.held is not None and b.held.publisher == "gtm-c"  # the winner, held while a's is read
    config = b.shelf.config_path(first)
    assert config.read_bytes() == b"from: a\n"  # still there to be read
    b.ran(first, "config-a")
    reading.callback([])
    trio.cluster.settle()
    (second, running) = pending[1]
    assert second.publisher == "gtm-c"
    running.callback([])
    b.ran(second, "config-c")
    assert b.refused is None and trio.syncs["gtm-a"].views["gtm-b"].refused is None
    assert not config.exists()  # the loser's folder went once it was read


def test_a_failure_of_a_bundle_superseded_meanwhile_is_no_refusal(trio: Members) -> None:
    b = trio.syncs["gtm-b"]
    pending: list[defer.Deferred[list[str]]] = []
    b.apply = lambda header: pending.append(defer.Deferred()) or pending[-1]  # type: ignore[func-returns-value]
    trio.publish("gtm-a", 3, "from: a\n")
    trio.publish("gtm-c", 3, "from: c\n")
    trio.cluster.connect("gtm-a", "gtm-b")
    trio.cluster.connect("gtm-b", "gtm-c")
    with capturedLogs() as events:
        pending[0].callback(["gtm.yaml: (top level): cannot read the config: No such file or directory"])
    assert b.refused is None
    assert [e["event"] for e in events if e.get("event", "").startswith("config_")] == ["config_superseded"]
    assert len(pending) == 2  # the winner is run next
