"""The events of servers, pools, data centers and links, from a real health tracker over a
real store: what each change gives, and the same ids on two members that hear the same
verdicts in another order."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gtmcluster.alerts.events import Event
from gtmcluster.alerts.sources import HealthEvents, Where
from gtmcluster.config.model import Config
from gtmcluster.health.tracker import HealthTracker
from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store
from tests.support.healthcfg import health_config, load_config, observe


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def member(config: Config, name: str, clock: Clock) -> tuple[Store, list[Event]]:
    store = Store(name, clock)
    tracker = HealthTracker(config, store, clock, name)
    got: list[Event] = []
    health = HealthEvents(Where(name, "test", clock), store, lambda: tracker.evaluated, got.append)
    health.configure(config)
    tracker.vs_listeners.append(health.vs_changed)
    tracker.link_listeners.append(health.link_changed)
    return store, got


def verdict(observer: str, up: bool, at: float) -> Record:
    """*observer*'s verdict on vs3, written at *at*."""
    value = {"up": up, "reason": "fine" if up else "HTTP 503"}
    return Record(f"obs/vs/vs3/{observer}", value, Version(int(at * 1000), 5, observer), 90, at)


def summary(got: list[Event]) -> list[tuple[str, dict[str, object]]]:
    return [(e.kind, dict(e.object)) for e in got]


def test_a_server_pool_and_data_center_going_down_and_back(tmp_path: Path) -> None:
    config = load_config(tmp_path, health_config())
    clock = Clock()
    store, got = member(config, "n1", clock)
    for vs in ("vs1", "vs2", "vs3"):
        observe(store, "vs", vs, "n1", True)
    observe(store, "link", "l1", "n1", True)
    got.clear()
    observe(store, "vs", "vs3", "n1", False, "HTTP 503 not in [200]")
    assert summary(got) == [
        ("vs_down", {"virtual_server": "vs3", "datacenter": "DC3"}),
        ("datacenter_down", {"datacenter": "DC3"}),  # vs3 is DC3's only server
    ]
    assert "HTTP 503" in got[0].reason
    got.clear()
    observe(store, "vs", "vs2", "n1", False)
    observe(store, "link", "l1", "n1", False, "no echo reply")  # takes vs1 out: pool p has none left
    assert summary(got) == [
        ("vs_down", {"virtual_server": "vs2", "datacenter": "DC2"}),  # (DC2 keeps vs2-6)
        ("link_down", {"link": "l1"}),
        ("vs_down", {"virtual_server": "vs1", "datacenter": "DC1"}),
        ("pool_down", {"pool": "p"}),
    ]
    got.clear()
    observe(store, "vs", "vs3", "n1", True)
    assert summary(got) == [
        ("vs_up", {"virtual_server": "vs3", "datacenter": "DC3"}),
        ("datacenter_up", {"datacenter": "DC3"}),
        ("pool_up", {"pool": "p"}),
    ]


def test_two_members_give_one_event_the_same_id(tmp_path: Path) -> None:
    """Two members hearing the same verdicts in another order name the event alike (the
    receiver drops a repeat by its id); the next time it goes down is another event."""
    config = load_config(tmp_path, health_config())
    clock = Clock()
    s1, got1 = member(config, "m1", clock)
    s2, got2 = member(config, "m2", clock)
    for store in (s1, s2):  # (vs3's monitor: up while any observer sees it up)
        observe(store, "vs", "vs3", "n2", True)
        observe(store, "vs", "vs3", "n3", True)
    clock.now += 1
    # the same two records (one version each, as replication carries them), in another order
    down2 = verdict("n2", False, clock.now)
    down3 = verdict("n3", False, clock.now + 0.01)
    for record in (down2, down3):
        s1.merge(record)
    clock.now += 0.2
    for record in (down3, down2):
        s2.merge(record)
    got = [e for e in got1 + got2 if e.kind == "vs_down"]
    assert len(got) == 2 and got[0].id == got[1].id and got[0].node != got[1].node
    clock.now += 60
    for store in (s1, s2):
        observe(store, "vs", "vs3", "n2", True)
    clock.now += 60
    observe(s1, "vs", "vs3", "n2", False)
    later = [e for e in got1 if e.kind == "vs_down"]
    assert len(later) == 2 and later[1].id != later[0].id


class CountingStatus(dict[str, Any]):
    """A snapshot's servers, counting the looks at them."""

    looks = 0

    def get(self, key: str, default: Any = None) -> Any:
        CountingStatus.looks += 1
        return super().get(key, default)


@pytest.mark.parametrize("order", ["in turn", "reversed", "shuffled"])
def test_a_big_pool_going_down_server_by_server_costs_its_size_not_its_square(order: str) -> None:
    """Whether a pool is up is asked at each of its members' changes: the member last found
    usable is asked first, so 2,000 members going down one after another cost a few looks
    each (a count of every member at every change was 4,000,000; 2.9 s at 4,000 members)."""
    n = 2000
    members = tuple(SimpleNamespace(vs=SimpleNamespace(name=f"vs{i}"), name=f"vs{i}") for i in range(n))
    config: Any = SimpleNamespace(
        pools={"p": SimpleNamespace(members=members)},
        datacenters=("DC1",),
        virtual_servers={f"vs{i}": SimpleNamespace(datacenter="DC1", link=None) for i in range(n)},
        admin_defaults={},
    )
    up: Any = SimpleNamespace(available=True, healthy=True, reason="")
    status = CountingStatus({f"vs{i}": up for i in range(n)})
    snapshot: Any = SimpleNamespace(vs=status, admin={})
    got: list[Event] = []
    health = HealthEvents(Where("n1", "test", Clock()), Store("n1", Clock()), lambda: snapshot, got.append)
    health.configure(config)
    names = [f"vs{i}" for i in range(n)]
    if order == "reversed":
        names.reverse()
    elif order == "shuffled":
        random.Random(5).shuffle(names)
    CountingStatus.looks = 0
    for name in names:
        down: Any = SimpleNamespace(available=False, healthy=False, reason="HTTP 503")
        status[name] = down
        health.vs_changed(name, up, down)
    assert [e.kind for e in got if e.kind.startswith("pool")] == ["pool_down"]  # once, at the last
    assert CountingStatus.looks <= 4 * n, CountingStatus.looks
