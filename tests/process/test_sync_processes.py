"""A three-member sync group as real `twistd -n gtm` processes on their own loopback addresses.

The in-memory cluster (tests/unit/test_sync_cluster.py) checks the protocol with a fake
clock; here the same things happen between real processes over real mutual TLS:

- the three members connect, reconcile and hold the same state (equal digests);
- a virtual server whose backend dies is seen down by all three: each member's own verdict
  and the other two's (replicated observation records) make it unavailable everywhere, and
  no member answers it any more;
- a member killed with SIGKILL while the others' state changes loads its snapshot when it
  comes back, reconnects, catches up and reports itself ready;
- an LDNS persistence record written by one member makes the other two answer the same
  client the same way.

Every test sets up what it needs from whatever state the group is in, so they may run
alone or in any order. Waits are polls with deadlines (see tests/support/trio.py).
"""

from __future__ import annotations

import re
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.state.record import Version, fingerprint
from tests.support import dnsclient
from tests.support.backends import Backend, running_backends
from tests.support.nodeproc import loopback_address
from tests.support.trio import Group, running_group, summarize

pytestmark = pytest.mark.process

NODES = ("n1", "n2", "n3")
BACKEND_PORT = 8080
#: the monitor of vsm: two refused connections (about a second) take it down
PROBE: dict[str, Any] = {"type": "tcp", "interval": 0.5, "timeout": 0.25, "up_after": 1, "down_after": 2}
WATCHED = "watched.example.test"  # pool pw: vsm while it is available, else vsalt
VSALT = "10.0.9.1"
STICKY = "sticky.example.test"  # pool pr: round robin over vsa and vsb, with persistence
VSA, VSB = "10.0.7.1", "10.0.7.2"
#: how long a change may take to be seen everywhere (checks, then replication)
SETTLE = 15.0


def customize(backend: Backend) -> Any:
    """The config additions: vsm behind *backend* with a tcp monitor, and the two wide IPs."""

    def change(config: dict[str, Any]) -> None:
        config["monitors"] = {"probe": PROBE}
        config["virtual_servers"].update(
            {
                "vsm": {"address": backend.address, "port": BACKEND_PORT, "datacenter": "DC1", "monitor": "probe"},
                "vsalt": {"address": VSALT, "datacenter": "DC2"},
                "vsa": {"address": VSA, "datacenter": "DC1"},
                "vsb": {"address": VSB, "datacenter": "DC2"},
            }
        )
        config["pools"].update(
            {
                "pw": {"members": ["vsm", "vsalt"], "load_balancing": {"preferred": "global_availability"}, "ttl": 5},
                "pr": {"members": ["vsa", "vsb"], "load_balancing": {"preferred": "round_robin"}, "ttl": 5},
            }
        )
        config["wideips"].update(
            {
                WATCHED: {"type": "A", "pools": ["pw"]},
                STICKY: {"type": "A", "pools": ["pr"], "persistence": {"ttl": 600}},
            }
        )

    return change


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    """vsm's HTTP backend, running when the group starts (so the first verdicts are `up`)."""
    server = Backend("vsm", loopback_address(), BACKEND_PORT)
    with running_backends(server):
        yield server


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory, backend: Backend) -> Iterator[Group]:
    """Members n1, n2 and n3 running; all stopped afterwards (also when a test fails)."""
    workdir: Path = tmp_path_factory.mktemp("sync-trio")
    with running_group(workdir, 3, customize=customize(backend)) as running:
        yield running


def ask(group: Group, node: str, name: str, source: str | None = None) -> list[str]:
    """The A records *node* answers for *name* (over UDP, from *source* when given)."""
    wire = dnsclient.query(name, "A", qid=7)
    reply = dnsclient.udp(wire, group.members[node].dns, source=source, timeout=2.0)
    return sorted(dnsclient.addresses(dnsclient.parse(reply)))


def vsm_available(group: Group, node: str) -> bool:
    return bool(group.status(node)["health"]["virtual_servers"]["vsm"]["available"])


