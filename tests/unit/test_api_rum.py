"""GET /api/v1/rum and `gtmcluster rum` (issue 36): the client subnets most recently written
first, at most `limit` of them (the walk is bounded by the limit, not by the table), the
LDNS populations, one population with its subnets, one subnet; bad query parameters are a
clear 400 (JSON through the API's server: test_api_any_input covers every route); and
whatever a node answers that passes the command's spec renders."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.api import rum
from gtmcluster.api.server import ApiError
from gtmcluster.cli import rum as rumcli
from gtmcluster.cli.shape import Malformed, check
from gtmcluster.cli.terminal import printable
from gtmcluster.config.load import load
from gtmcluster.node import Node
from gtmcluster.proximity.clients import merge_sample
from gtmcluster.state import keys
from gtmcluster.state.record import Record
from tests.support import configs
from tests.support.hostileapi import CONTROLS, mutated

LDNS = "198.18.0.53"


def node(tmp_path: Path) -> Node:
    raw = configs.base()
    raw["rum"] = {"targets": {"DC1": "https://dc1.example.net/o", "DC2": "https://dc2.example.net/o"}}
    now = [1000.0]
    n = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: now[0], rng=random.Random(3))
    n.store.clock = lambda: now[0]
    return n


def subnet(i: int) -> str:
    return f"10.{i // 256}.{i % 256}.0/24"


def measured(n: Node, count: int) -> None:
    """*count* client subnets, each measured from DC1 and DC2, in order."""
    for i in range(count):
        for dc, us in (("DC1", 20_000 + i), ("DC2", 80_000 + i)):
            n.store.put(keys.client(subnet(i), dc), merge_sample(None, us, "rum", "n1"), ttl=3600)


def population(n: Node, ldns: str, counts: dict[str, int]) -> None:
    value = {
        "subnets": {keys.subnet_text(s): c for s, c in counts.items()},
        "rtt": {"DC1": 21_000, "DC2": 79_000},
        "n": sum(counts.values()),
    }
    n.store.put(keys.population(ldns), value, ttl=3600)


def test_the_newest_subnets_come_first_at_most_limit(tmp_path: Path) -> None:
    n = node(tmp_path)
    measured(n, 300)
    table = rum.rum_table(n, {})
    assert table["limit"] == rum.LIMIT and table["truncated"]
    assert [s["subnet"] for s in table["subnets"]][:3] == [subnet(299), subnet(298), subnet(297)]
    assert len(table["subnets"]) == rum.LIMIT
    first = table["subnets"][0]
    assert first["datacenters"] == {
        "DC1": {"rtt_us": 20_299, "samples": 1, "source": "rum", "by": "n1", "age": 0.0},
        "DC2": {"rtt_us": 80_299, "samples": 1, "source": "rum", "by": "n1", "age": 0.0},
    }
    assert table["held"] == {"client_figures": 600, "populations": 0}
    # a subnet measured again is the newest
    n.store.put(keys.client(subnet(5), "DC1"), merge_sample(None, 19_000, "probe", "n2"), ttl=3600)
    again = rum.rum_table(n, {"limit": "2"})
    assert [s["subnet"] for s in again["subnets"]] == [subnet(5), subnet(299)]
    assert again["subnets"][0]["datacenters"]["DC1"]["source"] == "probe"


def test_the_walk_is_bounded_by_the_limit_not_the_table(tmp_path: Path) -> None:
    n = node(tmp_path)
    measured(n, 2000)
    looked: list[str] = []

    def skip(record: Record) -> bool:
        looked.append(record.key)
        return record.key.endswith("/DC1")

    held = n.store.newest("client", 10, skip)
    assert len(held) == 10 and len(looked) <= 21  # (each subnet's two records, and one more)


def test_an_exact_limit_is_not_truncated(tmp_path: Path) -> None:
    n = node(tmp_path)
    measured(n, 5)
    population(n, LDNS, {subnet(0): 3})
    table = rum.rum_table(n, {"limit": "5"})
    assert len(table["subnets"]) == 5 and not table["truncated"]
    assert [p["ldns"] for p in table["populations"]] == [LDNS]
    assert rum.rum_table(n, {"limit": "4"})["truncated"]


def test_one_population_with_its_subnets_and_one_subnet(tmp_path: Path) -> None:
    n = node(tmp_path)
    measured(n, 3)
    population(n, LDNS, {subnet(0): 3, subnet(2): 7, "192.0.2.0/24": 1})
    (pop,) = rum.rum_table(n, {})["populations"]
    assert pop == {"ldns": LDNS, "subnets": 3, "n": 11, "rtt_us": {"DC1": 21_000, "DC2": 79_000}, "age": 0.0}
    one = rum.rum_table(n, {"ldns": LDNS})["population"]
    assert [(m["subnet"], m["count"]) for m in one["members"]] == [(subnet(2), 7), (subnet(0), 3), ("192.0.2.0/24", 1)]
    assert one["members"][0]["figures"]["datacenters"]["DC1"]["rtt_us"] == 20_002
    assert one["members"][2]["figures"] is None  # (its figures expired, or were never held here)
    assert rum.rum_table(n, {"ldns": "192.0.2.53"})["population"] is None
    assert rum.rum_table(n, {"subnet": "10.0.1.77"})["subnet"]["subnet"] == subnet(1)
    assert rum.rum_table(n, {"subnet": "10.0.9.0/24"})["subnet"] is None


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"limit": "0"}, "limit must be a whole number from 1 to 1000"),
        ({"limit": "1001"}, "limit must be"),
        ({"limit": "ten"}, "limit must be"),
        ({"limit": "-1"}, "limit must be"),
        ({"ldns": "resolver"}, "ldns 'resolver' is not an IP address"),
        ({"subnet": "10.0.0.0/8"}, "subnet 10.0.0.0/8 is wider than the /24 clients are known by"),
        ({"subnet": "2001:db8::/32"}, "wider than the /48"),
        ({"subnet": "x" * 5000}, "is not an IP address or network"),
    ],
)
def test_bad_parameters_are_a_clear_400(tmp_path: Path, args: dict[str, str], said: str) -> None:
    n = node(tmp_path)
    with pytest.raises(ApiError) as raised:
        rum.rum_table(n, args)
    assert raised.value.code == 400 and said in raised.value.message
    assert len(raised.value.message) < 200


def lines(n: Node, **args: str) -> list[str]:
    answer = rum.rum_table(n, args)
    check(answer, rumcli.TABLE)
    return rumcli.render(printable(answer)).splitlines()


def test_the_command_prints_subnets_and_populations(tmp_path: Path) -> None:
    n = node(tmp_path)
    measured(n, 2)
    population(n, LDNS, {subnet(0): 3, subnet(1): 2})
    assert lines(n) == [
        "sources client, population, ldns; held: 4 client figures (subnet x data center), 1 LDNS populations",
        "client subnets (newest first, 2 shown): RTT (samples source, by, age)",
        "  10.0.1.0/24          DC1 20.0 ms (1 rum, n1, 0 s)  DC2 80.0 ms (1 rum, n1, 0 s)",
        "  10.0.0.0/24          DC1 20.0 ms (1 rum, n1, 0 s)  DC2 80.0 ms (1 rum, n1, 0 s)",
        "LDNS populations (newest first, 1 shown):",
        f"  {LDNS:<20} 2 subnets, 5 beacons  DC1 21.0 ms  DC2 79.0 ms  (0 s)",
    ]
    assert lines(n, ldns=LDNS)[1:] == [
        "population:",
        f"  {LDNS:<20} 2 subnets, 5 beacons  DC1 21.0 ms  DC2 79.0 ms  (0 s)",
        "its client subnets (beacons tied to it):",
        "  10.0.0.0/24              3  DC1 20.0 ms (1 rum, n1, 0 s)  DC2 80.0 ms (1 rum, n1, 0 s)",
        "  10.0.1.0/24              2  DC1 20.0 ms (1 rum, n1, 0 s)  DC2 80.0 ms (1 rum, n1, 0 s)",
    ]
    assert lines(n, ldns="192.0.2.1")[1:] == ["no measured clients for that LDNS"]


def test_the_command_takes_one_of_ldns_and_subnet() -> None:
    parser = argparse.ArgumentParser()
    rumcli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["rum", "-c", "x.yaml", "--limit", "5", "--ldns", LDNS])
    assert (args.limit, args.ldns, args.subnet) == (5, LDNS, None)
    with pytest.raises(SystemExit):
        parser.parse_args(["rum", "-c", "x.yaml", "--ldns", LDNS, "--subnet", "10.0.0.0/24"])


BASES: list[dict[str, Any]] = []


def bases(tmp_path: Path) -> list[dict[str, Any]]:
    if not BASES:
        n = node(tmp_path)
        measured(n, 2)
        population(n, LDNS, {subnet(0): 3, "192.0.2.0/24": 1})
        BASES.extend([rum.rum_table(n, {}), rum.rum_table(n, {"ldns": LDNS}), rum.rum_table(n, {"subnet": subnet(1)})])
    return BASES


@settings(max_examples=300)
@given(data=st.data())
def test_an_answer_that_passes_its_check_always_renders(tmp_path_factory: Any, data: st.DataObject) -> None:
    value = data.draw(mutated(data.draw(st.sampled_from(bases(tmp_path_factory.mktemp("rum"))))))
    try:
        check(value, rumcli.TABLE)
    except Malformed:
        return
    assert not CONTROLS.search(rumcli.render(printable(value)))
