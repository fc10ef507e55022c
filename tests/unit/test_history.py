"""The node's last hour for the dashboard's graphs (`gtmcluster.history`), on a fake clock:
queries per second per wide IP and answers per second per data center from real answers
(the responder), a ring of a fixed number of samples, the busiest wide IPs kept and the
rest summed, failovers and admin changes on the timeline, the median RTT of the newest
paths per data center; the workers' counts carrying the answers; and GET /api/v1/history
on the node's real routes."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.api import admin as api_admin
from gtmcluster.config.load import load
from gtmcluster.fanout.feed import add_counts, take_counts
from gtmcluster.history import OTHER, History
from gtmcluster.lb.context import Client
from gtmcluster.node import Node
from gtmcluster.nodeservice import NodeService
from gtmcluster.runtime.stats import QueryStats
from gtmcluster.service import Sockets, make_service
from gtmcluster.state import keys
from gtmcluster.state.record import Record, Version
from tests.support import configs
from tests.support.dnsclient import addresses, parse, query
from tests.unit.test_api_admin import TOKEN, ask

WIDEIP = "gslb.example.test"
#: an LDNS of region r1: topology sends it to DC1
R1 = "198.51.100.53"


def node_on(tmp_path: Path, clock: Clock, raw: dict[str, Any] | None = None) -> Node:
    node = Node(load(configs.write(tmp_path, raw or configs.base())), "n1", clock=clock.seconds, rng=random.Random(1))
    node.ready = True
    return node


def started(node: Node, clock: Clock, points: int = 360) -> History:
    history = History(node, clock, interval=10.0, points=points)
    history.startService()
    return history


def ask_dns(node: Node, name: str, times: int, source: str = R1) -> list[str]:
    answer: list[str] = []
    for i in range(times):
        reply = node.responder.handle(query(name, qid=i), source)
        assert reply is not None
        answer = addresses(parse(reply))
    return answer


def test_queries_and_answers_per_second_from_real_answers(tmp_path: Path) -> None:
    """30 queries in 10 s are 3 per second for the wide IP and for DC1 (whose vs1 answered);
    an idle interval after them is 0; the other data centers show 0 throughout."""
    clock = Clock()
    node = node_on(tmp_path, clock)
    history = started(node, clock)
    assert ask_dns(node, WIDEIP, 30) == ["10.0.1.1"]
    clock.advance(10)
    clock.advance(10)
    answer = history.to_json()
    assert answer["times"] == [10.0, 20.0]
    assert answer["queries_per_second"] == {WIDEIP: [3.0, 0.0]}
    assert answer["answers_per_second"] == {"DC1": [3.0, 0.0], "DC2": [0.0, 0.0], "DC3": [0.0, 0.0]}
    assert answer["wideips_with_queries"] == 1


def test_the_ring_keeps_the_newest_points_only(tmp_path: Path) -> None:
    """With 6 points, 20 intervals later the samples are the last 6."""
    clock = Clock()
    node = node_on(tmp_path, clock)
    history = started(node, clock, points=6)
    for _ in range(20):
        ask_dns(node, WIDEIP, 1)
        clock.advance(10)
    answer = history.to_json()
    assert answer["times"] == [150.0, 160.0, 170.0, 180.0, 190.0, 200.0]
    assert answer["queries_per_second"][WIDEIP] == [0.1] * 6
    assert len(history.samples) == 6


def test_the_busiest_wide_ips_are_shown_and_the_rest_summed(tmp_path: Path) -> None:
    """25 wide IPs, w<i> asked i times: a sample keeps the 20 busiest and sums the other 5
    as (other); the API shows the 10 busiest and sums every other as (other)."""
    raw = configs.base()
    for i in range(1, 26):
        raw["wideips"][f"w{i}.example.test"] = {"type": ["A"], "pools": ["p"]}
    clock = Clock()
    node = node_on(tmp_path, clock, raw)
    history = started(node, clock)
    for i in range(1, 26):
        ask_dns(node, f"w{i}.example.test", i)
    clock.advance(10)
    sample = history.samples[-1]
    assert len(sample.queries) == 21
    assert sample.queries[OTHER] == pytest.approx(sum(range(1, 6)) / 10)
    shown = history.to_json(shown=10)["queries_per_second"]
    assert set(shown) == {f"w{i}.example.test" for i in range(16, 26)} | {OTHER}
    assert shown["w25.example.test"] == [2.5]
    assert shown[OTHER] == [pytest.approx(sum(range(1, 16)) / 10)]


def test_an_admin_change_and_the_failovers_it_causes_are_on_the_timeline(tmp_path: Path) -> None:
    """Disabling DC1 is one admin event (who and why) and a failover event for each of its
    virtual servers; its answers move to DC3 in the next sample."""
    clock = Clock()
    node = node_on(tmp_path, clock)
    history = started(node, clock)
    clock.advance(5)
    api_admin.change(node, "datacenter", "DC1", "disable", by="alice", reason="maintenance")
    assert ask_dns(node, WIDEIP, 10) == ["10.0.3.1"]
    clock.advance(5)
    answer = history.to_json()
    events = [(e["at"], e["kind"], e["text"]) for e in answer["events"]]
    assert (5.0, "admin", "data center DC1 disabled by alice (maintenance)") in events
    failovers = sorted(text for _, kind, text in events if kind == "failover")
    assert failovers == [
        "virtual server vs1 unavailable: data center DC1 disabled by alice (maintenance)",
        "virtual server vs1-6 unavailable: data center DC1 disabled by alice (maintenance)",
    ]
    assert answer["answers_per_second"]["DC3"] == [1.0]
    assert answer["answers_per_second"]["DC1"] == [0.0]


def test_events_older_than_the_window_are_not_shown(tmp_path: Path) -> None:
    """An event is shown for the hour the samples cover, then no more."""
    clock = Clock()
    node = node_on(tmp_path, clock)
    history = started(node, clock, points=6)
    api_admin.change(node, "virtual-server", "vs2", "drain", by="bob")
    assert sorted(e["kind"] for e in history.to_json()["events"]) == ["admin", "failover"]
    clock.advance(61)
    assert history.to_json()["events"] == []


def test_an_admin_change_from_a_peer_is_placed_when_it_was_made(tmp_path: Path) -> None:
    """A replicated admin record that arrives late is on the timeline at the time its
    operator made it (the record's "at"), not when it arrived."""
    clock = Clock()
    node = node_on(tmp_path, clock)
    history = started(node, clock)
    clock.advance(30)
    value = {"state": "drain", "by": "carol", "reason": "", "at": 12.0, "node": "n2"}
    node.store.merge(Record("admin/datacenter/DC2", value, Version(12_000, 0, "n2"), None, 12.0))
    admin_events = [e for e in history.to_json()["events"] if e["kind"] == "admin"]
    assert admin_events == [{"at": 12.0, "kind": "admin", "text": "data center DC2 draining by carol"}]


def _path(rtt_us: int) -> dict[str, Any]:
    return {
        "rtt": rtt_us,
        "last_rtt": rtt_us,
        "hops": 0,
        "completion": 100,
        "protocol": "dns",
        "failures": 0,
        "window": "",
        "by": "n1",
    }


def test_rtt_per_datacenter_is_the_median_of_the_newest_paths(tmp_path: Path) -> None:
    """Paths to DC2 of 10, 20 and 90 ms give a median of 20 ms; DC3's never-answered path
    (RTT 0) is no point; before any path a data center has no series."""
    clock = Clock()
    node = node_on(tmp_path, clock)
    history = started(node, clock)
    clock.advance(10)
    for i, rtt in enumerate((10_000, 20_000, 90_000)):
        node.store.put(keys.path(f"192.0.2.{i}", "DC2"), _path(rtt))
    node.store.put(keys.path("192.0.2.9", "DC3"), _path(0))
    clock.advance(10)
    rtt = history.to_json()["rtt_ms"]
    assert rtt == {"DC2": [None, 20.0]}


def test_stopped_history_samples_nothing(tmp_path: Path) -> None:
    """After stopService no more samples are taken nor events kept."""
    clock = Clock()
    node = node_on(tmp_path, clock)
    history = started(node, clock)
    clock.advance(10)
    history.stopService()
    api_admin.change(node, "virtual-server", "vs2", "disable")
    clock.advance(100)
    assert len(history.samples) == 1 and not history.events


def test_a_workers_counts_carry_its_answers() -> None:
    """The answers a worker counted reach the node's counters (and start again from 0)."""
    worker, node = QueryStats(), QueryStats()
    one = ("www.example.test", "web", "preferred", "topology", ("vs1",))
    two = ("www.example.test", "web", "alternate", "round_robin", ("vs2", "vs3"))
    worker.answered[one] += 4
    worker.answered[two] += 1
    add_counts(node, take_counts(worker))
    assert dict(node.answered) == {one: 4, two: 1}
    assert not worker.answered


def a_service(tmp_path: Path, token_for_reads: bool) -> NodeService:
    raw = configs.base()
    raw["api"] = {"token_for_reads": token_for_reads}
    top = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    top.snapshots = None
    top.node.ready = True
    return top


def test_the_api_serves_the_history(tmp_path: Path) -> None:
    """GET /api/v1/history: the samples the node took, 200 on loopback as other reads."""
    service = a_service(tmp_path, token_for_reads=False)
    assert service.history is not None
    service.history.startService()
    node = service.node
    wideip = next(iter(node.config.wideips.values()))
    for _ in range(20):
        node.decide(wideip, 1, Client.from_ldns(ipaddress.ip_address(R1)))
    service.reactor.advance(10)
    code, answer = ask(service, "GET", "/api/v1/history", token=None)
    assert code == 200
    assert answer["node"] == "n1" and answer["interval"] == 10.0 and answer["window"] == 3600.0
    assert answer["answers_per_second"]["DC1"] == [2.0]


def test_the_history_needs_the_token_where_reads_do(tmp_path: Path) -> None:
    """Where reads need the token (api.token_for_reads), the history does: refused without
    it or with a wrong one, as /api/v1/status is; served with it."""
    service = a_service(tmp_path, token_for_reads=True)
    for token in (None, "wrong-token-0123456789"):
        code, _ = ask(service, "GET", "/api/v1/history", token=token)
        assert code in (401, 403)
        assert code == ask(service, "GET", "/api/v1/status", token=token)[0]
    assert ask(service, "GET", "/api/v1/history", token=TOKEN)[0] == 200
