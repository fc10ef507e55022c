"""Failover with real backends: one `twistd -n gtm` node, HTTP backends on loopback, `dig`.

Every virtual server with a monitor is a real `gtmcluster.cli.backend` process on its own
127.x address. The tests kill and restart those processes and measure, with `dig` polled
every ~100 ms, when the node's answers change:

- a killed server stops being answered within ``interval x down_after + timeout`` (and not
  long before ``(down_after - 1) x interval``: it takes several failures), and is answered
  again within ``up_after x interval`` of its return;
- a link with one dead and one live target stays up; with both dead it goes down;
- when every pool of a wide IP is down, the wide IP's `failure_response` is answered;
- each change of a server is logged as a structured event with from, to and the reason.

All cases share one node (and its config), each on its own virtual servers and wide IP.
Measured times appear in the assertion messages. `SLACK` is what the bounds allow beyond
the monitors' own timing: the poll period, dig's round trip and process scheduling.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.support import configs
from tests.support.backends import Backend, running_backends
from tests.support.dig import DigResult, dig
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

T = TypeVar("T")

DNS_PORT = 5353
BACKEND_PORT = 8080
#: an asker in region r1 (127.0.1.0/24), for which topology prefers data center DC1
R1_SOURCE = "127.0.1.77"
POLL = 0.1
SLACK = 0.5
SOA_TEXT = "ns1.example.test. hostmaster.example.test. 1 3600 600 86400 300"

#: vs1 and vs2 (the failover case)
WEB: dict[str, Any] = {
    "type": "http",
    "interval": 1,
    "timeout": 0.5,
    "up_after": 2,
    "down_after": 3,
    "path": "/",
    "expect_status": [200],
    "expect_body": "ok from",
}
#: vsd1 and vsd2 (the failure response cases)
FAST: dict[str, Any] = {"type": "http", "interval": 0.5, "timeout": 0.25, "up_after": 1, "down_after": 2, "path": "/"}
#: the link's targets
UPLINK: dict[str, Any] = {"type": "tcp", "interval": 0.5, "timeout": 0.25, "up_after": 1, "down_after": 2}

GSLB = "gslb.example.test"
LINKED = "linked.example.test"
VS_LINKED = "10.0.1.50"  # vsl: no monitor of its own, bound to link lnk
VS_ALT = "10.0.2.50"  # vsalt: no monitor, in DC2 (the linked wide IP's alternative)
FALLBACK_IP = "192.0.2.222"
FAILURES = ("servfail", "nxdomain", "refused", "fallback_ip", "return_to_dns", "drop")


def failure_wideip(kind: str) -> str:
    return f"fail-{kind.replace('_', '-')}.example.test"


def down_bound(monitor: dict[str, Any]) -> float:
    """interval x down_after + timeout: the longest a dead server may still be answered."""
    return float(monitor["interval"] * monitor["down_after"] + monitor["timeout"])


def down_floor(monitor: dict[str, Any]) -> float:
    """(down_after - 1) x interval: down_after failures in a row cannot come sooner."""
    return float((monitor["down_after"] - 1) * monitor["interval"])


def up_bound(monitor: dict[str, Any]) -> float:
    """up_after x interval: the longest before a returned server is answered again."""
    return float(monitor["up_after"] * monitor["interval"])


def up_floor(monitor: dict[str, Any]) -> float:
    return float((monitor["up_after"] - 1) * monitor["interval"])


@dataclass
class Cluster:
    """The node under test, the addresses of its virtual servers and their backends."""

    node: RunningNode
    addresses: dict[str, str]  # virtual server (or link target) -> loopback address
    backends: dict[str, Backend]

    def ask(self, name: str, rdtype: str = "A", source: str | None = None) -> DigResult | None:
        """dig for *name*'s *rdtype* records; None when no reply came (one try, one second).

        (dig.dig raises AssertionError for no reply, or a YAMLError: with no reply, dig's
        ``;;`` header lines before its DIG_ERROR document are not YAML.)"""
        try:
            return dig(self.node.address, self.node.port, name, rdtype, "+tries=1", "+time=1", source=source)
        except (AssertionError, yaml.YAMLError):
            return None

    def answer(self, name: str, source: str | None = None) -> list[str]:
        result = self.ask(name, source=source)
        return result.answer_data() if result is not None else []

    def wait_log(self, text: str, timeout: float = 10.0) -> str:
        """Wait until the node's log has a line containing *text*; return that line."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.node.log_text().splitlines():
                if text in line:
                    return line
            if time.monotonic() >= deadline:
                raise AssertionError(f"no log line with {text!r} within {timeout}s:\n{self.node.log_text()}")
            time.sleep(POLL)


