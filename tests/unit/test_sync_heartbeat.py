"""Heartbeats and silence: a peer that goes quiet without closing its connection (its links
cut, packets dropped, no reset) stops counting within `heartbeat_timeout`, long before the
connection is closed for silence (`idle_timeout`); heard again, it counts again.

Two nodes in memory over real TLS and the real protocol (`tests.support.cluster`), one fake
clock; "silent" is a link whose bytes stop moving (removed from the cluster's pump).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.logger import capturedLogs
from twisted.protocols import amp

from gtmcluster.health.tracker import HealthTracker
from gtmcluster.sync import commands, link
from tests.support.cluster import Link, MemoryCluster
from tests.support.healthcfg import health_config, load_config

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: the defaults (config.model.SyncSettings): a heartbeat a second, silent after three
INTERVAL, TIMEOUT, IDLE = 1.0, 3.0, 30.0


@pytest.fixture
def pair(tmp_path: Path) -> MemoryCluster:
    """Nodes n1 and n2 (the member names of `health_config`), not connected yet."""
    return MemoryCluster(["n1", "n2"], tmp_path / "certs")


def silence(cluster: MemoryCluster, link: Link) -> None:
    """Stop moving the link's bytes both ways (the connection stays open at both ends)."""
    cluster.links.remove(link)


def heartbeats_sent(proto: link.Link, seconds: float, cluster: MemoryCluster) -> int:
    """Heartbeats *proto* sends in *seconds* of fake time (the link moving bytes)."""
    sent = 0
    original = proto.callRemote

    def counting(command: type[amp.Command], **kw: object) -> object:
        nonlocal sent
        if command is commands.Heartbeat:
            sent += 1
        return original(command, **kw)

    setattr(proto, "callRemote", counting)  # noqa: B010 - an instance attribute over the method
    try:
        cluster.advance(seconds, step=0.25)
    finally:
        delattr(proto, "callRemote")
    return sent


def test_each_connection_sends_a_heartbeat_every_interval(pair: MemoryCluster) -> None:
    """An otherwise quiet connection carries one heartbeat per `heartbeat_interval` each way,
    so a peer that is there is heard from well within `heartbeat_timeout`."""
    pair.connect("n1", "n2")
    pair.advance(5)
    (dialler,) = pair.replicators["n1"].peers["n2"].channels
    (answerer,) = pair.replicators["n2"].peers["n1"].channels
    assert heartbeats_sent(dialler, 10, pair) in (9, 10, 11)
    assert heartbeats_sent(answerer, 10, pair) in (9, 10, 11)
    assert pair.replicators["n1"].live_names() == ["n2"]
    assert pair.replicators["n2"].live_names() == ["n1"]


def test_a_silent_peer_stops_counting_after_the_heartbeat_timeout_and_stays_connected(pair: MemoryCluster) -> None:
    """With no message through for `heartbeat_timeout`, each side takes the other out of
    `live_names` (whose verdicts count), says so once in its log and tells its listeners;
    the connection itself stays open (it is closed after `idle_timeout`, not before)."""
    n1 = pair.replicators["n1"]
    link = pair.connect("n1", "n2")
    pair.advance(10)
    told: list[list[str]] = []
    n1.peer_listeners.append(lambda: told.append(n1.live_names()))
    silence(pair, link)
    with capturedLogs() as events:
        pair.clock.advance(TIMEOUT - 0.2)
        assert n1.live_names() == ["n2"] and told == []
        pair.clock.advance(0.3)
        assert n1.live_names() == [] and n1.connected_names() == ["n2"]
        assert pair.replicators["n2"].live_names() == []
        assert told == [[]]
        pair.clock.advance(IDLE - TIMEOUT - 1)
    silent = [e for e in events if e.get("event") == "peer_silent"]
    assert sorted(e["peer"] for e in silent) == ["n1", "n2"]  # once by each side (one log here)
    assert n1.connected_names() == ["n2"] and n1.peers["n2"].silent_since is not None


