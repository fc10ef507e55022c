"""The real-browser harness of client proximity (issue 36): a page in headless Chromium, in
a client namespace behind the WAN emulator, times both data centers' measurement URLs.

`tests/support/rumworld.py` builds the world (namespaces dc1, dc2, client and ldns joined by
`tests/tools/wanem.py`; a web server with a measurement object at each DC, the test pages and
their collector at the client, `unbound` as the client's resolver at ldns). Round-trip times::

             dc1      dc2
    client   20 ms   120 ms      client <-> ldns 10 ms, dc1 <-> dc2 10 ms
    ldns    120 ms    20 ms      (the resolver sits elsewhere: its RTTs disagree)

Shown here, as the proof that the harness measures what the feature test relies on:

- a page loaded in the client namespace fetches both DCs' objects by name, the names resolved
  by the client's unbound (its log has the browser's queries), and the Resource Timing the
  page reads (TCP connect and request, one round trip each) is about 20 ms for dc1 and about
  120 ms for dc2;
- swapping the client's delays at run time, with nothing restarted, swaps what the next
  page reads;
- real GTM nodes in dc1 and dc2 (`start_gtms`, with `with_rum`'s config) measure the LDNS and answer the wide IP
  through that unbound with dc2 (the LDNS's nearer DC, the client's farther one), to `dig`
  in the client namespace and to the browser, which fetches the object there (its body
  names the DC).

Needs root, /dev/net/tun, `ip`, `unbound`, `dig` and `chromium` (the Makefile installs
them): skipped without them, failed in CI (``CI=true``). Every process, namespace and the
client's /etc/netns resolv.conf is removed afterwards.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gtmcluster.config.load import load
from tests.conftest import require_tool
from tests.support.multisite import wait_for
from tests.support.nsbrowser import Report
from tests.support.rumworld import (
    DCS,
    HOSTS,
    RTTS,
    WEB_NAMES,
    WIDEIP,
    ZONE,
    RumWorld,
    base_config,
    require_rumworld,
    running_rumworld,
    unbound_config,
    with_rum,
    zone_text,
)
from tests.tools import wanem

# alone: it reads emulated delays through a browser, which load beside it would disturb
pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.alone]

#: what a browser's timing may read above the emulated RTT (the emulator, scheduling,
#: Chromium's own work), and below it (clock rounding)
ABOVE_MS, BELOW_MS = 25.0, 1.0
#: fetches of each object per page: the connect is timed once, the request FETCHES times
FETCHES = 3


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RumWorld]:
    require_rumworld()
    prefix = wanem.run_prefix("rw")
    with running_rumworld(tmp_path_factory.mktemp("rumworld"), prefix, ecs=True) as running:
        yield running
    assert wanem.list_namespaces(prefix) == [], f"namespaces with prefix {prefix} left behind"
    assert not Path(f"/etc/netns/{prefix}client").exists(), "the client's resolv.conf left behind"


def timing_page(world: RumWorld) -> Report:
    """A page that fetches each DC's object (by name) `FETCHES` times in a row, both DCs at
    once, and reports their timing: the first fetch opens the connection, the others reuse it."""
    urls = [world.object_url(dc) for dc in DCS]
    script = (
        f"const times = (u) => Array.from({{length: {FETCHES}}}, (_, i) => `${{u}}?n=${{i}}`);\n"
        "const one = async (u) => {\n"
        "  let t = '';\n"
        "  for (const v of times(u)) t = await (await fetch(v)).text();\n"
        "  return t;\n"
        "};\n"
        f"Promise.all({json.dumps(urls)}.map(one))"
        ".then((t) => { window.HARNESS_PAGE = t; }, (e) => { window.HARNESS_PAGE = String(e); });"
    )
    report = world.load(f"<script>{script}</script>", expect=[f"{u}?n={FETCHES - 1}" for u in urls], wait_page=True)
    assert report.complete, f"the page did not get the objects: {report.raw}"
    assert report.errors == [], report.errors
    assert report.page == ["ok dc1\n", "ok dc2\n"], f"the page read {report.page!r}"
    for u in urls:
        assert len(report.entries_for(u)) == FETCHES, report.entries
    return report


def assert_near(report: Report, expected: dict[str, float]) -> None:
    """Each DC's TCP connect and best request read at least the client's RTT to it (ms), the
    best request at most `ABOVE_MS` above (the one connect of a page may meet Chromium's own
    start on a busy machine: only its floor is checked)."""
    measured = {
        dc: {"connect": report.connect_ms(WEB_NAMES[dc]), "request": report.best_request_ms(WEB_NAMES[dc])}
        for dc in DCS
    }
    print(f"\nresource timing (ms) with RTTs {expected}: {measured}")
    for dc, rtt_ms in expected.items():
        for what, ms in measured[dc].items():
            assert ms >= rtt_ms - BELOW_MS, f"{dc} {what} {ms:.1f} ms, below the RTT {rtt_ms} ms: {measured}"
        request = measured[dc]["request"]
        assert request <= rtt_ms + ABOVE_MS, f"{dc} request {request:.1f} ms, RTT {rtt_ms} ms: {measured}"


def client_rtts_ms(world: RumWorld) -> dict[str, float]:
    return {dc: world.rtt("client", dc) * 1000 for dc in DCS}


def test_unbound_configs_check(tmp_path: Path) -> None:
    """Both LDNS configs (with and without client subnet) are valid for this unbound."""
    require_tool("unbound-checkconf", "unbound")
    for ecs in (False, True):
        conf = tmp_path / f"unbound-{ecs}.conf"
        conf.write_text(unbound_config(tmp_path, HOSTS["ldns"], [HOSTS[dc] for dc in DCS], ecs))
        out = subprocess.run(["unbound-checkconf", str(conf)], capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stdout + out.stderr


def test_configs_load(tmp_path: Path) -> None:
    """`base_config` and `with_rum` of it are configs a node takes (the latter: rum on, each
    member with its listener, the DCs' objects as targets)."""
    (tmp_path / f"{ZONE}.zone").write_text(zone_text())
    for made in (base_config(), with_rum(base_config())):
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump(made, sort_keys=False))
        config = load(path)
    assert config.rum is not None
    assert dict(config.rum.targets) == {
        "DC1": "http://dc1.web.test:8080/object",
        "DC2": "http://dc2.web.test:8080/object",
    }
    assert {m.name: str(m.rum) for m in config.sync_group.members} == {
        "gtm-dc1": "10.36.1.1:8036",
        "gtm-dc2": "10.36.2.1:8036",
    }


