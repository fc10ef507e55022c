"""Proximity across a real (emulated) WAN: two GTM sites, two resolvers, measured paths.

The acceptance test of proximity (issue 5, part 5). `tests/support/multisite.py` builds, with
the WAN emulator (`tests/tools/wanem.py`), four network namespaces: the sites ``cnc`` and
``tel`` (a GTM node each, members of one sync group, and the HTTP backend of the site's
virtual server) and the resolvers ``ldns1`` and ``ldns2`` (`unbound`, whose stub zone
gslb.test points at both GTMs). One-way delays (and hops)::

            cnc            tel
    ldns1  120 ms (6)     20 ms (3)
    ldns2   20 ms (3)    120 ms (6)        cnc <-> tel: 5 ms

www.gslb.test is answered by RTT first, then topology (TEL for every LDNS), then global
availability. With clients asking through each resolver (`dig` in the LDNS namespaces):

- the two nodes connect and hold the same state;
- an LDNS's first query is answered at once (topology: vs-tel); once both data centers have
  probed it, each LDNS gets the data center it is nearer to: ldns1 vs-tel, ldns2 vs-cnc;
- both nodes' `gtmcluster ldns` show the same paths, with the emulated RTTs and hops;
- swapping the delays moves both answers after the re-probes;
- cutting site cnc off makes vs-cnc unavailable within the partition bound (gtm-cnc goes
  silent at tel before its connection is closed) and its GTM silent, and the tel site goes
  on answering everybody (vs-tel);
- SIGTERM to both GTMs during the cut stops each within 3 s.

The tests share one world and run in order; each waits (polls with a deadline) for what it
checks. Needs root, /dev/net/tun, `ip`, `unbound` and `dig`: skipped without them, except
in CI (``CI=true``), where a missing capability fails the run. Every process and namespace
is removed afterwards, also on failure (the fixture checks that none is left).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI
from tests.support.multisite import (
    LDNSES,
    MONITOR,
    SITES,
    SYNC_SETTINGS,
    TIMEOUT,
    WIDEIP,
    MultiSite,
    running_multisite,
    stop_all_within,
    wait_for,
)
from tests.tools import wanem

# alone: its RTTs through the WAN emulator must be within 25 ms of the emulated delays, and
# load beside it (dnsperf) added 34 ms to a path; its tests build on each other's queries
pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.alone]

#: one-way delays at the start: each LDNS is near one site and far from the other
NEAR, FAR, BETWEEN_SITES = 0.020, 0.120, 0.005
DELAYS = {
    ("ldns1", "cnc"): FAR,
    ("ldns1", "tel"): NEAR,
    ("ldns2", "cnc"): NEAR,
    ("ldns2", "tel"): FAR,
    ("cnc", "tel"): BETWEEN_SITES,
}
SWAPPED = {
    ("ldns1", "cnc"): NEAR,
    ("ldns1", "tel"): FAR,
    ("ldns2", "cnc"): FAR,
    ("ldns2", "tel"): NEAR,
}
#: routers between each LDNS and each site (the emulator lowers the TTL by that much)
HOPS = {("ldns1", "cnc"): 6, ("ldns1", "tel"): 3, ("ldns2", "cnc"): 3, ("ldns2", "tel"): 6}
#: how far a measured path RTT may be from twice the one-way delay
RTT_SLACK_US = 25_000
#: the same answers this many rounds in a row count as settled (not a tie taken in turn)
STEADY = 3
#: sync_group.heartbeat_timeout (the default: the multisite config does not set it)
HEARTBEAT_TIMEOUT = 3.0
#: SIGTERM to exit, whatever the peers do (README, "Running a node")
STOP_BOUND = 3.0
#: what the partition bound allows beyond the timers: status polling, the emulator, scheduling
CUT_SLACK = 1.0
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def require(condition: bool, reason: str) -> None:
    """Skip without *condition*, or fail in CI, where a missing capability is an error."""
    if not condition:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiSite]:
    """The two sites and two LDNSes, running; afterwards no process and no namespace is left."""
    require(os.geteuid() == 0, "the multi-site test needs root (network namespaces and TUN devices)")
    require(os.path.exists("/dev/net/tun"), "/dev/net/tun is missing (no TUN support)")
    for tool, package in (("ip", "iproute2"), ("unbound", "unbound"), ("dig", "bind9-dnsutils")):
        require(shutil.which(tool) is not None, f"`{tool}` is not installed (Debian package {package})")
    prefix = wanem.run_prefix("ms")
    with running_multisite(tmp_path_factory.mktemp("multisite"), prefix, DELAYS, HOPS) as running:
        yield running
    assert wanem.list_namespaces(prefix) == [], f"namespaces with prefix {prefix} left behind"


# -- helpers ----------------------------------------------------------------------------------


def answers(world: MultiSite) -> dict[str, str | None]:
    """What a client behind each LDNS is sent to now (vs-cnc, vs-tel, or what came)."""
    return {host: world.answer(host) for host in LDNSES}


def wait_answers(
    world: MultiSite,
    expected: dict[str, str],
    timeout: float,
    what: str,
    details: Callable[[], str] | None = None,
) -> float:
    """Ask through every LDNS until each gets *expected* `STEADY` rounds in a row; the seconds
    it took. On failure the message shows the answers seen, round by round."""
    seen: list[dict[str, str | None]] = []
    streak = [0]

    def settled() -> bool:
        got = answers(world)
        seen.append(got)
        streak[0] = streak[0] + 1 if got == expected else 0
        return streak[0] >= STEADY

    def report() -> str:
        rounds = "\n".join(f"  {r}" for r in seen[-12:])
        extra = f"\n{details()}" if details is not None else ""
        return f"last answers (of {len(seen)} rounds):\n{rounds}{extra}"

    return wait_for(settled, timeout, what, report)


def ldns_json(world: MultiSite, site: str) -> dict[str, Any]:
    """`gtmcluster ldns --json` of the node at *site*, parsed."""
    out = world.cli(site, "ldns", "--json")
    assert out.returncode == 0, f"gtmcluster ldns on {world.member(site)}: {out.stderr}"
    table: dict[str, Any] = json.loads(out.stdout)
    return table


def paths_of(table: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(LDNS, data center) -> what the path record holds (the age is each node's own count)."""
    return {
        (entry["address"], p["datacenter"]): {k: v for k, v in p.items() if k != "age"}
        for entry in table["ldns"]
        for p in entry["paths"]
    }


