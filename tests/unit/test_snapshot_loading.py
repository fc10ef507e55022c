"""A snapshot read in two parts: the node answers after everything but the path records is
in, and the paths follow in slices across reactor turns (gtmcluster/state/loading.py).

Every test drives the slices by hand: a cooperator that runs one slice (the next
`loading.SLICE` rows of the table) each time its own fake clock advances by a second
(`Slices.turn`). The snapshot's first rows are the other records, then the paths.
"""

from __future__ import annotations

import ipaddress
import json
import math
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, task
from twisted.logger import capturedLogs, formatEvent

from gtmcluster.api.admin import set_admin
from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.dnsdata.zone import TYPE_A
from gtmcluster.health.checker import subjects
from gtmcluster.lb.context import Client
from gtmcluster.lb.trace import Decision
from gtmcluster.node import Node
from gtmcluster.state import keys, loading, snapshot
from gtmcluster.state.persistence import PersistKey
from gtmcluster.state.record import Record, Version
from gtmcluster.state.snapshotter import Snapshotter
from gtmcluster.state.store import Store
from tests.support import configs
from tests.support.cluster import MemoryCluster

WALL = 1_800_000_000.0
NEAR = "near.example.test"  # rtt, then topology
STICKY = "sticky.example.test"  # rtt with persistence
GSLB = "gslb.example.test"  # topology (the base config's)
DATACENTERS = ("DC1", "DC2", "DC3")
ORIGINS = {"DC1": "n1", "DC2": "n2", "DC3": "n3"}
#: LDNSes of the table; the ones the tests ask about come last, so slices reach them last
TABLE = 600
ASKED = 40


def config(tmp_path: Path) -> Config:
    raw = configs.base()
    configs.add_member(raw, "n2", "DC2", "127.0.0.2")
    configs.add_member(raw, "n3", "DC3", "127.0.0.3")
    raw["pools"]["near"] = {
        "members": ["vs1", "vs2", "vs3"],
        "load_balancing": {"preferred": "rtt", "alternate": "topology"},
        "ttl": 30,
    }
    raw["wideips"][NEAR] = {"pools": ["near"]}
    raw["wideips"][STICKY] = {"pools": ["near"], "persistence": {"ttl": 3600, "ipv4_prefix": 24}}
    return load(configs.write(tmp_path / "etc", raw))


def ldns(i: int) -> str:
    return str(ipaddress.IPv4Address(0xC6120000 + i))  # 198.18.0.0/15, the benchmarking range


def client_network(i: int) -> str:
    """The /24 (without its last byte) of the asked LDNS i's clients (ECS)."""
    return f"100.64.{i}"


def path_value(rng: random.Random, dc: str) -> dict[str, Any]:
    rtt = rng.randrange(1_000, 200_000)
    return {
        "rtt": rtt,
        "last_rtt": rtt,
        "hops": rng.randrange(3, 20),
        "completion": rng.choice((10000, 9000, 5000)),
        "protocol": "dns_dot",
        "failures": 0,
        "window": "1111111111",
        "by": ORIGINS[dc],
    }


def path_of(rtt: int, by: str) -> dict[str, Any]:
    """A path value of *rtt* microseconds, as *by* measured it."""
    return {
        "rtt": rtt,
        "last_rtt": rtt,
        "hops": 0,
        "completion": 10000,
        "protocol": "udp",
        "failures": 0,
        "window": "1",
        "by": by,
    }


def saved_table(directory: Path) -> Path:
    """A snapshot of node n1: `TABLE` LDNSes with a path from each data center (written by
    that data center's member), persistence records of STICKY for half of the asked
    LDNSes' networks, vs2 disabled by an operator, a few other records; the asked LDNSes'
    paths are the last rows."""
    rng = random.Random(3)
    clock = task.Clock()
    clock.advance(1000)
    store = Store("n1", clock.seconds)
    store.put("admin/vs/vs2", {"state": "disabled", "reason": "maintenance"})
    for i in range(ASKED):
        if i % 2:
            key = PersistKey(STICKY, TYPE_A, f"{client_network(i)}.0/24")
            store.put(keys.persist(key), {"pool": "near", "members": [f"vs{1 + i % 3}"]}, ttl=3600)
    store.put("probe/192.0.2.53", {"by": "n1"}, ttl=60)
    # the peers' paths, measured later than anything else (the newest versions of the file)
    stamp = int(WALL * 1000) - 60_000
    for i in range(TABLE):
        for n, dc in enumerate(DATACENTERS):
            version = Version(stamp + i, n, ORIGINS[dc])
            store.merge(Record(keys.path(ldns(i), dc), path_value(rng, dc), version, 2419200.0, clock.seconds()))
    path = directory / snapshot.FILENAME
    # the other records first in the file, then the table in the order it was measured (as a
    # node that added paths later); the store's own order follows the keys' hashes
    rows = sorted(snapshot.rows(store, WALL, clock.seconds()), key=lambda row: (row[0].startswith("path/"), row[2]))
    snapshot.write(path, rows, "n1")
    return path


