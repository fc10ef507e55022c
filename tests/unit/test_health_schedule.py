"""The health check schedule: due times, the rate and in-flight budget, skipping (pure, no reactor)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.health.schedule import BUCKET, MAX_WAIT, TURN_MAX, TURN_MIN, Entry, Schedule
from gtmcluster.runtime.tokenbucket import TokenBucket


class Run:
    """Drives a `Schedule` the way the checker does: `take` at each step of a fake time,
    rounds that last `duration` seconds (or never end: None), `finished` when they end."""

    def __init__(self, schedule: Schedule[str], duration: float | None = 0.0) -> None:
        self.schedule = schedule
        self.duration = duration
        self.now = 0.0
        self.running: list[tuple[float, Entry[str]]] = []  # (ends at, entry)
        self.starts: list[tuple[float, str]] = []
        self.peak = 0

    def step(self, dt: float) -> None:
        self.now = round(self.now + dt, 9)  # (no drift from adding 0.01s)
        for end, entry in [r for r in self.running if r[0] <= self.now]:
            self.running.remove((end, entry))
            self.schedule.finished(entry, self.now)
        for entry in self.schedule.take(self.now):
            self.starts.append((self.now, entry.item))
            if self.duration is not None:
                self.running.append((self.now + self.duration, entry))
        self.peak = max(self.peak, self.schedule.stats.in_flight)

    def until(self, end: float, dt: float = 0.01) -> None:
        while self.now < end - 1e-9:
            self.step(dt)

    def starts_of(self, item: str) -> list[float]:
        return [round(t, 6) for t, i in self.starts if i == item]


def test_a_due_round_starts_on_time_and_keeps_its_phase() -> None:
    """Within the budget a round starts when due (lag 0); the next is due one interval after
    this one was due, so the phase holds."""
    schedule: Schedule[str] = Schedule(100, 10, 0.0)
    schedule.add("a", 5.0, 1, 0.3)
    run = Run(schedule)
    run.until(11)
    assert run.starts_of("a") == [0.3, 5.3, 10.3]
    assert schedule.stats.started == 3
    assert schedule.stats.lag_max == pytest.approx(0, abs=1e-9)
    assert schedule.stats.skipped == 0


def test_a_late_start_does_not_move_the_phase() -> None:
    """A round started late (taken 1.2 s after it was due) leaves the next one where it was."""
    schedule: Schedule[str] = Schedule(100, 10, 0.0)
    entry = schedule.add("a", 5.0, 1, 1.0)
    assert schedule.take(2.2) == [entry]
    schedule.finished(entry, 2.3)
    assert entry.due == 6.0
    assert schedule.stats.lag_max == pytest.approx(1.2)
    assert schedule.stats.lag_quantile(0.5) == 2.0  # the bucket (1, 2]


def test_over_the_rate_rounds_are_spread_then_skipped_and_counted_not_queued() -> None:
    """100 rounds due at once at 10 checks/s: they start at no more than the rate; those not
    started within half an interval are skipped, counted, and due again an interval later.
    Each subject keeps one place in the schedule: nothing accumulates."""
    schedule: Schedule[str] = Schedule(10, 1000, 0.0)
    for i in range(100):
        schedule.add(f"s{i}", 10.0, 1, 0.0)
    run = Run(schedule)
    run.until(10 * MAX_WAIT + 0.5)
    started = schedule.stats.started
    # the bucket starts full (a second's worth), then 10 a second for 5 s
    assert started == pytest.approx(10 * BUCKET + 10 * 10 * MAX_WAIT, abs=1)
    assert schedule.stats.skipped_late == 100 - started
    assert len(schedule) == 100
    windows = [sum(1 for t, _ in run.starts if k <= t < k + 1) for k in range(5)]
    assert windows[0] <= 10 * BUCKET + 10 + 1
    assert max(windows[1:]) <= 10 + 1
    assert schedule.stats.lag_max <= 10 * MAX_WAIT


def test_a_steady_overload_is_skipped_at_the_rate_it_exceeds_the_budget() -> None:
    """Rounds due at 20 a second against a budget of 10: about half start, half are skipped,
    lag never exceeds half an interval, and the schedule holds one entry per subject."""
    schedule: Schedule[str] = Schedule(10, 1000, 0.0)
    for i in range(100):
        schedule.add(f"s{i}", 5.0, 1, i * 0.05)  # spread over the interval: 20 due a second
    run = Run(schedule)
    run.until(60)
    stats = schedule.stats
    assert stats.started == pytest.approx(600, rel=0.05)
    assert stats.skipped_late == pytest.approx(600, rel=0.1)
    assert stats.lag_max <= 5 * MAX_WAIT + 1e-9
    assert len(schedule) == 100


def test_in_flight_never_exceeds_the_cap() -> None:
    """Rounds that take 1 s, 10 due a second, cap 4: at most 4 run at once; a finished round
    frees its slot for the next waiting one at once; the rest are skipped at their deadline."""
    schedule: Schedule[str] = Schedule(1000, 4, 0.0)
    for i in range(20):
        schedule.add(f"s{i}", 2.0, 1, i * 0.1)
    run = Run(schedule, duration=1.0)
    run.until(20)
    assert run.peak == 4
    assert schedule.stats.peak_in_flight == 4
    assert schedule.stats.started == pytest.approx(4 * 20, abs=4)
    assert schedule.stats.skipped_late > 0
    assert schedule.stats.started + schedule.stats.skipped_late == pytest.approx(20 * 10, abs=20)


def test_a_round_that_never_ends_holds_its_slot_and_only_its_own_schedule() -> None:
    """A hanging round keeps its slot (so the cap also bounds what hangs), and its subject
    gets no new round; when it finally ends, the rounds it missed count as skipped (busy)
    and the next is due on its old phase."""
    schedule: Schedule[str] = Schedule(1000, 2, 0.0)
    hang = schedule.add("hang", 5.0, 1, 0.5)
    schedule.add("other", 5.0, 1, 1.0)
    assert schedule.take(0.5) == [hang]
    run = Run(schedule)
    run.now = 0.5
    run.until(20)
    assert run.starts_of("other") == [1.0, 6.0, 11.0, 16.0]
    assert schedule.stats.in_flight == 1
    schedule.finished(hang, 21.0)  # was due again at 5.5, 10.5, 15.5 (missed) and 20.5
    assert schedule.stats.skipped_busy == 3
    assert schedule.stats.in_flight == 0
    assert hang in schedule.take(21.0)  # 0.5 s late: within its wait
    assert hang.due == 20.5


def test_a_round_ending_just_after_its_next_was_due_starts_that_one_at_once() -> None:
    """timeout = interval: the round ends a little after the next is due; that one is not
    skipped but starts right away (a little late)."""
    schedule: Schedule[str] = Schedule(1000, 2, 0.0)
    entry = schedule.add("a", 5.0, 1, 0.0)
    assert schedule.take(0.0) == [entry]
    schedule.finished(entry, 5.01)
    assert schedule.take(5.01) == [entry]
    assert schedule.stats.lag_max == pytest.approx(0.01)
    assert schedule.stats.skipped == 0


def test_after_a_long_stall_missed_rounds_are_counted_and_the_phase_kept() -> None:
    """Nothing taken for 22 s (the process stood still): each missed round counts once, and
    the subject is due again on its grid (one stall does not start a burst of old rounds)."""
    schedule: Schedule[str] = Schedule(1000, 10, 0.0)
    entry = schedule.add("a", 5.0, 1, 1.0)
    # due at 1, 6, 11, 16 (all more than 2.5 s late): skipped; 21 is 2 s late: started
    assert schedule.take(23.0) == [entry]
    assert schedule.stats.skipped_late == 4
    assert entry.due == 21.0
    assert schedule.stats.lag_max == pytest.approx(2.0)


def test_one_turn_starts_at_most_a_turns_worth_and_the_rest_follow() -> None:
    """1000 rounds due at once, 1000 checks/s, turns every 10 ms: one call of take starts at
    most TURN_MIN's worth (one reactor turn stays short) and wakeup says to come back at
    once; the bucket holds a second's worth, so the next turns catch up without waiting
    for the rate."""
    schedule: Schedule[str] = Schedule(1000, 5000, 0.0)
    for i in range(1000):
        schedule.add(f"s{i}", 5.0, 1, 0.0)
    per_turn = int(1000 * TURN_MIN)
    assert len(schedule.take(0.0)) == per_turn
    assert schedule.wakeup(0.0) == 0.0
    assert len(schedule.take(0.01)) == per_turn
    started = 2 * per_turn
    now = 0.01
    while started < 1000:
        now = round(now + 0.01, 9)
        started += len(schedule.take(now))
    assert now == pytest.approx((1000 / per_turn - 1) * 0.01)  # 20 turns, 0.19 s
    assert schedule.stats.skipped == 0


def test_turns_that_come_seldom_stay_short_and_what_cannot_start_is_skipped() -> None:
    """When the reactor comes round only every 200 ms (busy, or the process starved of CPU),
    a turn still starts at most TURN_MAX's worth of checks, so no turn adds a long stall to
    a busy reactor; what cannot start in time is skipped and counted, never queued. Turns
    every 40 ms keep up (with the catching up the bucket allows)."""
    schedule: Schedule[str] = Schedule(1000, 5000, 0.0)
    for i in range(5000):
        schedule.add(f"s{i}", 5.0, 1, i * 0.001)  # 1000 due a second
    run = Run(schedule)
    for _ in range(50):
        before = len(run.starts)
        run.step(0.2)
        assert len(run.starts) - before <= 1000 * TURN_MAX
    assert schedule.stats.skipped > 0
    assert schedule.stats.lag_max <= MAX_WAIT * 5.0 + 1e-9
    before = len(run.starts)
    run.step(3.0)  # a stall
    assert len(run.starts) - before == 1000 * TURN_MAX
    quick: Schedule[str] = Schedule(1000, 5000, 0.0)
    for i in range(5000):
        quick.add(f"s{i}", 5.0, 1, i * 0.001)
    run = Run(quick)
    for _ in range(250):
        run.step(0.04)
    assert quick.stats.skipped == 0
    assert quick.stats.started == pytest.approx(10000, abs=250)


def test_the_rate_is_kept_over_a_second() -> None:
    """Once the second's worth in the bucket is spent, starts follow the rate."""
    schedule: Schedule[str] = Schedule(100, 5000, 0.0)
    for i in range(1000):
        schedule.add(f"s{i}", 20.0, 1, 0.0)
    run = Run(schedule)
    run.until(5.0)
    assert schedule.stats.started == pytest.approx(100 * BUCKET + 100 * 5, abs=2)


