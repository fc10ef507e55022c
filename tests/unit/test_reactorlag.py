"""The reactor stall probe: how late its calls come, kept as a histogram and maxima, and
shown in /metrics; and /metrics itself built in small steps at thousands of servers."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import task
from twisted.logger import capturedLogs

from gtmcluster.api.metrics import metrics_steps
from gtmcluster.api.scrape import ADD_STEP
from gtmcluster.node import Node
from gtmcluster.nodeservice import NodeService
from gtmcluster.runtime.reactorlag import ReactorLag
from gtmcluster.runtime.reactors import Runtime
from gtmcluster.runtime.slices import whole
from gtmcluster.sync.replicator import Replicator
from tests.support import configs
from tests.support.healthcfg import load_config


def started(clock: task.Clock) -> ReactorLag:
    lag = ReactorLag(clock, interval=0.01, log_over=1.0)
    lag.startService()
    return lag


def test_calls_on_time_are_not_late() -> None:
    """A reactor that runs every call when due: 100 calls, all in the lowest bucket."""
    clock = task.Clock()
    lag = started(clock)
    clock.pump([0.01] * 100)
    assert lag.lag.count == 100
    assert lag.max == 0.0 and lag.lag.total == 0.0
    assert lag.lag.counts[0] == 100


def test_a_stall_is_measured_from_when_the_call_was_due() -> None:
    """The reactor stands still for 250 ms: the call due 10 ms after the last one comes
    240 ms late; that is the maximum since start and since the last look, and the calls
    after it are on time again."""
    clock = task.Clock()
    lag = started(clock)
    clock.advance(0.01)  # on time
    clock.advance(0.25)  # a stall: the next call was due at 0.02, it runs at 0.26
    assert lag.lag.count == 2
    assert lag.max == pytest.approx(0.24)
    assert lag.take_recent() == pytest.approx(0.24)
    assert lag.take_recent() == 0.0  # taken: nothing since
    clock.pump([0.01] * 5)
    assert lag.lag.count == 7
    assert lag.take_recent() == 0.0
    assert lag.max == pytest.approx(0.24)  # since start
    cumulative = dict(lag.lag.cumulative())
    assert cumulative["0.2"] == 6 and cumulative["0.5"] == 7  # one call in (0.2, 0.5]


def test_a_long_stall_is_logged() -> None:
    clock = task.Clock()
    started(clock)
    with capturedLogs() as events:
        clock.advance(0.5)  # 490 ms late: not logged
        clock.advance(1.6)  # 1590 ms late
    stalls = [e for e in events if e.get("event") == "reactor_stall"]
    assert len(stalls) == 1 and round(stalls[0]["ms"]) == 1590


def test_stopping_leaves_no_call_behind() -> None:
    clock = task.Clock()
    lag = started(clock)
    clock.advance(0.01)
    lag.stopService()
    assert clock.getDelayedCalls() == []
    clock.advance(1.0)
    assert lag.lag.count == 1


def test_metrics_show_the_lag(tmp_path: Path) -> None:
    """/metrics of a node (its service built in-process on a fake clock) carries the
    histogram, the maximum since start and the maximum since the previous scrape, which a
    second scrape shows as 0 when nothing stalled in between."""
    config = load_config(tmp_path, configs.base())
    clock = task.Clock()
    clock.advance(1000.0)
    node = Node(config, "n1", clock.seconds)
    replicator = Replicator(
        node.store, clock, node="n1", group="test", datacenter="DC1", members=["n1"], config_digest=config.digest
    )
    service = NodeService(node, replicator, clock, str(tmp_path / "cluster.yaml"), runtime=Runtime.of(clock))
    service.lag = started(clock)
    clock.advance(0.01)
    clock.advance(0.13)  # 120 ms late

    def scrape() -> dict[str, float]:
        text = whole(metrics_steps(service)).body.decode()
        out = {}
        for family in text_string_to_metric_families(text):
            if family.name.startswith("gtm_reactor_lag"):
                for sample in family.samples:
                    out[sample.name + str(sample.labels.get("le", ""))] = sample.value
        return out

    first = scrape()
    assert first["gtm_reactor_lag_seconds_count"] == 2
    assert first["gtm_reactor_lag_seconds_bucket0.1"] == 1 and first["gtm_reactor_lag_seconds_bucket0.2"] == 2
    assert first["gtm_reactor_lag_max_seconds"] == pytest.approx(0.12)
    assert first["gtm_reactor_lag_recent_max_seconds"] == pytest.approx(0.12)
    clock.advance(0.01)
    second = scrape()
    assert second["gtm_reactor_lag_recent_max_seconds"] == 0.0
    assert second["gtm_reactor_lag_max_seconds"] == pytest.approx(0.12)


def test_metrics_of_thousands_of_servers_and_series_are_built_in_small_steps(tmp_path: Path) -> None:
    """/metrics of 2,000 virtual servers and 3,000 query series: no step of its building
    adds more than `ADD_STEP` samples to a family nor formats more than
    `SAMPLES_PER_SLICE` (one step of 10,000 held every scrape 40 ms), and no step counts
    the frozen objects (a walk over all of them); the text has every sample."""
    raw = configs.base()
    for i in range(2000):
        raw["virtual_servers"][f"x{i}"] = {"address": f"10.9.{i // 250}.{i % 250 + 1}", "datacenter": "DC1"}
    config = load_config(tmp_path, raw)
    clock = task.Clock()
    node = Node(config, "n1", clock.seconds)
    for i in range(3000):
        node.stats.queries[(f"w{i}.example.test", "A", "NOERROR", "topology")] = i + 1
    replicator = Replicator(
        node.store, clock, node="n1", group="test", datacenter="DC1", members=["n1"], config_digest=config.digest
    )
    service = NodeService(node, replicator, clock, str(tmp_path / "cluster.yaml"), runtime=Runtime.of(clock))
    added = [0]
    most = [0]

    def counting(family: type[Any]) -> Any:
        real_add = family.add_metric

        def add_metric(self: Any, *a: Any, **k: Any) -> None:
            added[0] += 1
            real_add(self, *a, **k)

        return add_metric

    steps = metrics_steps(service)
    with (
        patch.object(GaugeMetricFamily, "add_metric", counting(GaugeMetricFamily)),
        patch.object(CounterMetricFamily, "add_metric", counting(CounterMetricFamily)),
        patch.object(gc, "get_freeze_count", side_effect=AssertionError("walks every frozen object")),
    ):
        while True:
            added[0] = 0
            try:
                next(steps)
            except StopIteration as done:
                text = done.value.body.decode()
                break
            most[0] = max(most[0], added[0])
    assert most[0] <= 3 * ADD_STEP  # (a server adds to three families: healthy, available, serving)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert len(families["gtm_virtual_server_available"].samples) == len(config.virtual_servers)
    assert len(families["gtm_dns_queries"].samples) == 3000
