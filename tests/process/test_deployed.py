"""The group as deployed, operated from a host that is neither site (issue 14, item 9).

`tests/support/deployed.py` builds, with the WAN emulator, the two sites ``cnc`` and ``tel``
(a GTM node each, members of one sync group, and the HTTP backend of the site's virtual
server), the resolvers ``ldns1`` and ``ldns2`` (`unbound`) and a management host ``mgmt``.
Every member's API is on its site address over HTTPS (``api.tls``), with a client
certificate from the group CA (``api.client_certificates: required``; the operator's) and
a token (``api.token``). Site tel is reached over IPv6 only (its DNS, peer and API
addresses): the resolvers, the CLI and gtm-cnc's sync connection reach it over IPv6
(gtm-tel's own connection goes to gtm-cnc's IPv4 peer address). www.gslb.test is answered
by RTT (ldns1 is near CNC, ldns2 near TEL), then topology, then global availability. From
``mgmt``, with the real `gtmcluster` command line:

- `status` shows both nodes, connected and agreeing;
- `explain` and `ldns` answer from either node: RTT decides, with the emulated RTTs;
- `logs` merges both nodes' logs, read through their APIs;
- `disable datacenter TEL --reason ...` sends everybody to vs-cnc at once, with the reason
  shown by `status` and `explain`; `enable` gives TEL back;
- cutting site tel off makes vs-tel unavailable at cnc within the partition bound, and
  everybody gets vs-cnc; `logs -f` follows gtm-cnc meanwhile, saying it keeps asking
  gtm-tel; SIGTERM to both GTMs during the cut stops each within 3 s.

The commands' outputs go to test-artifacts/deployed-*.txt (for the README). The tests share
one world and run in order. Needs root, /dev/net/tun, `ip`, `unbound` and `dig`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from gtmcluster.cli.nodeapi import TIMEOUT
from tests.process.test_multisite import require, wait_answers
from tests.support.deployed import API_PORT, IPV6_SITE, MGMT, OPERATOR, TOKEN, Deployed, running_deployed
from tests.support.multisite import (
    LDNSES,
    MONITOR,
    SITES,
    SYNC_SETTINGS,
    WIDEIP,
    ZONE,
    in_namespace,
    stop_all_within,
    wait_for,
)
from tests.tools import wanem

pytestmark = [pytest.mark.process, pytest.mark.slow]

#: one-way delays: each LDNS is near one site and far from the other
DELAYS = {
    ("ldns1", "cnc"): 0.010,
    ("ldns1", "tel"): 0.060,
    ("ldns2", "cnc"): 0.060,
    ("ldns2", "tel"): 0.010,
    ("cnc", "tel"): 0.005,
    ("mgmt", "cnc"): 0.015,
    ("mgmt", "tel"): 0.015,
}
#: sync_group.heartbeat_timeout (the default: the config does not set it)
HEARTBEAT_TIMEOUT = 3.0
#: SIGTERM to exit, whatever the peers do (README, "Running a node")
STOP_BOUND = 3.0
#: what the partition bound allows beyond the timers: status polling, the emulator, scheduling
CUT_SLACK = 1.0
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
REASON = "fibre work at TEL"
NEAREST = {"ldns1": "vs-cnc", "ldns2": "vs-tel"}
EVERYBODY_CNC = {"ldns1": "vs-cnc", "ldns2": "vs-cnc"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    """The two sites, two LDNSes and the management host, running; afterwards no process and
    no namespace is left."""
    require(os.geteuid() == 0, "the deployed test needs root (network namespaces and TUN devices)")
    require(os.path.exists("/dev/net/tun"), "/dev/net/tun is missing (no TUN support)")
    for tool, package in (("ip", "iproute2"), ("unbound", "unbound"), ("dig", "bind9-dnsutils")):
        require(shutil.which(tool) is not None, f"`{tool}` is not installed (Debian package {package})")
    prefix = wanem.run_prefix("dp")
    with running_deployed(tmp_path_factory.mktemp("deployed"), prefix, DELAYS) as running:
        yield running
    assert wanem.list_namespaces(prefix) == [], f"namespaces with prefix {prefix} left behind"


#: what the remote commands printed, in order, for test-artifacts/
TRANSCRIPT: list[str] = []


def run_cli(world: Deployed, site: str | None, *args: str, expect: int = 0) -> str:
    """`gtmcluster ARGS` on the management host; its output, once its exit status is *expect*;
    the command and its output are kept for `save`."""
    out = world.cli(site, *args)
    node = f" --node {world.member(site)}" if site is not None else ""
    command, *rest = args
    shown = f"$ gtmcluster {command} --config cluster.yaml{node} {shlex.join(rest)}".rstrip()
    assert out.returncode == expect, f"{shown} exited {out.returncode}:\n{out.stdout}{out.stderr}"
    TRANSCRIPT.append(f"{shown}\n{out.stdout}{out.stderr}")
    return out.stdout


def save(name: str) -> None:
    """Write the commands kept since the last save to test-artifacts/deployed-NAME.txt."""
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"deployed-{name}.txt").write_text("\n".join(TRANSCRIPT) + "\n")
    TRANSCRIPT.clear()


def answered_by(world: Deployed, ldns: str, name: str, addresses: set[str]) -> bool:
    """*ldns* answers *name* with some of *addresses* and nothing else."""
    got = world.dig(ldns, name).addresses
    return bool(got) and set(got) <= addresses


def statuses(world: Deployed) -> dict[str, dict[str, Any] | None]:
    return {site: world.status(site) for site in SITES}


# -- the tests --------------------------------------------------------------------------------


def test_both_sites_converge_over_https_and_ipv6(world: Deployed) -> None:
    """Asked from the management host over HTTPS with the token, each GTM lists the other as
    connected and synced (gtm-tel's peer address is IPv6: the sync group runs over IPv6),
    both hold the same state and find both virtual servers available."""
    last: dict[str, dict[str, Any] | None] = {}

    def converged() -> bool:
        last.update(statuses(world))
        for status in last.values():
            if status is None:
                return False
            for peer in status["peers"]:
                if not peer["connected"] or not peer["synced"]:
                    return False
            if not all(vs["available"] for vs in status["health"]["virtual_servers"].values()):
                return False
        return len({s["state"]["digest"] for s in last.values() if s is not None}) == 1

    wait_for(converged, 40, "convergence over HTTPS and IPv6", lambda: json.dumps(last, indent=1)[:4000])
    for site, status in last.items():
        assert status is not None
        assert status["node"] == world.member(site)
        assert [p["name"] for p in status["peers"]] == [world.member(o) for o in SITES if o != site]


def test_the_api_wants_tls_and_the_token(world: Deployed) -> None:
    """From the management host, the API at tel's IPv6 address answers over HTTPS (its
    certificate from the group CA) to a client with the operator's certificate and the
    token, refuses a request without the token (401), shuts out a client without a
    certificate, and gives plain HTTP no answer."""
    address = world.gtm_address(IPV6_SITE)
    context = ssl.create_default_context(cafile=str(world.workdir / "certs" / "ca.pem"))
    context.check_hostname = False
    anonymous = ssl.create_default_context(cafile=str(world.workdir / "certs" / "ca.pem"))
    anonymous.check_hostname = False
    context.load_cert_chain(world.operator_cert, world.operator_cert.with_suffix(".key"))

    def get(scheme: str, token: str | None = None, tls: ssl.SSLContext = context) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(f"{scheme}://[{address}]:{API_PORT}/api/v1/status", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=3, context=tls if scheme == "https" else None) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    assert in_namespace(world.wan.namespace(MGMT), lambda: get("https", TOKEN)) == 200
    assert in_namespace(world.wan.namespace(MGMT), lambda: get("https")) == 401
    with pytest.raises((urllib.error.URLError, OSError)):  # no certificate: the handshake fails
        in_namespace(world.wan.namespace(MGMT), lambda: get("https", TOKEN, anonymous))
    with pytest.raises((urllib.error.URLError, OSError)):
        in_namespace(world.wan.namespace(MGMT), lambda: get("http"))


def test_status_from_the_management_host(world: Deployed) -> None:
    """`gtmcluster status` on the management host asks both nodes (one over IPv4, one over
    IPv6, both over HTTPS) and finds them agreeing (exit 0)."""
    out = run_cli(world, None, "status")
    for site in SITES:
        assert world.member(site) in out, out
    data = json.loads(run_cli(world, None, "status", "--json"))
    TRANSCRIPT.pop()  # the JSON is for the test, not the README
    assert data, data
    save("status")


def test_each_ldns_is_sent_to_its_nearest_data_center(world: Deployed) -> None:
    """Once both data centers have probed them, clients behind ldns1 get vs-cnc (10 ms away,
    TEL 60 ms) and clients behind ldns2 get vs-tel (10 ms away), the GTM at tel asked and
    probing over IPv6; asked directly at its IPv6 address, it gives ldns2 vs-tel too."""
    wait_answers(world, NEAREST, 40, "answers by RTT (ldns1: vs-cnc, ldns2: vs-tel)")
    direct = world.dig("ldns2", server=world.gtm_address(IPV6_SITE))
    assert direct.status == "NOERROR", f"the GTM at tel, asked over IPv6:\n{direct.output}"
    assert direct.addresses == [world.addresses["tel"]], f"the GTM at tel, asked over IPv6:\n{direct.output}"


def test_explain_and_ldns_from_the_management_host(world: Deployed) -> None:
    """`gtmcluster explain` on either node says RTT chose vs-cnc for ldns1; `gtmcluster ldns`
    on either node shows ldns1's two paths with the emulated RTTs (twice the one-way delay,
    give or take 25 ms)."""
    ldns1 = LDNSES["ldns1"]
    decisions: dict[str, dict[str, Any]] = {}

    def by_rtt() -> bool:
        for site in SITES:
            decisions[site] = json.loads(run_cli(world, site, "explain", WIDEIP, "--ldns", ldns1, "--json"))
            TRANSCRIPT.pop()
        return all(d["method"] == "rtt" for d in decisions.values())

    # ldns1 also asks tel over IPv6, as another LDNS (its IPv6 address, probed on its own):
    # the paths to its IPv4 address may still be on their way
    # (40 s: in the parallel test run the probes through the WAN emulator once took over 20)
    wait_for(by_rtt, 40, "RTT deciding for ldns1 on both nodes", lambda: json.dumps(decisions, indent=1))
    for decision in decisions.values():
        assert decision["answer"] == [world.addresses["cnc"]], decision
    out = run_cli(world, "tel", "explain", WIDEIP, "--ldns", ldns1)
    assert "rtt" in out, out
    for site in SITES:
        table = json.loads(run_cli(world, site, "ldns", "--json"))
        TRANSCRIPT.pop()
        paths = {p["datacenter"]: p for e in table["ldns"] if e["address"] == ldns1 for p in e["paths"]}
        assert set(paths) == {"CNC", "TEL"}, table
        for other, (_, _, dc, _) in SITES.items():
            expected = round(2 * DELAYS["ldns1", other] * 1_000_000)
            assert abs(paths[dc]["rtt_us"] - expected) <= 25_000, (dc, paths[dc], expected)
        run_cli(world, site, "ldns")
    save("explain-ldns")


def test_logs_of_both_nodes_from_the_management_host(world: Deployed) -> None:
    """`gtmcluster logs --lines 5` reads both nodes' logs through their APIs and prints the
    lines of each, prefixed with its name."""
    out = run_cli(world, None, "logs", "--lines", "5")
    for site in SITES:
        assert any(line.startswith(world.member(site)) for line in out.splitlines()), out
    save("logs")


def test_disable_and_enable_a_datacenter_from_the_management_host(world: Deployed) -> None:
    """`gtmcluster disable datacenter TEL --reason ...` (sent to gtm-cnc) sends both LDNSes'
    clients to vs-cnc; `status` and `explain` at gtm-tel show who (the name on the
    operator's client certificate) and why; `enable` gives TEL back."""
    out = run_cli(world, "cnc", "disable", "datacenter", "TEL", "--reason", REASON)
    assert f"by {OPERATOR} " in out and REASON in out, out
    wait_answers(world, EVERYBODY_CNC, 15, "vs-cnc for everybody while TEL is disabled")
    status = run_cli(world, "tel", "status")
    assert f"by {OPERATOR} " in status and REASON in status, status
    decision = run_cli(world, "tel", "explain", WIDEIP, "--ldns", LDNSES["ldns2"])
    assert "vs-cnc" in decision or world.addresses["cnc"] in decision, decision
    run_cli(world, "tel", "enable", "datacenter", "TEL", "--reason", "work done")
    wait_answers(world, NEAREST, 15, "ldns2's clients back at vs-tel once TEL is enabled")
    save("admin")


def test_a_config_pushed_from_the_management_host_reaches_both_sites(world: Deployed) -> None:
    """The operator adds a wide IP to the group's config on the management host and pushes
    it through gtm-cnc (`gtmcluster config push`, over HTTPS with its client certificate
    and the token); gtm-tel takes it over the sync group (IPv6), both resolvers get answers
    for it, and `config history` at gtm-tel lists the generation."""
    raw = yaml.safe_load(world.config_path.read_text())
    pushed = f"pushed.{ZONE}"
    raw["wideips"][pushed] = {"type": "A", "pools": ["www"]}
    world.config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = run_cli(world, "cnc", "config", "push")
    assert f"{world.member('tel')}: runs it" in out, out
    vs_addresses = {world.addresses[site] for site in SITES}

    for ldns in LDNSES:
        wait_for(partial(answered_by, world, ldns, pushed, vs_addresses), 15, f"{ldns} answered for {pushed}")
    history = run_cli(world, "tel", "config", "history")
    assert "(running)" in history and world.member("cnc") in history, history
    save("config")


def test_a_cut_off_site_is_out_within_the_partition_bound(world: Deployed) -> None:
    """Site tel (IPv6) cut off from every other host: gtm-cnc finds gtm-tel silent and vs-tel
    unavailable within interval x down_after + timeout + heartbeat_timeout, while the
    connection is still open; clients behind both LDNSes get vs-cnc. The times are printed."""
    world.cut_off(IPV6_SITE)
    cut = time.monotonic()
    last: dict[str, Any] = {}
    seen: dict[str, float] = {}

    def cnc_sees_tel_out() -> bool:
        status = world.status("cnc")
        last["gtm-cnc"] = status
        if status is None:
            return False
        now = time.monotonic() - cut
        peer = next(p for p in status["peers"] if p["name"] == world.member("tel"))
        vs = status["health"]["virtual_servers"][world.vs("tel")]
        if peer["connected"] and peer["counted"] is False:
            seen.setdefault("silent", now)
        if not vs["available"]:
            seen.setdefault("out", now)
            seen.setdefault("out while connected" if peer["connected"] else "out after the close", now)
        return not vs["available"]

    wait_for(cnc_sees_tel_out, 30, "vs-tel unavailable at gtm-cnc", lambda: last, poll=0.05)
    bound = MONITOR["interval"] * MONITOR["down_after"] + MONITOR["timeout"] + HEARTBEAT_TIMEOUT
    print(
        f"\nsite tel (IPv6) cut off: at cnc, gtm-tel silent after {seen.get('silent', -1):.2f}s, vs-tel out "
        f"after {seen['out']:.2f}s (bound {bound:g}s; idle_timeout {SYNC_SETTINGS['idle_timeout']}s); "
        f"load {os.getloadavg()[0]:.2f}"
    )
    assert "out while connected" in seen, f"vs-tel went out only with the connection: {seen}"
    assert seen["out"] <= bound + CUT_SLACK, f"vs-tel out {seen['out']:.2f}s after the cut; the bound is {bound:g}s"
    wait_answers(world, EVERYBODY_CNC, 30, "vs-cnc for everybody while tel is cut off")
    out = run_cli(world, None, "status", expect=1)
    assert world.member("tel") in out, out
    save("partition")


def test_logs_follow_during_the_partition(world: Deployed) -> None:
    """With site tel still cut off, `gtmcluster logs -f --since 2m` on the management host
    prints gtm-cnc's lines at once (among them that gtm-tel went silent); it says that gtm-tel
    does not answer and that it keeps asking once its connection attempt times out
    (`nodeapi.TIMEOUT`, 5 s: not the stream's 45 s read timeout); it goes on following until
    Ctrl-C (SIGINT), after which it exits 0. The time of the note is printed."""
    argv, env = world.cli_command(None, "logs", "-f", "--since", "2m")
    path = world.workdir / "logs-follow.out"
    start = time.monotonic()
    with path.open("wb") as output:
        proc = world.wan.popen(MGMT, argv, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=world.workdir)

    def text() -> str:
        return path.read_text(errors="replace")

    try:

        def cnc_shown() -> bool:
            return any(line.startswith("gtm-cnc |") and "peer gtm-tel silent" in line for line in text().splitlines())

        wait_for(cnc_shown, 15, "gtm-cnc's line on gtm-tel going silent", lambda: text()[-3000:])

        def tel_noted() -> bool:
            return "gtmcluster logs: gtm-tel: " in text() and "asking again until it answers" in text()

        wait_for(tel_noted, TIMEOUT + 5, "a note that gtm-tel does not answer", lambda: text()[-3000:])
        print(f"\nlogs -f: gtm-tel noted as not answering {time.monotonic() - start:.1f}s after the start")
        assert proc.poll() is None, f"logs -f exited {proc.returncode}:\n{text()}"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"logs -f exited {proc.returncode} after SIGINT:\n{text()}"
    lines = [line for line in text().splitlines() if "gtm-tel" in line and "Scheduling retry" not in line]
    TRANSCRIPT.append(
        "$ gtmcluster logs --config cluster.yaml -f --since 2m   # its lines on gtm-tel\n" + "\n".join(lines)
    )
    save("logs-follow")


def test_sigterm_during_the_partition_stops_both_nodes_within_3s(world: Deployed) -> None:
    """With site tel still cut off, SIGTERM to both GTMs: each exits within 3 s."""
    stop_all_within(world, STOP_BOUND)


def test_no_node_logged_a_traceback(world: Deployed) -> None:
    """Neither node's log (nor its output) holds a traceback or an unhandled error."""
    for site in SITES:
        text = world.log_text(site) + world.output(world.member(site))
        assert text, f"{world.member(site)} wrote no log"
        assert "Traceback" not in text, f"{world.member(site)}:\n{text[-6000:]}"
        assert "Unhandled" not in text, f"{world.member(site)}:\n{text[-6000:]}"
