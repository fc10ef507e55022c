"""Answering on several processes (dns_server.processes), as real twistd nodes.

A node with three processes (itself and two workers on SO_REUSEPORT sockets) and a node
with one, from the same config, get the same queries from many source ports (so the kernel
spreads them over the processes): their answers are the same, and every worker answered
some. Persistence written for a worker's decision holds whoever answers next. A killed
worker's queries are answered by the node until it is restarted; a reload reaches the
workers; stopping the node stops them. The one-use names a worker answers (`dns.rumnames`)
are recorded by the node.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.message
import pytest
import yaml

from tests.support import configs, dnsclient, poll
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process]

#: client subnets: two regions, and outside every region
SUBNETS = [f"198.51.100.{i}/32" for i in range(0, 60, 4)] + [f"203.0.113.{i}/32" for i in range(0, 60, 4)]
SUBNETS += [f"192.0.2.{i}/32" for i in range(0, 60, 4)]


def config(address: str, processes: int) -> dict[str, Any]:
    raw = configs.base(address, 5353)
    raw["dns_server"]["processes"] = processes
    raw["wideips"]["gslb.example.test"]["persistence"] = {"ttl": 600, "ipv4_prefix": 24}
    raw["rum"] = {"targets": {"DC1": "https://dc1.example.net/o"}, "answer": ["192.0.2.10"]}
    return raw


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningNode, RunningNode, Path]]:
    multi_dir = tmp_path_factory.mktemp("multi")
    single_dir = tmp_path_factory.mktemp("single")
    multi_address, single_address = loopback_address(), loopback_address()
    multi_path = configs.write(multi_dir, config(multi_address, 3))
    single_path = configs.write(single_dir, config(single_address, 1))
    with (
        running_node(multi_path, "n1", multi_address, 5353, multi_dir) as multi,
        running_node(single_path, "n1", single_address, 5353, single_dir) as single,
    ):
        poll.until(lambda: running_workers(multi) == 2, 20, "two answering workers")
        yield multi, single, multi_path
    assert worker_pids(multi_path) == [], "workers outlived their node"


def status(node: RunningNode) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{node.address}:8053/api/v1/status", timeout=5) as response:
        body: dict[str, Any] = json.load(response)
    return body


def running_workers(node: RunningNode) -> int:
    return sum(1 for w in status(node)["workers"] if w["running"])


def worker_pids(config_path: Path) -> list[int]:
    """Worker processes of the node run with *config_path*, from /proc: their --config is
    that file, or after a reload the group's bundle in the node's state_dir, beside it."""
    folder = str(config_path.parent).encode() + b"/"
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gtmcluster.fanout.worker" in cmdline and any(arg.startswith(folder) for arg in cmdline):
            pids.append(int(entry))
    return pids


def ask(node: RunningNode, ecs: str | None = None, timeout: float = 2.0) -> dns.message.Message:
    """One query from a fresh socket (a new source port: any process may get it)."""
    wire = dnsclient.query("gslb.example.test", ecs=ecs)
    return dnsclient.parse(dnsclient.udp(wire, node.server, timeout=timeout))


def summary(message: dns.message.Message) -> tuple[Any, ...]:
    option = dnsclient.ecs_option(message)
    scope = option.scopelen if option is not None else None
    return (message.rcode(), message.flags, tuple(dnsclient.addresses(message)), message.answer[0].ttl, scope)


def test_every_process_answers_as_one_process_does(nodes: tuple[RunningNode, RunningNode, Path]) -> None:
    multi, single, _ = nodes
    before = {w["worker"]: w["answered"] for w in status(multi)["workers"]}
    for subnet in SUBNETS:
        for _ in range(3):  # the first answer writes persistence, the next ones use it
            assert summary(ask(multi, subnet)) == summary(ask(single, subnet)), subnet
    poll.until(
        lambda: all(w["answered"] > before[w["worker"]] for w in status(multi)["workers"]),
        5,
        "every worker's tally of answered queries",
    )


def persist_records(node: RunningNode, kind: str = "persist") -> float:
    with urllib.request.urlopen(f"http://{node.address}:8053/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f'gtm_store_records{{kind="{kind}"}}'):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_one_use_names_any_process_answers_are_recorded_by_the_node(
    nodes: tuple[RunningNode, RunningNode, Path],
) -> None:
    """Each from a fresh source port (any process may answer): TTL 0, the configured
    address; every id reaches the node's store, those the workers answered through the feed."""
    multi, _, _ = nodes
    held = persist_records(multi, "rumid")
    for i in range(40):
        wire = dnsclient.query(f"{i:020d}.rum.example.test")
        reply = dnsclient.parse(dnsclient.udp(wire, multi.server))
        assert dnsclient.addresses(reply) == ["192.0.2.10"] and reply.answer[0].ttl == 0
    poll.until(lambda: persist_records(multi, "rumid") == held + 40, 5, "the node's rumid records")


