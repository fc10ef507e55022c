"""The dashboard's client proximity tile (issue 36) in a real browser (headless Chromium,
driven as in test_dashboard.py) against a real `twistd gtm` member with ``rum:`` on: dig
asks the wide IP from a resolver whose paths are not measured yet, so the pool's ``rtt``
yields nothing and its alternate (``topology``, no paths) answers; the tile then shows the
client table empty and every answer decided with no proximity source, as the node's
/api/v1/status and /metrics say."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import require_tool
from tests.process.test_dashboard import Chromium
from tests.support import apiclient, poll
from tests.support.dig import dig
from tests.support.trio import Group, running_group

pytestmark = pytest.mark.process

LDNS = "127.0.1.77"
TILE_JS = """(() => {
  if (!document.body || document.readyState === "loading" || !document.body.dataset.polls) return null;
  const tile = document.querySelector('[data-rum="coverage"]');
  if (!tile) return { polls: Number(document.body.dataset.polls), tile: null };
  return { polls: Number(document.body.dataset.polls), tile: { ...tile.dataset, text: tile.innerText } };
})()"""


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Group, Chromium]]:
    require_tool("chromium", "chromium")
    require_tool("dig", "dnsutils")
    workdir = tmp_path_factory.mktemp("dashrum")

    def customize(raw: dict[str, Any]) -> None:
        raw["rum"] = {"targets": {"DC1": "https://dc1.example.net/rum/v1/object"}}
        for pool in raw["pools"].values():
            pool["load_balancing"] = {"preferred": "rtt", "alternate": "topology"}

    with running_group(workdir, size=1, customize=customize) as g:
        browser = Chromium(workdir)
        try:
            yield g, browser
        finally:
            browser.close()


def test_the_tile_shows_the_client_table_and_the_answers_by_source(group: Any) -> None:
    g, browser = group
    n1 = g.members["n1"]
    wideip = next(iter(g.config["wideips"]))
    for _ in range(3):
        assert dig(*n1.dns, wideip, "A", source=LDNS).status == "NOERROR"
    code, status = apiclient.call(n1.api, "/api/v1/status")
    assert code == 200, status
    assert status["proximity"]["decisions"]["none"] >= 1, status["proximity"]
    assert status["proximity"]["subnets"] == 0 and status["proximity"]["sources"] == ["client", "population", "ldns"]
    host, port = n1.api
    tab = browser.open(f"http://{host}:{port}/")
    last: list[Any] = [None]

    def shown() -> dict[str, Any] | None:
        last[0] = tab.evaluate(TILE_JS)
        return last[0]["tile"] if last[0] and last[0]["tile"] else None

    try:
        tile = poll.until(shown, 20.0, "the client proximity tile", step=0.1, details=lambda: json.dumps(last[0]))
        assert tile is not None
        assert (tile["subnets"], tile["populations"], tile["shareNone"], tile["shareClient"]) == ("0", "0", "100", "0")
        assert "CLIENT PROXIMITY" in tile["text"].upper() and "0 client figures · 0 LDNS populations" in tile["text"]
        assert "answers decided by no paths 100 %" in tile["text"]
    finally:
        tab.close()