def poll_until(probe: Callable[[], T], done: Callable[[T], bool], deadline: float) -> tuple[float | None, T]:
    """Run *probe* every POLL seconds until *done* holds for its value or *deadline* passes.

    Returns (the monotonic time the satisfying probe was sent, or None, and the last value)."""
    while True:
        sent = time.monotonic()
        value = probe()
        if done(value):
            return sent, value
        if sent >= deadline:
            return None, value
        time.sleep(max(0.0, min(POLL - (time.monotonic() - sent), deadline - time.monotonic())))


def cluster_config(address: str, addresses: dict[str, str]) -> dict[str, Any]:
    """configs.base() with the test's monitors, link, virtual servers, pools and wide IPs."""
    config = configs.base(address, DNS_PORT)
    config["monitors"] = {"web": WEB, "fast": FAST, "uplink": UPLINK}
    config["links"] = {
        "lnk": {
            "datacenter": "DC1",
            "monitor": "uplink",
            "targets": [f"{addresses['dead']}:{BACKEND_PORT}", f"{addresses['live']}:{BACKEND_PORT}"],
        }
    }

    def backed(name: str, datacenter: str, monitor: str) -> dict[str, Any]:
        return {"address": addresses[name], "port": BACKEND_PORT, "datacenter": datacenter, "monitor": monitor}

    config["virtual_servers"] = {
        "vs1": backed("vs1", "DC1", "web"),
        "vs2": backed("vs2", "DC2", "web"),
        "vsl": {"address": VS_LINKED, "datacenter": "DC1", "link": "lnk"},
        "vsalt": {"address": VS_ALT, "datacenter": "DC2"},
        "vsd1": backed("vsd1", "DC1", "fast"),
        "vsd2": backed("vsd2", "DC2", "fast"),
    }
    config["topology"] = [
        {"ldns": "region r1", "server": "datacenter DC1", "score": 100},
        {"ldns": "any", "server": "datacenter DC2", "score": 10},
    ]
    config["pools"] = {
        "p": {"members": ["vs1", "vs2"], "load_balancing": {"preferred": "topology"}, "ttl": 30},
        "pl": {"members": ["vsl", "vsalt"], "load_balancing": {"preferred": "topology"}, "ttl": 30},
        "pd1": {"members": ["vsd1"], "ttl": 30},
        "pd2": {"members": ["vsd2"], "ttl": 30},
    }
    config["wideips"] = {
        GSLB: {"type": "A", "pools": ["p"]},
        LINKED: {"type": "A", "pools": ["pl"]},
    }
    for kind in FAILURES:
        wideip: dict[str, Any] = {"type": "A", "pools": ["pd1", "pd2"], "pool_lb": "global_availability"}
        if kind != "return_to_dns":  # the default: leave it unset
            wideip["failure_response"] = kind
        if kind == "fallback_ip":
            wideip["fallback_ip"] = FALLBACK_IP
        config["wideips"][failure_wideip(kind)] = wideip
    return config


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The node, started after its backends (so first verdicts are `up`); all stopped after."""
    address = loopback_address()
    addresses = {name: loopback_address() for name in ("vs1", "vs2", "vsd1", "vsd2", "live", "dead")}
    workdir: Path = tmp_path_factory.mktemp("failover")
    path = configs.write(workdir, cluster_config(address, addresses))
    backends = [Backend(name, addresses[name], BACKEND_PORT) for name in ("vs1", "vs2", "vsd1", "vsd2", "live")]
    with running_backends(*backends) as running, running_node(path, "n1", address, DNS_PORT, workdir) as node:
        yield Cluster(node, addresses, running)


# --- 1 and 4: a server dies and returns ---------------------------------------------------


@dataclass
class Failover:
    """What happened when vs1's backend was killed and later restarted."""

    vs1: str
    vs2: str
    before: list[str]
    moved_after: float | None = None  # seconds from the kill to the first answer without vs1
    moved_to: list[str] = field(default_factory=list)
    back_after: float | None = None  # seconds from the restart to the first answer with vs1 again
    back_to: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def failover(cluster: Cluster) -> Failover:
    """Kill vs1's backend while an r1 asker gets vs1; measure the move; restart it; measure the return."""
    cluster.wait_log("virtual server vs1 seen up by n1")
    cluster.wait_log("virtual server vs2 seen up by n1")
    outcome = Failover(cluster.addresses["vs1"], cluster.addresses["vs2"], cluster.answer(GSLB, R1_SOURCE))
    assert outcome.before == [outcome.vs1], f"with both backends up, {R1_SOURCE} should get vs1: {outcome}"

    def ask() -> list[str]:
        return cluster.answer(GSLB, R1_SOURCE)

    backend = cluster.backends["vs1"]
    backend.kill()
    killed = time.monotonic()
    moved, outcome.moved_to = poll_until(ask, lambda a: a != [outcome.vs1], killed + down_bound(WEB) + 5)
    outcome.moved_after = None if moved is None else moved - killed
    if moved is None:
        return outcome

    backend.start()
    restarted = time.monotonic()
    back, outcome.back_to = poll_until(ask, lambda a: a == [outcome.vs1], restarted + up_bound(WEB) + 5)
    outcome.back_after = None if back is None else back - restarted
    return outcome