def workers_hold_what_the_node_holds(node: RunningNode) -> bool:
    return all(w["record_batches_behind"] == 0 for w in status(node)["workers"])


def test_persistence_written_for_a_workers_answer_holds_everywhere(
    nodes: tuple[RunningNode, RunningNode, Path],
) -> None:
    """Round robin picks in turn; persistence then holds the client's network to its first
    answer, whichever process answered first and whichever answers next. The record is
    written by the node and reaches the workers within a moment (as it reaches the other
    GTMs of the group): the test waits until the node holds it and every worker has
    acknowledged the node's batches of records (the status API's ``record_batches_behind``)."""
    multi, _, path = nodes
    raw = yaml.safe_load(path.read_text())
    raw["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    generation = status(multi)["config_generation"]
    multi.proc.send_signal(signal.SIGHUP)
    poll.until(lambda: status(multi)["config_generation"] == generation + 1, 10, "the reload")
    firsts = set()
    for i in range(20):
        subnet = f"100.64.{i}.0/24"
        held = persist_records(multi)
        first = dnsclient.addresses(ask(multi, subnet))
        firsts.add(tuple(first))
        poll.until(lambda: persist_records(multi) > held, 5, f"the persistence record of {subnet}")  # noqa: B023
        poll.until(lambda: workers_hold_what_the_node_holds(multi), 5, f"the workers' copies of the record of {subnet}")
        for _ in range(5):
            assert dnsclient.addresses(ask(multi, subnet)) == first, subnet
    assert len(firsts) > 1  # round robin did pick in turn


def test_a_reload_reaches_every_worker(nodes: tuple[RunningNode, RunningNode, Path]) -> None:
    multi, _, path = nodes
    raw = yaml.safe_load(path.read_text())
    raw["pools"]["p"]["ttl"] = 42
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    generation = status(multi)["config_generation"]
    multi.proc.send_signal(signal.SIGHUP)
    poll.until(lambda: status(multi)["config_generation"] == generation + 1, 10, "the reload")
    # the workers reload when the node tells them: every process answers with the new TTL
    poll.until(lambda: all(ask(multi).answer[0].ttl == 42 for _ in range(30)), 10, "TTL 42 from every process")


def test_a_killed_worker_is_covered_then_restarted(nodes: tuple[RunningNode, RunningNode, Path]) -> None:
    multi, _, path = nodes
    victim = next(w for w in status(multi)["workers"] if w["worker"] == 1)
    os.kill(victim["pid"], signal.SIGKILL)
    answered = 0
    for _ in range(60):  # meanwhile: one try each, no query may go unanswered
        ask(multi, timeout=1.0)
        answered += 1
    assert answered == 60
    poll.until(
        lambda: any(w["worker"] == 1 and w["running"] and w["pid"] != victim["pid"] for w in status(multi)["workers"]),
        15,
        "worker 1 restarted",
    )
    assert "answering worker 1 exited (signal 9)" in multi.log_text()
    assert len(worker_pids(path)) == 2


def test_a_second_node_cannot_take_the_address(nodes: tuple[RunningNode, RunningNode, Path]) -> None:
    """SO_REUSEPORT is set only among the node's own sockets' group: a node with one
    process on the same address is refused ("address in use"), not let in to share."""
    multi, _, _ = nodes
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other, pytest.raises(OSError):
        other.bind((multi.address, 5353))
