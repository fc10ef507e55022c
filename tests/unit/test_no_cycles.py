"""What the node does again and again leaves no reference cycles behind.

The heap keeper freezes every object alive after a slow full collection, and a reload
freezes the config it built (`gtmcluster.runtime.heap`, `gtmcluster.config.reload`). A reference
cycle alive at that moment that dies later is never collected: a leak for good. Measured
before these tests, a member at 5,000 servers left about 1,000 such objects per freeze, most
of them a peer batch held by the closure that merged it a slice per turn (a nested function
that schedules itself by name is a cycle: the function and its cell). So each of these runs
with the collector off and asserts that a full collection afterwards finds no garbage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet import task

from gtmcluster.config.load import load
from gtmcluster.health.status import evaluate
from gtmcluster.runtime import slices
from gtmcluster.state.store import Store
from tests.support import configs
from tests.support.cycles import collector_off
from tests.support.healthcfg import health_config, observe


def test_a_walk_run_a_slice_per_turn_leaves_no_cycle() -> None:
    """`slices.run` over several turns (the walks of /metrics, the API, a reload's build)."""
    clock = task.Clock()

    def walk() -> slices.Steps[int]:
        total = 0
        for i in range(5):
            total += i
            yield
        return total

    results: list[int] = []
    with collector_off() as left:
        slices.run(walk(), clock, budget=0.0).addCallback(results.append)
        for _ in range(6):
            clock.advance(0)
        outcome = list(results)
    assert outcome == [10]
    assert left == []


def test_a_config_with_region_includes_and_dependencies_is_read_without_cycles(tmp_path: Path) -> None:
    """Reading a config: regions that include regions, servers that depend on servers (each
    checked by a depth-first walk), the whole health evaluated once."""
    data = health_config(vs2={"depends_on": ["vs3"]}, vs1={"depends_on": ["vs2"]})
    data["regions"]["r3"] = [{"region": "r1"}, {"region": "r2"}, "192.0.2.0/24"]
    path = configs.write(tmp_path, data)
    with collector_off() as left:
        config = load(path)
        store = Store("n1", lambda: 1000.0)
        observe(store, "vs", "vs3", "n1", up=False)
        status, _ = evaluate(config, store)
        facts: dict[str, Any] = {
            "r3": len(config.regions["r3"].networks),
            "vs1": status["vs1"].available,
        }
    assert facts == {"r3": 6, "vs1": False}  # r1's 3 networks, r2's 2, its own; vs3 down takes vs1
    assert left == []