def wait_vsm(group: Group, nodes: tuple[str, ...], available: bool) -> None:
    """Wait until every one of *nodes* reports vsm as *available* (or not)."""
    group.wait_for(
        lambda: all(vsm_available(group, n) == available for n in nodes),
        SETTLE,
        f"vsm {'available' if available else 'unavailable'} on {', '.join(nodes)}",
        lambda: {n: group.status(n)["health"]["virtual_servers"]["vsm"] for n in nodes},
    )


def snapshot_digest(group: Group, node: str) -> str | None:
    """The state digest of the records in *node*'s SQLite snapshot, computed the way the
    store computes its own (count and XOR of key/version fingerprints); None while there is
    no complete snapshot to read."""
    path = group.workdir / "var" / "state" / node / "state.sqlite"
    if not path.exists():
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT key, wall_ms, logical, origin FROM records").fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return None  # mid-write or not created yet
    xor = 0
    for key, wall_ms, logical, origin in rows:
        xor ^= fingerprint(key, Version(wall_ms, logical, origin))
    return f"{len(rows)}-{xor:016x}"


def test_three_members_converge(group: Group) -> None:
    """Started together, each member lists the other two as connected and synced, and all
    three hold the same state: equal digests over records written by all three (their
    verdicts on vsm), not merely three empty stores."""
    last: dict[str, dict[str, Any]] = {}

    def settled() -> bool:
        last.update({n: group.status(n) for n in NODES})
        return group.converged(last) and all(set(s["state"]["by_origin"]) == set(NODES) for s in last.values())

    group.wait_for(settled, SETTLE, "convergence over records of all three members", lambda: summarize(dict(last)))
    digests = {n: s["state"]["digest"] for n, s in last.items()}
    assert len(set(digests.values())) == 1, digests
    assert all(s["state"]["records"] >= 3 for s in last.values()), summarize(dict(last))
    for node, status in last.items():
        assert status["node"] == node
        peers = {p["name"]: p for p in status["peers"]}
        assert set(peers) == set(NODES) - {node}, status["peers"]
        for other, peer in peers.items():
            assert peer["connected"] and peer["synced"], f"{node} about {other}: {peer}"
            assert peer["config_matches"] is True, f"{node} about {other}: {peer}"
            assert peer["datacenter"] == group.members[other].datacenter, peer


def test_a_server_going_down_behind_one_member_is_seen_by_all(group: Group, backend: Backend) -> None:
    """With vsm's backend killed, every member reports vsm unavailable with all three members'
    verdicts in the reason (so each holds the other two's observation records), the digests
    are equal again, and no member answers vsm for the wide IP any more (vsalt instead)."""
    if not backend.running:
        backend.start()
    wait_vsm(group, NODES, available=True)
    group.wait_converged()
    for node in NODES:
        assert ask(group, node, WATCHED) == [backend.address], f"{node} before the kill"

    backend.kill()
    wait_vsm(group, NODES, available=False)
    statuses = group.wait_converged(timeout=SETTLE)
    for node, status in statuses.items():
        vsm = status["health"]["virtual_servers"]["vsm"]
        assert vsm["health"] == "down", f"{node}: {vsm}"
        for observer in NODES:
            assert f"{observer}: connection refused" in vsm["reason"], f"{node} lacks {observer}'s verdict: {vsm}"
    for node in NODES:
        answers = [ask(group, node, WATCHED) for _ in range(3)]
        assert all(a == [VSALT] for a in answers), f"{node} still answers vsm (or nothing): {answers}"


