"""What DNS clients can make a real three-member sync group (`twistd -n gtm` processes) hold.

One resolver's client subnet option (real `dig` with +subnet) cannot pin the answer
another resolver's clients get: persistence is kept per resolver and client subnet.

In a flood, a Python client sends 6,000 UDP queries from 1,024 source addresses, each query with a new
EDNS client subnet (IPv4 /24s and IPv6 /56s), spread over the three members. Every answer
writes a persistence record and each new source asks for a probe (the pool's preferred
method is rtt). Afterwards every member holds `persistence.max_records` persistence
records, the same ones (equal digests), its snapshot holds no more, the members filed no
more probe requests than they can probe, and /metrics shows the evictions.
"""

from __future__ import annotations

import re
import selectors
import socket
import sqlite3
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.dig import dig
from tests.support.ecsquery import ecs_query
from tests.support.trio import DNS_PORT, Group, running_group

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.alone]

WIDEIP = "gslb.example.test"
MAX_RECORDS = 500
QUERIES = 6_000
PROBES_PER_SECOND = 2
#: the flood's sources: 1,024 loopback addresses no member uses (members are on 127.100+.x.x)
SOURCES = [f"127.0.{86 + i // 256}.{i % 256}" for i in range(1024)]


#: a wide IP by topology with persistence per /24, where 127.0.8.200 alone goes to DC3 and
#: the rest of 127.0.8.0/24 to DC2
PINNED = "pinned.example.test"
LONE, VICTIMS = "10.0.3.1", "10.0.2.1"


def customize(config: dict[str, Any]) -> None:
    config["regions"]["lone"] = ["127.0.8.200/32"]
    config["regions"]["victims"] = ["127.0.8.0/24"]
    config["topology"][:0] = [
        {"ldns": "region lone", "server": "datacenter DC3", "score": 100},
        {"ldns": "region victims", "server": "datacenter DC2", "score": 50},
    ]
    config["pools"]["pt"] = {"members": ["vs1", "vs2", "vs3"], "load_balancing": {"preferred": "topology"}}
    config["wideips"][PINNED] = {"type": "A", "pools": ["pt"], "persistence": {"ttl": 3600, "ipv4_prefix": 24}}
    config["pools"]["p"]["load_balancing"] = {"preferred": "rtt", "alternate": "topology"}
    config["wideips"][WIDEIP]["persistence"] = {"ttl": 3600, "ipv4_prefix": 24, "ipv6_prefix": 56}
    config["persistence"] = {"max_records": MAX_RECORDS}
    config["prober"]["max_per_second"] = PROBES_PER_SECOND


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    workdir: Path = tmp_path_factory.mktemp("client-flood")
    with running_group(workdir, 3, customize=customize) as running:
        running.wait_converged()
        # (measured methods, rtt here, decide and ask for probes once a member is ready)
        running.wait_for(lambda: all(running.status(n)["ready"] for n in running.members), 20, "readiness")
        yield running


def subnet_of(i: int) -> str:
    if i % 4 == 3:
        return f"2001:db8:{i >> 8:x}:{(i & 255) << 8:x}::/56"
    return f"{10 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}.0/24"


def flood(group: Group, first: int, count: int, per_second: float = 1000.0) -> int:
    """Send *count* queries at about *per_second*, each from the next source and to the next
    member, with a new client subnet (the *first*-th on); returns how many were answered
    (replies read as they come, none waited for at the end beyond two seconds)."""
    members = [m.dns for m in group.members.values()]
    sockets = []
    selector = selectors.DefaultSelector()  # (1,024 sockets: more descriptors than select takes)
    for source in SOURCES:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((source, 0))
        s.setblocking(False)
        sockets.append(s)
        selector.register(s, selectors.EVENT_READ)
    answered = 0

    def drain(wait: float) -> None:
        nonlocal answered
        for key, _ in selector.select(wait):
            sock: socket.socket = key.fileobj  # type: ignore[assignment]
            while True:
                try:
                    sock.recv(2048)
                except BlockingIOError:
                    break
                answered += 1

    try:
        started = time.monotonic()
        for i in range(first, first + count):
            sockets[i % len(sockets)].sendto(ecs_query(i, WIDEIP, subnet_of(i)), members[i % len(members)])
            if i % 50 == 49:
                due = started + (i - first + 1) / per_second
                drain(0.0)
                while (ahead := due - time.monotonic()) > 0:
                    drain(ahead)
        deadline = time.monotonic() + 2.0
        while answered < count and time.monotonic() < deadline:
            drain(0.1)
    finally:
        selector.close()
        for s in sockets:
            s.close()
    return answered


def metrics(group: Group, node: str) -> dict[str, float]:
    host, port = group.members[node].api
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        name: float(value)
        for line in text.splitlines()
        if line and not line.startswith("#")
        for name, value in [line.rsplit(" ", 1)]
    }


