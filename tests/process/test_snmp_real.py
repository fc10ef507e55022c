"""The SNMP reader against a real `snmpd` (net-snmp) on loopback: the counters it returns
are the agent's, exactly (Counter64 values past 2**63 too), and what the agent will not
give is a clear error, not a figure."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gtmcluster.config.monitoring import SnmpSource
from gtmcluster.probe.linkrate import COUNTER64, CounterRate, Counters, Rate
from gtmcluster.probe.snmp import IF_HC_IN_OCTETS, SnmpClient, SnmpError
from tests.support import snmpd
from tests.support.nodeproc import loopback_address

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(not snmpd.available(), reason="snmpd/snmpget not installed (tools/ensure-system-tools)"),
]


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[snmpd.Snmpd]:
    with snmpd.running_snmpd(tmp_path / "snmpd", loopback_address()) as running:
        yield running


@pytest.fixture
def client() -> Iterator[SnmpClient]:
    made = SnmpClient()
    yield made
    made.close()


def source(agent: snmpd.Snmpd, if_index: int, community: str = snmpd.COMMUNITY) -> SnmpSource:
    return SnmpSource(ipaddress.ip_address(agent.address), agent.port, community, if_index)


def test_the_counters_are_the_agents(agent: snmpd.Snmpd, client: SnmpClient) -> None:
    agent.set(2, 12_345_678_901_234, COUNTER64 - 600)
    assert "Counter64: 12345678901234" in agent.snmpget(f".{IF_HC_IN_OCTETS}.2")  # the agent itself
    assert client.get(source(agent, 2), 2.0).result(10) == Counters(12_345_678_901_234, COUNTER64 - 600)


def test_a_rate_across_a_wrap_from_real_readings(agent: snmpd.Snmpd, client: SnmpClient) -> None:
    """Out counter from 2**64 - 600 past the wrap to 650: 1250 octets in 10 s = 1000 bit/s."""
    tracker = CounterRate()
    agent.set(2, 1000, COUNTER64 - 600)
    assert tracker.update(client.get(source(agent, 2), 2.0).result(10), 100.0) is None
    agent.set(2, 1000 + 12_500, 650)
    assert tracker.update(client.get(source(agent, 2), 2.0).result(10), 110.0) == Rate(10_000.0, 1000.0)
    assert client.engines_made == 1  # one engine for every reading


def test_closed_and_used_again(agent: snmpd.Snmpd, client: SnmpClient) -> None:
    """Closing stops the client's thread (a node that stops leaves none behind: its log is
    checked in tests/process/test_links.py); a later reading starts it again."""
    agent.set(2, 5, 6)
    assert client.get(source(agent, 2), 2.0).result(10) == Counters(5, 6)
    loop = client._loop
    assert loop is not None
    client.close()
    assert not [t for t in threading.enumerate() if t.name == "snmp"]
    assert loop.is_closed()
    assert client.get(source(agent, 2), 2.0).result(10) == Counters(5, 6)


def test_what_the_agent_will_not_give_is_an_error(agent: snmpd.Snmpd, client: SnmpClient) -> None:
    with pytest.raises(SnmpError, match="not a 64-bit counter"):
        client.get(source(agent, 7), 2.0).result(10)  # no such interface
    with pytest.raises(SnmpError, match=r"[Tt]imeout|No SNMP response"):
        client.get(source(agent, 2, community="wrong"), 0.5).result(10)  # the agent stays silent