def test_a_peer_heard_again_counts_again(pair: MemoryCluster) -> None:
    """When the bytes move again (the heartbeats queued meanwhile arrive), the peer is live
    again at once, logged with how long it was silent, and the listeners are told."""
    n1 = pair.replicators["n1"]
    link = pair.connect("n1", "n2")
    pair.advance(5)
    silence(pair, link)
    pair.advance(TIMEOUT + 2, step=0.1)
    assert n1.live_names() == []
    told: list[list[str]] = []
    n1.peer_listeners.append(lambda: told.append(n1.live_names()))
    with capturedLogs() as events:
        pair.links.append(link)
        pair.settle()
    assert n1.live_names() == ["n2"] and pair.replicators["n2"].live_names() == ["n1"]
    assert told and told[-1] == ["n2"]
    heard = {e["peer"]: e for e in events if e.get("event") == "peer_heard"}  # one by each side
    assert sorted(heard) == ["n1", "n2"]
    assert heard["n2"]["seconds"] == pytest.approx(2, abs=0.2)  # silent since TIMEOUT after the cut
    assert n1.peers["n2"].silent_since is None
    # and it goes silent again, with a fresh timeout, if the link is cut once more
    silence(pair, link)
    pair.clock.advance(TIMEOUT + 0.1)
    assert n1.live_names() == []


def test_a_silent_peer_is_not_one_we_tell_others_we_reach(tmp_path: Path) -> None:
    """Heartbeats list the live peers only: n3 learns that n1 no longer hears n2, so it
    relays n2's records to n1 (a record of n2 written during the silence reaches n1
    through n3)."""
    trio = MemoryCluster(["n1", "n2", "n3"], tmp_path)
    silent_link = trio.connect("n1", "n2")
    trio.connect("n1", "n3")
    trio.connect("n2", "n3")
    trio.advance(5)
    assert trio.replicators["n3"].peers["n1"].their_peers == {"n2", "n3"}
    silence(trio, silent_link)
    trio.advance(TIMEOUT + 1)
    assert trio.replicators["n3"].peers["n1"].their_peers == {"n3"}
    trio.write("n2", "admin/vs/during", {"state": "drain"})
    record = trio.stores["n1"].get("admin/vs/during")
    assert record is not None and record.origin == "n2"


def test_health_stops_counting_a_silent_peers_up_verdict(pair: MemoryCluster, tmp_path: Path) -> None:
    """F5's rule with `any`: n1 answers with vs2 while some connected observer sees it up.
    n1 sees it down, n2 up: available. When n2 goes silent, its last `up` stops counting
    after `heartbeat_timeout` (the server becomes unavailable, with n1's verdict only in
    the reason), though n2's connection and record are still there; heard again, it counts."""
    config = load_config(tmp_path / "config", health_config())
    n1 = pair.replicators["n1"]
    tracker = HealthTracker(config, pair.stores["n1"], pair.clock.seconds, "n1")
    tracker.observers = lambda: frozenset(["n1", *n1.live_names()])
    n1.peer_listeners.append(tracker.observers_changed)
    link = pair.connect("n1", "n2")
    pair.write("n2", "obs/vs/vs2/n2", {"up": True, "reason": "200 OK"}, ttl=90)
    pair.write("n1", "obs/vs/vs2/n1", {"up": False, "reason": "connection refused"}, ttl=90)
    vs2 = config.virtual_servers["vs2"]
    assert tracker.vs_up(vs2)
    silence(pair, link)
    pair.clock.advance(TIMEOUT - 0.1)
    assert tracker.vs_up(vs2)
    pair.clock.advance(0.2)
    assert not tracker.vs_up(vs2)
    assert pair.stores["n1"].get("obs/vs/vs2/n2") is not None and n1.connected_names() == ["n2"]
    reason = tracker.snapshot.vs["vs2"].reason
    assert "n1: connection refused" in reason and "n2" not in reason
    pair.links.append(link)
    pair.settle()
    assert tracker.vs_up(vs2)
