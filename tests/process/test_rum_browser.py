"""The RUM snippet in a real browser: headless Chromium (Debian's ``chromium``) loads a page
of another origin that includes ``/rum/v1/snippet.js?zone=example.test`` from a RUM
listener (`tests.support.rumserve`, the real reactor on loopback). Without any help from the
test, the snippet times both DCs' targets (one the listener's own ``/rum/v1/object`` with
``Timing-Allow-Origin``, one a plain web server without it) and posts one beacon that the
listener keeps; Chromium's own network log shows that the browser's resolver was asked for
``<id>.rum.example.test`` with the very id the beacon carries."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_tool
from tests.support.nsbrowser import chromium_argv
from tests.support.poll import until

pytestmark = [pytest.mark.process, pytest.mark.slow]

PAGE = (
    "<!doctype html><title>a shop</title><p>hello"
    '<script async src="http://127.0.0.1:{port}/rum/v1/snippet.js?zone=example.test"></script>'
)


def test_the_snippet_measures_and_posts_one_beacon_from_a_real_browser(tmp_path: Path) -> None:
    require_tool("chromium", "chromium")
    kept = tmp_path / "kept.jsonl"
    settings = {
        "allow": ["127.0.0.0/8"],
        "targets": {"dc1": "http://127.0.0.1:{port}/rum/v1/object", "dc2": "http://127.0.0.1:{page_port}/object"},
        "page": PAGE,
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.support.rumserve", json.dumps(settings), str(kept)], stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        ports = json.loads(server.stdout.readline())
        net_log = tmp_path / "net.json"
        browser = subprocess.run(
            chromium_argv(
                tmp_path / "profile",
                f"http://127.0.0.1:{ports['page_port']}/page.html",
                [f"--log-net-log={net_log}", "--virtual-time-budget=5000", "--dump-dom"],
            ),
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert b"a shop" in browser.stdout, browser.stderr[-2000:]
        # (the beacon may still be on its way when the browser exits)
        until(kept.exists, 10, "the listener kept the beacon")
        beacons = [json.loads(line) for line in kept.read_text().splitlines()]
    finally:
        server.terminate()
        server.wait(10)
    assert len(beacons) == 1, beacons
    beacon = beacons[0]
    assert beacon["subnet"] == "127.0.0.0/24" and set(beacon["samples"]) == {"dc1", "dc2"}
    assert all(0 < ms < 60_000 for ms in beacon["samples"].values())
    assert re.fullmatch(r"[a-z0-9]{20}", beacon["id"])
    asked = set(re.findall(r'"([a-z0-9]+)\.rum\.example\.test"', net_log.read_text(errors="replace")))
    assert asked == {beacon["id"]}
