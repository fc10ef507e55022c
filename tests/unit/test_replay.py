"""`gtmcluster replay`: logged queries decided again before and after a change, and the
report of who moves (engine, report, rendering; configs built here, queries made directly)."""

from __future__ import annotations

import copy
import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.config.model import Config
from gtmcluster.dns import wire
from gtmcluster.dnsdata import names
from gtmcluster.querylog.dnstap import Decided
from gtmcluster.replay import render, report
from gtmcluster.replay.engine import Disable, Replayer, replay
from gtmcluster.replay.queries import LoggedQuery
from tests.support import configs
from tests.support.lbfakes import load_config

NOW = 1_800_000_000.0
WIDEIP = "gslb.example.test"


def query(ldns: str, subnet: str | None = None, name: str = WIDEIP, qtype: int = 1, **decided: Any) -> LoggedQuery:
    """A logged query from *ldns*, with a client subnet option for *subnet*."""
    ecs = None
    if subnet is not None:
        network = ipaddress.ip_network(subnet)
        length = (network.prefixlen + 7) // 8
        ecs = wire.ClientSubnet(1, network.prefixlen, 0, network.network_address.packed[:length])
    logged = Decided(WIDEIP, **decided) if decided else None
    return LoggedQuery(NOW, ipaddress.ip_address(ldns), names.from_text(name), qtype, ecs, logged)


def moved_topology() -> dict[str, Any]:
    """The test config with region r2 sent to DC1 instead of DC2."""
    config = configs.base()
    config["topology"][1]["server"] = "datacenter DC1"
    return config


def run(base: Config, after: Config, queries: list[LoggedQuery], disables: tuple[Disable, ...] = ()) -> dict[str, Any]:
    pairs, _ = replay(queries, Replayer(base, NOW), Replayer(after, NOW, None, disables))
    about: dict[str, Any] = {
        "logs": ["q.dnstap"],
        "base": "old.yaml",
        "config": "new.yaml",
        "disabled": [str(d) for d in disables],
    }
    about |= {"state": {"snapshot": None, "note": "none"}, "time": "t", "seed": 0, "skipped": {}}
    return report.build(pairs, about)


CLIENTS = [
    query("127.0.1.5"),  # r1: DC1
    query("127.0.2.5"),  # r2: DC2
    query("127.0.2.6"),  # r2: DC2
    query("127.0.3.5"),  # no region: DC3
    query("127.0.0.1", "203.0.113.0/24"),  # a trusted resolver's client subnet in r2: DC2
    query("127.0.0.1", "198.51.100.0/24"),  # ... in r1: DC1
]


def test_a_topology_change_moves_exactly_the_clients_of_that_region(tmp_path: Path) -> None:
    base = load_config(tmp_path / "old", configs.base())
    new = load_config(tmp_path / "new", moved_topology())
    found = run(base, new, CLIENTS)
    assert [(m["client"], m["from"], m["to"], m["from_members"], m["to_members"]) for m in found["moved"]] == [
        ("127.0.0.1 ecs 203.0.113.0/24", "DC2", "DC1", "vs2", "vs1"),
        ("127.0.2.5", "DC2", "DC1", "vs2", "vs1"),
        ("127.0.2.6", "DC2", "DC1", "vs2", "vs1"),
    ]
    shares = found["wideips"][WIDEIP]["datacenters"]
    assert {dc: (s["before"], s["after"]) for dc, s in shares.items()} == {
        "DC1": (2, 5),
        "DC2": (3, 0),
        "DC3": (1, 1),
    }
    assert shares["DC1"]["after_share"] == round(5 / 6, 4)
    assert found["now_failing"] == [] and found["now_falling_back"] == []
    text = render.to_text(found)
    assert "  127.0.2.5: DC2 (vs2) -> DC1 (vs1)" not in text  # (members are listed apart)
    assert f"  {WIDEIP}  127.0.2.5: DC2 -> DC1  (1 query)" in text


