"""The nemesis's plan: seeded, every kind of fault in a run of a few minutes, one episode at a
time, and everything it breaks repaired (by the episode, or by the final heal)."""

from __future__ import annotations

import itertools

import pytest

from tests.chaos.schedule import KINDS, Step, plan

NODES = ["gtm-cnc", "gtm-tel", "gtm-cmcc"]
SERVERS = {"gtm-cnc": "vs-cnc", "gtm-tel": "vs-tel", "gtm-cmcc": "vs-cmcc"}


def episodes(steps: list[Step]) -> list[tuple[str, float, float]]:
    """(kind, start, end) of each episode."""
    starts = [s for s in steps if s.action == "episode" and s.args["phase"] == "start"]
    ends = [s for s in steps if s.action == "episode" and s.args["phase"] == "end"]
    assert [s.args["name"] for s in starts] == [s.args["name"] for s in ends]
    return [(a.args["name"], a.at, b.at) for a, b in zip(starts, ends, strict=True)]


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    assert plan(7, 300, NODES, SERVERS) == plan(7, 300, NODES, SERVERS)
    assert plan(7, 300, NODES, SERVERS) != plan(8, 300, NODES, SERVERS)


@pytest.mark.parametrize("seed", range(20))
def test_a_run_of_five_minutes_has_every_kind_one_at_a_time(seed: int) -> None:
    steps = plan(seed, 300, NODES, SERVERS)
    found = episodes(steps)
    assert {kind for kind, _, _ in found} == set(KINDS)
    for (_, _, end), (_, start, _) in itertools.pairwise(found):
        assert start >= end + 4, found  # the group settles between episodes
    assert steps[-1].action == "final_heal"
    assert all(0 <= s.at <= 300 for s in steps)
    for s in steps:  # every step falls inside its episode (the final heal after all)
        if s.action not in ("episode", "final_heal"):
            assert any(a <= s.at <= b for _, a, b in found), s


@pytest.mark.parametrize("seed", range(20))
def test_every_fault_is_repaired_by_its_episode(seed: int) -> None:
    """Cuts are healed (the same pair and direction), loss goes back to 0, killed nodes are
    started, stopped backends started, before the final heal."""
    cuts: set[tuple[str, str, bool]] = set()
    dead: set[str] = set()
    stopped: set[str] = set()
    loss = 0.0
    for s in plan(seed, 300, NODES, SERVERS):
        a = s.args
        if s.action == "cut":
            cuts.add((a["a"], a["b"], a["oneway"]))
        elif s.action == "heal":
            cuts.remove((a["a"], a["b"], a["oneway"]))
        elif s.action == "loss":
            loss = a["share"]
        elif s.action in ("kill", "write_then_kill"):
            dead.add(a["node"])
        elif s.action == "start":
            dead.remove(a["node"])
        elif s.action == "backend_stop":
            stopped.add(a["vs"])
        elif s.action == "backend_start":
            stopped.remove(a["vs"])
        elif s.action == "final_heal":
            assert (cuts, dead, stopped, loss) == (set(), set(), set(), 0.0)


def test_loss_is_twenty_percent_and_skew_twenty_to_forty_seconds() -> None:
    steps = [s for seed in range(20) for s in plan(seed, 300, NODES, SERVERS)]
    assert {s.args["share"] for s in steps if s.action == "loss"} == {0.2, 0.0}
    skews = [s.args["skew"] for s in steps if s.action == "start" and s.args.get("skew")]
    assert skews and all(20 <= abs(k) <= 40 for k in skews)


@pytest.mark.parametrize("seed", range(10))
def test_a_short_run_fits_what_it_can_and_ends_with_the_final_heal(seed: int) -> None:
    steps = plan(seed, 40, NODES, SERVERS)
    assert steps[-1] == Step(40, "final_heal")
    found = episodes(steps)
    assert found  # passes over what does not fit, takes what does
    assert all(end <= 40 for _, _, end in found)


def test_a_plan_of_some_kinds_only() -> None:
    steps = plan(1, 120, NODES, SERVERS, kinds=("kill", "crash_after_ack"))
    assert {kind for kind, _, _ in episodes(steps)} == {"kill", "crash_after_ack"}
    with pytest.raises(ValueError, match="must be some of"):
        plan(1, 120, NODES, SERVERS, kinds=("earthquake",))