def explain(world: MultiSite, site: str, ldns: str) -> dict[str, Any]:
    """`gtmcluster explain --json` of www.gslb.test for *ldns* on the node at *site*."""
    out = world.cli(site, "explain", WIDEIP, "--ldns", ldns, "--json")
    assert out.returncode == 0, f"gtmcluster explain on {world.member(site)}: {out.stderr}"
    decision: dict[str, Any] = json.loads(out.stdout)
    return decision


def proximity_details(world: MultiSite) -> Callable[[], str]:
    """For failure messages: each node's paths (smoothed RTT, last sample, age) and its
    decision for each LDNS."""

    def show() -> str:
        parts = []
        for site in SITES:
            table = world.cli(site, "ldns", "--json")
            lines = [f"--- gtmcluster ldns --json on {world.member(site)}, in short:{table.stderr}"]
            if table.returncode == 0:
                for (ldns, dc), p in paths_of(json.loads(table.stdout)).items():
                    lines.append(
                        f"  {dc} -> {ldns}: rtt {p['rtt_us']} us (last sample {p['last_rtt_us']} us) measured by "
                        f"{p['measured_by']}, failures {p['failures']}"
                    )
                for entry in json.loads(table.stdout)["ldns"]:
                    ages = ", ".join(f"{p['datacenter']} {p['age']:.1f}s" for p in entry["paths"])
                    lines.append(f"  ages of the paths to {entry['address']}: {ages}")
            parts.append("\n".join(lines))
            for host, address in LDNSES.items():
                out = world.cli(site, "explain", WIDEIP, "--ldns", address)
                parts.append(f"--- explain for {host} on {world.member(site)}:\n{out.stdout}{out.stderr}")
        return "\n".join(parts)

    return show


def statuses(world: MultiSite) -> dict[str, dict[str, Any] | None]:
    """Each node's /api/v1/status (None for a node that does not answer)."""
    return {site: world.status(site) for site in SITES}


# -- the tests --------------------------------------------------------------------------------


def test_both_sites_converge(world: MultiSite) -> None:
    """Each GTM's /api/v1/status (asked inside its site's namespace) lists the other as
    connected and synced, from the right data center and with the same config, both hold
    the same state (equal digests), and both find both virtual servers available."""
    last: dict[str, dict[str, Any] | None] = {}

    def converged() -> bool:
        last.update(statuses(world))
        if any(s is None for s in last.values()):
            return False
        for site, status in last.items():
            assert status is not None
            peers = {p["name"]: p for p in status["peers"]}
            for other in SITES.keys() - {site}:
                peer = peers.get(world.member(other))
                if peer is None or not peer["connected"] or not peer["synced"]:
                    return False
            if not all(vs["available"] for vs in status["health"]["virtual_servers"].values()):
                return False
        return len({s["state"]["digest"] for s in last.values() if s is not None}) == 1

    wait_for(converged, 30, "convergence of gtm-cnc and gtm-tel", lambda: json.dumps(last, indent=1)[:4000])
    for site, status in last.items():
        assert status is not None
        assert status["node"] == world.member(site)
        for peer in status["peers"]:
            other = next(s for s in SITES if world.member(s) == peer["name"])
            assert peer["datacenter"] == SITES[other][2], peer
            assert peer["config_matches"] is True, peer


