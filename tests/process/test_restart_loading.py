"""A real node restarted on a snapshot of 200,000 path records answers before they are all
read, and answers as a node that has read them all (gtmcluster/state/loading.py).

The node (``twistd -n gtm``, two answering processes) starts on a snapshot written before
it starts: 200,001 path records (66,667 LDNSes x 3 data centers), persistence records,
and last (so read last) the paths of the LDNSes the test asks from, whose best data center
by RTT is DC1 or DC2, where topology says DC3. From the moment it answers, the test asks,
from those LDNS addresses, a wide IP decided by RTT, one with persistence (ECS subnets whose
records the snapshot holds) and a static name, and reads `/api/v1/status` in between.
No timing is asserted: only that answers came while the node said it was still loading,
and that every answer, then and after, is the one the whole table gives.
"""

from __future__ import annotations

import ipaddress
import json
import random
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.dnsdata.zone import TYPE_A
from gtmcluster.state import keys, snapshot
from gtmcluster.state.persistence import PersistKey
from tests.support import configs, dnsclient, poll
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = pytest.mark.process

ASKERS = 12
TABLE_LDNS = 66_655
PATHS = 3 * (TABLE_LDNS + ASKERS)  # 200,001
PERSIST = 5_000
NEAR = "near.example.test"
STICKY = "sticky.example.test"
SERVERS = {"DC1": "10.0.1.1", "DC2": "10.0.2.1", "DC3": "10.0.3.1"}
ORIGINS = {"DC1": "n1", "DC2": "n2", "DC3": "n3"}
#: the load is long over by then on any machine this runs on; only a bound for the waits
LOAD_BOUND = 300.0


@dataclass
class Table:
    askers: list[str]  # LDNS addresses the test asks from
    best: dict[str, str]  # asker -> the address rtt answers
    persisted: dict[str, str]  # ECS subnet -> the address its persistence record holds
    rows: int


def write_snapshot(path: Path, askers: list[str]) -> Table:
    wall = time.time()
    rng = random.Random(12)
    stamp = int(wall * 1000) - 3_600_000
    rows: list[snapshot.Row] = []

    def add_path(ldns: str, dc: str, rtt: int) -> None:
        value = {
            "rtt": rtt,
            "last_rtt": rtt,
            "hops": 9,
            "completion": 10000,
            "protocol": "dns_dot",
            "failures": 0,
            "window": "1111111111",
            "by": ORIGINS[dc],
        }
        rows.append((keys.path(ldns, dc), json.dumps(value), stamp + len(rows), 0, ORIGINS[dc], wall + 86400))

    persisted = {}
    # a client subnet is held per resolver (each asker's /24: persistence's prefix)
    resolvers = sorted({str(ipaddress.ip_network(f"{asker}/24", strict=False)) for asker in askers})
    for j in range(PERSIST):
        subnet = f"100.{64 + j // 256}.{j % 256}.0/24"
        member = rng.choice(("vs1", "vs2", "vs3"))
        value = json.dumps({"pool": "near", "members": [member]})
        for resolver in resolvers:
            key = keys.persist(PersistKey(STICKY, TYPE_A, subnet, resolver))
            rows.append((key, value, stamp + len(rows), 0, "n1", wall + 3600))
        if j % 97 == 0:
            persisted[subnet] = SERVERS[f"DC{member[2]}"]
    for i in range(TABLE_LDNS):
        ldns = str(ipaddress.IPv4Address(0xC6120000 + i))  # 198.18.0.0/15
        for dc in SERVERS:
            add_path(ldns, dc, rng.randrange(1_000, 300_000))
    best = {}
    for k, asker in enumerate(askers):
        winner, second = ("DC1", "DC2") if k % 2 else ("DC2", "DC1")
        add_path(asker, winner, 5_000)
        add_path(asker, second, 50_000)
        add_path(asker, "DC3", 150_000)
        best[asker] = SERVERS[winner]
    snapshot.write(path, rows, "n1")
    return Table(askers, best, persisted, len(rows))


