"""`gtmcluster explain` for a path-based method names each data center with the figure the
method compared (rtt and its samples, completion and its probes, hops), or says it has no
path yet: on the node's whole service tree built in-process, paths written in its store the
way the prober writes them, the API's answer rendered by the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.api import proximity
from gtmcluster.cli import explain
from gtmcluster.cli.shape import check
from gtmcluster.cli.terminal import printable
from gtmcluster.config.load import load
from gtmcluster.nodeservice import NodeService
from gtmcluster.service import Sockets, make_service
from tests.support import configs

LDNS = "198.51.100.53"


def path(rtt_us: int, window: str, hops: int = 0, by: str = "n1") -> dict[str, Any]:
    """A path record's value as `proximity.table.updated` leaves it after *window*'s probes."""
    return {
        "rtt": rtt_us,
        "last_rtt": rtt_us,
        "hops": hops,
        "completion": round(window.count("1") * 10000 / len(window)),
        "protocol": "udp",
        "failures": 0,
        "window": window,
        "by": by,
    }


def node(tmp_path: Path, method: str) -> NodeService:
    """Members in DC1, DC2 and DC3 (each measures); pool p's preferred method *method*."""
    raw = configs.base()
    configs.add_member(raw, "n2", "DC2", "127.0.0.2")
    configs.add_member(raw, "n3", "DC3", "127.0.0.3")
    raw["state_dir"] = str(tmp_path / "state")
    raw["pools"]["p"]["load_balancing"] = {"preferred": method, "alternate": "round_robin"}
    raw["wideips"]["gslb.example.test"].update(pools=["p"], type=["A"])
    top = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    top.node.ready = True
    store = top.node.store
    store.put(f"path/{LDNS}/DC1", path(20_900, "111", hops=7), ttl=900)
    store.put(f"path/{LDNS}/DC2", path(41_200, "1" * 49 + "0", hops=12, by="n2"), ttl=900)
    return top


def explained(top: NodeService) -> tuple[dict[str, Any], list[str]]:
    """The API's answer (checked against what the CLI reads) and the CLI's lines."""
    answer = proximity.explain(top.node, {"wideip": "gslb.example.test", "ldns": LDNS})
    check(answer, explain.EXPLAINED)
    return answer, explain.render(printable(answer)).splitlines()


@pytest.mark.parametrize(
    ("method", "dc1", "dc2", "dc3", "chosen"),
    [
        (
            "rtt",
            "DC1 rtt 20.9 ms (3 samples) for vs1",
            "DC2 rtt 41.2 ms (49 samples) for vs2",
            "rtt 9.0 ms (1 sample)",
            "vs3",
        ),
        (
            "completion_rate",
            "DC1 completion 100% (3 probes) for vs1",
            "DC2 completion 98% (50 probes) for vs2",
            "completion 50% (2 probes)",
            "vs1",
        ),
        ("hops", "DC1 hops 7 for vs1", "DC2 hops 12 for vs2", "hops 3", "vs3"),
    ],
)
def test_each_data_center_is_named_with_the_figure_that_decided(
    tmp_path: Path, method: str, dc1: str, dc2: str, dc3: str, chosen: str
) -> None:
    top = node(tmp_path, method)
    top.node.store.put(f"path/{LDNS}/DC3", path(9_000, "10", hops=3, by="n3"), ttl=900)
    answer, lines = explained(top)
    assert answer["members"] == [chosen]
    step = next(s for s in answer["trace"] if s["method"] == method)
    at = lines.index(f"  {step['text']}")
    shown = lines[at + 1 : at + 4]
    assert shown[0].startswith(f"    {dc1}; measured by n1 "), lines
    assert shown[1].startswith(f"    {dc2}; measured by n2 "), lines
    assert shown[2].startswith(f"    DC3 {dc3} for vs3; measured by n3 "), lines
    dcs = {d["datacenter"]: d for d in step["datacenters"]}
    assert dcs["DC1"]["rtt_ms"] == 20.9 and dcs["DC1"]["rtt_samples"] == 3 and dcs["DC1"]["hops"] == 7
    assert dcs["DC2"]["completion_percent"] == 98 and dcs["DC2"]["probes"] == 50
    # the older fields are all still there (backward compatible)
    assert {"subject", "slot", "method", "candidates", "scores", "result", "note", "text"} <= step.keys()


@pytest.mark.parametrize("method", ["rtt", "completion_rate", "hops"])
def test_a_data_center_without_a_path_says_so(tmp_path: Path, method: str) -> None:
    """DC3's path is missing: the method yields nothing (the alternate answers) and explain
    says which data center has no path, besides the figures of those that have one."""
    answer, lines = explained(node(tmp_path, method))
    assert answer["method"] == "round_robin"
    assert "    DC3 no path measured yet (probe requested) for vs3" in lines, lines
    step = next(s for s in answer["trace"] if s["method"] == method)
    assert [d["measured"] for d in step["datacenters"]] == [True, True, False]


def test_a_path_without_replies_is_shown_as_not_usable(tmp_path: Path) -> None:
    top = node(tmp_path, "rtt")
    top.node.store.put(f"path/{LDNS}/DC3", {**path(0, "000", by="n3"), "failures": 3}, ttl=900)
    answer, lines = explained(top)
    assert "    DC3 no reply to the last 3 probes (not usable) for vs3" in [line.split(";")[0] for line in lines]
    assert answer["members"] == ["vs1"]


def test_a_data_center_no_member_measures_from_is_named(tmp_path: Path) -> None:
    """With no sync group member in DC3 nobody measures its path: the method compares the
    others, and explain says why DC3 has none."""
    raw = configs.base()
    configs.add_member(raw, "n2", "DC2", "127.0.0.2")
    raw["state_dir"] = str(tmp_path / "state")
    raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt"}
    raw["wideips"]["gslb.example.test"].update(pools=["p"], type=["A"])
    top = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    top.node.ready = True
    top.node.store.put(f"path/{LDNS}/DC1", path(20_900, "111"), ttl=900)
    top.node.store.put(f"path/{LDNS}/DC2", path(41_200, "11", by="n2"), ttl=900)
    answer, lines = explained(top)
    assert answer["members"] == ["vs1"]
    assert "    DC3 no path measured yet (no sync group member there to measure from) for vs3" in lines


def test_other_methods_carry_no_figures(tmp_path: Path) -> None:
    answer, _ = explained(node(tmp_path, "topology"))
    assert all("datacenters" not in s for s in answer["trace"])


def test_an_answer_from_an_older_node_without_figures_still_renders() -> None:
    """A node from before the figures: the trace's steps have only their text."""
    answer = {
        "wideip": "w.example.test",
        "type": "A",
        "client": {"ldns": LDNS, "subnet": None, "keys": "the LDNS address"},
        "trace": [{"text": "pool p preferred=rtt: candidates [vs1] scores [vs1=20900] -> [vs1]"}],
        "action": "answer",
        "answer": ["10.0.1.1"],
        "pool": "p",
        "members": ["vs1"],
        "method": "rtt",
        "ttl": 30,
        "scope": 0,
        "probe_requested": False,
    }
    check(answer, explain.EXPLAINED)
    assert "  pool p preferred=rtt" in explain.render(answer)