def test_each_ldns_is_sent_to_its_nearest_data_center(world: MultiSite) -> None:
    """An LDNS's first query is answered at once by the next method, topology (vs-tel for
    everybody), while both data centers probe it. Once they have, a client behind ldns1 gets
    vs-tel (TEL is 20 ms from ldns1, CNC 120 ms) and one behind ldns2 gets vs-cnc (CNC is 20
    ms from it): the data center with the lower RTT for that LDNS. Both nodes say that the
    rtt method decided it."""
    for host in LDNSES:
        first = world.dig(host)
        assert first.status == "NOERROR", f"{host}'s first query:\n{first.output}"
        assert first.addresses == [world.addresses["tel"]], f"{host}'s first query (topology: vs-tel):\n{first.output}"
        assert first.seconds < 1.5, f"{host}'s first query took {first.seconds:.2f}s:\n{first.output}"

    wait_answers(
        world,
        {"ldns1": "vs-tel", "ldns2": "vs-cnc"},
        30,
        "answers by RTT (ldns1: vs-tel, ldns2: vs-cnc)",
        proximity_details(world),
    )
    for site in SITES:
        for host, expected in (("ldns1", "tel"), ("ldns2", "cnc")):
            decision = explain(world, site, LDNSES[host])
            assert decision["method"] == "rtt", f"{world.member(site)} for {host}: {decision}"
            assert decision["answer"] == [world.addresses[expected]], f"{world.member(site)} for {host}: {decision}"


def test_every_node_shows_the_same_paths_with_the_emulated_rtts(world: MultiSite) -> None:
    """`gtmcluster ldns --json` on gtm-cnc and on gtm-tel (each in its namespace) list the
    same four paths (two LDNSes, two data centers) with the same figures: each path is one
    record, measured by the node of its data center and replicated. The RTTs are twice the
    emulated one-way delays (± 25 ms): CNC-ldns1 and TEL-ldns2 about 240 ms, TEL-ldns1 and
    CNC-ldns2 about 40 ms; the hop counts (from the TTL of the LDNS's replies) are the
    emulated ones. The text form and an explanation go to test-artifacts/."""
    expected_keys = {(address, SITES[site][2]) for address in LDNSES.values() for site in SITES}
    tables: dict[str, dict[str, Any]] = {}

    def same() -> bool:
        tables.update({site: ldns_json(world, site) for site in SITES})
        cnc, tel = (paths_of(tables[site]) for site in SITES)
        return set(cnc) == expected_keys and cnc == tel

    wait_for(same, 20, "the same four paths on both nodes", lambda: json.dumps(tables, indent=1))
    paths = paths_of(tables["cnc"])
    for site, (_, member, dc, _) in SITES.items():
        for host, address in LDNSES.items():
            path = paths[address, dc]
            expected = round(2 * DELAYS[host, site] * 1_000_000)
            assert abs(path["rtt_us"] - expected) <= RTT_SLACK_US, f"{dc} -> {host}: {path}, expected ~{expected} µs"
            assert path["hops"] == HOPS[host, site], f"{dc} -> {host}: {path}, expected {HOPS[host, site]} hops"
            assert path["measured_by"] == member, f"{dc} -> {host}: {path}"
            assert path["completion_rate"] == 10000, f"{dc} -> {host}: {path}"
            assert path["protocol"] == "dns_dot", f"{dc} -> {host}: {path}"

    ARTIFACTS.mkdir(exist_ok=True)
    texts = []
    for site in SITES:
        out = world.cli(site, "ldns")
        assert out.returncode == 0, out.stderr
        texts.append(f"$ gtmcluster ldns --config cluster.yaml --node {world.member(site)}\n{out.stdout}")
    (ARTIFACTS / "multisite-ldns.txt").write_text("\n".join(texts))
    ldns1 = LDNSES["ldns1"]
    out = world.cli("cnc", "explain", WIDEIP, "--ldns", ldns1)
    assert out.returncode == 0, out.stderr
    command = f"$ gtmcluster explain --config cluster.yaml --node {world.member('cnc')} {WIDEIP} --ldns {ldns1}"
    (ARTIFACTS / "multisite-explain.txt").write_text(f"{command}\n{out.stdout}")


