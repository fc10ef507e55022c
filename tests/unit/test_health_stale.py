"""How old the health an answer uses may be: evaluation in bounded turns, never in a read.

Twins (`tests.support.twins`) from a config of 5,000 monitored servers: the reference node
evaluates every change at once and answers by the general path; the other answers through
`FastPath` (kept replies, kept decisions) and evaluates on a schedule of reactor turns
played here with a fake clock (`Turns`: each turn first moves the clock by its length).
The rule (`health.tracker.STALE`): an answer never names a server whose down verdict the
store has held for 250 ms, whatever else waits, and no turn evaluates more than its
budget; an answer evaluates nothing.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gtmcluster.health import tracker as tracker_module
from gtmcluster.health.tracker import AIM, SLICE, STALE
from gtmcluster.node import Node
from gtmcluster.state.record import Record, Version
from tests.support.healthcfg import observe
from tests.support.twins import Twins, make_query

SERVERS = 5_000
WIDEIP = "gslb.example.test"
R1 = "127.0.1.9"  # region r1: DC1 first (vs1)
R2 = "127.0.2.9"  # region r2: DC2 first (vs2)
TURN = 0.01  # a busy reactor: a turn every 10 ms


def _big(raw: dict[str, Any]) -> None:
    """configs.base with a peer, a monitor on every server and 4,995 more servers in DC2."""
    raw["sync_group"]["members"].append(
        {"name": "n2", "datacenter": "DC2", "peer": "127.0.0.2:4353", "dns": ["127.0.0.2:5353"]}
    )
    raw["monitors"] = {"web": {"type": "tcp", "interval": 5, "timeout": 2}}
    for vs in raw["virtual_servers"].values():
        vs["monitor"] = "web"
    for i in range(SERVERS - len(raw["virtual_servers"])):
        raw["virtual_servers"][f"x{i}"] = {
            "address": f"10.9.{i // 250}.{i % 250 + 1}",
            "datacenter": "DC2",
            "monitor": "web",
        }
    raw["pools"]["px"] = {"members": [f"x{i}" for i in range(40)], "load_balancing": {"preferred": "round_robin"}}
    raw["wideips"]["many.example.test"] = {"pools": ["px"]}


class Turns:
    """Reactor turns on the twins' fake clock: what a turn runs is what was scheduled
    before it began; each turn's evaluations are counted."""

    def __init__(self, twins: Twins):
        self.twins = twins
        self.queue: list[Callable[[], object]] = []
        self.evaluated: list[int] = []

    def schedule(self, call: Callable[[], None]) -> None:
        self.queue.append(call)

    def turn(self, seconds: float = TURN) -> None:
        self.twins.clock.now += seconds
        calls, self.queue = self.queue, []
        health = self.twins.node.health
        before = health.evaluations
        for call in calls:
            call()
        self.evaluated.append(health.evaluations - before)

    def drain(self) -> None:
        while self.queue:
            self.turn(0.001)


def _twins(tmp_path: Path) -> tuple[Twins, Turns]:
    twins = Twins(tmp_path, _big)
    turns = Turns(twins)
    twins.node.health.schedule = turns.schedule
    for node in (twins.reference, twins.node):
        node.health.observers = lambda: frozenset({"n1", "n2"})
    twins.both(lambda node: _verdicts(node, [*node.config.virtual_servers], "n1", True))
    turns.drain()
    twins.node.health.longest_wait = 0.0
    turns.evaluated.clear()
    return twins, turns


def _verdicts(node: Node, servers: list[str], observer: str, up: bool) -> None:
    for name in servers:
        observe(node.store, "vs", name, observer, up)


def _ask(twins: Twins, source: str, name: str = WIDEIP, qid: int = 7) -> tuple[bytes | None, bytes | None]:
    """The fast node's answer (evaluating nothing: asserted) and the reference's."""
    health = twins.node.health
    before = health.evaluations
    query = make_query(name, qid=qid)
    fast = twins.fast.handle(query, source)
    assert health.evaluations == before, "an answer evaluated health"
    return fast, twins.reference.responder.handle(query, source)


def _names(reply: bytes | None, address: str) -> bool:
    assert reply is not None
    return struct.pack("!4B", *map(int, address.split("."))) in reply


def test_a_down_verdict_is_honoured_within_the_bound_while_5000_servers_wait(tmp_path: Path) -> None:
    """Every server's verdict was rewritten this turn (5,000 waiting, none urgent), then
    vs1's observers both see it down: within 250 ms of simulated time, turns of 10 ms,
    the answer no longer names vs1 and is the reference's to the byte; no turn evaluated
    more than a `SLICE`; the answers in between evaluated nothing."""
    twins, turns = _twins(tmp_path)
    assert _ask(twins, R1)[0] == _ask(twins, R1)[1]
    assert _names(_ask(twins, R1)[0], "10.0.1.1")
    node = twins.node
    _verdicts(node, [*node.config.virtual_servers], "n1", True)  # the refresh wave
    assert node.health.pending == SERVERS and node.health.urgent == 0
    down_at = twins.clock.now
    twins.both(lambda n: _verdicts(n, ["vs1"], "n1", False))
    twins.both(lambda n: _verdicts(n, ["vs1"], "n2", False))
    assert node.health.urgent == 1
    answered = []
    while twins.clock.now - down_at < STALE:
        fast, reference = _ask(twins, R1)
        answered.append(_names(fast, "10.0.1.1"))
        turns.turn()
    fast, reference = _ask(twins, R1)
    assert fast == reference and not _names(fast, "10.0.1.1")
    assert answered[0], "the first answer, before any turn, is as evaluated so far"
    assert max(turns.evaluated) <= SLICE
    assert node.health.longest_wait <= TURN + 1e-9  # the urgent mark went first
    turns.drain()
    assert node.health.pending == 0 and max(turns.evaluated) <= SLICE
    assert _ask(twins, R2)[0] == _ask(twins, R2)[1]


