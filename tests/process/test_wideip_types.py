"""CNAME, MX and SRV wide IPs on a real `twistd -n gtm` node, asked with the real `dig`.

The CNAME wide IP's two targets are checked by a tcp monitor at their `check_address`,
where real `gtmcluster.cli.backend` processes listen on loopback: killing the first one's
makes the node answer with the second target (inside our zone: its address follows the
CNAME), and starting it again brings the first back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import configs
from tests.support.backends import Backend, running_backends
from tests.support.dig import DigResult, dig
from tests.support.nodeproc import RunningNode, loopback_address, running_node
from tests.support.poll import until

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

DNS_PORT = 5353
CHECK_PORT = 8080
CDN = "cdn.example.test"
MAIL = "mail.example.test"
SIP = "_sip._tcp.example.test"
#: up after one success, down after two failures half a second apart
TCP_MONITOR = {"type": "tcp", "interval": 0.5, "timeout": 0.25, "up_after": 1, "down_after": 2}
ZONE = configs.ZONE + "edge-b IN A 192.0.2.88\nmx1 IN A 192.0.2.61\n"


def _config(address: str, check_a: str, check_b: str) -> dict[str, Any]:
    config = configs.base(address, DNS_PORT)
    config["monitors"] = {"tcp": TCP_MONITOR}
    config["virtual_servers"].update(
        {
            "cdn-a": {
                "cname": "site.cdn-a.example.net",
                "datacenter": "DC1",
                "monitor": "tcp",
                "check_address": check_a,
                "port": CHECK_PORT,
            },
            "cdn-b": {
                "cname": "edge-b.example.test",
                "datacenter": "DC2",
                "monitor": "tcp",
                "check_address": check_b,
                "port": CHECK_PORT,
            },
            "mx1": {"mx": {"exchange": "mx1.example.test", "preference": 10}, "datacenter": "DC1"},
            "mx2": {"mx": {"exchange": "mx2.example.net", "preference": 20}, "datacenter": "DC2"},
            "sip1": {
                "srv": {"target": "sip1.example.net", "port": 5060, "priority": 10, "weight": 60},
                "datacenter": "DC1",
            },
        }
    )
    config["pools"].update(
        {
            "cdns": {"members": ["cdn-a", "cdn-b"], "load_balancing": {"preferred": "global_availability"}, "ttl": 20},
            "mx": {"members": ["mx1", "mx2"], "max_answers": 2, "ttl": 300},
            "sip": {"members": ["sip1"]},
        }
    )
    config["wideips"].update(
        {
            CDN: {"type": "CNAME", "pools": ["cdns"]},
            MAIL: {"type": "MX", "pools": ["mx"]},
            SIP: {"type": "SRV", "pools": ["sip"]},
        }
    )
    return config


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningNode, dict[str, Backend]]]:
    workdir = tmp_path_factory.mktemp("wideip-types")
    address = loopback_address()
    a = Backend("check-a", loopback_address(), CHECK_PORT)
    b = Backend("check-b", loopback_address(), CHECK_PORT)
    path = configs.write(workdir, _config(address, a.address, b.address), ZONE)
    with running_backends(a, b) as backends, running_node(path, "n1", address, DNS_PORT, workdir) as node:
        yield node, backends


def ask(node: RunningNode, name: str, rdtype: str) -> DigResult:
    return dig(node.address, node.port, name, rdtype)


def answer_starting(node: RunningNode, name: str, rdtype: str, first: str) -> DigResult | None:
    """The answer to *name* *rdtype* when its first record's data is *first*, else None."""
    result = ask(node, name, rdtype)
    return result if result.answer_data()[:1] == [first] else None


def test_cname_wide_ip_fails_over_when_the_first_target_s_monitor_fails(
    setup: tuple[RunningNode, dict[str, Backend]],
) -> None:
    node, backends = setup
    first = until(
        lambda: answer_starting(node, CDN, "A", "site.cdn-a.example.net."),
        10,
        "the first target",
        details=node.log_text,
    )
    assert first is not None and first.status == "NOERROR" and "aa" in first.flags and first.types() == ["CNAME"]
    assert first.answer[0].split()[1] == "20"  # the pool's TTL
    backends["check-a"].kill()
    second = until(
        lambda: answer_starting(node, CDN, "A", "edge-b.example.test."),
        10,
        "failover to the second target",
        details=node.log_text,
    )
    # the second target is in our zone: its address follows the CNAME
    assert second is not None and second.answer_data() == ["edge-b.example.test.", "192.0.2.88"]
    assert second.types() == ["CNAME", "A"]
    assert ask(node, CDN, "CNAME").answer_data() == ["edge-b.example.test."]
    backends["check-a"].start()
    until(lambda: ask(node, CDN, "TXT").answer_data() == ["site.cdn-a.example.net."], 10, "the first target back")


def test_mx_and_srv_wide_ips(setup: tuple[RunningNode, dict[str, Backend]]) -> None:
    node, _ = setup
    mx = ask(node, MAIL, "MX")
    assert mx.status == "NOERROR" and "aa" in mx.flags
    assert sorted(mx.answer_data()) == ["10 mx1.example.test.", "20 mx2.example.net."]
    assert "mx1.example.test. 3600 IN A 192.0.2.61" in [" ".join(line.split()) for line in mx.additional]
    srv = ask(node, SIP, "SRV")
    assert srv.answer_data() == ["10 60 5060 sip1.example.net."]
