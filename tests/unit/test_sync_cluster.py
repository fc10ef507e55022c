"""Three nodes in memory, over real TLS and the real protocol: push, relay, anti-entropy,
restart from a snapshot, and the refusals of peers that are not who they should be."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from twisted.internet.base import DelayedCall
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.logger import capturedLogs
from twisted.python.failure import Failure

from gtmcluster.state import snapshot
from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store
from gtmcluster.sync import certs, codec, commands
from gtmcluster.sync.peer import STABLE
from gtmcluster.sync.replicator import DIGEST_DELAY, MERGE_SLICE
from gtmcluster.sync.service import PeerFactory
from gtmcluster.sync.tls import load_credentials
from tests.support.cluster import MemoryCluster
from tests.support.cycles import collector_off

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def trio(tmp_path: Path) -> MemoryCluster:
    return MemoryCluster(["gtm-a", "gtm-b", "gtm-c"], tmp_path)


def path_value(rtt: int, by: str) -> dict[str, Any]:
    """A path record's value (`proximity.table.PathInfo.value`)."""
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


def established(cluster: MemoryCluster, name: str) -> set[str]:
    return {peer for peer, state in cluster.replicators[name].peers.items() if state.connected}


def test_connected_peers_know_each_other(trio: MemoryCluster) -> None:
    """After the TLS handshake and Hello both sides list the other as connected."""
    trio.connect("gtm-a", "gtm-b")
    assert established(trio, "gtm-a") == {"gtm-b"}
    assert established(trio, "gtm-b") == {"gtm-a"}
    peer = trio.replicators["gtm-b"].peers["gtm-a"]
    assert (peer.datacenter, peer.version, peer.config_digest) == ("DC-gtm-a", commands.PROTOCOL_VERSION, "digest")


def test_a_write_reaches_every_peer_at_once(trio: MemoryCluster) -> None:
    """A new local record is pushed to every connected peer."""
    trio.connect("gtm-a", "gtm-b")
    trio.connect("gtm-a", "gtm-c")
    trio.write("gtm-a", "obs/vs/web/gtm-a", {"up": False, "reason": "refused"}, ttl=90)
    for name in ("gtm-b", "gtm-c"):
        record = trio.stores[name].get("obs/vs/web/gtm-a")
        assert record is not None and record.value == {"up": False, "reason": "refused"}
        assert record.origin == "gtm-a"
    assert trio.converged()


def test_peers_hear_the_new_digest_a_second_after_a_change(trio: MemoryCluster) -> None:
    """After a write every peer knows the writer's new state digest within DIGEST_DELAY (not
    a heartbeat interval later), so "digests agree" in status is current; changes within
    the delay are told once."""
    trio.connect("gtm-a", "gtm-b")
    trio.advance(DIGEST_DELAY + 0.1)  # what the connection itself changed is told
    before = trio.replicators["gtm-b"].peers["gtm-a"].digest
    trio.write("gtm-a", "admin/vs/v1", {"state": "drain"})
    trio.write("gtm-a", "admin/vs/v2", {"state": "drain"})
    assert trio.replicators["gtm-b"].peers["gtm-a"].digest == before
    trio.advance(DIGEST_DELAY)
    assert trio.replicators["gtm-a"].idle_timeout / 3 > DIGEST_DELAY
    assert trio.replicators["gtm-b"].peers["gtm-a"].digest == trio.stores["gtm-a"].digest() != before
    assert trio.replicators["gtm-a"].peers["gtm-b"].digest == trio.stores["gtm-b"].digest()


def test_records_are_relayed_through_a_middle_node(trio: MemoryCluster) -> None:
    """A node that reaches only one peer still gets everything: the middle node relays."""
    trio.connect("gtm-a", "gtm-b")
    trio.connect("gtm-b", "gtm-c")  # a and c never meet
    trio.write("gtm-a", "admin/vs/from-a", {"state": "drain"})
    trio.write("gtm-c", "admin/vs/from-c", {"state": "drain"})
    assert trio.stores["gtm-c"].get("admin/vs/from-a") is not None
    assert trio.stores["gtm-a"].get("admin/vs/from-c") is not None
    assert trio.converged()


def test_newest_version_wins_for_keys_written_on_two_nodes(trio: MemoryCluster) -> None:
    """An admin record written on two nodes ends the same everywhere: the newer write."""
    trio.connect("gtm-a", "gtm-b")
    trio.connect("gtm-b", "gtm-c")
    trio.write("gtm-a", "admin/vs/web", {"state": "disabled"})
    trio.clock.advance(1)
    trio.write("gtm-c", "admin/vs/web", {"state": "enabled"})
    for store in trio.stores.values():
        record = store.get("admin/vs/web")
        assert record is not None and record.value == {"state": "enabled"}