def test_wakeup_names_the_next_due_time_or_the_deadline_of_one_waiting_for_a_slot() -> None:
    schedule: Schedule[str] = Schedule(1000, 1, 0.0)
    assert schedule.wakeup(0.0) is None
    first = schedule.add("a", 4.0, 1, 1.0)
    schedule.add("b", 4.0, 1, 1.5)
    assert schedule.wakeup(0.0) == 1.0
    assert schedule.take(1.0) == [first]
    assert schedule.wakeup(1.0) == 1.5
    assert schedule.wakeup(1.6) == 1.5 + 4.0 * MAX_WAIT  # b waits for the slot until then
    assert schedule.take(1.5 + 4.0 * MAX_WAIT + 0.01) == []
    assert schedule.stats.skipped_late == 1


def test_a_link_takes_one_slot_and_token_per_target() -> None:
    """A round with three targets needs three slots; with two free it waits."""
    schedule: Schedule[str] = Schedule(1000, 4, 0.0)
    one = schedule.add("vs", 5.0, 2, 0.0)
    link = schedule.add("link", 5.0, 3, 0.0)
    assert schedule.take(0.0) == [one]
    assert schedule.stats.in_flight == 2
    assert schedule.take(0.1) == []
    schedule.finished(one, 0.2)
    assert schedule.take(0.2) == [link]
    assert schedule.stats.in_flight == 3
    assert schedule.stats.started == 5