def test_killed_backend_stops_being_answered_within_the_bound_and_returns(failover: Failover) -> None:
    """With vs1 (preferred by topology for an r1 asker) killed, the answer moves to vs2 no later
    than interval x down_after + timeout (+ SLACK) and no sooner than (down_after - 1) x
    interval (- SLACK); restarted, vs1 is answered again within up_after x interval (+ SLACK)."""
    high = down_bound(WEB) + SLACK
    low = down_floor(WEB) - SLACK
    assert failover.moved_after is not None, f"vs1 was still answered {down_bound(WEB) + 5:.1f}s after the kill"
    took = f"{failover.moved_after:.2f}s"
    assert failover.moved_after <= high, f"the answer moved after {took}, bound {high:.2f}s"
    assert failover.moved_after >= low, (
        f"the answer moved after {took}, before the {low:.2f}s that {WEB['down_after']} failures take"
    )
    assert failover.moved_to == [failover.vs2], f"after {took} the answer was {failover.moved_to}, not vs2"

    high = up_bound(WEB) + SLACK
    low = up_floor(WEB) - SLACK
    assert failover.back_after is not None, f"vs1 was not answered again {up_bound(WEB) + 5:.1f}s after its return"
    took = f"{failover.back_after:.2f}s"
    assert failover.back_after <= high, f"vs1 came back after {took}, bound {high:.2f}s"
    assert failover.back_after >= low, (
        f"vs1 came back after {took}, before the {low:.2f}s that {WEB['up_after']} successes take"
    )


# --- 2: links ------------------------------------------------------------------------------


def test_link_with_one_dead_target_stays_up_and_goes_down_with_both(cluster: Cluster) -> None:
    """Link lnk has a dead target (nothing listens) and a live one: it is judged up, and vsl
    (bound to it) keeps being answered over 4 of the link monitor's intervals. With the live
    target killed too, vsl stops being answered (vsalt instead) within the link monitor's bound."""
    dead = cluster.addresses["dead"]
    line = cluster.wait_log("link lnk seen up by n1")
    assert f"{dead}: connection refused" in line, f"the verdict should name the dead target's failure: {line}"

    answers: list[list[str]] = []
    end = time.monotonic() + 4 * UPLINK["interval"]
    while time.monotonic() < end:
        answers.append(cluster.answer(LINKED, R1_SOURCE))
        time.sleep(POLL)
    assert len(answers) >= 4, f"fewer polls than intervals: {answers}"
    assert all(a == [VS_LINKED] for a in answers), f"vsl was not always answered with one target dead: {answers}"

    cluster.backends["live"].kill()
    killed = time.monotonic()
    moved, moved_to = poll_until(
        lambda: cluster.answer(LINKED, R1_SOURCE), lambda a: a != [VS_LINKED], killed + down_bound(UPLINK) + 5
    )
    high = down_bound(UPLINK) + SLACK
    assert moved is not None, f"vsl was still answered {down_bound(UPLINK) + 5:.1f}s after both targets died"
    took = moved - killed
    assert took <= high, f"vsl stopped being answered after {took:.2f}s, bound {high:.2f}s"
    assert moved_to == [VS_ALT], f"after {took:.2f}s the answer was {moved_to}, not vsalt"
    cluster.wait_log("link lnk up -> down")


# --- 3: every pool down --------------------------------------------------------------------


@dataclass
class Failure:
    """The first answer (for each failure wide IP) that no longer named vsd1 or vsd2."""

    before: dict[str, list[str]]
    first: dict[str, DigResult | None] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)  # seconds from the kill


@pytest.fixture(scope="module")
def all_pools_down(cluster: Cluster) -> Failure:
    """Kill the backends of vsd1 and vsd2 (each the only member of one of the failure wide IPs'
    two pools) and poll every failure wide IP until its answer stops naming either."""
    cluster.wait_log("virtual server vsd1 seen up by n1")
    cluster.wait_log("virtual server vsd2 seen up by n1")
    served = {cluster.addresses["vsd1"], cluster.addresses["vsd2"]}
    outcome = Failure({kind: cluster.answer(failure_wideip(kind)) for kind in FAILURES})
    for kind, answer in outcome.before.items():
        assert len(answer) == 1 and answer[0] in served, f"{failure_wideip(kind)} before the kill: {answer}"

    cluster.backends["vsd1"].kill()
    cluster.backends["vsd2"].kill()
    killed = time.monotonic()
    deadline = killed + down_bound(FAST) + 5

    def watch(kinds: list[str]) -> None:
        """Ask for each of *kinds* in turn, every POLL seconds, until each stops naming vsd1/vsd2."""
        pending = list(kinds)
        while pending and time.monotonic() < deadline:
            round_start = time.monotonic()
            for kind in list(pending):
                sent = time.monotonic()
                result = cluster.ask(failure_wideip(kind))
                if result is None or not served & set(result.answer_data()):
                    outcome.first[kind] = result
                    outcome.after[kind] = sent - killed
                    pending.remove(kind)
            time.sleep(max(0.0, POLL - (time.monotonic() - round_start)))

    # Once dropped, each dig for the "drop" wide IP waits its full second for a reply: that
    # one is watched on its own thread, so the wait does not delay noticing the others.
    with ThreadPoolExecutor(max_workers=2) as pool:
        watches = [pool.submit(watch, ["drop"]), pool.submit(watch, [k for k in FAILURES if k != "drop"])]
        for w in watches:
            w.result()
    return outcome


