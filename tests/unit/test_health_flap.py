"""Anti-flap thresholds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.health.flap import DOWN, UNKNOWN, UP, Flap


def run(flap: Flap, results: str) -> list[str]:
    """Feed 'p'/'f' results; return the state after each."""
    out = []
    for c in results:
        flap.feed(c == "p")
        out.append(flap.state)
    return out


def test_first_result_decides_from_unknown() -> None:
    """A fresh target is up after one pass, or down after one failure."""
    assert Flap(3, 3).state == UNKNOWN
    assert run(Flap(3, 3), "p") == [UP]
    assert run(Flap(3, 3), "f") == [DOWN]


def test_down_after_consecutive_failures_only() -> None:
    """An up target goes down after down_after failures in a row; a pass resets the count."""
    assert run(Flap(2, 3), "pffpff") == [UP] * 6
    assert run(Flap(2, 3), "pfff") == [UP, UP, UP, DOWN]


def test_up_after_consecutive_successes_only() -> None:
    """A down target comes back after up_after passes in a row."""
    assert run(Flap(2, 1), "fpfpp") == [DOWN, DOWN, DOWN, DOWN, UP]


def test_feed_reports_changes_only() -> None:
    """feed() returns the new verdict on a change and None otherwise."""
    flap = Flap(1, 2)
    assert flap.feed(True) == UP
    assert flap.feed(True) is None
    assert flap.feed(False) is None
    assert flap.feed(False) == DOWN


@given(st.integers(2, 5), st.integers(2, 5), st.integers(10, 60))
def test_alternating_input_never_flaps(up_after: int, down_after: int, n: int) -> None:
    """Pass/fail alternating forever changes the verdict at most once (the first result)."""
    flap = Flap(up_after, down_after)
    changes = sum(flap.feed(i % 2 == 0) is not None for i in range(n))
    assert changes == 1
    assert flap.state == UP


@given(st.lists(st.booleans(), max_size=80), st.integers(1, 4), st.integers(1, 4))
def test_a_change_needs_its_run_of_results(results: list[bool], up_after: int, down_after: int) -> None:
    """Every change (after the first) ends a run of up_after passes or down_after failures."""
    flap = Flap(up_after, down_after)
    for i, ok in enumerate(results):
        change = flap.feed(ok)
        if change is None or i == 0:
            continue
        need = up_after if change == UP else down_after
        assert i + 1 >= need
        assert all(r == ok for r in results[i + 1 - need : i + 1])