def test_reconnect_pulls_what_was_missed_in_both_directions(trio: MemoryCluster) -> None:
    """Records written while two nodes were apart are exchanged when they reconnect."""
    link = trio.connect("gtm-a", "gtm-b")
    trio.write("gtm-a", "admin/vs/before", {"state": "enabled"})
    link.cut()
    assert established(trio, "gtm-a") == set()
    for i in range(300):
        trio.stores["gtm-a"].put(f"admin/vs/a{i}", {"state": "drain"})
        trio.stores["gtm-b"].put(f"admin/vs/b{i}", {"state": "drain"})
    trio.stores["gtm-b"].put("admin/vs/before", {"state": "disabled", "by": "gtm-b"})
    assert not trio.converged()
    trio.connect("gtm-b", "gtm-a")
    a, b = trio.stores["gtm-a"], trio.stores["gtm-b"]
    assert a.digest() == b.digest()
    assert a.get("admin/vs/b299") is not None and b.get("admin/vs/a299") is not None
    assert a.get("admin/vs/before").value == {"state": "disabled", "by": "gtm-b"}  # type: ignore[union-attr]


def test_a_fresh_node_pulls_everything_in_batches(trio: MemoryCluster) -> None:
    """A node with an empty store receives a large state (many AMP messages) on connect."""
    big = trio.stores["gtm-a"]
    for i in range(5000):
        big.put(f"path/10.0.{i // 250}.{i % 250}/CNC", path_value(i, "gtm-a"), ttl=3600)
    trio.connect("gtm-c", "gtm-a")
    assert len(trio.stores["gtm-c"]) == 5000
    assert trio.stores["gtm-c"].digest() == big.digest()


def test_expiry_counts_age_on_receipt_not_the_senders_clock(trio: MemoryCluster) -> None:
    """A record received half way through its life lives only the other half on the receiver."""
    trio.stores["gtm-a"].put("persist/www/1/192.0.2.0/24", {"pool": "p", "members": ["v"]}, ttl=100)
    trio.clock.advance(60)
    trio.connect("gtm-b", "gtm-a")
    received = trio.stores["gtm-b"].get("persist/www/1/192.0.2.0/24")
    assert received is not None
    assert received.remaining(trio.clock.seconds()) == pytest.approx(40, abs=0.01)
    trio.clock.advance(41)
    assert trio.stores["gtm-b"].get("persist/www/1/192.0.2.0/24") is None


def test_restart_from_snapshot_then_catch_up(trio: MemoryCluster, tmp_path: Path) -> None:
    """A node restarted from its snapshot keeps its records, never reuses a version, and
    pulls what it missed while down."""
    trio.connect("gtm-a", "gtm-b")
    trio.write("gtm-b", "admin/vs/mine", {"state": "drain"})
    trio.write("gtm-a", "admin/vs/theirs", {"state": "drain"})
    old_version = trio.stores["gtm-b"].version_of("admin/vs/mine")
    path = tmp_path / "b-state" / snapshot.FILENAME
    snapshot.write(path, snapshot.rows(trio.stores["gtm-b"], 5000.0, trio.clock.seconds()), "gtm-b")
    trio.links[0].cut()
    trio.write("gtm-a", "admin/vs/while-b-was-down", {"state": "drain"})
    fresh = Store("gtm-b", trio.clock.seconds)
    assert snapshot.read(path, fresh, 5000.0) == 2
    trio.add("gtm-b", fresh)
    rewritten = fresh.put("admin/vs/mine", {"state": "enabled"})
    assert old_version is not None and rewritten.version > old_version
    trio.connect("gtm-b", "gtm-a")
    assert fresh.get("admin/vs/while-b-was-down") is not None
    assert trio.stores["gtm-a"].get("admin/vs/mine").value == {"state": "enabled"}  # type: ignore[union-attr]
    assert trio.stores["gtm-a"].digest() == fresh.digest()


def test_a_certificate_from_another_ca_is_refused(trio: MemoryCluster, tmp_path: Path) -> None:
    """A server certificate from a foreign CA never gets past TLS; nothing is exchanged."""
    rogue_dir = tmp_path / "rogue"
    certs.init_ca(rogue_dir)
    certs.issue(rogue_dir, "gtm-b")
    rogue = load_credentials(
        trio.files("gtm-b").__class__(rogue_dir / "ca.pem", rogue_dir / "gtm-b.pem", rogue_dir / "gtm-b.key"), "gtm-b"
    )
    trio.connect("gtm-a", "gtm-b", server_creds=rogue)
    assert established(trio, "gtm-a") == set()
    assert established(trio, "gtm-b") == set()


