"""The dashboard's graphs of the last hour in a real browser, against a real node.

One `twistd -n gtm` node (n1 in DC1) whose pool balances by RTT, so that the LDNSes that
ask it get their paths measured. ``dig`` asks it from two resolvers, an operator disables
vs1 through the API (an admin change, and the failover it causes), and dig asks again.
Headless Chromium (driven as in test_dashboard.py) loads the dashboard, which draws
``/api/v1/history`` as inline SVG; the test waits until each graph has data points:
queries per second of the wide IP, answers per data center (DC1 before the change, another
after), the RTT of DC1's measured paths, and the admin change and the failover as markers
on the timeline. The page's screenshot is saved in test-artifacts/, and as docs/dashboard.png
(the README shows it) with GTM_UPDATE_SCREENSHOT=1
and test-artifacts/dashboard-graphs.png.

The node samples every 10 s (gtmcluster.history), so this takes about half a minute.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_tool
from tests.process.test_dashboard import ARTIFACTS, Chromium, Tab, assert_png
from tests.support import apiclient, configs
from tests.support.dig import dig
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = pytest.mark.process

DOCS = Path(__file__).resolve().parents[2] / "docs"
WIDEIP = "gslb.example.test"
#: resolvers (any 127/8 address is a source on loopback): in regions r1 and r2
LDNSES = ("127.0.1.77", "127.0.2.77")
#: two of the node's 10 s samples, and a poll of the page (every 10 s) after them
GRAPH_TIMEOUT = 45.0

#: what the page's graphs show, read in the browser
GRAPHS_JS = """(() => {
  // not loaded yet
  if (!document.body || document.readyState === "loading") return null;
  if (!document.getElementById("banner") || !document.body.dataset.polls) return null;
  const graphs = {};
  for (const svg of document.querySelectorAll("svg[data-graph]")) {
    graphs[svg.dataset.graph] = {
      points: Number(svg.dataset.points),
      series: Object.fromEntries([...svg.querySelectorAll("path[data-series]")].map(
        (p) => [p.dataset.series, { points: Number(p.dataset.points), d: p.getAttribute("d") }])),
      events: [...svg.querySelectorAll("line[data-event]")].map((l) => l.dataset.event),
      width: svg.getBoundingClientRect().width,
    };
  }
  return {
    error: document.body.dataset.error,
    banner: document.getElementById("banner").hidden ? "" : document.getElementById("banner").innerText,
    graphs,
    events: [...document.querySelectorAll(".events li")].map((li) => [li.dataset.kind, li.innerText]),
    legend: [...document.querySelectorAll("figure.graph .legend li")].map((li) => li.innerText),
  };
})()"""


def ask(node: RunningNode, times: int) -> list[str]:
    """dig the wide IP *times* from each LDNS; the addresses of the last answer."""
    answer: list[str] = []
    for _ in range(times):
        for ldns in LDNSES:
            result = dig(node.address, node.port, WIDEIP, "A", source=ldns)
            assert result.status == "NOERROR", result
            answer = result.answer_data()
    return answer


def measured(node: RunningNode, api: tuple[str, int]) -> None:
    """Ask again (each answer files a probe request, as a resolver asking again would)
    until the node has measured a path to each LDNS."""
    deadline = time.monotonic() + 30.0
    while True:
        table = apiclient.call(api, "/api/v1/ldns")[1]["ldns"]
        usable = {e["address"] for e in table if any(p["rtt_us"] > 0 for p in e["paths"])}
        if usable >= set(LDNSES):
            return
        assert time.monotonic() < deadline, f"no path measured to each of {LDNSES}: {table}"
        ask(node, 1)
        time.sleep(0.5)  # polling a real node: its prober measures on its own clock


def wait_graphs(tab: Tab, condition: Any, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + GRAPH_TIMEOUT
    while True:
        shown: dict[str, Any] | None = tab.evaluate(GRAPHS_JS)  # None while the page loads
        if shown is not None and condition(shown):
            return shown
        if time.monotonic() >= deadline:
            seen = json.dumps(shown)[:2000] if shown is not None else "the page still loading"
            raise AssertionError(f"the graphs did not show {what} within {GRAPH_TIMEOUT}s: {seen}")
        time.sleep(0.5)  # polling a real browser: the node samples every 10 s of its real clock


@pytest.fixture
def node(tmp_path: Path) -> Iterator[RunningNode]:
    require_tool("chromium", "chromium")
    require_tool("dig", "bind9-dnsutils")
    address = loopback_address()
    raw = configs.base(address, 5353)
    raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt", "alternate": "topology"}
    raw["prober"].update({"protocols": ["udp", "tcp"], "timeout": 1})
    with running_node(configs.write(tmp_path, raw), "n1", address, 5353, tmp_path) as running:
        yield running


def test_the_graphs_show_queries_answers_rtt_and_the_timeline(node: RunningNode, tmp_path: Path) -> None:
    """Queries, answers per data center, RTT and an admin change with its failover, drawn."""
    config = tmp_path / "cluster.yaml"
    token = apiclient.token_of(config, "n1")
    api = (node.address, 8053)
    before = ask(node, 10)
    measured(node, api)
    browser = Chromium(tmp_path)
    try:
        tab = browser.open(f"http://{node.address}:8053/#token={token}")
        shown = wait_graphs(
            tab,
            lambda g: (
                g["graphs"].get("queries", {}).get("series", {}).get(WIDEIP, {}).get("points", 0) >= 1
                and g["graphs"]["rtt"]["points"] >= 1
            ),
            "queries of the wide IP and an RTT",
        )
        assert set(shown["graphs"]) == {"queries", "answers", "rtt", "events"}
        assert shown["error"] == "" and shown["banner"] == "", shown["banner"]
        # answered by vs1 (DC1) or by RTT's pick: each answer is counted in its data center
        answered_dc = {"10.0.1.1": "DC1", "10.0.2.1": "DC2", "10.0.3.1": "DC3"}[before[0]]
        assert shown["graphs"]["answers"]["series"][answered_dc]["points"] >= 1
        assert "DC1" in shown["graphs"]["rtt"]["series"]
        code, answer = apiclient.call(
            api,
            "/api/v1/admin/virtual-server/vs1/disable",
            "POST",
            token,
            body=json.dumps({"by": "alice", "reason": "graph test"}).encode(),
        )
        assert code == 200, answer
        after = ask(node, 10)
        assert after and after != ["10.0.1.1"]
        shown = wait_graphs(
            tab,
            lambda g: (
                {"admin", "failover"} <= set(g["graphs"]["events"]["events"])
                and g["graphs"]["queries"]["series"][WIDEIP]["points"] >= 2
            ),
            "the admin change and the failover on the timeline, and two samples of queries",
        )
        assert shown["error"] == "" and shown["banner"] == "", shown["banner"]
        texts = [text for _, text in shown["events"]]
        assert any("virtual server vs1 disabled by alice (graph test)" in t for t in texts), texts
        assert any("virtual server vs1 unavailable" in t for t in texts), texts
        # the same markers on the other graphs' shared time axis
        assert {"admin", "failover"} <= set(shown["graphs"]["queries"]["events"])
        for graph in ("queries", "answers", "rtt", "events"):
            assert shown["graphs"][graph]["width"] > 300, graph
        history = apiclient.call(api, "/api/v1/history")[1]
        assert history["queries_per_second"][WIDEIP][-1] > 0
        shot = ARTIFACTS / "dashboard-graphs.png"
        png = tab.screenshot(shot)
        assert_png(png, shot)
        if os.environ.get("GTM_UPDATE_SCREENSHOT"):  # the README's picture, on request only
            (DOCS / "dashboard.png").write_bytes(png)
    finally:
        browser.close()
