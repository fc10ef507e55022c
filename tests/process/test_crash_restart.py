"""A real node killed with SIGKILL in the middle of its snapshot writes, and a node whose
snapshot file was damaged while it was down: each time it restarts, answers, keeps what
its last committed snapshot held, and converges with its peer.

Two members (n1, n2) run as real `twistd -n gtm` processes with a snapshot every second.
A client thread asks n1 for a wide IP with LDNS persistence from a new client subnet (ECS)
at every query, so each answer is a new persistence record and every snapshot write has
hundreds of rows. Once a write with new clients has committed, the test watches n1's state
directory and kills n1 with SIGKILL as soon as the next write's journal appears (so the kill
lands inside the transaction, or just after its commit when the write wins the race).

``GTM_CRASH_NODE_KILLS`` (default 4) sets how many times n1 is killed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.state import snapshot
from gtmcluster.state.store import Store
from tests.support import dnsclient, poll
from tests.support.trio import Group, running_group, summarize

pytestmark = pytest.mark.process

KILLS = int(os.environ.get("GTM_CRASH_NODE_KILLS", "4"))
SEED = 5
STICKY = "sticky.example.test"
SERVERS = {"10.0.1.1", "10.0.2.1"}
#: client subnets of the queries: one /32 each, from the benchmarking range (only ever a
#: value inside a query: every packet goes to the node on loopback)
CLIENTS = ipaddress.ip_network("198.18.0.0/15")
CLIENT_NUMBERS = itertools.count()
SETTLE = 20.0
#: clients answered before n1 is killed in its next write
BUSY = 300


def customize(config: dict[str, Any]) -> None:
    config["pools"]["rr"] = {"members": ["vs1", "vs2"], "load_balancing": {"preferred": "round_robin"}, "ttl": 5}
    config["wideips"][STICKY] = {"type": "A", "pools": ["rr"], "persistence": {"ttl": 3600, "ipv4_prefix": 32}}


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    with running_group(tmp_path_factory.mktemp("crash"), 2, customize=customize) as running:
        running.wait_converged(timeout=SETTLE)
        yield running


def state_dir(group: Group, node: str) -> Path:
    return group.workdir / "var" / "state" / node


class Clients(threading.Thread):
    """Asks *server* for STICKY from a new client subnet at every query (never one asked
    before in this run), one at a time, until stopped; keeps each answer by subnet."""

    def __init__(self, server: tuple[str, int]):
        super().__init__(daemon=True)
        self.server = server
        self.answers: dict[str, list[str]] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(0.5)
            while not self.halt.is_set():
                number = next(CLIENT_NUMBERS)
                subnet = str(CLIENTS[number])
                qid = number % 65536
                s.sendto(dnsclient.query(STICKY, "A", ecs=f"{subnet}/32", qid=qid), self.server)
                with contextlib.suppress(OSError):  # no answer: the node is being killed
                    while True:
                        reply = dnsclient.parse(s.recv(65535))
                        if reply.id == qid:
                            self.answers[subnet] = sorted(dnsclient.addresses(reply))
                            break

    def busy(self) -> bool:
        """Whether `BUSY` clients have had their answer (so snapshot writes are large)."""
        return len(self.answers) >= BUSY

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)


def ask(group: Group, node: str, subnet: str) -> list[str]:
    wire = dnsclient.query(STICKY, "A", ecs=f"{subnet}/32", qid=9)
    return sorted(dnsclient.addresses(dnsclient.parse(dnsclient.udp(wire, group.members[node].dns))))


def snapshot_copy(directory: Path, scratch: Path) -> Store:
    """The snapshot in *directory* loaded the node's way from a copy (with its journal, so
    a write cut short is rolled back in the copy, and the node itself meets the original)."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    for name in (snapshot.FILENAME, f"{snapshot.FILENAME}-journal"):
        if (directory / name).exists():
            shutil.copy2(directory / name, scratch / name)
    store = Store("reader", time.monotonic)
    snapshot.read(scratch / snapshot.FILENAME, store, time.time())
    return store


def persisted(store: Store) -> dict[str, str]:
    """Client subnet -> the persistence record's key, for the records of STICKY."""
    return {key.rsplit("/", 2)[1]: key for key in (r.key for r in store.scan("persist/")) if STICKY in key}


def committed(group: Group, node: str) -> set[str]:
    """The keys of the persistence records in *node*'s snapshot as committed now (read
    through SQLite, which shows a reader the last committed write, never one under way)."""
    path = state_dir(group, node) / snapshot.FILENAME
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return {key for (key,) in db.execute("SELECT key FROM records WHERE key LIKE 'persist/%'")}
        finally:
            db.close()
    except sqlite3.Error:
        return set()  # not created yet


def wait_committed(group: Group, node: str, known: set[str]) -> set[str]:
    """Wait until *node*'s snapshot has committed a persistence record not in *known*;
    the records committed then."""
    return poll.until(
        lambda: (keys := committed(group, node)) - known and keys,
        SETTLE,
        f"a snapshot write of {node} with new clients",
    )


def kill_in_a_write(group: Group, node: str, rng: random.Random, timeout: float = 30.0) -> bool:
    """SIGKILL *node* as soon as a snapshot write's journal appears (plus up to 2 ms drawn
    from *rng*); whether the journal was still there after the kill (the write cut short)."""
    journal = state_dir(group, node) / f"{snapshot.FILENAME}-journal"
    deadline = time.monotonic() + timeout
    while not journal.exists():
        assert time.monotonic() < deadline, f"{node} began no snapshot write within {timeout:g}s"
        time.sleep(0.0002)  # a poll step: a write lasts milliseconds (it syncs to disk)
    time.sleep(rng.uniform(0, 0.002))
    group.kill(node, signal.SIGKILL)
    return journal.exists()


