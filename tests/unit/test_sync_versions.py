"""A sync group being upgraded member by member: a member of protocol version 2 and one of
version 1 (the real code with `Replicator.protocol_version` lowered: its Hello says 1 and
its schema refuses the admin levels version 2 brought) stay connected, the older one never
receives a record it would refuse, everything else flows both ways, and reconciliation
between them settles."""

from __future__ import annotations

import ipaddress
import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.logger import capturedLogs

from gtmcluster.api import admin as api_admin
from gtmcluster.api.status import status
from gtmcluster.cli.status import summarize
from gtmcluster.config.load import load
from gtmcluster.lb.context import Client
from gtmcluster.node import Node
from gtmcluster.state import schema
from gtmcluster.state.record import bucket_of
from gtmcluster.state.values import numerous
from gtmcluster.sync import codec, commands
from gtmcluster.sync.replicator import RECONCILE_INTERVAL, Replicator
from tests.support import configs
from tests.support.cluster import MemoryCluster

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

NEW, OLD = "gtm-a", "gtm-b"
#: a key only version 2 knows, and one version 1 knows too
DATACENTER, VS = "admin/datacenter/DC1", "admin/vs/www1"


#: a key only version 4 knows
TRAFFIC = "traffic/link/L1"


def traffic(node: str, bps: int = 1_000_000) -> dict[str, Any]:
    return {"bps_in": bps, "bps_out": bps // 2, "by": node}


def admin(state: str, node: str) -> dict[str, Any]:
    return {"state": state, "by": "ops", "reason": "maintenance", "at": 1.0, "node": node}


@pytest.fixture
def pair(tmp_path: Path) -> MemoryCluster:
    return MemoryCluster([NEW, OLD], tmp_path, versions={OLD: 1})


def connected(cluster: MemoryCluster) -> bool:
    return all(r.peers[other].connected for r in cluster.replicators.values() for other in r.peers)


def count_commands(
    replicator: Replicator, listed: list[tuple[str, int]] | None = None, keys: list[str] | None = None
) -> Counter[str]:
    """The anti-entropy commands *replicator* answers from now on (its `anti_entropy` does), by name (the real
    handlers still answer them); the (origin, bucket) pairs it is asked to list go to
    *listed*, and the keys its listings answer with to *keys*."""
    counts: Counter[str] = Counter()

    def counting(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            counts[name] += 1
            if name == "listing_message" and listed is not None:
                _, origin, request = args
                listed.extend((origin, bucket) for bucket, _ in json.loads(request))
            answer = call(*args)
            if name == "listing_message" and keys is not None:
                keys.extend(entry[0] for entry in json.loads(answer[0]))
            return answer

        return wrapper

    for name in ("summary_message", "buckets_message", "listing_message", "pull_message", "send_all"):
        setattr(replicator.anti_entropy, name, counting(name, getattr(replicator.anti_entropy, name)))
    return counts


def test_versions_and_the_schemas_they_take() -> None:
    """Version 5 is the newest (client proximity's records; version 4 brought links'
    traffic records, version 3 config sync's commands); a member of version 1 refuses the
    admin levels other than vs (as the version-1 code did: only admin/vs/<vs> was known),
    tombstones too."""
    assert commands.PROTOCOL_VERSION == 5
    assert schema.NEWEST_VERSION == 5
    assert commands.MIN_PROTOCOL_VERSION == 1
    for key in (DATACENTER, "admin/link/L1", "admin/pool/p", "admin/member/p/www1", "admin/wideip/w.example"):
        assert schema.version_needed(key) == 2
        assert schema.problem(key, admin("disabled", NEW), NEW, None) is None
        refused = schema.problem(key, admin("disabled", NEW), NEW, None, version=1)
        assert refused is not None and refused.reason == "key"
        assert schema.problem(key, None, NEW, 60.0, version=1) is not None
    for key in (VS, "obs/vs/www1/gtm-a", "probe/192.0.2.1"):
        assert schema.version_needed(key) == 1
    # every key of another kind needs version 1 (the withheld records are listed from these)
    assert all(not numerous(kind) for kind in schema.VERSIONED_KINDS)
    for kind in set(schema.KINDS) - set(schema.VERSIONED_KINDS):
        assert schema.version_needed(f"{kind}/x/y/z") == 1
    # a link's traffic is of version 4: members of 3 and older refuse it
    assert schema.version_needed(TRAFFIC) == 4
    assert schema.problem(TRAFFIC, traffic(NEW), NEW, 30.0) is None
    for version in (1, 2, 3):
        refused = schema.problem(TRAFFIC, traffic(NEW), NEW, 30.0, version=version)
        assert refused is not None and refused.reason == "key", version
    # client proximity's records are of version 5: members of 4 and older refuse them
    for key, value in CLIENT_RECORDS:
        assert schema.version_needed(key) == 5
        assert schema.problem(key, value, NEW, 60.0) is None
        refused = schema.problem(key, value, NEW, 60.0, version=4)
        assert refused is not None and refused.reason == "key", key
    assert schema.problem(VS, admin("drain", NEW), NEW, None, version=1) is None


CLIENT_RECORDS = (
    ("client/198.51.100.0_24/DC1", {"rtt": 20000, "samples": [20000], "source": "rum", "by": NEW}),
    ("pop/192.0.2.53", {"subnets": {"198.51.100.0_24": 3}, "rtt": {"DC1": 20000}, "n": 3}),
    ("rumid/abcdefghij0123456789", {"ldns": "192.0.2.53", "ecs": ""}),
)


def test_the_old_member_drops_a_peer_that_sends_it_a_new_key(pair: MemoryCluster) -> None:
    """The test double behaves as a version-1 member: a Publish of admin/datacenter/...
    sent to it regardless of its version ends the connection (what the filtering on the
    newer side prevents)."""
    pair.connect(NEW, OLD)
    pair.stores[NEW].put(DATACENTER, admin("disabled", NEW))
    record = pair.stores[NEW].raw(DATACENTER)
    assert record is not None
    ((batch, _),) = codec.batches([record], pair.clock.seconds())
    with capturedLogs() as events:
        channel = pair.replicators[NEW].channel(OLD)
        assert channel is not None
        channel.callRemote(commands.Publish, records=batch).addErrback(lambda _: None)
        pair.settle()
    assert not pair.replicators[OLD].peers[NEW].connected
    assert pair.replicators[OLD].refused["admin", "key"] == 1
    assert any("protocol version 2" in str(e.get("reason", "")) for e in events), events


@pytest.mark.parametrize("dialler", [NEW, OLD])
def test_a_new_member_and_an_old_one_agree_on_version_1(pair: MemoryCluster, dialler: str) -> None:
    """Whoever dials, both sides record version 1 for the connection (a version-1 peer is
    accepted), and the new member says what the old one will not be sent."""
    with capturedLogs() as events:
        pair.connect(dialler, OLD if dialler == NEW else NEW)
    assert connected(pair)
    assert pair.replicators[NEW].peers[OLD].version == 1
    assert pair.replicators[OLD].peers[NEW].version == 1
    older = [e for e in events if e.get("event") == "peer_older_protocol"]
    assert [(e["peer"], e["version"], e["ours"]) for e in older] == [(OLD, 1, commands.PROTOCOL_VERSION)]


@pytest.mark.parametrize("dialler", [NEW, OLD])
def test_new_admin_records_are_withheld_from_an_old_peer_and_the_rest_flows(pair: MemoryCluster, dialler: str) -> None:
    """A data center disabled on the new member: the connection stays up, the old member
    never receives the record (pushed, sent in full at connection, listed or pulled after a
    reconnection, or deleted), admin/vs records flow both ways, and reconciliation settles:
    further rounds pull and list nothing, and the two say their digests agree."""
    new, old = pair.replicators[NEW], pair.replicators[OLD]
    other = OLD if dialler == NEW else NEW
    # Before connecting: the new member's origin holds only a withheld record (the old
    # one must not ask for all of it every round), then a record both take.
    pair.stores[NEW].put(DATACENTER, admin("disabled", NEW))
    link = pair.connect(dialler, other)
    assert connected(pair)
    assert pair.stores[OLD].raw(DATACENTER) is None
    pair.stores[NEW].put("admin/pool/p1", admin("drain", NEW))
    pair.write(NEW, VS, admin("disabled", NEW))
    pair.write(OLD, "admin/vs/www2", admin("drain", OLD))
    assert connected(pair)
    assert pair.stores[OLD].get(VS) is not None
    assert pair.stores[NEW].get("admin/vs/www2") is not None

    # Apart, then back: the old member holds some of the new one's origin, so it compares
    # buckets, lists the differing ones and pulls what it lacks. The buckets of withheld
    # records do not differ; one withheld record shares the bucket of a record both take
    # (that bucket is listed, without it).
    link.cut()
    www3 = "admin/vs/www3"
    beside = next(k for i in range(100_000) if bucket_of(k := f"admin/link/L{i}") == bucket_of(www3))
    pair.stores[NEW].put(beside, admin("disabled", NEW))
    pair.stores[NEW].put(www3, admin("drain", NEW))
    pair.stores[NEW].delete(DATACENTER)
    pair.stores[OLD].put("admin/vs/www4", admin("disabled", OLD))
    pair.settle()
    listed: dict[str, list[tuple[str, int]]] = {NEW: [], OLD: []}
    keys: list[str] = []  # listed by the new member
    count_commands(new, listed[NEW], keys)
    count_commands(old, listed[OLD])
    with capturedLogs() as events:
        pair.connect(dialler, other)
    assert connected(pair)
    assert not [e for e in events if e.get("event") in ("peer_down", "peer_refused")], events
    # (each side may list both origins: the rounds in each direction overlap)
    assert set(listed[NEW] + listed[OLD]) == {(NEW, bucket_of(www3)), (OLD, bucket_of("admin/vs/www4"))}
    assert www3 in keys and beside not in keys, keys
    assert pair.stores[OLD].get(www3) is not None
    assert pair.stores[NEW].get("admin/vs/www4") is not None
    for key in (DATACENTER, "admin/pool/p1", beside):
        assert pair.stores[OLD].raw(key) is None, key
    assert not old.refused and not new.refused
    # The old member holds exactly what the new one holds of the records it can take.
    assert new.anti_entropy.digest_for(1) == pair.stores[OLD].digest() != pair.stores[NEW].digest()

    # Settled: rounds of reconciliation find nothing to list or pull, and heartbeats say
    # the digests agree (as status and metrics compare them).
    counts = {NEW: count_commands(new), OLD: count_commands(old)}  # (counting from here)
    sent = (new.peers[OLD].sent, old.peers[NEW].sent)
    for _ in range(3):
        new.anti_entropy.reconcile_all()
        old.anti_entropy.reconcile_all()
        pair.advance(RECONCILE_INTERVAL, step=5.0)
    for name in (NEW, OLD):
        assert counts[name]["summary_message"] >= 3, counts
        for command in ("buckets_message", "listing_message", "pull_message", "send_all"):
            assert counts[name][command] == 0, (name, counts)
    assert (new.peers[OLD].sent, old.peers[NEW].sent) == sent
    assert new.peers[OLD].digest == new.anti_entropy.digest_for(new.peers[OLD].version)
    assert old.peers[NEW].digest == pair.stores[OLD].digest()
    assert connected(pair)


def test_an_old_member_relays_no_new_records_between_new_ones(tmp_path: Path) -> None:
    """New members reached only through an old one do not get the new admin records (the
    old one never holds them) until they connect directly; nobody is dropped meanwhile."""
    cluster = MemoryCluster([NEW, OLD, "gtm-c"], tmp_path, versions={OLD: 1})
    cluster.connect(NEW, OLD)
    cluster.connect("gtm-c", OLD)
    cluster.write(NEW, DATACENTER, admin("disabled", NEW))
    cluster.write(NEW, VS, admin("disabled", NEW))
    assert connected_pairs(cluster) == {(NEW, OLD), (OLD, NEW), ("gtm-c", OLD), (OLD, "gtm-c")}
    assert cluster.stores["gtm-c"].get(VS) is not None
    assert cluster.stores["gtm-c"].raw(DATACENTER) is None
    cluster.connect("gtm-c", NEW)
    record = cluster.stores["gtm-c"].get(DATACENTER)
    assert record is not None and record.value["state"] == "disabled"
    assert cluster.stores["gtm-c"].digest() == cluster.stores[NEW].digest()
    assert cluster.stores[OLD].raw(DATACENTER) is None


def connected_pairs(cluster: MemoryCluster) -> set[tuple[str, str]]:
    return {(name, peer) for name, r in cluster.replicators.items() for peer, s in r.peers.items() if s.connected}


def test_an_origin_of_withheld_records_only_is_not_asked_for(pair: MemoryCluster) -> None:
    """When all the old member could take of an origin is nothing (the new member wrote only
    new admin records), the origin is absent from what the two compare: the old member does
    not ask for all of it (SendAll) round after round."""
    new, old = pair.replicators[NEW], pair.replicators[OLD]
    pair.stores[NEW].put(DATACENTER, admin("disabled", NEW))
    counts = {NEW: count_commands(new), OLD: count_commands(old)}
    pair.connect(OLD, NEW)
    for _ in range(3):
        new.anti_entropy.reconcile_all()
        old.anti_entropy.reconcile_all()
        pair.advance(RECONCILE_INTERVAL, step=5.0)
    assert counts[NEW]["summary_message"] >= 3 and counts[OLD]["summary_message"] >= 3, counts
    assert counts[NEW]["send_all"] == counts[NEW]["buckets_message"] == 0, counts
    assert pair.stores[OLD].raw(DATACENTER) is None and len(pair.stores[OLD]) == 0
    assert new.peers[OLD].digest == new.anti_entropy.digest_for(1) == pair.stores[OLD].digest()
    assert connected(pair)


def test_an_old_member_catching_up_is_not_sent_new_records(pair: MemoryCluster) -> None:
    """Keys pulled by name (a member catching up while it loads its snapshot asks for its
    health and admin keys): the new member answers only those the old one takes."""
    pair.write(NEW, DATACENTER, admin("disabled", NEW))
    pair.write(NEW, VS, admin("disabled", NEW))
    pair.connect(OLD, NEW)
    old = pair.replicators[OLD]
    channel = old.channel(NEW)
    assert channel is not None
    pair.stores[NEW].put(VS, admin("enabled", NEW))  # newer than what the old member holds
    old._catch_up(channel, [DATACENTER, VS])
    pair.settle()
    assert connected(pair)
    assert pair.stores[OLD].raw(DATACENTER) is None
    record = pair.stores[OLD].get(VS)
    assert record is not None and record.value["state"] == "enabled"
    assert not old.refused


def test_a_datacenter_disabled_during_a_rolling_upgrade(tmp_path: Path) -> None:
    """Two nodes, n2 not yet upgraded (version 1): DC1 disabled through n1's admin code moves
    n1's answers, n2 keeps answering as before (it never holds the record) and stays
    connected; a virtual server's admin state set on n2 moves n1's answers; both nodes'
    status says the state digests agree."""
    raw = configs.add_member(configs.base(), "n2", "DC2", "127.0.0.2")
    config = load(configs.write(tmp_path, raw))
    cluster = MemoryCluster(["n1", "n2"], tmp_path / "certs", versions={"n2": 1})
    nodes = {}
    for name in ("n1", "n2"):
        node = Node(config, name, clock=cluster.clock.seconds, rng=random.Random(1))
        node.ready = True
        cluster.add(name, store=node.store)
        nodes[name] = node
    cluster.connect("n2", "n1")
    wideip = next(iter(config.wideips.values()))
    r1 = Client.from_ldns(ipaddress.ip_address("198.51.100.53"))
    api_admin.change(nodes["n1"], "datacenter", "DC1", "disable", by="alice", reason="maintenance")
    cluster.settle()
    assert nodes["n1"].decide(wideip, 1, r1, key="a").members == ("vs3",)
    assert nodes["n2"].decide(wideip, 1, r1, key="a").members == ("vs1",)
    assert nodes["n2"].store.raw("admin/datacenter/DC1") is None
    api_admin.change(nodes["n2"], "virtual-server", "vs3", "disable", by="bob", reason="upgrade")
    cluster.settle()
    assert nodes["n1"].health.snapshot.vs["vs3"].admin == "disabled"
    assert "vs3" not in nodes["n1"].decide(wideip, 1, r1, key="b").members
    assert connected(cluster)
    cluster.advance(5.0)  # heartbeats carry the digests
    reports = {}
    for name in ("n1", "n2"):
        report = reports[name] = status(nodes[name], cluster.replicators[name], cluster.clock.seconds())
        assert report["state"]["agrees"] is True, (name, report["peers"])
        assert [p["protocol"] for p in report["peers"]] == [1]
    # `gtmcluster status` compares the nodes over what the oldest of them can hold
    assert reports["n1"]["state"]["digest"] != reports["n2"]["state"]["digest"]
    assert reports["n1"]["state"]["digest_by_protocol"]["1"] == reports["n2"]["state"]["digest"]
    assert summarize(reports).state_agree
    del reports["n2"]["state"]["digest_by_protocol"]  # (as a member of version 1 answers)
    assert summarize(reports).state_agree
    reports["n2"]["state"]["digest"] = "0-0000000000000000"
    assert not summarize(reports).state_agree


@pytest.mark.parametrize("dialler", [NEW, "gtm-v3"])
def test_link_traffic_is_withheld_from_a_version_3_peer(tmp_path: Path, dialler: str) -> None:
    """A member of version 3 (config sync, no traffic records) is never sent a link's
    traffic: not when pushed, nor in the full send at connection, nor after a reconnection
    (listed, pulled); records of version 3 flow both ways, it is not dropped, and the two
    agree on the digest over what both hold. A version-4 peer gets the figure."""
    v3 = "gtm-v3"
    PAIRS = {(NEW, v3), (v3, NEW), (NEW, "gtm-c"), ("gtm-c", NEW)}
    cluster = MemoryCluster([NEW, v3, "gtm-c"], tmp_path, versions={v3: 3})
    new, old = cluster.replicators[NEW], cluster.replicators[v3]
    cluster.stores[NEW].put(TRAFFIC, traffic(NEW), 30.0)  # held before they connect
    other = v3 if dialler == NEW else NEW
    link = cluster.connect(dialler, other)
    cluster.connect("gtm-c", NEW)
    assert connected_pairs(cluster) == PAIRS
    assert new.peers[v3].version == 3 and new.peers["gtm-c"].version == commands.PROTOCOL_VERSION
    cluster.write(NEW, "traffic/link/L2", traffic(NEW, 5_000), 30.0)  # pushed
    cluster.write(NEW, VS, admin("disabled", NEW))
    cluster.write(v3, "admin/pool/p1", admin("drain", v3))  # version 2 records flow to and fro
    assert cluster.stores[v3].get(VS) is not None
    assert cluster.stores[NEW].get("admin/pool/p1") is not None
    for key in (TRAFFIC, "traffic/link/L2"):
        assert cluster.stores[v3].raw(key) is None, key
        held = cluster.stores["gtm-c"].get(key)
        assert held is not None and held.value["by"] == NEW, key
    # apart, a new figure; together again: reconciliation lists and pulls without it
    link.cut()
    cluster.stores[NEW].put(TRAFFIC, traffic(NEW, 2_000_000), 30.0)
    cluster.stores[NEW].put("admin/vs/www3", admin("drain", NEW))
    cluster.settle()
    with capturedLogs() as events:
        cluster.connect(dialler, other)
    assert connected_pairs(cluster) == PAIRS
    assert not [e for e in events if e.get("event") in ("peer_down", "peer_refused")], events
    assert cluster.stores[v3].get("admin/vs/www3") is not None
    assert cluster.stores[v3].raw(TRAFFIC) is None
    assert not old.refused and not new.refused
    assert new.anti_entropy.digest_for(3) == cluster.stores[v3].digest() != cluster.stores[NEW].digest()
    older = [e for e in events if e.get("event") == "peer_older_protocol"]
    assert [(e["peer"], e["version"]) for e in older] == [(v3, 3)], older