class Slices:
    """A cooperator that runs one step per `turn` (a step scheduled during a turn waits for
    the next one, where a zero delay on a fake clock would run at once)."""

    def __init__(self) -> None:
        self.clock = task.Clock()
        self.cooperator = task.Cooperator(
            terminationPredicateFactory=lambda: lambda: True, scheduler=lambda f: self.clock.callLater(1, f)
        )

    def turn(self) -> None:
        self.clock.advance(1)


class Held:
    """A reactor stand-in: a fake clock, and a thread pool that holds each call until `release`."""

    def __init__(self, clock: task.Clock) -> None:
        self.clock = clock
        self.held: list[Callable[[], None]] = []

    def getThreadPool(self) -> Held:
        return self

    def callInThreadWithCallback(self, on_result: Callable[[bool, Any], None], f: Any, *a: Any, **kw: Any) -> None:
        def run() -> None:
            try:
                result = f(*a, **kw)
            except Exception as e:
                on_result(False, e)
            else:
                on_result(True, result)

        self.held.append(run)

    def release(self) -> None:
        held, self.held = self.held, []
        for run in held:
            run()

    def callFromThread(self, f: Callable[..., Any], *a: Any, **kw: Any) -> None:
        f(*a, **kw)

    def seconds(self) -> float:
        return self.clock.seconds()

    def callLater(self, *a: Any, **kw: Any) -> Any:
        return self.clock.callLater(*a, **kw)


class Restart:
    """Node n1 restarted on the table: `full` read it whole before answering (the reference),
    `node` answers after the first part while its paths load (`snaps`), a slice per turn."""

    def __init__(self, tmp_path: Path, ready: bool = True, damage: Callable[[Path], None] | None = None) -> None:
        self.cfg = config(tmp_path)
        state = tmp_path / "state"
        state.mkdir()
        self.path = saved_table(state)
        self.clock = task.Clock()
        self.clock.advance(5000)
        self.full = Node(self.cfg, "n1", self.clock.seconds, rng=random.Random(1))
        snapshot.read(self.path, self.full.store, WALL)
        self.full.health.refresh()
        if damage is not None:
            damage(self.path)
        self.reactor = Held(self.clock)
        self.node = Node(self.cfg, "n1", self.clock.seconds, rng=random.Random(1))
        self.heard: list[Record] = []
        self.node.store.subscribe(self.heard.append)
        self.slices = Slices()
        self.snaps = Snapshotter(
            self.node.store, state, self.reactor, lambda: WALL, later=keys.PATH, cooperator=self.slices.cooperator
        )
        with capturedLogs() as events:
            self.first = self.snaps.load()
        self.logged = [formatEvent(e) for e in events]
        self.node.health.refresh()
        self.full.ready = self.node.ready = ready
        self.snaps.startService()

    def turn(self) -> None:
        """One more slice (and whatever the reactor had to do at once)."""
        self.slices.turn()
        self.clock.advance(0)

    def finish(self, limit: int = 1000) -> int:
        turns = 0
        while not self.snaps.loaded:
            assert turns < limit, "the load never ended"
            self.turn()
            turns += 1
        return turns

    def wideip(self, name: str) -> Any:
        return next(w for w in self.cfg.wideips.values() if w.name == name)


def summary(decision: Decision) -> tuple[Any, ...]:
    return (decision.method, decision.addresses, decision.pool, decision.members, decision.scope, decision.rcode)


def asked_clients() -> list[Client]:
    """The asked LDNSes, each asking for itself and for a client subnet (ECS) of its own."""
    clients = []
    for i in range(ASKED):
        address = ipaddress.ip_address(ldns(TABLE - ASKED + i))
        clients.append(Client.from_ldns(address))
        clients.append(Client(ipaddress.ip_address(f"{client_network(i)}.7"), 32, address, True))
    # an LDNS the table never measured, and one of the first rows
    for other in ("192.0.2.200", ldns(0)):
        clients.append(Client.from_ldns(ipaddress.ip_address(other)))
    return clients


