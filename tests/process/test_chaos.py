"""The chaos run in short: the harness of `make chaos` (`bench/chaos.py`) end to end, on a
plan of two episodes (seed 9, 30 s): an isolated node acknowledges an admin write and is
SIGKILLed at once, then restarted ("crash after ack"); then a node is SIGKILLed and restarted
a few seconds later. Every invariant holds: live nodes never stop answering, the digests
agree after the last heal, and the write acknowledged just before the crash is on every node
at the end (an admin write is acknowledged only once it is on disk).

About 40 seconds (three twistd nodes start first); the full run, a few minutes of every
kind of fault, is ``make chaos``. Needs root, /dev/net/tun and `ip`: without them it is
skipped, except in CI (``CI=true``), where a missing capability fails. Every namespace is
deleted afterwards, failures included.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.chaos.invariants import summary
from tests.chaos.run import ChaosRun, History, Options
from tests.chaos.world import DURABLE_SERVER, NODES, ChaosWorld
from tests.conftest import IN_CI
from tests.tools import wanem

pytestmark = [pytest.mark.process, pytest.mark.slow]

SEED = 9
KINDS = ("crash_after_ack", "kill")


def require(condition: bool, reason: str) -> None:
    """Skip without *condition*, or fail in CI, where a missing capability is an error."""
    if not condition:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


def test_a_short_chaos_run_keeps_every_invariant(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "the chaos run needs root (network namespaces and TUN devices)")
    require(os.path.exists("/dev/net/tun"), "/dev/net/tun is missing (no TUN support)")
    require(shutil.which("ip") is not None, "`ip` is not installed (Debian package iproute2)")
    prefix = wanem.run_prefix("chaos")
    world = ChaosWorld(tmp_path / "world", prefix)
    history = History(tmp_path / "history.jsonl")
    try:
        world.start()
        run = ChaosRun(world, Options(seconds=30, seed=SEED, kinds=KINDS, quiet=2), history, say=lambda line: None)
        report = run.run(tmp_path / "loadgen.jsonl")
    finally:
        history.close()
        world.close()
    assert wanem.list_namespaces(prefix) == [], "namespaces left behind"
    assert report.ok, "\n".join([*report.failures, *summary(report)])
    assert report.figures["episodes"] == {"crash_after_ack": 1, "kill": 1}
    for node in NODES:
        dns = report.figures["dns"][node]
        assert dns["live_answered"] > 100, dns  # it was asked all along, and answered
    kills = [e for e in history.events if e["kind"] == "nemesis" and e["action"] == "kill" and "after_write" in e]
    assert kills and kills[0]["after_write"] is True, kills  # the crash came right after an acknowledged write
    final = next(e for e in history.events if e["kind"] == "final")["admin"]
    last = [e for e in history.events if e["kind"] == "admin" and e["vs"] == DURABLE_SERVER][-1]
    assert {states[DURABLE_SERVER] for states in final.values()} == {last["state"]}, (final, last)
    assert set(final) == set(NODES)
