"""The link methods (bandwidth_ratio, link_capacity, lowest_cost) at pool member and pool
level, and a link over its max_utilisation: its servers take no new clients, whatever the
method, and a new figure re-evaluates that link's servers only."""

from __future__ import annotations

import collections
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.config.load import load
from gtmcluster.config.model import Config, Prober
from gtmcluster.health.tracker import HealthTracker
from gtmcluster.lb import linkload
from gtmcluster.lb.links import bandwidth_ratio, link_capacity, lowest_cost
from gtmcluster.lb.methods import Method
from gtmcluster.lb.ranking import Candidate
from gtmcluster.node import Node
from gtmcluster.proximity.table import Measurements
from gtmcluster.state import keys
from gtmcluster.state.store import Store
from tests.support import configs
from tests.support.dnsclient import addresses, parse, query
from tests.support.lbfakes import FakeClock, context, slot
from tests.unit.test_config_links import linked


def configured(tmp_path: Path, config: dict[str, Any] | None = None) -> Config:
    return load(configs.write(tmp_path, config or linked()))


def firsts(
    method: Method, cands: Sequence[Candidate], calls: int, measurements: Any = None
) -> collections.Counter[str]:
    """How often each candidate comes first in *calls* successive rankings (one node)."""
    ctx = context()
    ctx.measurements = measurements
    out: collections.Counter[str] = collections.Counter()
    for _ in range(calls):
        out[method(cands, ctx, slot()).order[0].name] += 1
    return out


def measured(config: Config, **mbps: float) -> Measurements:
    """Measurements holding a traffic figure (in, Mbit/s; out a tenth of it) for each link named."""
    clock = FakeClock()
    store = Store("n1", clock)
    for link, used in mbps.items():
        store.put(keys.traffic(link), linkload.LinkLoad(used * 1e6, used * 1e5, "n1").value(), 30.0)
    return Measurements(store, Prober(), lambda: True)


def test_bandwidth_ratio_shares_by_configured_bandwidth(tmp_path: Path) -> None:
    """cnc 1000 Mbit/s, tel 100: ten new clients to cnc for each one to tel, spread out;
    nothing measured is needed."""
    config = configured(tmp_path)
    members = config.pools["lp"].members
    assert firsts(bandwidth_ratio, members, 110) == {"vs1": 100, "vs2": 10}
    ranking = bandwidth_ratio(members, context(), slot())
    assert ranking.scores == (("vs1", 1000.0), ("vs2", 100.0))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40))
def test_bandwidth_ratio_is_exact_over_a_cycle(tmp_path_factory: pytest.TempPathFactory, a: int, b: int) -> None:
    config = linked()
    config["links"]["cnc"]["bandwidth_mbps"] = a
    config["links"]["tel"]["bandwidth_mbps"] = b
    loaded = configured(tmp_path_factory.mktemp("ratio"), config)
    assert firsts(bandwidth_ratio, loaded.pools["lp"].members, a + b) == {"vs1": a, "vs2": b}


def test_link_capacity_shares_by_free_bandwidth(tmp_path: Path) -> None:
    """cnc 1000 Mbit/s with 600 used has 400 free, tel 100 with none used 100: 4 to 1. The
    busier direction counts (out is a tenth of in here)."""
    config = configured(tmp_path)
    members = config.pools["lp"].members
    m = measured(config, cnc=600, tel=0)
    assert firsts(link_capacity, members, 50, m) == {"vs1": 40, "vs2": 10}
    ctx = context()
    ctx.measurements = m
    ranking = link_capacity(members, ctx, slot())
    assert ranking.scores == (("vs1", 400.0), ("vs2", 100.0))
    # tel busier: 95 of 100 used -> 400:5
    assert firsts(link_capacity, members, 81, measured(config, cnc=600, tel=95)) == {"vs1": 80, "vs2": 1}