def test_swapped_delays_move_the_answers(world: MultiSite) -> None:
    """With the delays swapped (ldns1 now 20 ms from CNC and 120 ms from TEL, ldns2 the
    reverse) and clients still asking, each stale path is probed again (probe_interval is
    10 s) and within a minute ldns1's clients get vs-cnc and ldns2's get vs-tel."""
    world.set_delays(SWAPPED)
    wait_answers(
        world,
        {"ldns1": "vs-cnc", "ldns2": "vs-tel"},
        60,
        "answers moved by the swapped delays (ldns1: vs-cnc, ldns2: vs-tel)",
        proximity_details(world),
    )


def test_a_cut_off_site_is_out_for_everybody(world: MultiSite) -> None:
    """Site cnc cut off from every other host, both ways: gtm-tel finds gtm-cnc silent while
    its connection is still open (packets are dropped, nothing resets it) and stops counting
    its verdicts, so vs-cnc (which gtm-cnc still sees up) is unavailable at tel within the
    partition bound, interval x down_after + timeout + heartbeat_timeout, and before the
    connection is closed for silence (`idle_timeout`); then gtm-tel loses its peer; the GTM
    at cnc answers nobody (queries to it from ldns1, ldns2 and tel time out), and clients
    behind both LDNSes get vs-tel, from the GTM at tel (unbound gives up on the silent
    server by itself). The times are printed."""
    world.cut_off("cnc")
    cut = time.monotonic()
    cnc_address = world.addresses["cnc"]
    last: dict[str, Any] = {}
    seen: dict[str, float] = {}  # when gtm-tel first showed each change, seconds after the cut

    def tel_sees_cnc_gone() -> bool:
        status = world.status("tel")
        last["gtm-tel"] = status
        if status is None:
            return False
        now = time.monotonic() - cut
        peer = next(p for p in status["peers"] if p["name"] == world.member("cnc"))
        vs = status["health"]["virtual_servers"][world.vs("cnc")]
        if peer["connected"] and peer["counted"] is False:
            seen.setdefault("silent", now)
        if not vs["available"]:
            seen.setdefault("out", now)
            seen.setdefault("out while connected" if peer["connected"] else "out after the close", now)
        if not peer["connected"]:
            seen.setdefault("closed", now)
        return not peer["connected"] and not vs["available"]

    wait_for(tel_sees_cnc_gone, 30, "gtm-tel without its peer and with vs-cnc unavailable", lambda: last, poll=0.05)
    bound = MONITOR["interval"] * MONITOR["down_after"] + MONITOR["timeout"] + HEARTBEAT_TIMEOUT
    print(
        f"\nsite cut off: at tel, gtm-cnc silent after {seen.get('silent', -1):.2f}s, vs-cnc out after "
        f"{seen['out']:.2f}s (bound {bound:g}s), connection closed after {seen['closed']:.2f}s "
        f"(idle_timeout {SYNC_SETTINGS['idle_timeout']}s); load {os.getloadavg()[0]:.2f}"
    )
    assert "silent" in seen and "out while connected" in seen, f"vs-cnc went out only with the connection: {seen}"
    assert seen["out"] <= bound + CUT_SLACK, f"vs-cnc out {seen['out']:.2f}s after the cut; the bound is {bound:g}s"
    gone = next(p for p in last["gtm-tel"]["peers"] if p["name"] == world.member("cnc"))
    assert gone["synced"] is None, gone  # not known while apart (it was synced before)
    wait_answers(world, {"ldns1": "vs-tel", "ldns2": "vs-tel"}, 30, "vs-tel for everybody", proximity_details(world))
    for host in (*LDNSES, "tel"):
        got = world.dig(host, server=cnc_address, wait=1)
        assert got.status == TIMEOUT, f"the GTM at cnc answered {host}:\n{got.output}"
    status = world.status("tel")
    assert status is not None
    assert status["health"]["virtual_servers"][world.vs("tel")]["available"], status["health"]


def test_sigterm_during_the_partition_stops_both_nodes_within_3s(world: MultiSite) -> None:
    """With site cnc still cut off, SIGTERM to both GTMs: each exits within 3 s (the cut-off
    peer never answers; whatever is open to it is aborted, a dial to it cancelled), and
    says it shut down. The times are printed."""
    stop_all_within(world, STOP_BOUND)
    for site in SITES:
        assert "Server Shut Down." in world.log_text(site), world.log_text(site)[-3000:]


def test_no_node_logged_a_traceback(world: MultiSite) -> None:
    """Probing, re-probing, a swap and a cut are ordinary operation: neither node's log (nor
    its output) holds a traceback or an unhandled error."""
    for site in SITES:
        text = world.log_text(site) + world.output(world.member(site))
        assert text, f"{world.member(site)} wrote no log"
        assert "Traceback" not in text, f"{world.member(site)}:\n{text[-6000:]}"
        assert "Unhandled" not in text, f"{world.member(site)}:\n{text[-6000:]}"
