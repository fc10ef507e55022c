"""Records a member sends that their kind does not allow (state/schema.py), over real TLS
and the real protocol in memory: the peer is dropped with the reason and nothing of its
batch is merged; each refusal is counted by kind and reason. Per origin and kind, a cap on
records: the origin that writes beyond it is dropped, a relay of its records is not, and
anti-entropy leaves an origin over its cap alone rather than pulling what it would refuse
again every round."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from twisted.logger import capturedLogs

from gtmcluster.state import schema
from gtmcluster.state.record import Record, Version
from gtmcluster.sync import commands
from tests.support.cluster import Link, MemoryCluster

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def trio(tmp_path: Path) -> MemoryCluster:
    cluster = MemoryCluster(["gtm-a", "gtm-b", "gtm-c"], tmp_path)
    cluster.clock.advance(1_700_000_000)
    return cluster


def publish(cluster: MemoryCluster, link: Link, entries: list[list[Any]]) -> list[str]:
    """The dialling side of *link* sends *entries* in one Publish; the reasons the other side
    gave for dropping it (logged)."""
    batch = json.dumps(entries).encode()
    with capturedLogs() as events:
        link.client.wrappedProtocol.callRemote(commands.Publish, records=batch).addErrback(lambda _: None)
        cluster.settle()
    assert not [e for e in events if "log_failure" in e], "a traceback was logged"
    return [e["reason"] for e in events if e.get("event") == "peer_refused"]


def entry(cluster: MemoryCluster, key: str, value: Any, origin: str = "gtm-a", ttl: float | None = None) -> list[Any]:
    return [key, value, int(cluster.clock.seconds() * 1000), 0, origin, ttl, 0]


def connected(cluster: MemoryCluster, name: str) -> set[str]:
    return {peer for peer, state in cluster.replicators[name].peers.items() if state.connected}


@pytest.mark.parametrize(
    ("bad", "origin", "ttl", "reason", "counted"),
    [
        (["admin/vs/vs-a", "x"], "gtm-a", None, "the value is not a mapping", ("admin", "value")),
        (["obs/vs/vs-m/zz", []], "gtm-b", 90.0, "a verdict of 'zz' written by 'gtm-b'", ("obs", "origin")),
        (["obs/vs/vs-m/gtm-b", []], "gtm-b", 90.0, "the value is not a mapping", ("obs", "value")),
        (["zz/0", {"x": "y" * 50_000}], "gtm-a", 10 * 365 * 86400.0, "of no known kind", ("unknown", "kind")),
        (["path/203.0.113.7/DC-gtm-a", {"rtt": "fast"}], "gtm-a", 60.0, "the value has no", ("path", "value")),
    ],
)
def test_a_record_its_kind_does_not_allow_drops_the_peer_and_nothing_is_merged(
    trio: MemoryCluster, bad: list[Any], origin: str, ttl: float | None, reason: str, counted: tuple[str, str]
) -> None:
    """Issue 13's records (an admin state "x", a verdict [] under the receiving node's own
    origin, an invented kind of 50 KB for ten years), sent with a good record first: gtm-b
    drops gtm-a with the reason, merges neither, counts the refusal, and keeps gtm-c."""
    link = trio.connect("gtm-a", "gtm-b")
    trio.connect("gtm-c", "gtm-b")
    before = trio.stores["gtm-b"].digest()
    good = entry(trio, "admin/vs/vs-b", {"state": "drain", "by": "gtm-a"})
    reasons = publish(trio, link, [good, entry(trio, bad[0], bad[1], origin, ttl)])
    assert len(reasons) == 1 and reason in reasons[0], reasons
    assert connected(trio, "gtm-b") == {"gtm-c"}
    assert trio.stores["gtm-b"].digest() == before
    assert trio.stores["gtm-b"].raw(bad[0]) is None and trio.stores["gtm-b"].raw("admin/vs/vs-b") is None
    assert trio.replicators["gtm-b"].refused == {counted: 1}
    trio.write("gtm-c", "admin/vs/vs-c", {"state": "drain"})
    assert trio.stores["gtm-b"].get("admin/vs/vs-c") is not None


def test_forty_large_records_of_an_invented_kind_never_reach_the_store(trio: MemoryCluster) -> None:
    """Issue 13: 40 records of 50 KB under `zz/` with 10-year TTLs were merged (and shown in
    /metrics). Now the first batch drops the peer: nothing of them is held."""
    link = trio.connect("gtm-a", "gtm-b")
    for i in range(40):
        if link.pump.serverIO.disconnected:
            break
        publish(trio, link, [entry(trio, f"zz/{i}", {"x": "y" * 50_000}, ttl=10 * 365 * 86400.0)])
    assert "zz" not in trio.stores["gtm-b"].kinds()
    assert trio.replicators["gtm-b"].refused == {("unknown", "kind"): 1}


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    """The probe kind capped at 20 records per origin (the real cap is 100,000)."""
    cap = 20
    monkeypatch.setitem(schema.KINDS, "probe", dataclasses.replace(schema.KINDS["probe"], max_records=cap))
    return cap


def probe_request(i: int) -> str:
    return f"probe/198.18.{i // 250}.{i % 250 + 1}"


def test_an_origin_writing_beyond_its_cap_is_dropped(trio: MemoryCluster, small_cap: int) -> None:
    """gtm-a writes 25 probe requests (its own writes are not capped here: a bad member):
    gtm-b takes 20 and drops gtm-a, saying why; the refusal is counted."""
    trio.connect("gtm-a", "gtm-b")
    with capturedLogs() as events:
        for i in range(25):
            trio.stores["gtm-a"].put(probe_request(i), {"by": "gtm-a"}, ttl=60)
        trio.settle()
    reasons = [e["reason"] for e in events if e.get("event") == "peer_refused"]
    assert any(f"wrote more than {small_cap} probe records" in r for r in reasons), reasons
    assert trio.stores["gtm-b"].held_by("gtm-a", "probe") == small_cap
    assert trio.replicators["gtm-b"].refused[("probe", "count")] >= 1
    assert "gtm-a" not in connected(trio, "gtm-b")


def test_a_relay_of_an_origin_over_its_cap_is_not_dropped_and_not_pulled_from_again(
    trio: MemoryCluster, small_cap: int
) -> None:
    """gtm-a wrote more probe requests than the cap (a bad member): gtm-c holds 20 of them
    (living a minute), gtm-b 5 others. When gtm-b and gtm-c meet, each refuses what the
    other relays beyond the cap but keeps the connection (a relay is not at fault), logs
    once, and its later reconciliations leave gtm-a alone (they would pull and refuse the
    same records every round). Once the 20 have expired, gtm-a is reconciled again and the
    stores agree."""
    c = trio.stores["gtm-c"]
    now = trio.clock.seconds()
    old = [
        Record(probe_request(100 + i), {"by": "gtm-a"}, Version(int(now * 1000), i, "gtm-a"), 60.0, now)
        for i in range(small_cap)
    ]
    assert c.load(old) == small_cap
    trio.connect("gtm-a", "gtm-b")
    for i in range(5):
        trio.stores["gtm-a"].put(probe_request(i), {"by": "gtm-a"}, ttl=300)
    trio.settle()
    trio.links[0].cut()  # gtm-a goes away
    with capturedLogs() as events:
        trio.connect("gtm-b", "gtm-c")
        for _ in range(3):
            trio.replicators["gtm-c"].anti_entropy.reconcile_all()
            trio.replicators["gtm-b"].anti_entropy.reconcile_all()
            trio.settle()
    for name in ("gtm-b", "gtm-c"):
        replicator = trio.replicators[name]
        assert replicator.refused == {("probe", "count"): 5}, name  # once, none pulled again
        assert replicator.capped == {"gtm-a": {"probe"}}
        assert trio.stores[name].held_by("gtm-a", "probe") == small_cap
    assert connected(trio, "gtm-c") == {"gtm-b"}
    capped = [e["log_namespace"] for e in events if e.get("event") == "origin_capped"]
    assert len(capped) == 2, capped  # once on each side
    assert c.get(probe_request(0)) is None
    trio.advance(61)  # the 20 expire (heartbeats keep the connection)
    for store in trio.stores.values():
        store.expire()
    trio.replicators["gtm-c"].anti_entropy.reconcile_all()
    trio.settle()
    assert trio.replicators["gtm-c"].capped == {}
    assert c.get(probe_request(0)) is not None
    assert c.digest() == trio.stores["gtm-b"].digest()
