"""Per-object statistics (`gtmcluster.runtime.objectstats`): a real node answers real queries, on the
general path and the fast path, and the figures per wide IP, pool and pool member say what it
answered, from which slot of the search (preferred, alternate, fallback, last resort, failure
response, persistence), with the drops and returns to the zone."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.fanout.feed import add_counts, take_counts
from gtmcluster.node import Node
from gtmcluster.runtime.objectstats import object_stats
from gtmcluster.runtime.stats import QueryStats
from tests.support import configs
from tests.support.twins import Clock, make_query

WIDEIP = "gslb.example.test"
R1 = "127.0.1.9"  # region r1: topology prefers DC1 (vs1)
NOWHERE = "192.0.2.55"  # in no region: with the "any" record gone no topology record matches


def a_node(tmp_path: Path, mutate: Callable[[dict[str, Any]], None] | None = None) -> tuple[Node, FastPath]:
    raw = configs.base()
    if mutate:
        mutate(raw)
    node = Node(load(configs.write(tmp_path, raw)), "n1", clock=Clock(), rng=random.Random(7))
    node.ready = True
    return node, FastPath(node.responder)


def ask(fast: FastPath, times: int, source: str = R1, qtype: int = 1) -> None:
    for i in range(times):
        fast.handle(make_query(WIDEIP, qtype, qid=i), source)


def disable(node: Node, *servers: str) -> None:
    for name in servers:
        node.store.put(f"admin/vs/{name}", {"state": "disabled"})


def test_answers_count_for_the_wide_ip_its_pool_and_the_member_on_both_paths(tmp_path: Path) -> None:
    node, fast = a_node(tmp_path)
    ask(fast, 7)  # the first by the general path, the others from the kept decision
    ask(fast, 2, qtype=28)
    assert node.stats.kept_hits >= 6
    figures = object_stats(node.stats)
    w = figures["wideips"][WIDEIP]
    assert w["requests"] == 9 and w["types"] == {"A": 7, "AAAA": 2}
    assert w["answered"] == 9 and w["slots"] == {"preferred": 9} and w["methods"] == {"topology": 9}
    assert w["fallbacks"] == w["persistence_hits"] == w["dropped"] == w["returned_to_dns"] == 0
    assert figures["pools"]["p"] == {
        "answered": 7,
        "slots": {"preferred": 7},
        "methods": {"topology": 7},
        "members": {"vs1": {"answered": 7, "slots": {"preferred": 7}}},
    }
    assert figures["pools"]["p6"]["members"] == {"vs1-6": {"answered": 2, "slots": {"preferred": 2}}}


def test_alternate_fallback_and_last_resort_answers_are_fallbacks(tmp_path: Path) -> None:
    def chain(raw: dict[str, Any]) -> None:
        raw["topology"] = [r for r in raw["topology"] if r["ldns"] != "any"]
        raw["pools"]["p"]["load_balancing"] = {
            "preferred": "topology",
            "alternate": "global_availability",
            "fallback": "fallback_ip",
        }
        raw["pools"]["p"]["fallback_ip"] = ["192.0.2.200"]
        raw["virtual_servers"]["spare"] = {"address": "10.0.9.9", "datacenter": "DC3"}
        raw["pools"]["spare"] = {"members": ["spare"]}
        raw["wideips"][WIDEIP]["last_resort_pool"] = "spare"

    node, fast = a_node(tmp_path, chain)
    ask(fast, 3, source=R1)  # topology: vs1
    ask(fast, 2, source=NOWHERE)  # no record matches: the alternate's first available, vs1
    disable(node, "vs1", "vs2", "vs3")
    ask(fast, 1, source=R1)  # no member left: the fallback's address, regardless of health
    w = object_stats(node.stats)["wideips"][WIDEIP]
    assert w["slots"] == {"preferred": 3, "alternate": 2, "fallback": 1}
    assert w["fallbacks"] == 3
    pool = object_stats(node.stats)["pools"]["p"]
    assert pool["methods"] == {"topology": 3, "global_availability": 2, "fallback_ip": 1}
    assert pool["members"] == {"vs1": {"answered": 5, "slots": {"preferred": 3, "alternate": 2}}}

    def no_fallback_ip(raw: dict[str, Any]) -> None:
        chain(raw)
        del raw["pools"]["p"]["fallback_ip"]
        raw["pools"]["p"]["load_balancing"]["fallback"] = "none"

    node2, fast2 = a_node(tmp_path / "no-fallback-ip", no_fallback_ip)
    disable(node2, "vs1", "vs2", "vs3")
    ask(fast2, 2)
    figures = object_stats(node2.stats)
    assert figures["wideips"][WIDEIP]["slots"] == {"last_resort": 2}
    assert figures["pools"]["spare"]["members"] == {"spare": {"answered": 2, "slots": {"last_resort": 2}}}


def test_persistence_hits_drops_and_returns_to_the_zone(tmp_path: Path) -> None:
    def persistent(raw: dict[str, Any]) -> None:
        raw["wideips"][WIDEIP]["persistence"] = {"ttl": 600}
        raw["wideips"][WIDEIP]["failure_response"] = "drop"

    node, fast = a_node(tmp_path, persistent)
    ask(fast, 4)
    w = object_stats(node.stats)["wideips"][WIDEIP]
    assert w["slots"] == {"preferred": 1, "persistence": 3} and w["persistence_hits"] == 3
    node.store.put("admin/wideip/" + WIDEIP, {"state": "disabled"})
    ask(fast, 2)  # a disabled wide IP: its failure response, for every client
    w = object_stats(node.stats)["wideips"][WIDEIP]
    assert w["dropped"] == 2 and w["requests"] == 6 and w["answered"] == 4

    node2, fast2 = a_node(tmp_path / "rtd")
    disable(node2, "vs1", "vs2", "vs3")
    ask(fast2, 3)  # no member: return_to_dns, the static zone answers
    w = object_stats(node2.stats)["wideips"][WIDEIP]
    assert w["returned_to_dns"] == 3 and w["answered"] == 0 and w["requests"] == 3


def test_one_wide_ip_only(tmp_path: Path) -> None:
    def two(raw: dict[str, Any]) -> None:
        raw["pools"]["q"] = {"members": ["vs2"]}
        raw["wideips"]["other.example.test"] = {"pools": ["q"]}

    node, fast = a_node(tmp_path, two)
    ask(fast, 2)
    fast.handle(make_query("other.example.test"), R1)
    figures = object_stats(node.stats, "other.example.test")
    assert list(figures["wideips"]) == ["other.example.test"] and list(figures["pools"]) == ["q"]
    assert figures["pools"]["q"]["members"]["vs2"]["answered"] == 1


TALLIES = st.tuples(
    st.sampled_from(["a.example", "b.example"]),
    st.sampled_from(["", "p", "q"]),
    st.sampled_from(["preferred", "alternate", "fallback", "last_resort", "failure_response", "persistence"]),
    st.sampled_from(["topology", "round_robin", "persistence"]),
    st.lists(st.sampled_from(["vs1", "vs2", "vs3"]), max_size=2, unique=True).map(tuple),
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(TALLIES, st.integers(1, 1000), max_size=20), st.integers(0, 3))
def test_the_folds_add_up_and_survive_a_workers_hand_over(counts: dict[Any, int], split: int) -> None:
    """Whatever was counted: every wide IP's slots add up to its answers, fallbacks and
    persistence hits are their slots, a pool's answers are its wide IPs' answers through it,
    a member's are those naming it; and counts handed over by a worker add up the same."""
    node, worker = QueryStats(), QueryStats()
    for i, (tally, n) in enumerate(counts.items()):
        (worker if i % 4 < split else node).answered[tally] += n
    add_counts(node, take_counts(worker))
    figures = object_stats(node)
    for name, w in figures["wideips"].items():
        mine = {t: n for t, n in counts.items() if t[0] == name}
        assert w["answered"] == sum(mine.values()) == sum(w["slots"].values()) == sum(w["methods"].values())
        assert w["persistence_hits"] == sum(n for t, n in mine.items() if t[2] == "persistence")
        assert w["fallbacks"] == sum(n for t, n in mine.items() if t[2] not in ("preferred", "persistence"))
    for pool, p in figures["pools"].items():
        assert p["answered"] == sum(n for t, n in counts.items() if t[1] == pool)
        for member, m in p["members"].items():
            assert m["answered"] == sum(n for t, n in counts.items() if t[1] == pool and member in t[4])
    assert "" not in figures["pools"]