@pytest.fixture(scope="module")
def region_configs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Config, Config]:
    """The test config, and the one with region r2 moved to DC1."""
    root = tmp_path_factory.mktemp("regions")
    return load_config(root / "old", configs.base()), load_config(root / "new", moved_topology())


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(1, 254)), min_size=1, max_size=20))
def test_only_clients_of_the_moved_region_move(
    region_configs: tuple[Config, Config], hosts: list[tuple[int, int]]
) -> None:
    """Whatever clients ask, those in r2 (127.0.2.0/24) and only those move, DC2 -> DC1."""
    base, new = region_configs
    asked = [query(f"127.0.{third}.{fourth}") for third, fourth in hosts]
    found = run(base, new, asked)
    expected = sorted({f"127.0.2.{fourth}" for third, fourth in hosts if third == 2})
    assert [m["client"] for m in found["moved"]] == expected
    assert all((m["from"], m["to"]) == ("DC2", "DC1") for m in found["moved"])
    # nothing changes without a change
    assert run(base, base, asked)["moved"] == []


def test_disabling_a_datacenter_moves_its_share_to_the_others(tmp_path: Path) -> None:
    config = load_config(tmp_path, configs.base())
    found = run(config, config, CLIENTS, (Disable("datacenter", "DC2"),))
    shares = found["wideips"][WIDEIP]["datacenters"]
    # r2's clients had DC2 (score 100); with DC2 out the "any" rule's DC3 is what is left
    assert {dc: (s["before"], s["after"]) for dc, s in shares.items()} == {
        "DC1": (2, 2),
        "DC2": (3, 0),
        "DC3": (1, 4),
    }
    assert sorted((m["client"], m["to"]) for m in found["moved"]) == [
        ("127.0.0.1 ecs 203.0.113.0/24", "DC3"),
        ("127.0.2.5", "DC3"),
        ("127.0.2.6", "DC3"),
    ]
    assert found["disabled"] == ["datacenter DC2"]


def test_a_query_that_would_now_fail_is_reported(tmp_path: Path) -> None:
    raw = configs.base()
    raw["wideips"][WIDEIP]["failure_response"] = "servfail"
    config = load_config(tmp_path, raw)
    everything = tuple(Disable("datacenter", dc) for dc in ("DC1", "DC2", "DC3"))
    found = run(config, config, [query("127.0.1.5"), query("127.0.2.5")], everything)
    assert found["now_failing"] == [
        {"after": ["failure_response servfail"], "before": ["DC1 (vs1)"], "client": "127.0.1.5", "queries": 1}
        | {"wideip": WIDEIP},
        {"after": ["failure_response servfail"], "before": ["DC2 (vs2)"], "client": "127.0.2.5", "queries": 1}
        | {"wideip": WIDEIP},
    ]
    outcomes = found["wideips"][WIDEIP]["outcomes"]
    assert outcomes["failed"] == {"before": 0, "after": 2}
    assert found["wideips"][WIDEIP]["datacenters"][report.NO_MEMBER]["after"] == 2
    assert "Queries that would now fail (2)" in render.to_text(found)


def test_a_query_that_would_now_fall_back_is_reported(tmp_path: Path) -> None:
    raw = configs.base()
    raw["pools"]["p"]["load_balancing"] = {"preferred": "topology", "fallback": "fallback_ip"}
    raw["pools"]["p"]["fallback_ip"] = ["192.0.2.200"]
    config = load_config(tmp_path, raw)
    everything = tuple(Disable("server", vs) for vs in ("vs1", "vs2", "vs3"))
    found = run(config, config, [query("127.0.1.5")], everything)
    # (fallback_ip answers from the pool's fallback slot: no member, no data center)
    assert found["now_falling_back"] == [
        {"after": ["fallback 192.0.2.200"], "before": ["DC1 (vs1)"], "client": "127.0.1.5", "queries": 1}
        | {"wideip": WIDEIP}
    ]
    assert found["now_failing"] == []