@pytest.mark.parametrize("ready", [True, False])
def test_answers_while_the_paths_load_are_those_of_a_fully_loaded_node(tmp_path: Path, ready: bool) -> None:
    """Node n1 restarted twice from one snapshot: once read whole before answering, once
    answering after everything but the paths. At every turn of the second's load, both
    decide alike for every asked LDNS: rtt (paths of LDNSes whose rows are read last,
    looked up ahead of their slice), rtt with persistence (records of phase 1, and new
    ones written by the decisions alike), topology, an LDNS never measured, and the
    admin-disabled vs2 never chosen; and, before ready, both answer the measured wide IP
    by topology alike."""
    r = Restart(tmp_path, ready=ready)
    clients = asked_clients()
    compared_while_loading = 0
    methods: set[str] = set()
    while True:
        loading_now = not r.snaps.loaded
        for name in (NEAR, STICKY, GSLB):
            for client in clients:
                mine = r.node.decide(r.wideip(name), TYPE_A, client)
                reference = r.full.decide(r.wideip(name), TYPE_A, client)
                assert summary(mine) == summary(reference), (name, str(client.ldns), mine.trace)
                assert "10.0.2.1" not in [str(a) for a in mine.addresses]
                methods.add(mine.method)
                compared_while_loading += loading_now
        if not loading_now:
            break
        r.turn()
    assert compared_while_loading >= 3 * len(clients) * (TABLE * 3 // loading.SLICE - 1)
    assert methods >= ({"rtt", "persistence", "topology"} if ready else {"topology", "persistence"})


def test_the_first_part_is_everything_but_the_paths_and_the_rest_follows(tmp_path: Path) -> None:
    """load() reads the records other than paths (admin, persistence, probe requests) and
    says how many paths follow; `loading` counts the rows read of them, a slice a turn;
    at the end the store equals one loaded whole (same digest) and the log says so."""
    r = Restart(tmp_path)
    kinds = r.node.store.kinds()
    assert "path" not in kinds and kinds["admin"] == 1 and kinds["persist"] == ASKED // 2 and kinds["probe"] == 1
    assert r.first == len(r.node.store) == 2 + ASKED // 2
    assert any(f"answering while the other {TABLE * 3} (under path/) load" in line for line in r.logged), r.logged
    assert r.snaps.loading == {"done": 0, "total": TABLE * 3}
    r.turn()
    assert r.snaps.loading == {"done": loading.SLICE - r.first, "total": TABLE * 3}  # the table's first rows
    with capturedLogs() as events:
        turns = r.finish()
    # one turn before; a slice per SLICE rows of the table; the last finds no more rows
    assert 1 + turns == math.ceil((r.first + TABLE * 3) / loading.SLICE) + 1
    assert r.snaps.loading is None
    assert r.node.store.digest() == r.full.store.digest()
    lines = [formatEvent(e) for e in events]
    assert any(f"loaded {len(r.full.store)} records from {r.path}" in line for line in lines), lines


def test_nothing_loaded_is_heard_saved_again_or_relayed(tmp_path: Path) -> None:
    """No store listener hears of a loaded record (the replicator would relay it, the
    snapshot writer mark it for the next write, the health tracker react to it): after
    the whole load, no listener was called and there is nothing to save."""
    r = Restart(tmp_path)
    r.node.decide(r.wideip(NEAR), TYPE_A, asked_clients()[0])  # a lookup ahead of its slice
    r.heard.clear()  # (that decision wrote a probe request of its own: news, heard)
    r.finish()
    assert r.heard == []
    assert r.snaps.save_if_changed() is None
    assert r.reactor.held == []


def test_a_record_from_a_peer_meets_the_saved_one_as_if_all_were_loaded(tmp_path: Path) -> None:
    """While its row is still on disk, a path merged from a peer is compared with the saved
    one: an older version is refused (and never overwrites the row), a newer one wins
    and is heard (news: relayed, saved); the slice reaching the row later changes nothing."""
    r = Restart(tmp_path)
    key = keys.path(ldns(TABLE - 1), "DC2")
    saved = r.full.store.raw(key)
    assert saved is not None
    older = Record(key, {**saved.value, "rtt": 1}, Version(saved.wall_ms - 1, 0, "n2"), 600.0, r.clock.seconds())
    assert r.node.store.merge(older) is False
    assert r.node.store.raw(key) == saved
    assert r.heard == []
    newer = Record(key, {**saved.value, "rtt": 2}, Version(saved.wall_ms + 1, 0, "n2"), 600.0, r.clock.seconds())
    assert r.node.store.merge(newer) is True
    assert [h.key for h in r.heard] == [key]
    r.finish()
    held = r.node.store.raw(key)
    assert held is not None and held.value["rtt"] == 2


def test_the_clock_passes_every_saved_version_before_the_paths_are_read(tmp_path: Path) -> None:
    """A write made right after the first part gets a version newer than every saved path,
    though none is in the store yet (a restarted node never reuses a version)."""
    r = Restart(tmp_path)
    newest = max(record.version for record in r.full.store.all_records())
    assert newest.origin != "n1"  # a peer's path: the first part held nothing as new
    assert r.node.store.put(keys.path(ldns(TABLE - 1), "DC1"), {"x": 1}).version > newest


def test_slices_wait_while_a_snapshot_write_is_under_way(tmp_path: Path) -> None:
    """A reader and a committing writer exclude each other in SQLite: while a write runs (in
    its thread), no slice is read; the load goes on once it is done, and the write (a new
    record) and the load both end up in the file and the store."""
    r = Restart(tmp_path)
    r.turn()
    r.node.store.put("admin/vs/vs3", {"state": "drain"})
    writing = r.snaps.save()
    before = r.snaps.loading
    for _ in range(5):
        r.clock.advance(loading.WRITE_WAIT)
        r.turn()
    assert r.snaps.loading == before
    r.reactor.release()
    assert writing.called
    r.clock.advance(loading.WRITE_WAIT)  # the load looks again
    r.finish()
    again = Store("n1", r.clock.seconds)
    snapshot.read(r.path, again, WALL)
    assert again.get("admin/vs/vs3") is not None and again.kinds()["path"] == TABLE * 3


def damage_row(index: int) -> Callable[[Path], None]:
    """Make the value of the path row of LDNS *index* (from DC1) not JSON."""

    def damage(path: Path) -> None:
        db = sqlite3.connect(path)
        db.execute("UPDATE records SET value = '{not json' WHERE key = ?", (keys.path(ldns(index), "DC1"),))
        db.commit()
        db.close()

    return damage


def test_a_damaged_row_in_the_later_part_sets_the_file_aside_and_keeps_what_was_read(tmp_path: Path) -> None:
    """A path row that is not JSON (SQLite's check cannot see it) is found when its slice
    is read: the load ends there with a warning naming the file, the reason and where it
    went; what was read stays (the first part, the earlier slices), `when_loaded` fires (so
    the node reconciles and its peers bring the rest), and the next write saves the whole
    store to a new file."""
    r = Restart(tmp_path, damage=damage_row(TABLE // 2))
    waiting = r.snaps.when_loaded()
    with capturedLogs() as events:
        r.finish()
    assert waiting.called
    lines = [formatEvent(e) for e in events]
    warning = [line for line in lines if "unreadable" in line]
    assert len(warning) == 1, lines
    assert str(r.path) in warning[0] and "the value is not JSON" in warning[0], warning
    assert "the sync group's peers bring the rest" in warning[0], warning
    assert [p.name for p in r.path.parent.iterdir() if ".bad-" in p.name] == ["state.sqlite.bad-20270115T080000Z"]
    held = r.node.store.kinds()
    assert held["admin"] == 1 and held["persist"] == ASKED // 2
    assert 0 < held["path"] < TABLE * 3
    assert r.node.store.missing is None
    saved = r.snaps.save()  # its rows made over a few turns
    while not saved.called:
        r.clock.advance(0)
        r.reactor.release()
    again = Store("n1", r.clock.seconds)
    snapshot.read(r.path, again, WALL)
    assert again.digest() == r.node.store.digest()


def test_a_damaged_row_found_by_a_lookup_is_handled_on_the_next_turn(tmp_path: Path) -> None:
    """A decision that needs the damaged row gets no exception (it decides without that
    path); on the next turn the file is set aside as when a slice finds the damage."""
    r = Restart(tmp_path, damage=damage_row(TABLE - 1))
    client = Client.from_ldns(ipaddress.ip_address(ldns(TABLE - 1)))
    decision = r.node.decide(r.wideip(NEAR), TYPE_A, client)
    assert decision.addresses
    assert not list(r.path.parent.glob("*.bad-*"))
    with capturedLogs() as events:
        r.turn()
    assert r.snaps.loaded
    assert [formatEvent(e) for e in events if "unreadable" in formatEvent(e)]
    assert list(r.path.parent.glob("*.bad-*"))


def test_a_file_a_write_finds_damaged_while_loading_ends_the_load(tmp_path: Path) -> None:
    """The writer finds the file damaged (its header overwritten meanwhile) while the paths
    still load: the load stops there, the file is set aside once, `when_loaded` fires, and
    the next write saves everything held to a new file."""
    r = Restart(tmp_path)
    r.turn()
    with r.path.open("r+b") as f:
        f.write(b"this is no SQLite file at all!!\0" * 4)
    r.node.store.put("admin/vs/vs3", {"state": "drain"})
    r.snaps.save()
    with capturedLogs() as events:
        r.reactor.release()
    assert r.snaps.loaded and r.snaps.loading is None and r.node.store.missing is None
    assert len([e for e in events if "unreadable" in formatEvent(e)]) == 1
    assert len(list(r.path.parent.glob("*.bad-*"))) == 1
    r.turn()  # nothing more is read
    saved = r.snaps.save()  # its rows made over a few turns
    while not saved.called:
        r.clock.advance(0)
        r.reactor.release()
    again = Store("n1", r.clock.seconds)
    snapshot.read(r.path, again, WALL)
    assert again.digest() == r.node.store.digest()


def test_stopping_while_loading_leaves_the_rest_on_disk(tmp_path: Path) -> None:
    """A node stopped mid-load closes the file; the rows not read are still in it (the
    stop's write adds what changed and deletes nothing it did not hold)."""
    r = Restart(tmp_path)
    r.turn()
    stopped = r.snaps.stopService()
    r.reactor.release()
    assert stopped.called
    again = Store("n1", r.clock.seconds)
    snapshot.read(r.path, again, WALL)
    assert again.digest() == r.full.store.digest()


# --- with peers: anti-entropy waits for the whole snapshot ---------------------------------------


def test_anti_entropy_waits_for_the_load_and_pushes_go_on(tmp_path: Path) -> None:
    """gtm-b measured paths while apart from gtm-a, then restarts on its snapshot and
    connects to gtm-a while those paths load. Neither side reconciles meanwhile: b pulls
    nothing else a wrote while b was down (a persistence record), and a asks for b's
    summary, is told b is still loading and pulls none of the paths b has loaded so far.
    But b pulls the health and admin keys (`Replicator.catch_up`) at once: a's verdict
    changed while b was down counts right away. A new write of a reaches b at once. When
    the load ends, both reconcile and the digests agree."""
    trio = MemoryCluster(["gtm-a", "gtm-b"], tmp_path / "certs")
    trio.clock.advance(1000)
    trio.connect("gtm-a", "gtm-b")
    trio.write("gtm-a", "obs/vs/vs1/gtm-a", {"up": True}, ttl=600)
    trio.links[0].cut()
    for i in range(300):
        trio.stores["gtm-b"].put(keys.path(ldns(i), "DC-b"), path_of(1000 + i, "gtm-b"), ttl=86400)
    state = tmp_path / "b-state"
    state.mkdir()
    snapshot.write(state / snapshot.FILENAME, snapshot.rows(trio.stores["gtm-b"], WALL, trio.clock.seconds()), "gtm-b")
    trio.write("gtm-a", "obs/vs/vs1/gtm-a", {"up": False}, ttl=600)  # while b is down
    trio.write("gtm-a", "persist/www/1/192.0.2.0/24", {"pool": "p", "members": ["vs1"]}, ttl=3600)
    fresh = Store("gtm-b", trio.clock.seconds)
    slices = Slices()
    snaps = Snapshotter(fresh, state, trio.clock, lambda: WALL, later=keys.PATH, cooperator=slices.cooperator)
    snaps.load()
    replicator = trio.add("gtm-b", fresh)
    replicator.hold_until(snaps.when_loaded())
    replicator.catch_up = lambda: ["obs/vs/vs1/gtm-a", "obs/vs/vs1/gtm-b", "admin/vs/vs1"]
    a = trio.stores["gtm-a"]
    snaps.startService()
    slices.turn()
    with capturedLogs() as events:
        trio.connect("gtm-b", "gtm-a")
        slices.turn()
        trio.settle()
    assert not snaps.loaded and 0 < fresh.kinds()["path"] < 300
    lines = [formatEvent(e) for e in events]
    assert "gtm-b is still loading its state snapshot: reconciling when it says it is done" in lines, lines
    assert not [line for line in lines if "failed" in line], lines
    assert "took 1 newer records of 3 health and admin keys from gtm-a while loading" in lines, lines
    assert value_of(fresh, "obs/vs/vs1/gtm-a") == {"up": False}  # caught up
    assert value_of(fresh, "persist/www/1/192.0.2.0/24") is None  # not pulled yet
    assert "path" not in a.kinds()  # not pulled from b, nor pushed by it
    trio.write("gtm-a", "admin/vs/vs1", {"state": "disabled"})
    assert fresh.get("admin/vs/vs1") is not None  # pushed at once
    for _ in range(10):
        if snaps.loaded:
            break
        slices.turn()
        trio.settle()
    assert snaps.when_loaded().called
    trio.settle()
    assert value_of(fresh, "persist/www/1/192.0.2.0/24") is not None
    assert a.kinds()["path"] == 300
    assert trio.converged()


def test_while_loading_a_persistence_record_is_asked_of_the_peers_before_it_is_written(tmp_path: Path) -> None:
    """While gtm-b loads (not reconciled yet), a record a decision asks it to write (a
    client's persistence) goes to the peers first: a client gtm-a persisted while b was
    down keeps a's record (b's own would be newer and move the client group-wide); one no
    peer holds is written once they have answered (a second write asked meanwhile is
    dropped); once loaded, b writes at once."""
    trio = MemoryCluster(["gtm-a", "gtm-b"], tmp_path / "certs")
    trio.clock.advance(1000)
    known, new = "persist/www/1/192.0.2.0/24", "persist/www/1/198.51.100.0/24"
    trio.write("gtm-a", known, {"pool": "p", "members": ["vs1"]}, ttl=3600)
    loaded: defer.Deferred[None] = defer.Deferred()
    trio.replicators["gtm-b"].hold_until(loaded)
    trio.connect("gtm-b", "gtm-a")
    b, replicator = trio.stores["gtm-b"], trio.replicators["gtm-b"]
    writes: list[str] = []

    def write(key: str, member: str) -> Callable[[], object]:
        def put() -> None:
            writes.append(f"{key} {member}")
            b.put(key, {"pool": "p", "members": [member]}, ttl=3600)

        return put

    replicator.ask_first(known, write(known, "vs2"))
    replicator.ask_first(new, write(new, "vs2"))
    replicator.ask_first(new, write(new, "vs3"))
    assert writes == []
    trio.settle()
    assert writes == [f"{new} vs2"]
    assert value_of(b, known) == {"pool": "p", "members": ["vs1"]}
    loaded.callback(None)
    trio.settle()
    replicator.ask_first(new, write(new, "vs3"))
    assert writes == [f"{new} vs2", f"{new} vs3"]


def test_a_decisions_persistence_record_goes_through_before_persisting(tmp_path: Path) -> None:
    """A node with `before_persisting` hands it each persistence record's key and the write."""
    node = Node(config(tmp_path), "n1", task.Clock().seconds)
    node.ready = True
    asked: list[tuple[str, Callable[[], object]]] = []
    node.before_persisting = lambda key, write: asked.append((key, write))
    sticky = next(w for w in node.config.wideips.values() if w.name == STICKY)
    client = Client(ipaddress.ip_address("100.64.9.7"), 32, ipaddress.ip_address(ldns(1)), True)
    node.decide(sticky, TYPE_A, client)
    resolver = ipaddress.ip_network(f"{ldns(1)}/24", strict=False)  # (held per resolver and client subnet)
    assert [key for key, _ in asked] == [f"persist/{STICKY}/1/{resolver}/ecs/100.64.9.0/24"]
    assert node.store.get(asked[0][0]) is None
    asked[0][1]()
    assert node.store.get(asked[0][0]) is not None


def test_the_keys_caught_up_are_those_health_and_admin_states_are_made_of(tmp_path: Path) -> None:
    """`Node.health_keys` holds every member's verdict key as the health checker writes it
    (for servers and links), the admin key the API writes, and the held and load keys."""
    raw = configs.base()
    configs.add_member(raw, "n2", "DC2", "127.0.0.2")
    raw["monitors"] = {"t": {"type": "tcp", "interval": 5, "timeout": 2}}
    for vs in raw["virtual_servers"].values():
        vs["monitor"] = "t"
    raw["links"] = {"l1": {"datacenter": "DC1", "monitor": "t", "targets": ["192.0.2.9:80"]}}
    cfg = load(configs.write(tmp_path, raw))
    node = Node(cfg, "n1", task.Clock().seconds)
    keys = set(node.health_keys())
    for member in ("n1", "n2"):
        assert {s.key for s in subjects(cfg, member)} <= keys
    set_admin(node, "vs2", "disable")
    assert {r.key for r in node.store.all_records()} <= keys
    assert {"held/vs/vs1", "metrics/vs/vs1", "obs/link/l1/n2"} <= keys


def value_of(store: Store, key: str) -> Any:
    record = store.get(key)
    return None if record is None else record.value


def test_a_slice_looks_at_a_slice_of_the_table_also_across_a_long_run_of_other_rows(tmp_path: Path) -> None:
    """Slices go through the table `count` rows (by rowid) at a time, whatever those rows
    are: a run of a thousand persistence records between the paths costs ten slices of
    nothing to read, not one slice that reads through all of them; gaps in the rowids
    (deleted rows) are skipped at once; then the reader is done."""
    rows: list[snapshot.Row] = []
    for i in range(1450):
        key = keys.path(ldns(i), "DC1") if not 250 <= i < 1250 else f"persist/x/1/10.{i // 256}.{i % 256}.0/24"
        value = path_of(i, "n1") if key.startswith(keys.PATH) else {"pool": "p", "members": ["a"]}
        rows.append((key, json.dumps(value), i, 0, "n1", WALL + 3600))
    path = tmp_path / snapshot.FILENAME
    snapshot.write(path, rows, "n1")
    db = sqlite3.connect(path)
    db.execute("UPDATE records SET rowid = rowid + 100000 WHERE rowid > 1300")  # a gap
    db.commit()
    db.close()
    reader = snapshot.Reader.open(path, keys.PATH, lambda: WALL)
    assert reader is not None
    store = Store("n1", lambda: 0.0)
    reader.first(store)
    taken, cursors = [], []
    while not reader.done:
        taken.append(reader.next_slice(store, 100))
        cursors.append(reader.cursor)
    reader.close()
    # paths at rowids 1-250, persistence 251-1250, paths 1251-1300 and 101301-101450
    assert taken == [100, 100, 50, *[0] * 9, 50, 0, 100, 50, 0]
    assert cursors[:13] == [100 * n for n in range(1, 14)]
    assert cursors[13] == 101300  # past the gap at once
    assert store.kinds()["path"] == 450


def test_a_key_not_in_the_file_is_looked_up_once(tmp_path: Path) -> None:
    """An LDNS the table never measured is asked about again and again: its keys are looked
    up in the file once, then known to be absent; a key in the file is read once too (then
    the store holds it)."""
    r = Restart(tmp_path)
    loading_now = r.snaps._loading  # the reader and its connection, to trace its statements
    assert loading_now is not None
    statements: list[str] = []
    reader = loading_now.reader
    assert isinstance(reader, snapshot.Reader)
    reader.db.set_trace_callback(statements.append)
    for _ in range(3):
        assert r.node.store.get(keys.path("192.0.2.200", "DC1")) is None
        assert r.node.store.get(keys.path(ldns(TABLE - 1), "DC1")) is not None
    assert len(statements) == 2, statements


def test_rows_are_read_in_table_order_not_through_the_key_index(tmp_path: Path) -> None:
    """The slice query walks the table by rowid (SQLite's plan says so): a key-ordered walk
    would look up every row's page at random."""
    path = saved_table(tmp_path)
    db = sqlite3.connect(path)
    plan = db.execute(
        "EXPLAIN QUERY PLAN SELECT rowid, key FROM records WHERE rowid > ? AND +key >= ? AND +key < ? "
        "ORDER BY rowid LIMIT ?",
        (0, "path/", "path0", 100),
    ).fetchall()
    db.close()
    text = json.dumps(plan)
    assert "INTEGER PRIMARY KEY" in text and "USING INDEX" not in text, text