def assert_negative_soa(result: DigResult) -> None:
    assert len(result.authority) == 1, result.authority
    owner, _ttl, _cls, rtype, *rdata = result.authority[0].split()
    assert (owner, rtype, " ".join(rdata)) == ("example.test.", "SOA", SOA_TEXT), result.authority


def check_failure_response(kind: str, result: DigResult | None) -> None:
    """The reply for a wide IP whose pools are all down, per `failure_response`."""
    if kind == "drop":
        assert result is None, f"expected no reply, got {result}"
        return
    assert result is not None, "expected a reply, got none"
    if kind in ("servfail", "refused"):
        assert result.status == kind.upper(), result
        assert result.answer == [], result
    elif kind == "nxdomain":
        assert result.status == "NXDOMAIN", result
        assert "aa" in result.flags, result
        assert result.answer == [], result
        assert_negative_soa(result)
    elif kind == "fallback_ip":
        assert result.status == "NOERROR", result
        assert "aa" in result.flags, result
        assert result.answer_data() == [FALLBACK_IP], result
    else:  # return_to_dns: the zone has nothing at the name but the wide IP: NODATA
        assert result.status == "NOERROR", result
        assert "aa" in result.flags, result
        assert result.answer == [], result
        assert_negative_soa(result)


@pytest.mark.parametrize("kind", FAILURES)
def test_all_pools_down_gives_the_configured_failure_response(
    cluster: Cluster, all_pools_down: Failure, kind: str
) -> None:
    """With the backends of both pools killed, the wide IP answers its failure_response
    (servfail, nxdomain with AA and the SOA, refused, fallback_ip's address, drop: no reply,
    default return_to_dns: NOERROR NODATA from the zone) within the monitor's bound, and keeps
    answering it."""
    name = failure_wideip(kind)
    assert kind in all_pools_down.first, f"{name} still named vsd1 or vsd2 {down_bound(FAST) + 5:.1f}s after the kill"
    took = all_pools_down.after[kind]
    high = down_bound(FAST) + SLACK
    assert took <= high, f"{name}'s answer changed after {took:.2f}s, bound {high:.2f}s"
    check_failure_response(kind, all_pools_down.first[kind])
    asked = time.monotonic()
    check_failure_response(kind, cluster.ask(name))
    if kind == "drop":  # dropped, not refused by a dead node: dig waited its full second,
        assert time.monotonic() - asked >= 0.9, "dig gave up at once: is the node still running?"
        soa = cluster.ask("example.test", "SOA")  # and the node still answers other names
        assert soa is not None and soa.status == "NOERROR", soa


# --- 4: the log ----------------------------------------------------------------------------


def test_state_changes_are_logged_with_from_to_and_reason(cluster: Cluster, failover: Failover) -> None:
    """The node logs vs1 going from available to unavailable, with the monitor's reason
    (connection refused), and then from unavailable back to available; the checker's own
    verdict lines (seen down / seen up, was ...) come with them."""
    log = cluster.node.log_text()
    down = re.search(r"virtual server vs1 available -> unavailable: monitor web: n1: connection refused$", log, re.M)
    up = re.search(r"virtual server vs1 unavailable -> available: up for n1$", log, re.M)
    assert down, f"no state change line for vs1 going down:\n{log}"
    assert up, f"no state change line for vs1 coming back:\n{log}"
    assert down.start() < up.start(), f"vs1 came back before it went down?\n{log}"
    assert re.search(r"virtual server vs1 seen down by n1 \(was up\): connection refused$", log, re.M), log
    assert re.search(r"virtual server vs1 seen up by n1 \(was down\): HTTP 200", log, re.M), log


def test_node_log_has_no_traceback(cluster: Cluster) -> None:
    """Killing backends and link targets is ordinary operation: nothing in the log is a traceback."""
    log = cluster.node.log_text()
    assert "Traceback" not in log, log
    assert "Unhandled" not in log, log
