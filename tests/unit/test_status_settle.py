"""`gtmcluster status` fails only on a difference that lasts: members' answers taken a
moment apart differ while a change travels, and agree a poll later. Two made-up members
answer round after round; the clock and the wait are a `task.Clock` the test drives (no
sleeping), and the summary is rendered as the command prints it."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from twisted.internet.task import Clock

from gtmcluster.cli import status
from gtmcluster.cli.settle import MAX_SETTLE, POLL, SETTLE
from tests.support.hostileapi import STATUS

Round = dict[str, dict[str, Any]]


def member(name: str, state: str, origins: dict[str, str] | None = None, config: str = "cfg1") -> dict[str, Any]:
    answer = copy.deepcopy(STATUS)
    answer.update(node=name, config_digest=config, peers=[], admin=[])
    answer["health"] = {"virtual_servers": {}, "links": {}}
    answer["state"] = {"digest": state, "records": 3}
    if origins is not None:
        answer["state"]["origin_digests"] = origins
    return answer


def rounds(*answers: Round) -> tuple[Callable[[], Round], list[Round]]:
    """An `ask` giving *answers* in turn (the last one again after them), and what it gave."""
    given: list[Round] = []
    it: Iterator[Round] = iter(answers)

    def ask() -> Round:
        given.append(next(it, answers[-1]))
        return given[-1]

    return ask, given


def asked(ask: Callable[[], Round], within: float = SETTLE) -> tuple[status.Summary, str, float]:
    """The summary and the text `gtmcluster status` prints after settling on a fake clock,
    and the seconds that clock moved."""
    clock = Clock()
    settled = status.ask_settled(ask, within, clock.seconds, clock.advance)
    summary = status.summarize(settled.statuses, settled)
    return summary, status.render(settled.statuses, {"n1": "DC1", "n2": "DC2"}, summary), clock.seconds()


APART = {"n1": member("n1", "4-aaaa"), "n2": member("n2", "3-bbbb")}
AGREED = {"n1": member("n1", "4-aaaa"), "n2": member("n2", "4-aaaa")}


def test_one_round_taken_while_a_change_travels_fails_today() -> None:
    """The false failure: with one round (--settle 0, what status did before), a record
    written on n1 a moment before n2 took it in reads as digests that differ."""
    ask, given = rounds(APART, AGREED)
    summary, text, _ = asked(ask, within=0)
    assert len(given) == 1 and not summary.ok
    assert "DIGESTS DIFFER: state n1=4-aaaa, n2=3-bbbb" in text


def test_digests_that_agree_a_poll_later_are_no_failure_and_it_says_it_waited() -> None:
    ask, given = rounds(APART, AGREED)
    summary, text, moved = asked(ask)
    assert len(given) == 2 and summary.ok and summary.polls == 2 and moved == POLL
    assert "digests agree across 2 nodes (state 4-aaaa, config cfg1)" in text
    assert f"  (they differed at first: a change was propagating; agreed after {POLL:.1f}s (2 polls))" in text
    assert status.Summary.to_json(summary)["polls"] == 2


def test_agreeing_at_once_asks_once_and_says_nothing_of_waiting() -> None:
    ask, given = rounds(AGREED)
    summary, text, moved = asked(ask)
    assert len(given) == 1 and summary.ok and moved == 0 and "propagating" not in text


def test_a_difference_that_lasts_fails_after_the_bound() -> None:
    """Digests that differ at every poll for `SETTLE` seconds: a failure, saying how long."""
    ask, given = rounds(APART)
    summary, text, moved = asked(ask)
    assert not summary.ok and moved <= SETTLE and len(given) == int(SETTLE / POLL) + 1
    assert f"DIGESTS DIFFER for {moved:.1f}s ({len(given)} polls): state n1=4-aaaa, n2=3-bbbb" in text


def test_a_config_that_differs_for_good_fails() -> None:
    ask, _ = rounds({"n1": member("n1", "4-aaaa"), "n2": member("n2", "4-aaaa", config="cfg2")})
    summary, text, _ = asked(ask)
    assert not summary.ok and "config n1=cfg1, n2=cfg2" in text


def origins_round(n1: dict[str, str], n2: dict[str, str]) -> Round:
    return {"n1": member("n1", f"x{sorted(n1.items())}", n1), "n2": member("n2", f"x{sorted(n2.items())}", n2)}


def test_records_still_being_written_and_taken_in_are_in_flight() -> None:
    """n1 writes at every poll and n2 takes each write in a poll later: the digests never
    meet at a poll, but the member behind moves, so it is no failure, and says so."""
    steps = [origins_round({"n1": f"{i + 1}-a{i + 1}"}, {"n1": f"{i}-a{i}"}) for i in range(1, 10)]
    ask, given = rounds(*steps)
    summary, text, _ = asked(ask)
    assert summary.ok and summary.in_flight == ["n1"] and len(given) > 2
    assert "state digests still settling after " in text and "the records of n1 are on their way" in text


def test_a_member_behind_that_takes_nothing_in_is_a_lasting_difference() -> None:
    """n1 keeps writing while n2 holds what it held (cut off, or stuck): it fails."""
    steps = [origins_round({"n1": f"{i + 1}-a{i + 1}"}, {"n1": "1-a1"}) for i in range(1, 10)]
    summary, text, _ = asked(rounds(*steps)[0])
    assert not summary.ok and summary.in_flight == [] and "DIGESTS DIFFER for " in text


def test_one_stuck_origin_among_moving_ones_fails() -> None:
    steps = [
        origins_round({"n1": f"{i + 1}-a{i + 1}", "n2": "5-b"}, {"n1": f"{i}-a{i}", "n2": "4-b"}) for i in range(1, 10)
    ]
    summary, _, _ = asked(rounds(*steps)[0])
    assert not summary.ok and summary.in_flight == []


def test_members_that_do_not_report_origins_fail_on_any_lasting_difference() -> None:
    """An older node says no origin digests: a difference at every poll fails, as before."""
    steps = [{"n1": member("n1", f"{i + 1}-a"), "n2": member("n2", f"{i}-a")} for i in range(1, 10)]
    summary, _, _ = asked(rounds(*steps)[0])
    assert not summary.ok


@pytest.mark.parametrize(("given", "bound"), [(-1.0, 0.0), (float("nan"), 0.0), (float("inf"), MAX_SETTLE)])
def test_the_wait_is_bounded_whatever_settle_says(given: float, bound: float) -> None:
    ask, _ = rounds(APART)
    _, _, moved = asked(ask, within=given)
    assert moved <= bound