def test_a_member_claiming_another_name_in_hello_is_dropped(trio: MemoryCluster) -> None:
    """The certificate says gtm-a; a Hello claiming gtm-c is refused and logged."""
    replicator = trio.replicators["gtm-a"]
    replicator.node = "gtm-c"  # a's Hello will now lie about its name
    with capturedLogs() as events:
        trio.connect("gtm-a", "gtm-b")
    assert established(trio, "gtm-b") == set()
    reasons = [e.get("reason", "") for e in events if e.get("event") == "peer_refused"]
    assert any("certificate names gtm-a but its Hello claims to be gtm-c" in r for r in reasons), reasons


def test_a_peer_from_another_group_is_refused(trio: MemoryCluster) -> None:
    """Same CA, right names, but another sync group: refused."""
    trio.replicators["gtm-a"].group = "other"
    with capturedLogs() as events:
        trio.connect("gtm-a", "gtm-b")
    assert established(trio, "gtm-b") == set()
    assert any("sync group 'other'" in e.get("reason", "") for e in events if e.get("event") == "peer_refused")


def test_a_certificate_for_a_non_member_is_refused(trio: MemoryCluster) -> None:
    """A valid certificate of the group CA whose name is not a member gets nothing."""
    certs.issue(trio.directory, "intruder")
    trio.credentials["gtm-a"] = load_credentials(trio.files("intruder"), "intruder")
    with capturedLogs() as events:
        trio.connect("gtm-a", "gtm-b")
    assert established(trio, "gtm-b") == set()
    assert any("not a member" in e.get("reason", "") for e in events if e.get("event") == "peer_refused")


def test_a_misbehaving_peer_is_dropped_and_the_others_carry_on(trio: MemoryCluster) -> None:
    """Garbage from one peer ends that connection only; the others keep replicating."""
    bad = trio.connect("gtm-a", "gtm-b")
    trio.connect("gtm-c", "gtm-b")
    from gtmcluster.sync import commands

    with capturedLogs() as events:
        bad.client.wrappedProtocol.callRemote(commands.Publish, records=b"[[1,2,3]]").addErrback(lambda _: None)
        trio.settle()
    assert established(trio, "gtm-b") == {"gtm-c"}
    assert any("malformed" in e.get("reason", "") for e in events if e.get("event") == "peer_refused")
    trio.write("gtm-c", "admin/vs/still", {"state": "enabled"})
    assert trio.stores["gtm-b"].get("admin/vs/still") is not None


def test_a_silent_peer_is_dropped_after_the_idle_timeout(trio: MemoryCluster) -> None:
    """Heartbeats keep a quiet connection up; a peer that stops answering is dropped."""
    link = trio.connect("gtm-a", "gtm-b")
    trio.advance(120)  # heartbeats flow: still connected
    assert established(trio, "gtm-a") == {"gtm-b"}
    trio.links.remove(link)  # stop moving bytes: the peer goes silent
    with capturedLogs() as events:
        trio.clock.advance(31)
    assert any("silent for too long" in e.get("reason", "") for e in events)
    link.pump.flush()  # let the transports see the abort
    assert established(trio, "gtm-a") == set()


def drains(name: str, count: int, first_wall_ms: int, now: float) -> bytes:
    """One Publish batch of gtm-a's: *count* drain states of servers ``NAME0``, ``NAME1`` ..."""
    records = [
        Record(f"admin/vs/{name}{i}", {"state": "drain"}, Version(first_wall_ms + i, 0, "gtm-a"), None, now)
        for i in range(count)
    ]
    ((batch, _),) = list(codec.batches(records, now))
    return batch