def test_the_same_input_gives_the_same_report(tmp_path: Path) -> None:
    """Round robin and random pools: rotations start from zero, the random source is seeded."""
    raw = configs.base()
    raw["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}
    raw["pools"]["q"] = {"members": ["vs1", "vs2", "vs3"], "load_balancing": {"preferred": "random"}}
    raw["wideips"]["other.example.test"] = {"pools": ["q"]}
    config = load_config(tmp_path, raw)
    changed = copy.deepcopy(raw)
    changed["pools"]["q"]["members"] = ["vs1", "vs2"]
    new = load_config(tmp_path / "new", changed)
    asked = [query(f"127.0.{i % 4}.{i}", name=n) for i in range(1, 60) for n in (WIDEIP, "other.example.test")]
    first = render.to_json(run(config, new, asked))
    second = render.to_json(run(config, new, asked))
    assert first == second
    shares = json.loads(first)["wideips"][WIDEIP]["members"]
    # round robin over three members from the same start: an even spread, before and after
    assert {m: (s["before"], s["after"]) for m, s in shares.items()} == {
        "vs1": (20, 20),
        "vs2": (20, 20),
        "vs3": (19, 19),
    }
    assert json.loads(first)["wideips"]["other.example.test"]["members"]["vs3"]["after"] == 0


def test_the_base_replay_is_compared_with_what_was_logged(tmp_path: Path) -> None:
    config = load_config(tmp_path, configs.base())
    asked = [
        query("127.0.1.5", pool="p", slot="preferred", method="topology", members=("vs1",)),
        query("127.0.2.5", pool="p", slot="preferred", method="topology", members=("vs3",)),  # (vs2 now)
        query("127.0.3.5"),  # nothing logged: not compared
    ]
    found = run(config, config, asked)
    assert found["agreement"] == {
        "compared": 2,
        "agree": 1,
        "examples": [{"client": "127.0.2.5", "name": WIDEIP, "logged": "p (vs3) by topology", "replayed": "DC2 (vs2)"}],
    }


def test_queries_for_no_wide_ip_are_left_out_and_aliases_found(tmp_path: Path) -> None:
    raw = configs.base()
    raw["wideips"][WIDEIP]["aliases"] = ["other.example.test"]
    config = load_config(tmp_path, raw)
    pairs, left_out = replay(
        [query("127.0.1.5", name="www.example.test"), query("127.0.1.5", name="other.example.test")],
        Replayer(config, NOW),
        Replayer(config, NOW),
    )
    assert left_out == 1
    assert [(p.before.wideip, p.before.members) for p in pairs] == [(WIDEIP, ("vs1",))]


def test_html_report_has_an_svg_bar_per_datacenter_and_side(tmp_path: Path) -> None:
    base = load_config(tmp_path / "old", configs.base())
    new = load_config(tmp_path / "new", moved_topology())
    page = render.to_html(run(base, new, CLIENTS))
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg" class="shares"') == 1
    assert '<rect class="bar after" data-datacenter="DC1" data-share="0.8333"' in page
    assert '<rect class="bar before" data-datacenter="DC2" data-share="0.5"' in page
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # no external assets
    assert "<td>127.0.2.5</td><td>DC2</td><td>DC1</td>" in page


def test_the_text_lists_a_hundred_clients_a_section(tmp_path: Path) -> None:
    base = load_config(tmp_path / "old", configs.base())
    new = load_config(tmp_path / "new", moved_topology())
    found = run(base, new, [query(f"127.0.2.{n}") for n in range(1, 151)])
    assert len(found["moved"]) == 150
    lines = render.to_text(found).splitlines()
    start = lines.index("Clients that move (150)")
    assert [line.startswith(f"  {WIDEIP}  127.0.2.") for line in lines[start + 1 : start + 102]] == [True] * 100 + [
        False
    ]
    assert lines[start + 101] == "  ... and 50 more (all of them in --json and --html)"