def test_a_node_killed_during_snapshot_writes_restarts_consistent_and_converges(group: Group, tmp_path: Path) -> None:
    """KILLS times: n1 answers a stream of new clients until the test has seen (through
    SQLite, as a reader) a snapshot write with new clients committed; n1 is then killed with
    SIGKILL inside its next write. Its snapshot loads (no set-aside) and holds every record
    seen committed (no committed write lost); restarted, n1 answers DNS, logs that it loaded
    exactly the records of the file (and that it rolled back the write cut short, when it
    was), converges with n2 (equal digests, all of n2's records), and answers the clients of
    its snapshot as before the kill."""
    rng = random.Random(SEED)
    before: dict[str, str] = {}  # the persistence records of the snapshot after the last kill
    answered = 0
    cut_short = 0
    for round_ in range(KILLS):
        group.wait_converged(timeout=SETTLE)
        clients = Clients(group.members["n1"].dns)
        clients.start()
        try:
            group.wait_for(clients.busy, SETTLE, f"{BUSY} clients answered by n1")
            seen = wait_committed(group, "n1", set(before.values()))
            interrupted = kill_in_a_write(group, "n1", rng)
        finally:
            clients.stop()
        answered += len(clients.answers)
        cut_short += interrupted
        on_disk = snapshot_copy(state_dir(group, "n1"), tmp_path / "copy")
        now = persisted(on_disk)
        lost = sorted(seen - set(now.values()))
        assert not lost, f"round {round_}: records seen committed are missing after the kill: {lost[:5]}"

        offset = group.log_size("n1")
        group.restart("n1")
        group.wait_log("n1", "ready: ", since=offset)  # logged after the load
        restarted = group.log_text("n1", offset)
        assert "unreadable" not in restarted, restarted
        loaded = re.search(r"loaded (\d+) records", restarted)
        assert (int(loaded.group(1)) if loaded else 0) == len(on_disk), (
            f"round {round_}: the snapshot holds {len(on_disk)} records; n1 said: {restarted}"
        )
        assert ("rolled back" in restarted) == interrupted, restarted
        statuses = group.wait_converged(timeout=SETTLE)
        assert statuses["n1"]["state"]["records"] >= len(on_disk), summarize(dict(statuses))

        kept = {subnet: clients.answers[subnet] for subnet in now if subnet in clients.answers}
        sample = rng.sample(sorted(kept), min(30, len(kept)))
        again = {subnet: ask(group, "n1", subnet) for subnet in sample}
        assert again == {subnet: kept[subnet] for subnet in sample}, f"round {round_}: answers changed"
        if len(again) >= 10:  # round robin gave both servers out: the check tells them apart
            assert {tuple(a) for a in again.values()} == {(s,) for s in SERVERS}, again
        before = now
    print(
        f"\n{KILLS} kills of n1 during snapshot writes, {cut_short} inside the transaction; "
        f"{len(before)} persistence records in the last snapshot, of {answered} clients answered"
    )
    assert cut_short > 0, "no kill landed inside a write's transaction"
    assert before, "no persistence record ever reached the snapshot"


@pytest.mark.parametrize(("damage", "reason"), [("truncated", "malformed"), ("overwritten", "not a database")])
def test_a_damaged_snapshot_is_set_aside_and_the_node_converges_from_its_peer(
    group: Group, damage: str, reason: str
) -> None:
    """n1 stopped cleanly, its snapshot then truncated to half (or its header overwritten):
    restarted, n1 starts anyway, logs that the file is unreadable and where it was moved,
    the file is there under that name, and n1 fills its empty store from n2 (equal digests,
    every persistence record back) and answers those clients as before."""
    if not group.members["n1"].running:
        group.restart("n1")
    clients = Clients(group.members["n1"].dns)
    clients.start()
    try:
        group.wait_for(clients.busy, SETTLE, f"{BUSY} clients answered by n1")
    finally:
        clients.stop()
    statuses = group.wait_converged(timeout=SETTLE)
    directory = state_dir(group, "n1")
    group.kill("n1", signal.SIGTERM)  # a clean stop writes the snapshot once more
    path = directory / snapshot.FILENAME
    held = persisted(snapshot_copy(directory, directory.parent / "copy"))
    assert held, "n1's snapshot holds no persistence record to lose"
    if damage == "truncated":
        os.truncate(path, os.path.getsize(path) // 2)
    else:
        with path.open("r+b") as f:
            f.write(os.urandom(100))
    offset = group.log_size("n1")
    group.restart("n1")
    line = group.wait_log("n1", "unreadable", since=offset)
    assert reason in line and str(path) in line, line
    moved = re.search(r"moved it aside to (\S+);", line)
    assert moved is not None and Path(moved.group(1)).exists(), line
    after = group.wait_converged(timeout=SETTLE)
    assert after["n1"]["state"]["records"] == after["n2"]["state"]["records"] >= statuses["n2"]["state"]["records"]
    sample = sorted(held)[:20]
    answers = {subnet: ask(group, "n1", subnet) for subnet in sample}
    assert answers == {subnet: ask(group, "n2", subnet) for subnet in sample}, answers


def test_no_node_logged_a_traceback(group: Group) -> None:
    """Kills mid-write and damaged files are handled, not crashed on: no traceback in any log."""
    for node in group.members:
        text = group.log_text(node) + group.output_text(node)
        assert "Traceback" not in text, f"{node}:\n{text}"
