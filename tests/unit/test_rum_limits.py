"""Beacons taken per source subnet and in all (`gtmcluster.rum.limits`), on a fake clock:
the burst, then the rate; a bounded table of subnets, the least recently used forgotten;
the bound in all holding however many subnets send."""

from __future__ import annotations

import ipaddress

import pytest
from twisted.internet.task import Clock

from gtmcluster.rum.beacon import RATE
from gtmcluster.rum.limits import BeaconRate, Rates


def net(i: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"203.{i // 256 % 256}.{i % 256}.0/24")


def test_a_subnet_gets_its_burst_then_its_rate() -> None:
    clock = Clock()
    rate = BeaconRate(Rates(per_second=2.0, burst=5.0), clock.seconds)
    a, b = net(1), net(2)
    assert [rate.take(a) for _ in range(5)] == [None] * 5
    refused = rate.take(a)
    assert refused is not None and (refused.status, refused.reason) == (429, RATE)
    assert refused.retry == pytest.approx(0.5)
    assert rate.take(b) is None  # (another subnet has its own bucket)
    clock.advance(0.5)
    assert rate.take(a) is None
    assert rate.take(a) is not None
    clock.advance(10)
    assert [rate.take(a) for _ in range(6)].count(None) == 5  # (never more than the burst)


def test_the_table_of_subnets_is_bounded_least_recently_used_forgotten() -> None:
    clock = Clock()
    rates = Rates(per_second=1.0, burst=1.0, sources=100, total_per_second=1e9, total_burst=1e9)
    rate = BeaconRate(rates, clock.seconds)
    for i in range(1000):
        assert rate.take(net(i)) is None
    assert len(rate) == 100 and rate.forgotten == 900
    assert rate.take(net(999)) is not None  # kept: still empty
    assert rate.take(net(0)) is None  # forgotten: starts full again
    rate.configure(Rates(per_second=1.0, burst=1.0, sources=10, total_per_second=1e9, total_burst=1e9))
    assert len(rate) == 10


def test_the_bound_in_all_holds_whatever_the_number_of_subnets() -> None:
    clock = Clock()
    rate = BeaconRate(Rates(per_second=1.0, burst=1.0, total_per_second=10.0, total_burst=20.0), clock.seconds)
    taken = [rate.take(net(i)) for i in range(100)]
    assert taken.count(None) == 20
    clock.advance(1.0)
    taken = [rate.take(net(i)) for i in range(1000, 1100)]
    assert taken.count(None) == 10
    assert {t.reason for t in taken if t is not None} == {RATE}


def test_rates_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Rates(per_second=0)
    with pytest.raises(ValueError):
        Rates(sources=0)