def test_a_large_batch_is_merged_a_slice_per_reactor_turn(trio: MemoryCluster) -> None:
    """A batch of 250 records from a peer is checked whole, then merged MERGE_SLICE records
    at once and the rest in later reactor turns (DNS queries are answered in between; the
    fake clock runs the later slices in one advance); the answer counts them all. Another
    batch delivered in the same read (a connection resumed after a pause) merges nothing
    there: its first slice waits for the next turn."""
    receiver = trio.replicators["gtm-b"]
    proto = cast(Any, SimpleNamespace(peer="gtm-a", established=True, closed=False))
    now = trio.clock.seconds()
    batch = drains("v", 250, 1000, now)
    results: list[int] = []
    receiver.receive_in_slices(proto, batch).addCallback(results.append)
    assert len(trio.stores["gtm-b"]) == MERGE_SLICE and results == []
    assert [c.getTime() for c in trio.clock.getDelayedCalls()].count(now) == 1  # the next slice, next turn
    trio.clock.advance(0)
    assert len(trio.stores["gtm-b"]) == 250 and results == [250]
    second = drains("w", 50, 2000, now)
    receiver.receive_in_slices(proto, second, at_once=False).addCallback(results.append)
    assert len(trio.stores["gtm-b"]) == 250  # not in this turn
    (first,) = [cast(DelayedCall, c) for c in trio.clock.getDelayedCalls() if c.getTime() == now]
    run = partial(first.func, *first.args, **first.kw)
    first.cancel()
    run()  # the next turn
    assert len(trio.stores["gtm-b"]) == 300 and results == [250, 50]


def test_a_batch_merged_in_slices_leaves_no_reference_cycle(trio: MemoryCluster) -> None:
    """The merge of a batch over several turns holds the batch in an object, not in a
    closure that schedules itself (a cycle: its batch would wait for the collector, and a
    freeze meanwhile kept it for good: tests/unit/test_no_cycles.py)."""
    receiver = trio.replicators["gtm-b"]
    proto = cast(Any, SimpleNamespace(peer="gtm-a", established=True, closed=False))
    batch = drains("c", 250, 3000, trio.clock.seconds())
    results: list[int] = []
    with collector_off() as left:
        receiver.receive_in_slices(proto, batch).addCallback(results.append)
        trio.clock.advance(0)
        merged = list(results)
    assert merged == [250]
    assert left == []


def test_a_dialled_peer_that_refuses_us_is_dialled_on_a_growing_backoff(trio: MemoryCluster) -> None:
    """Each dialled connection that ends before its Hello is done (refused at TLS or Hello),
    or soon after, counts on the dialler's factory, which lengthens the ClientService's next
    delay; the end of a connection that lasted `STABLE` seconds resets it."""
    factory = PeerFactory(trio.replicators["gtm-a"], "gtm-c")
    for expected in (1, 2):
        refused = factory.buildProtocol(None)
        refused.makeConnection(StringTransport())
        refused.connectionLost(Failure(ConnectionDone("TLS handshake failed")))
        assert factory.refused == expected
    good = trio.connect("gtm-a", "gtm-b")
    dialler = good.client.wrappedProtocol.factory
    assert isinstance(dialler, PeerFactory) and dialler.refused == 0
    good.cut()  # dropped at once after its Hello (the peer refusing what we send): a refusal
    assert dialler.refused == 1
    lasting = trio.connect("gtm-a", "gtm-b")
    dialler = lasting.client.wrappedProtocol.factory
    assert isinstance(dialler, PeerFactory)
    dialler.refused = 3
    trio.clock.advance(STABLE)
    lasting.cut()  # an end after it lasted resets the wait
    assert dialler.refused == 0


def test_a_peers_certificate_is_its_oldest_open_connections(trio: MemoryCluster) -> None:
    """The two members of a pair dial each other, so a member may hold two connections to a
    peer that renewed between them: its status keeps the certificate of the oldest open one
    (the one `connected_since` counts from), and shows the newer one's once the oldest ends."""
    trio.connect("gtm-a", "gtm-b")
    old = f"{certs.load_certificate(trio.directory / 'gtm-a.pem').serial_number:x}"
    peer = trio.replicators["gtm-b"].peers["gtm-a"]
    assert peer.certificate["serial"] == old
    since = peer.connected_since

    certs.issue(trio.directory, "gtm-a", force=True)  # renewed: its next connection shows the new one
    trio.credentials["gtm-a"] = load_credentials(trio.files("gtm-a"), "gtm-a")
    new = f"{certs.load_certificate(trio.directory / 'gtm-a.pem').serial_number:x}"
    assert new != old
    trio.clock.advance(5)
    second = trio.connect("gtm-a", "gtm-b")
    assert [proto.certificate["serial"] for proto in peer.channels] == [old, new]
    assert peer.certificate["serial"] == old and peer.connected_since == since

    trio.links[0].cut()
    assert [proto.certificate["serial"] for proto in peer.channels] == [new]
    assert peer.certificate["serial"] == new and peer.connected
    second.cut()
    assert not peer.connected and peer.certificate["serial"] == new  # the last one shown
