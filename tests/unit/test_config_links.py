"""A link's bandwidth_mbps, cost, max_utilisation and traffic source in the config, and the
errors when they are wrong or when a link method lacks what it reads."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config.load import load
from gtmcluster.config.monitoring import SnmpSource, TrafficSource
from gtmcluster.config.problems import format_path
from tests.support import configs
from tests.unit.test_config_errors import assert_form, find, problems_of_file

SNMP = {"host": "127.0.0.1", "port": 16161, "community": "gtm", "if_index": 2}


def linked(**changes: Any) -> dict[str, Any]:
    """The base config with links cnc (DC1, vs1) and tel (DC2, vs2), and pool lp of the two
    with *changes* merged into each link (a value of None removes the key)."""
    config = configs.base()
    config["monitors"] = {"ping": {"type": "icmp", "interval": 5, "timeout": 1}}
    config["links"] = {
        "cnc": {
            "datacenter": "DC1",
            "monitor": "ping",
            "targets": ["192.0.2.1"],
            "bandwidth_mbps": 1000,
            "cost": 2,
            "max_utilisation": "90%",
            "traffic": {"snmp": dict(SNMP), "interval": 10},
        },
        "tel": {
            "datacenter": "DC2",
            "monitor": "ping",
            "targets": ["192.0.2.2"],
            "bandwidth_mbps": 100,
            "cost": 1,
            "traffic": {"snmp": {**SNMP, "if_index": 3}},
        },
    }
    for link in config["links"].values():
        for key, value in changes.items():
            if value is None:
                link.pop(key, None)
            else:
                link[key] = value
    config["virtual_servers"]["vs1"]["link"] = "cnc"
    config["virtual_servers"]["vs2"]["link"] = "tel"
    config["pools"]["lp"] = {"members": ["vs1", "vs2"], "load_balancing": {"preferred": "link_capacity"}}
    return config


def test_a_link_with_capacity_cost_limit_and_traffic(tmp_path: Path) -> None:
    """The settings reach the model: 90% as 0.9, the SNMP source with its defaults (v2c)."""
    config = linked()
    config["links"]["tel"]["max_utilisation"] = 75  # a plain number is a percentage too
    config["links"]["tel"]["traffic"] = {"snmp": {"host": "::1", "if_index": 7}}
    loaded = load(configs.write(tmp_path, config))
    cnc, tel = loaded.links["cnc"], loaded.links["tel"]
    assert (cnc.bandwidth_mbps, cnc.cost, cnc.max_utilisation) == (1000.0, 2.0, 0.9)
    assert cnc.traffic == TrafficSource(SnmpSource(ipaddress.ip_address("127.0.0.1"), 16161, "gtm", 2), 10.0, 2.0)
    assert tel.max_utilisation == 0.75
    assert tel.traffic == TrafficSource(SnmpSource(ipaddress.ip_address("::1"), 161, "public", 7))
    assert loaded.virtual_servers["vs1"].link is cnc


def test_links_without_capacity_are_as_before(tmp_path: Path) -> None:
    config = linked(bandwidth_mbps=None, cost=None, max_utilisation=None, traffic=None)
    config["pools"]["lp"]["load_balancing"]["preferred"] = "round_robin"
    loaded = load(configs.write(tmp_path, config))
    link = loaded.links["cnc"]
    assert (link.bandwidth_mbps, link.cost, link.max_utilisation, link.traffic) == (None, None, None, None)


BAD = [
    pytest.param(("bandwidth_mbps",), 0, "links.cnc.bandwidth_mbps", "0 is out of range", id="bandwidth-0"),
    pytest.param(("bandwidth_mbps",), "1G", "links.cnc.bandwidth_mbps", "must be a number", id="bandwidth-text"),
    pytest.param(("cost",), -1, "links.cnc.cost", "-1 is out of range", id="cost-negative"),
    pytest.param(("max_utilisation",), "ninety", "links.cnc.max_utilisation", "not a percentage", id="limit-text"),
    pytest.param(("max_utilisation",), "120%", "links.cnc.max_utilisation", "120 is out of range", id="limit-over"),
    pytest.param(("max_utilisation",), 0, "links.cnc.max_utilisation", "0 is out of range", id="limit-0"),
    pytest.param(("traffic",), "snmp", "links.cnc.traffic", "must be a mapping", id="traffic-text"),
    pytest.param(("traffic", "snmp", "host"), "router", "links.cnc.traffic.snmp.host", "", id="snmp-host"),
    pytest.param(("traffic", "snmp", "if_index"), 0, "links.cnc.traffic.snmp.if_index", "out of range", id="ifindex"),
    pytest.param(("traffic", "snmp", "version"), "3", "links.cnc.traffic.snmp.version", "not one of: 2c", id="snmp-v3"),
    pytest.param(("traffic", "snmp", "community"), "", "links.cnc.traffic.snmp.community", "empty", id="community"),
    pytest.param(("traffic", "snmp", "oid"), "1.3", "links.cnc.traffic.snmp.oid", "unknown key", id="snmp-unknown"),
    pytest.param(("traffic", "interval"), 0.5, "links.cnc.traffic.interval", "out of range", id="interval"),
    pytest.param(("traffic", "timeout"), 20, "links.cnc.traffic.timeout", "longer than the interval", id="timeout"),
    pytest.param(("capacity",), 5, "links.cnc.capacity", "unknown key", id="unknown"),
]


@pytest.mark.parametrize(("where", "value", "path", "fragment"), BAD)
def test_bad_link_settings(tmp_path: Path, where: tuple[str, ...], value: Any, path: str, fragment: str) -> None:
    config = linked()
    node = config["links"]["cnc"]
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = value
    file = configs.write(tmp_path, config)
    problem = find(problems_of_file(file), path, fragment)
    assert_form(problem, file, path)


def test_a_limit_needs_a_bandwidth_and_a_traffic_source(tmp_path: Path) -> None:
    config = linked()
    config["pools"]["lp"]["load_balancing"]["preferred"] = "round_robin"
    del config["links"]["cnc"]["bandwidth_mbps"]
    config["links"]["tel"]["max_utilisation"] = 80
    del config["links"]["tel"]["traffic"]
    problems = problems_of_file(configs.write(tmp_path, config))
    find(problems, "links.cnc.max_utilisation", "needs the link's 'bandwidth_mbps'")
    find(problems, "links.tel.max_utilisation", "needs the link's 'traffic'")


@pytest.mark.parametrize(
    ("method", "remove", "message"),
    [
        ("bandwidth_ratio", "bandwidth_mbps", "bandwidth_ratio needs each member's link's 'bandwidth_mbps'; missing: "),
        ("link_capacity", "traffic", "link_capacity needs each member's link's 'traffic'; missing: links.tel.traffic"),
        ("lowest_cost", "cost", "lowest_cost needs each member's link's 'cost'; missing: links.tel.cost"),
    ],
)
def test_a_link_method_names_what_a_members_link_lacks(tmp_path: Path, method: str, remove: str, message: str) -> None:
    """At the pool's method slot, naming the key path missing; at a wide IP's pool_lb too."""
    config = linked()
    config["links"]["cnc"]["max_utilisation"] = None
    del config["links"]["cnc"]["max_utilisation"]
    config["links"]["tel"].pop(remove, None)
    if remove == "bandwidth_mbps":
        del config["links"]["cnc"]["bandwidth_mbps"]
    config["pools"]["lp"]["load_balancing"] = {"alternate": method}
    config["wideips"]["links.example.test"] = {"pools": ["lp"], "pool_lb": method}
    file = configs.write(tmp_path, config)
    problems = problems_of_file(file)
    at_pool = find(problems, "pools.lp.load_balancing.alternate", message)
    at_wideip = find(problems, 'wideips."links.example.test".pool_lb', message)
    for problem in (at_pool, at_wideip):
        assert format_path(problem.path) in str(problem)
    if remove == "bandwidth_mbps":
        assert "links.cnc.bandwidth_mbps, links.tel.bandwidth_mbps" in at_pool.message


def test_a_link_method_needs_every_member_on_a_link(tmp_path: Path) -> None:
    config = linked()
    config["pools"]["lp"]["members"].append("vs3")
    config["pools"]["lp"]["load_balancing"]["preferred"] = "lowest_cost"
    problems = problems_of_file(configs.write(tmp_path, config))
    find(problems, "pools.lp.load_balancing.preferred", "lowest_cost needs every member on a link; missing: ")
    assert "virtual_servers.vs3.link" in described_all(problems)


def described_all(problems: list[Any]) -> str:
    return "\n".join(str(p) for p in problems)