def test_a_data_center_down_at_once_is_honoured_within_the_bound(tmp_path: Path) -> None:
    """All 4,997 servers of DC2 seen down in one turn (every mark urgent): they are spread
    over the turns of the first `AIM` (a planned share a turn, not all in one), and after
    250 ms no answer names a DC2 server."""
    twins, turns = _twins(tmp_path)
    node = twins.node
    dc2 = [n for n, vs in node.config.virtual_servers.items() if vs.datacenter == "DC2"]
    assert _names(_ask(twins, R2)[0], "10.0.2.1")
    down_at = twins.clock.now
    twins.both(lambda n: _verdicts(n, dc2, "n1", False))
    twins.both(lambda n: _verdicts(n, dc2, "n2", False))
    assert node.health.urgent == len(dc2)
    while twins.clock.now - down_at < STALE:
        _ask(twins, R2)
        turns.turn()
    fast, reference = _ask(twins, R2)
    assert fast == reference and not _names(fast, "10.0.2.1")
    assert node.health.pending == 0 and node.health.longest_wait <= AIM + TURN
    # the plan: about len(dc2) * TURN / AIM a turn (250 here), never all at once
    assert max(turns.evaluated) <= len(dc2) * TURN / (AIM - 2 * TURN) + 1
    assert len([n for n in turns.evaluated if n]) >= AIM / TURN - 1


def test_a_slow_reactor_still_meets_the_bound(tmp_path: Path) -> None:
    """Turns of 60 ms (over the stall target): what is due when a turn comes is evaluated
    in that turn, however much; the bound holds."""
    twins, turns = _twins(tmp_path)
    node = twins.node
    dc2 = [n for n, vs in node.config.virtual_servers.items() if vs.datacenter == "DC2"]
    down_at = twins.clock.now
    twins.both(lambda n: _verdicts(n, dc2, "n1", False))
    twins.both(lambda n: _verdicts(n, dc2, "n2", False))
    while twins.clock.now - down_at < STALE - 0.06:
        turns.turn(0.06)
    assert node.health.urgent == 0
    assert _ask(twins, R2)[0] == _ask(twins, R2)[1]


def test_verdicts_of_up_wait_behind_urgent_ones_and_come_in_slices(tmp_path: Path) -> None:
    """5,000 servers back up (none urgent): a `SLICE` a turn, oldest first."""
    twins, turns = _twins(tmp_path)
    node = twins.node
    names = [*node.config.virtual_servers]
    _verdicts(node, names, "n2", True)
    turns.turn()
    assert turns.evaluated[-1] == SLICE
    assert all(n in node.health._dirty_vs for n in names[SLICE:])
    assert not any(n in node.health._dirty_vs for n in names[:SLICE])


def test_a_lapsed_verdict_and_a_leaving_peer_are_urgent(tmp_path: Path) -> None:
    """A verdict of "up" that lapses may take its server out, as may a peer leaving that
    saw servers up: those are urgent; the servers the peer saw down are not."""
    twins, turns = _twins(tmp_path)
    node = twins.node
    health = node.health
    # x0..x9: only n2 sees them up
    _verdicts(node, [f"x{i}" for i in range(10)], "n1", False)
    turns.drain()
    counted = {"n1", "n2"}
    health.observers = lambda: frozenset(counted)
    turns.drain()
    _verdicts(node, [f"x{i}" for i in range(10, 20)], "n2", False)
    turns.drain()
    counted.discard("n2")
    health.observers_changed()
    # urgent: x0..x9 (n2 saw them up, n1 down), and the others n2 saw up (the refresh
    # evaluated a first slice of them at once); x10..x19 (n2 saw them down) are not
    assert not any(f"x{i}" in health._urgent_vs for i in range(10, 20))
    turns.turn()
    assert all(not health.snapshot.vs[f"x{i}"].available for i in range(10))
    turns.drain()
    # a lapse: n1's own verdict of "up" on vs3 ends (its TTL); n2's says down
    observe(node.store, "vs", "vs3", "n1", True, ttl=30)
    counted.add("n2")
    health.observers_changed()
    node.store.merge(
        Record("obs/vs/vs3/n2", {"up": False}, Version(int(twins.clock.now * 1000) + 1, 0, "n2"), 900, twins.clock.now)
    )
    turns.drain()
    assert health.snapshot.vs["vs3"].available
    twins.clock.now += 31
    node.store.expire()
    assert "vs3" in health._urgent_vs
    turns.turn()
    assert not health.snapshot.vs["vs3"].available


def test_the_tracker_alone_without_a_schedule_evaluates_at_once(tmp_path: Path) -> None:
    """Tools and tests without a reactor: every change is evaluated when it comes."""
    twins, _ = _twins(tmp_path)
    reference = twins.reference
    _verdicts(reference, ["vs1"], "n1", False)
    _verdicts(reference, ["vs1"], "n2", False)
    assert reference.health.pending == 0 and not reference.health.snapshot.vs["vs1"].available
    assert tracker_module.STALE > tracker_module.AIM