def test_link_capacity_yields_nothing_without_every_figure_or_with_no_room(tmp_path: Path) -> None:
    config = configured(tmp_path)
    members = config.pools["lp"].members
    for m, note in (
        (measured(config), "no traffic figure for link cnc, tel yet"),
        (measured(config, cnc=10), "no traffic figure for link tel yet"),
        (measured(config, cnc=1000, tel=150), "no link has bandwidth free"),
    ):
        ctx = context()
        ctx.measurements = m
        ranking = link_capacity(members, ctx, slot())
        assert ranking.order == () and ranking.note == note
    ctx = context()
    assert link_capacity(members, ctx, slot()).note == "no measurements on this node"
    ctx.measurements = Measurements(Store("n1", FakeClock()), Prober(), lambda: False)
    assert link_capacity(members, ctx, slot()).note.startswith("not ready")


def test_lowest_cost_takes_the_cheapest_link_and_ties_in_turn(tmp_path: Path) -> None:
    config = configured(tmp_path)
    members = config.pools["lp"].members
    ctx = context()
    ranking = lowest_cost(members, ctx, slot())
    assert [c.name for c in ranking.order] == ["vs2", "vs1"] and not ctx.varies  # tel costs 1, cnc 2
    assert ranking.scores == (("vs2", 1.0), ("vs1", 2.0))
    same = linked(cost=3)
    equal = configured(tmp_path / "equal", same).pools["lp"].members
    assert firsts(lowest_cost, equal, 10) == {"vs1": 5, "vs2": 5}


def test_at_pool_level_a_pool_counts_its_links(tmp_path: Path) -> None:
    """A pool's bandwidth is the sum over its links (each once), its free bandwidth too, its
    cost its cheapest link's."""
    raw = linked()
    raw["pools"]["both"] = {"members": ["vs1", "vs2"]}
    raw["pools"]["cnc-only"] = {"members": ["vs1"]}
    raw["wideips"]["links.example.test"] = {"pools": ["both", "cnc-only"], "pool_lb": "bandwidth_ratio"}
    config = configured(tmp_path, raw)
    refs = next(w for w in config.wideips.values() if w.name == "links.example.test").pools
    assert bandwidth_ratio(refs, context(), slot()).scores == (("both", 1100.0), ("cnc-only", 1000.0))
    ctx = context()
    ctx.measurements = measured(config, cnc=900, tel=50)
    assert link_capacity(refs, ctx, slot()).scores == (("both", 150.0), ("cnc-only", 100.0))
    assert lowest_cost(refs, context(), slot()).scores == (("both", 1.0), ("cnc-only", 2.0))


# -- max_utilisation -------------------------------------------------------------------------


def tracked(tmp_path: Path) -> tuple[HealthTracker, Store, Config]:
    raw = linked()
    raw["virtual_servers"]["vs3"]["link"] = "tel"
    raw["virtual_servers"]["vs1-6"]["link"] = "cnc"
    config = configured(tmp_path, raw)
    clock = FakeClock()
    store = Store("n1", clock)
    return HealthTracker(config, store, clock, "n1"), store, config


def test_a_link_over_its_max_utilisation_takes_no_new_clients(tmp_path: Path) -> None:
    """cnc at 93% of 1000 Mbit/s (max 90%): its servers serve clients held by persistence
    only, with the reason; back under, they take new clients again. tel (no max) never."""
    tracker, store, config = tracked(tmp_path)
    vs1 = config.virtual_servers["vs1"]
    assert tracker.vs_up(vs1)
    store.put(keys.traffic("cnc"), {"bps_in": 930_000_000, "bps_out": 5, "by": "n1"}, 30.0)
    status = tracker.snapshot.vs["vs1"]
    assert (status.available, status.serving) == (False, True)
    assert status.reason == "link cnc at 93% of 1000 Mbps (max 90%): only clients held by persistence"
    assert tracker.snapshot.links["cnc"].busy == "link cnc at 93% of 1000 Mbps (max 90%)"
    assert not tracker.vs_up(vs1) and tracker.vs_serving(vs1)
    assert tracker.vs_up(config.virtual_servers["vs2"])
    store.put(keys.traffic("cnc"), {"bps_in": 10, "bps_out": 900_000_000, "by": "n1"}, 30.0)  # exactly 90%
    assert tracker.vs_up(vs1)
    store.put(keys.traffic("tel"), {"bps_in": 10**12, "bps_out": 0, "by": "n1"}, 30.0)
    assert tracker.vs_up(config.virtual_servers["vs2"])  # no max_utilisation on tel