def test_a_round_bigger_than_the_cap_runs_alone() -> None:
    schedule: Schedule[str] = Schedule(1000, 2, 0.0)
    big = schedule.add("big", 5.0, 5, 0.0)
    assert schedule.take(0.0) == [big]


def test_removed_entries_are_not_started_and_a_running_one_is_not_rescheduled() -> None:
    schedule: Schedule[str] = Schedule(1000, 10, 0.0)
    gone = schedule.add("gone", 5.0, 1, 1.0)
    running = schedule.add("running", 5.0, 1, 0.0)
    assert schedule.take(0.0) == [running]
    schedule.remove(gone)
    schedule.remove(running)
    schedule.finished(running, 0.5)
    assert schedule.stats.in_flight == 0
    assert schedule.take(10.0) == []
    assert schedule.wakeup(10.0) is None
    assert len(schedule) == 0


def test_configure_changes_the_budget_at_once() -> None:
    schedule: Schedule[str] = Schedule(1000, 1, 0.0)
    a = schedule.add("a", 5.0, 1, 0.0)
    b = schedule.add("b", 5.0, 1, 0.0)
    assert schedule.take(0.0) == [a]
    schedule.configure(1000, 2)
    assert schedule.take(0.0) == [b]


def test_token_bucket() -> None:
    bucket = TokenBucket(10, 2, 0.0)
    assert bucket.take(1, 0.0) and bucket.take(1, 0.0)
    assert not bucket.take(1, 0.0)
    assert bucket.ready_in(1, 0.0) == pytest.approx(0.1)
    assert bucket.take(1, 0.1)
    assert bucket.refill(100.0) == 2  # never more than the capacity
    assert bucket.take(5, 100.0)  # more than the capacity: allowed when full, as debt
    assert bucket.tokens == -3
    assert bucket.ready_in(1, 100.0) == pytest.approx(0.4)


