"""The query log of a node answering on three processes (``dns_server.processes: 3``), as a
real twistd node: the node and each answering worker write a file of their own
(``queries.dnstap``, ``queries.w1.dnstap``, ``queries.w2.dnstap``); every query asked is in
exactly one of them, whole, once; a reload (a new ``max_bytes``) keeps every process writing
its file; a killed worker's queries are logged by the node meanwhile, and the restarted
worker rotates its cut-off file away; stopping the node closes every file with its STOP
frame; the node's status counts what the workers wrote; ``python -m
gtmcluster.querylog.read --merge`` reads them as one stream in time order."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import dns.message
import pytest
import yaml

from gtmcluster.querylog import dnstap
from gtmcluster.querylog.logfile import worker_path
from tests.support import configs, dnsclient, poll
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process]

DNS_PORT = 5353


def status(node: RunningNode) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{node.address}:8053/api/v1/status", timeout=5) as response:
        body: dict[str, Any] = json.load(response)
    return body


def ask(node: RunningNode, sent: list[tuple[int, int]]) -> int:
    """One query from a fresh socket (a new source port: any process may get it), its
    (source port, query id) added to *sent*; the answer's TTL."""
    wire = dnsclient.query("gslb.example.test")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2.0)
        s.bind(("127.0.0.1", 0))
        s.sendto(wire, node.server)
        sent.append((s.getsockname()[1], int.from_bytes(wire[:2], "big")))
        ttl: int = dns.message.from_wire(s.recv(4096)).answer[0].ttl
        return ttl


def records(path: Path) -> list[dnstap.Record]:
    if not path.exists():
        return []
    return [dnstap.decode(r) for r in dnstap.read_frames(path.read_bytes()).records]


def asked(path: Path) -> list[tuple[int, int]]:
    """(client port, query id) of each of the test's queries in *path*."""
    return [
        (r.query_port, int.from_bytes(r.query_message[:2], "big"))
        for r in records(path)
        if b"\x04gslb" in r.query_message
    ]


def files(log: Path) -> list[Path]:
    return [log, worker_path(log, 1), worker_path(log, 2)]


def test_each_process_writes_its_own_file_and_every_query_is_in_one(tmp_path: Path) -> None:
    address = loopback_address()
    raw = configs.base(address, DNS_PORT)
    raw["dns_server"]["processes"] = 3
    raw["dns_server"]["query_log"] = {"path": "var/log/queries.dnstap", "max_bytes": 1_000_000, "keep": 2}
    path = configs.write(tmp_path, raw)
    first = tmp_path / "var/log/queries.dnstap"
    with running_node(path, "n1", address, DNS_PORT, tmp_path) as node:
        poll.until(
            lambda: all(w["running"] and not w["covered_by_node"] for w in status(node)["workers"]),
            20,
            "two answering workers",
        )
        sent: list[tuple[int, int]] = []
        for _ in range(150):
            ask(node, sent)
        poll.until(
            lambda: sorted(q for f in files(first) for q in asked(f)) == sorted(sent),
            10,
            "every query in one of the three files",
            details=lambda: [len(asked(f)) for f in files(first)],
        )
        assert all(asked(f) for f in files(first)), [len(asked(f)) for f in files(first)]
        # the workers' counts reach the node's status (with their tallies, every second)
        poll.until(
            lambda: status(node)["query_log"]["written"] == sum(len(records(f)) for f in files(first)),
            5,
            "the node's count of what its processes wrote",
        )
        # a reload (the path is the member's own ground: a restart changes it, not a reload)
        # takes the new sizes; every process goes on writing its file (the new TTL: the
        # workers have reloaded)
        raw["dns_server"]["query_log"]["max_bytes"] = 2_000_000
        raw["pools"]["p"]["ttl"] = 42
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        generation = status(node)["config_generation"]
        node.proc.send_signal(signal.SIGHUP)
        poll.until(lambda: status(node)["config_generation"] == generation + 1, 10, "the reload")
        poll.until(lambda: all(ask(node, sent) == 42 for _ in range(30)), 10, "TTL 42 from every process")
        for _ in range(150):
            ask(node, sent)
        poll.until(
            lambda: sorted(q for f in files(first) for q in asked(f)) == sorted(sent),
            10,
            "every later query in one of the files",
        )
        # a worker killed outright: the node answers (and logs, in its own file) its queries
        # meanwhile; restarted, it rotates its previous file (cut off without a STOP frame)
        # away and begins a new one
        victim = next(w for w in status(node)["workers"] if w["worker"] == 1)
        os.kill(victim["pid"], signal.SIGKILL)
        poll.until(lambda: status(node)["workers"][0]["covered_by_node"], 5, "worker 1's sockets covered")
        for _ in range(60):
            ask(node, sent)
        poll.until(
            lambda: (
                not status(node)["workers"][0]["covered_by_node"] and status(node)["workers"][0]["pid"] != victim["pid"]
            ),
            15,
            "worker 1 restarted and fed",
        )
        for _ in range(150):
            ask(node, sent)
    # stopped: every file closed with its STOP frame, each query once in all of them
    killed = worker_path(first, 1).with_name(worker_path(first, 1).name + ".1")
    every = [*files(first), killed]
    assert sorted(p.name for p in first.parent.iterdir() if p.name.startswith("queries")) == sorted(
        f.name for f in every
    )
    assert not dnstap.read_frames(killed.read_bytes()).stopped  # (read whole: no record cut)
    assert all(dnstap.read_frames(f.read_bytes()).stopped for f in files(first)), "a file without its STOP frame"
    logged = [q for f in every for q in asked(f)]
    assert sorted(logged) == sorted(sent)
    # worker records name the node's DNS address, as the node's do
    for f in every:
        assert {(r.response_address, r.response_port) for r in records(f)} == {(socket.inet_aton(address), DNS_PORT)}
    # merged: one stream in time order, every record of the three files
    out = subprocess.run(
        [sys.executable, "-m", "gtmcluster.querylog.read", "--merge", *map(str, every)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert len(out) == sum(len(records(f)) for f in every)
    stamps = [line.split(" ", 1)[0] for line in out]
    assert stamps == sorted(stamps)