def test_the_figure_expiring_lifts_the_limit(tmp_path: Path) -> None:
    """Nobody renews the figure (the readers stopped): when it expires, the link is judged
    by its health alone again."""
    tracker, store, config = tracked(tmp_path)
    store.put(keys.traffic("cnc"), {"bps_in": 990_000_000, "bps_out": 0, "by": "n1"}, 30.0)
    assert not tracker.vs_up(config.virtual_servers["vs1"])
    clock = store.clock
    assert isinstance(clock, FakeClock)
    clock.advance(31)
    store.expire()
    assert tracker.vs_up(config.virtual_servers["vs1"])


def test_a_new_figure_re_evaluates_that_links_servers_only(tmp_path: Path) -> None:
    """A figure for cnc evaluates cnc and its two servers, not tel's or the others; a figure
    for a link without max_utilisation evaluates nothing."""
    tracker, store, _ = tracked(tmp_path)
    before = tracker.evaluations
    store.put(keys.traffic("cnc"), {"bps_in": 950_000_000, "bps_out": 0, "by": "n1"}, 30.0)
    tracker.settle()
    assert tracker.evaluations - before == 3  # cnc, vs1, vs1-6
    before = tracker.evaluations
    store.put(keys.traffic("tel"), {"bps_in": 95_000_000, "bps_out": 0, "by": "n1"}, 30.0)
    tracker.settle()
    assert tracker.evaluations == before


def test_a_figure_of_another_shape_counts_for_nothing(tmp_path: Path) -> None:
    tracker, store, config = tracked(tmp_path)
    for value in ({"bps_in": "lots", "bps_out": 0}, {"bps_in": -1, "bps_out": 0}, {"bps_out": 10**12}):
        store.put(keys.traffic("cnc"), value, 30.0)
        assert tracker.vs_up(config.virtual_servers["vs1"]), value


# -- through a node ----------------------------------------------------------------------------


def linked_node(tmp_path: Path) -> Node:
    """A node answering links.example.test from pool lp (link_capacity, then
    global_availability), with persistence."""
    raw = linked()
    raw["pools"]["lp"]["load_balancing"] = {"preferred": "link_capacity", "alternate": "global_availability"}
    raw["wideips"]["links.example.test"] = {"pools": ["lp"], "persistence": {"ttl": 600, "ipv4_prefix": 24}}
    n = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: 1000.0, rng=random.Random(5))
    n.ready = True
    return n


def ask(n: Node, source: str) -> list[str]:
    reply = n.responder.handle(query("links.example.test"), source)
    assert reply is not None
    return addresses(parse(reply))


def figure(n: Node, link: str, mbps: float) -> None:
    n.store.put(keys.traffic(link), linkload.LinkLoad(mbps * 1e6, 0, "n1").value(), 30.0)


def test_through_a_node_the_chain_moves_on_until_measured_and_a_full_link_keeps_only_held_clients(
    tmp_path: Path,
) -> None:
    n = linked_node(tmp_path)
    # no figures: link_capacity yields nothing, global_availability answers vs1 (cnc)
    assert ask(n, "198.18.1.1") == ["10.0.1.1"]
    figure(n, "cnc", 100)  # 900 Mbit/s free
    figure(n, "tel", 40)  # 60 free: 15 to 1
    seen = collections.Counter(ask(n, f"198.18.{i}.1")[0] for i in range(2, 34))
    assert seen == {"10.0.1.1": 30, "10.0.2.1": 2}, seen
    # cnc full (95% of 1000): new clients go to tel; the client held on cnc keeps it
    figure(n, "cnc", 950)
    assert [ask(n, f"198.18.{i}.1")[0] for i in range(40, 44)] == ["10.0.2.1"] * 4
    assert ask(n, "198.18.1.1") == ["10.0.1.1"]  # held by persistence (198.18.1.0/24)