def test_page_times_both_dcs_through_the_wan(world: RumWorld) -> None:
    assert client_rtts_ms(world) == {"dc1": RTTS["client", "dc1"] * 1000, "dc2": RTTS["client", "dc2"] * 1000}
    report = timing_page(world)
    assert_near(report, client_rtts_ms(world))
    # the browser asked the client's resolver (nothing else knows these names)
    log = world.unbound_log()
    for name in WEB_NAMES.values():
        assert re.search(rf"{re.escape(HOSTS['client'])} {re.escape(name)}\. A IN", log), f"no query for {name}:\n{log}"


def test_swapped_delays_swap_what_the_page_reads(world: RumWorld) -> None:
    world.swap("client")
    try:
        assert client_rtts_ms(world) == {"dc1": 120.0, "dc2": 20.0}
        assert_near(timing_page(world), client_rtts_ms(world))
    finally:
        world.swap("client")


def test_gtms_answer_the_browser_through_its_resolver(world: RumWorld) -> None:
    """With rum on (no beacon yet), once both DCs have probed the LDNS, rtt sends it to dc2,
    its nearer DC (20 ms, where the client is 120 ms away): what the feature test must
    overturn with the client's own figures. The browser gets that answer too."""
    world.start_gtms(with_rum(base_config()))
    wait_for(
        lambda: [world.answer() for _ in range(3)] == ["dc2"] * 3,
        45,
        f"{WIDEIP} answered dc2 (the LDNS's nearer DC) through unbound, 3 times in a row",
        lambda: (world.dig(WIDEIP), world.cli("dc1", "ldns").stdout),
    )
    url = f"http://{WIDEIP}:8080/object"
    body = f"<script>fetch('{url}').then((r) => r.text()).then((t) => {{ window.HARNESS_PAGE = t; }});</script>"
    report = world.load(body, expect=[url], wait_page=True)
    assert report.complete and report.page == "ok dc2\n", report.raw
    log = world.unbound_log()
    assert re.search(rf"{re.escape(HOSTS['client'])} {re.escape(WIDEIP)}\. A IN NOERROR", log), log