@given(
    st.lists(
        st.tuples(
            st.floats(0.5, 20),  # interval
            st.integers(1, 3),  # targets
            st.floats(0, 1),  # phase, as a share of the interval
            st.one_of(st.none(), st.floats(0, 1)),  # round duration as a share of the interval
        ),
        min_size=1,
        max_size=30,
    ),
    st.floats(0.5, 200),
    st.integers(1, 20),
    st.lists(st.floats(0.001, 3), min_size=1, max_size=200),
)
def test_invariants(
    subjects: list[tuple[float, int, float, float | None]],
    rate: float,
    cap: int,
    steps: list[float],
) -> None:
    """Whatever the load and the reactor's timing: in flight stays within the cap (or one
    round bigger than it, alone), no round starts later than half its interval, each subject
    has exactly one place: in the schedule or running."""
    schedule: Schedule[int] = Schedule(rate, cap, 0.0)
    entries = [schedule.add(i, iv, n, ph * iv) for i, (iv, n, ph, _) in enumerate(subjects)]
    durations = {i: None if d is None else d * subjects[i][0] for i, (_, _, _, d) in enumerate(subjects)}
    running: list[tuple[float, Entry[int]]] = []
    now = 0.0
    for dt in steps:
        now += dt
        for end, entry in sorted([r for r in running if r[0] <= now], key=lambda r: r[0]):
            running.remove((end, entry))
            schedule.finished(entry, now)
        for entry in schedule.take(now):
            assert now - entry.due <= entry.max_wait + 1e-9
            d = durations[entry.item]
            if d is not None:
                running.append((now + d, entry))
        in_flight = sum(e.cost for _, e in running) + sum(
            e.cost for e in entries if e.running and durations[e.item] is None
        )
        assert schedule.stats.in_flight == in_flight
        assert in_flight <= max(cap, *(e.cost for e in entries))
        assert len(schedule) + sum(1 for e in entries if e.running) == len(entries)