def config(address: str) -> dict[str, Any]:
    raw = configs.base(address, 5353)
    raw["sync_group"]["cold_start_wait"] = 0  # no peers: measured methods at once
    raw["dns_server"]["processes"] = 2  # (the askers' client subnets count: configs.ECS_TRUSTED)
    raw["state_dir"] = "state/{node}"
    raw["pools"]["near"] = {
        "members": ["vs1", "vs2", "vs3"],
        "load_balancing": {"preferred": "rtt", "alternate": "topology"},
        "ttl": 30,
    }
    raw["wideips"][NEAR] = {"pools": ["near"]}
    raw["wideips"][STICKY] = {"pools": ["near"], "persistence": {"ttl": 3600, "ipv4_prefix": 24}}
    return raw


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningNode, Table]]:
    workdir = tmp_path_factory.mktemp("restart")
    address = loopback_address()
    path = configs.write(workdir, config(address))
    state = workdir / "state" / "n1"
    state.mkdir(parents=True, mode=0o700)
    table = write_snapshot(state / snapshot.FILENAME, [loopback_address() for _ in range(ASKERS)])
    with running_node(path, "n1", address, 5353, workdir) as node:
        yield node, table


def status(node: RunningNode) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{node.address}:8053/api/v1/status", timeout=5) as response:
        body: dict[str, Any] = json.load(response)
    return body


def ask(node: RunningNode, name: str, source: str, ecs: str | None = None) -> str:
    """The first address of the answer to *name* asked from LDNS *source*."""
    wire = dnsclient.query(name, "A", ecs=ecs)
    reply = dnsclient.parse(dnsclient.udp(wire, node.server, source=source))
    addresses = dnsclient.addresses(reply)
    return addresses[0] if addresses else f"rcode {reply.rcode()}"


def check_all(node: RunningNode, table: Table, round_: int) -> None:
    """Every asker's rtt answer, some persistence answers and the static name: each right."""
    for asker in table.askers:
        assert ask(node, NEAR, asker) == table.best[asker], asker
    subnets = sorted(table.persisted)
    for k, asker in enumerate(table.askers):
        subnet = subnets[(round_ * len(table.askers) + k) % len(subnets)]
        assert ask(node, STICKY, asker, ecs=subnet) == table.persisted[subnet], subnet
    assert ask(node, "ns1.example.test", table.askers[0]) == "192.0.2.1"


def test_answers_come_while_loading_and_are_those_of_the_whole_table(restarted: tuple[RunningNode, Table]) -> None:
    """Rounds of questions from the moment the node answers: at least one round was over
    before a status that still said "loading" (so answered while loading, the answers by
    RTT coming from paths not read yet, since they are the file's last rows); every
    answer is right, during the load and after; the log names both parts of the load
    and the whole count; the answering worker, fed once the load is over, answers right
    too."""
    node, table = restarted
    rounds_while_loading = 0
    rounds = 0
    deadline = time.monotonic() + LOAD_BOUND
    progress = []
    while True:
        check_all(node, table, rounds)
        rounds += 1
        loading = status(node)["loading"]
        if loading is None:
            break
        rounds_while_loading += 1
        progress.append(loading["done"])
        assert loading["total"] == PATHS
        assert time.monotonic() < deadline, f"still loading after {LOAD_BOUND:g}s: {loading}"
    assert rounds_while_loading >= 1, "the load was over before the first round of answers"
    assert progress == sorted(progress) and progress[0] < PATHS
    log = node.log_text()
    assert f"read {PERSIST} records from " in log and f"answering while the other {PATHS} (under path/) load" in log
    poll.until(lambda: f"loaded {table.rows} records from " in node.log_text(), 10, "the load's last log line")
    poll.until(
        lambda: any(w["running"] and not w["covered_by_node"] for w in status(node)["workers"]),
        LOAD_BOUND,
        "the worker answering (fed every record)",
    )
    before = sum(w["answered"] for w in status(node)["workers"])
    for round_ in range(5):
        check_all(node, table, rounds + round_)
    poll.until(lambda: sum(w["answered"] for w in status(node)["workers"]) > before, 10, "the worker's answers")
    assert "Traceback" not in node.log_text()