def snapshot_rows(group: Group, node: str) -> dict[str, int]:
    """Rows of each kind in *node*'s snapshot file as committed now."""
    path = group.workdir / "var" / "state" / node / "state.sqlite"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT substr(key, 1, instr(key, '/') - 1), count(*) FROM records GROUP BY 1").fetchall()
    except sqlite3.OperationalError:
        return {}  # created, its first write not committed yet
    finally:
        db.close()
    return {str(kind): int(n) for kind, n in rows}


def rss_kib(group: Group, node: str) -> int:
    proc = group.members[node].proc
    assert proc is not None
    found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{proc.pid}/status").read_text())
    assert found
    return int(found.group(1))


def snapshot_bytes(group: Group) -> int:
    return sum((group.workdir / "var" / "state" / node / "state.sqlite").stat().st_size for node in group.members)


def settled(group: Group) -> None:
    """Wait until the members agree and their snapshots hold the bounded table."""
    group.wait_converged(timeout=30)
    group.wait_for(
        lambda: all(snapshot_rows(group, node).get("persist") == MAX_RECORDS for node in group.members),
        10,
        "the snapshots to hold the bounded table",
        lambda: {node: snapshot_rows(group, node) for node in group.members},
    )


@pytest.mark.usefixtures("dig_tool")
def test_one_resolvers_client_subnet_does_not_pin_another_resolvers_answer(group: Group) -> None:
    """127.0.0.1 asks n1 for client 127.0.8.200/32 and gets DC3, held for that client through
    127.0.0.1; the record reaches n2; 127.0.8.53, the resolver of 127.0.8.0/24 itself,
    asking n2 gets its own topology answer, DC2 (before: DC3 "by persistence")."""
    n1, n2 = group.members["n1"].address, group.members["n2"].address
    first = dig(n1, DNS_PORT, PINNED, "A", "+subnet=127.0.8.200/32", source="127.0.0.1")
    assert first.answer_data() == [LONE]
    key = f"persist/{PINNED}/1/127.0.0.0/24/ecs/127.0.8.0/24"
    group.wait_for(lambda: key in persist_keys(group, "n2"), 10, f"{key} on n2")
    for _ in range(3):
        assert dig(n2, DNS_PORT, PINNED, "A", source="127.0.8.53").answer_data() == [VICTIMS]
        assert dig(n1, DNS_PORT, PINNED, "A", source="127.0.8.54").answer_data() == [VICTIMS]


def persist_keys(group: Group, node: str) -> set[str]:
    """The persistence keys of *node*'s snapshot as committed now (written every second)."""
    path = group.workdir / "var" / "state" / node / "state.sqlite"
    if not path.exists():
        return set()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {key for (key,) in db.execute("SELECT key FROM records WHERE key LIKE 'persist/%'")}
    except sqlite3.OperationalError:
        return set()  # created, its first write not committed yet
    finally:
        db.close()


def test_a_flood_of_client_subnets_leaves_each_member_the_same_bounded_state(group: Group) -> None:
    started = time.monotonic()
    answered = flood(group, 0, QUERIES)
    flood_seconds = time.monotonic() - started
    # (UDP to nodes sharing two busy cores with the client: some queries may be lost; each
    # one answered wrote a record on the member that answered it, and reached the others)
    assert answered > QUERIES / 2, answered
    settled(group)
    rss_before = {node: rss_kib(group, node) for node in group.members}
    size_before = snapshot_bytes(group)
    answered += flood(group, QUERIES, 2 * QUERIES)
    statuses = group.wait_converged(timeout=30)
    elapsed = time.monotonic() - started
    records = {node: s["state"]["records"] for node, s in statuses.items()}
    for node in group.members:
        samples = metrics(group, node)
        assert samples['gtm_store_records{kind="persist"}'] == MAX_RECORDS, node
        assert samples['gtm_store_limit{kind="persist"}'] == MAX_RECORDS
        # each member wrote a record for each query it answered (a third of them) and saw
        # most of the others' (some were evicted where they were written before a push
        # reached it: a member that falls behind pulls only what its peers still hold)
        dropped = (
            samples['gtm_store_evicted_total{kind="persist"}']
            + samples['gtm_store_evicted_on_arrival_total{kind="persist"}']
        )
        assert dropped >= answered / 3 - MAX_RECORDS, (node, dropped)
        # each member files at most its burst (queue_limit: 2 a second x 60 s) and then
        # max_per_second; the requests of all three are replicated to each
        probes = samples.get('gtm_store_records{kind="probe"}', 0)
        assert probes <= 3 * (PROBES_PER_SECOND * 60 + PROBES_PER_SECOND * elapsed), probes
        assert samples["gtm_probe_requests_unfiled_total"] > 0
    settled(group)
    size_after = snapshot_bytes(group)
    rss_after = {node: rss_kib(group, node) for node in group.members}
    print(
        f"floods of {QUERIES} and {2 * QUERIES} queries, {answered} answered, the first in {flood_seconds:.1f} s; "
        f"records held {records}; RSS KiB after the first {rss_before}, after the second {rss_after}; "
        f"snapshots {size_before} then {size_after} bytes"
    )
    # twice as many records again would have doubled the snapshots (rows are bounded: above)
    assert size_after <= size_before * 1.4, (size_before, size_after)
