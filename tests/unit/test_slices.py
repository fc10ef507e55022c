"""`slices.run`: a walk's first turn's share at once, the rest a turn at a time (a Twisted
Cooperator), waiting for the Deferreds a step yields; its return value is the result."""

from __future__ import annotations

from twisted.internet import defer, task
from twisted.python.failure import Failure

from gtmcluster.runtime import slices


def counting(n: int, done: list[int]) -> slices.Steps[int]:
    """*n* steps, each noted in *done*; returns their sum."""
    total = 0
    for i in range(n):
        total += i
        done.append(i)
        yield
    return total


def turn(clock: task.Clock) -> None:
    """One reactor turn: the calls due when it starts (a `Clock.advance` would also run
    those they schedule for now, as a real reactor does only in its next turn)."""
    due = list(clock.calls)
    for call in due:
        clock.calls.remove(call)
        call.func(*call.args, **call.kw)


def outcome(d: defer.Deferred[object]) -> list[object]:
    out: list[object] = []
    d.addBoth(out.append)
    return out


def test_a_short_walk_answers_in_the_callers_turn() -> None:
    clock = task.Clock()
    result = outcome(slices.run(counting(5, []), clock))
    assert result == [10]
    assert clock.getDelayedCalls() == []


def test_a_long_walk_takes_one_budget_a_turn() -> None:
    """With no budget, one step a turn: the first now, then one per turn the reactor takes."""
    clock = task.Clock()
    done: list[int] = []
    result = outcome(slices.run(counting(4, done), clock, budget=0.0))
    assert done == [0] and result == []
    turn(clock)
    assert done == [0, 1] and result == []
    turn(clock)
    turn(clock)
    assert done == [0, 1, 2, 3] and result == []  # the last step's turn; the end comes next
    turn(clock)
    assert result == [6]
    assert clock.getDelayedCalls() == []


def test_a_step_that_waits_for_a_deferred_goes_on_when_it_fires() -> None:
    clock = task.Clock()
    waiting: list[defer.Deferred[None]] = []
    done: list[str] = []

    def walk() -> slices.Steps[str]:
        done.append("first")
        for _ in range(2):
            d: defer.Deferred[None] = defer.Deferred()
            waiting.append(d)
            yield d
            done.append("after")
        return "end"

    result = outcome(slices.run(walk(), clock))
    assert done == ["first"] and result == []
    clock.advance(10)
    assert done == ["first"] and result == []  # nothing goes on before it fires
    waiting[0].callback(None)
    turn(clock)
    assert done == ["first", "after"] and len(waiting) == 2
    waiting[1].callback(None)
    for _ in range(3):
        clock.advance(0)
    assert done == ["first", "after", "after"] and result == ["end"]


def test_a_failing_step_or_deferred_fails_the_run() -> None:
    clock = task.Clock()

    def broken(at: int) -> slices.Steps[None]:
        for i in range(3):
            if i == at:
                raise ValueError(f"step {i}")
            yield

    now = outcome(slices.run(broken(0), clock))
    assert isinstance(now[0], Failure) and now[0].check(ValueError)
    later = outcome(slices.run(broken(2), clock, budget=0.0))
    for _ in range(3):
        clock.advance(0)
    assert isinstance(later[0], Failure) and str(later[0].value) == "step 2"

    def waits() -> slices.Steps[None]:
        yield defer.fail(RuntimeError("child ended"))

    failed = outcome(slices.run(waits(), clock))
    assert isinstance(failed[0], Failure) and failed[0].check(RuntimeError)


def test_whole_runs_at_once_and_cannot_wait() -> None:
    assert slices.whole(counting(4, [])) == 6

    def waits() -> slices.Steps[None]:
        yield defer.Deferred()

    try:
        slices.whole(waits())
    except RuntimeError as e:
        assert "waited for a Deferred" in str(e)
    else:
        raise AssertionError("whole waited")