def test_a_member_killed_and_restarted_loads_its_snapshot_and_catches_up(group: Group, backend: Backend) -> None:
    """With vsm down everywhere, n3 is killed with SIGKILL (no clean shutdown) once its
    snapshot holds its state; vsm's backend then comes back, so n1 and n2 write new verdicts
    that n3 does not see. Restarted, n3 logs that it loaded exactly the records of its
    snapshot, reconnects to both, ends with the same digest as they (one that differs from
    before the kill), sees vsm available as they do, and reports itself ready.

    (The change while n3 is down is a server coming back, not going down: under the monitor's
    rule `any`, a dead member's last "up" verdict keeps a server available until the verdict
    expires.)"""
    if backend.running:
        backend.kill()
    wait_vsm(group, NODES, available=False)
    before: dict[str, dict[str, Any]] = {}

    def snapshot_current() -> bool:
        before.update(group.wait_converged(timeout=SETTLE))
        return snapshot_digest(group, "n3") == str(before["n3"]["state"]["digest"])

    group.wait_for(
        snapshot_current,
        10.0,
        "n3's snapshot holding exactly its state",
        lambda: f"snapshot {snapshot_digest(group, 'n3')}\n{summarize(dict(before))}",
    )

    group.kill("n3", signal.SIGKILL)
    assert not group.members["n3"].running
    in_snapshot = snapshot_digest(group, "n3")
    assert in_snapshot is not None, "n3's snapshot is unreadable after the kill"
    count = int(in_snapshot.split("-")[0])
    assert count > 0, in_snapshot

    backend.start()  # the state changes while n3 is down
    wait_vsm(group, ("n1", "n2"), available=True)
    during = group.wait_converged(["n1", "n2"], timeout=SETTLE)
    assert during["n1"]["state"]["digest"] != before["n1"]["state"]["digest"], summarize(dict(during))
    down = {p["name"]: p["connected"] for p in during["n1"]["peers"]}
    assert down["n3"] is False, during["n1"]["peers"]

    offset = group.log_size("n3")
    group.restart("n3")
    line = group.wait_log("n3", "loaded ", since=offset)
    loaded = re.search(r"loaded (\d+) records", line)
    assert loaded is not None, line
    assert int(loaded.group(1)) == count, f"the snapshot held {count} records: {line}"

    after = group.wait_converged(timeout=SETTLE)
    assert len({s["state"]["digest"] for s in after.values()}) == 1, summarize(dict(after))
    assert after["n3"]["state"]["digest"] != before["n3"]["state"]["digest"], summarize(dict(after))
    group.wait_for(lambda: group.status("n3")["ready"] is True, 10.0, "n3 ready", lambda: group.status("n3"))
    assert vsm_available(group, "n3"), group.status("n3")["health"]["virtual_servers"]["vsm"]
    restarted = group.log_text("n3", offset)
    for other in ("n1", "n2"):
        assert f"peer {other} (data center {group.members[other].datacenter}) connected" in restarted, restarted


def test_ldns_persistence_is_the_same_on_every_member(group: Group) -> None:
    """Two clients ask n1 in turn and round robin gives them different servers; once the
    persistence records have replicated, n2 and n3 (asked in the reverse order, so their own
    round robin would swap the answers) give each client exactly what n1 gave it."""
    group.wait_converged(timeout=SETTLE)
    first, second = loopback_address(), loopback_address()
    on_n1 = {first: ask(group, "n1", STICKY, first), second: ask(group, "n1", STICKY, second)}
    assert on_n1[first] in ([VSA], [VSB]), on_n1
    assert on_n1[second] in ([VSA], [VSB]), on_n1
    assert on_n1[first] != on_n1[second], f"round robin gave both clients the same server: {on_n1}"
    for client, answer in on_n1.items():
        assert ask(group, "n1", STICKY, client) == answer, f"n1 itself changed its answer for {client}"

    group.wait_converged(timeout=SETTLE)
    for node in ("n2", "n3"):
        for client in (second, first):
            got = [ask(group, node, STICKY, client) for _ in range(3)]
            assert got == [on_n1[client]] * 3, f"{node} answered {client} {got}; n1 answered {on_n1[client]}"

    others = [loopback_address() for _ in range(4)]
    fresh = {c: ask(group, "n2", STICKY, c) for c in others}
    assert {tuple(a) for a in fresh.values()} == {(VSA,), (VSB,)}, f"new clients on n2 all got one server: {fresh}"


def test_no_member_logged_a_traceback(group: Group) -> None:
    """Kills, restarts and failing backends are ordinary operation: no member's log (or
    output) holds a traceback or an unhandled error."""
    for node in NODES:
        text = group.log_text(node) + group.output_text(node)
        assert text, f"{node} wrote no log"
        assert "Traceback" not in text, f"{node}:\n{text}"
        assert "Unhandled" not in text, f"{node}:\n{text}"
