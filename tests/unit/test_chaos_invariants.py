"""The chaos run's invariants, on made-up histories: a clean run passes, and each kind of
misbehaviour (a silent live node, answers naming a dead server, digests that never agree, a
lost acknowledged write, flapping under loss, a traceback) is caught and named."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.invariants import Bounds, acceptable_states, alive_spans, check

NODES = {"a": "10.0.0.1", "b": "10.0.0.2"}
VS = {"vs-a": "10.0.0.1", "vs-b": "10.0.0.2", "vs-admin": "192.0.2.1"}
BOUNDS = Bounds(max_gap=2.0, propagation=5.0, failover=10.0, converge=20.0)


class H:
    """A history under construction: by default both nodes answer every 0.1 s for 30 s
    (vs-a and vs-b in turn), the observer sees equal digests every second, everything is up."""

    def __init__(self, seconds: float = 30.0):
        self.seconds = seconds
        self.events: list[dict[str, Any]] = [
            {
                "t": 0.0,
                "kind": "setup",
                "nodes": NODES,
                "vs": VS,
                "monitored": ["vs-a", "vs-b"],
                "admin_vs": ["vs-admin"],
                "bounds": BOUNDS.__dict__,
                "seed": 1,
                "seconds": seconds,
            }
        ]
        self.events += [{"t": 0.0, "kind": "nemesis", "action": "start", "node": n, "skew": 0} for n in NODES]
        self.silent: list[tuple[str, float, float]] = []  # node, from, to: queries time out
        self.answer_with: list[tuple[str, float, float]] = []  # vs, from, to: every answer names it
        self.own_down: list[tuple[str, float, float]] = []  # vs, from, to: every node's own verdict down
        self.available: dict[tuple[str, str], list[tuple[float, float]]] = {}  # (node, vs) -> down spans
        self.digests_differ: tuple[float, float] | None = None
        self.final_admin = {n: {"vs-admin": "enabled"} for n in NODES}

    def nemesis(self, t: float, action: str, **args: Any) -> H:
        self.events.append({"t": t, "kind": "nemesis", "action": action, **args})
        return self

    def admin(self, t: float, node: str, state: str, acked: bool = True, skew: int = 0) -> H:
        self.events.append(
            {"t": t, "kind": "admin", "node": node, "vs": "vs-admin", "state": state, "acked": acked, "skew": skew}
        )
        return self

    def build(self) -> list[dict[str, Any]]:
        events = list(self.events)
        spans = alive_spans(events, list(NODES), self.seconds)
        steps = int(self.seconds * 10)
        for i in range(steps):
            t = i / 10
            for node in NODES:
                if not any(a <= t < b for a, b in spans[node]):
                    continue
                silent = any(n == node and a <= t < b for n, a, b in self.silent)
                forced = [vs for vs, a, b in self.answer_with if a <= t < b]
                vs = forced[0] if forced else ("vs-a" if i % 2 else "vs-b")
                answer = [] if silent else [VS[vs]]
                events.append(
                    {"t": t, "kind": "dns", "node": node, "rcode": None if silent else "NOERROR", "answer": answer}
                )
        for second in range(int(self.seconds) + 1):
            t = float(second)
            views: dict[str, Any] = {}
            for node in NODES:
                if not any(a <= t < b for a, b in spans[node]):
                    views[node] = None
                    continue
                differ = self.digests_differ is not None and self.digests_differ[0] <= t < self.digests_differ[1]
                vs_view = {}
                for vs in ("vs-a", "vs-b", "vs-admin"):
                    down = any(v == vs and a <= t < b for v, a, b in self.own_down)
                    unavailable = any(a <= t < b for a, b in self.available.get((node, vs), []))
                    vs_view[vs] = {"available": not (down or unavailable), "admin": "enabled", "own": not down}
                views[node] = {"digest": f"3-{node}" if differ else "3-same", "records": 3, "peers": {}, "vs": vs_view}
            events.append({"t": t, "kind": "round", "views": views})
        if not any(e["kind"] == "nemesis" and e["action"] == "final_heal" for e in events):
            events.append({"t": self.seconds - 10, "kind": "nemesis", "action": "final_heal"})
        events.append({"t": self.seconds - 1, "kind": "final", "admin": self.final_admin})
        events += [{"t": self.seconds, "kind": "logs", "node": n, "tracebacks": 0, "excerpt": ""} for n in NODES]
        return events


def test_a_clean_history_passes_with_its_figures() -> None:
    report = check(H().build())
    assert report.ok, report.failures
    dns = report.figures["dns"]["a"]
    assert dns["live_share"] == 1.0
    assert dns["longest_gap"] == pytest.approx(0.1, abs=0.01)
    assert report.figures["converged_after_heal"] == 0.0
    assert report.figures["loss"]["availability_changes"] == 0


def test_a_live_node_that_stops_answering_fails() -> None:
    h = H()
    h.silent.append(("b", 10.0, 14.0))
    report = check(h.build())
    assert len(report.failures) == 1
    assert report.failures[0].startswith("b did not answer for 4.1 s while live")
    assert report.figures["dns"]["b"]["live_share"] < 0.9


def test_a_killed_node_is_held_to_answer_only_once_it_answers_again() -> None:
    """Killed at 5 s, started at 10 s, silent until 13 s (starting up): no failure; its live
    time leaves out the 5 s it was dead."""
    h = H().nemesis(5.0, "kill", node="b").nemesis(10.0, "start", node="b", skew=0)
    h.silent.append(("b", 10.0, 13.0))
    report = check(h.build())
    assert report.ok, report.failures
    assert report.figures["dns"]["b"]["live_seconds"] == 25.0


def test_a_restarted_node_that_never_answers_fails() -> None:
    h = H().nemesis(5.0, "kill", node="b").nemesis(10.0, "start", node="b", skew=0)
    h.silent.append(("b", 10.0, 30.0))
    report = check(h.build())
    assert any(f.startswith("b did not answer for") for f in report.failures), report.failures


def test_answers_naming_a_server_every_observer_saw_down_fail_after_the_bound() -> None:
    h = H()
    h.own_down.append(("vs-a", 10.0, 20.0))
    h.answer_with.append(("vs-a", 10.0, 16.5))  # 6.5 s into it; the bound is 5 s
    report = check(h.build())
    assert report.figures["all_observers_down_windows"] == 1
    assert any("answered vs-a" in f and "every observer had seen it down" in f for f in report.failures), (
        report.failures
    )


def test_answers_within_the_propagation_bound_pass() -> None:
    h = H()
    h.own_down.append(("vs-a", 10.0, 20.0))
    h.answer_with.append(("vs-a", 10.0, 14.0))  # vs-a for 4 s of it, then vs-b
    h.answer_with.append(("vs-b", 10.0, 20.0))
    report = check(h.build())
    assert report.ok, report.failures


def test_a_stopped_backend_still_answered_after_the_failover_bound_fails() -> None:
    h = H().nemesis(5.0, "backend_stop", vs="vs-b").nemesis(25.0, "backend_start", vs="vs-b")
    h.answer_with.append(("vs-a", 17.0, 25.0))  # vs-b in turn until 16.8 s: 11.8 s, the bound is 10
    report = check(h.build())
    stop = report.figures["backend_stops"][0]
    assert stop["moved_after"] == pytest.approx(11.8, abs=0.05)
    assert any(f.startswith("vs-b's backend stopped") for f in report.failures), report.failures


def test_a_stopped_backend_answered_within_the_bound_passes() -> None:
    h = H().nemesis(5.0, "backend_stop", vs="vs-b").nemesis(25.0, "backend_start", vs="vs-b")
    h.answer_with.append(("vs-a", 9.0, 25.0))
    report = check(h.build())
    assert report.ok, report.failures
    assert report.figures["backend_stops"][0]["moved_after"] == pytest.approx(3.8, abs=0.05)


def test_digests_that_agree_late_after_the_last_heal_fail() -> None:
    h = H(60.0).nemesis(20.0, "final_heal")
    h.digests_differ = (0.0, 45.0)
    report = check(h.build())
    assert report.figures["converged_after_heal"] == 25.0
    assert any("agreed 25.0 s after the last heal" in f for f in report.failures), report.failures


def test_digests_that_never_agree_fail() -> None:
    h = H(60.0).nemesis(20.0, "final_heal")
    h.digests_differ = (0.0, 61.0)
    report = check(h.build())
    assert report.figures["converged_after_heal"] is None
    assert any("never agreed" in f for f in report.failures)


def test_the_last_acknowledged_write_is_what_every_node_holds() -> None:
    h = H().admin(3.0, "a", "disabled").admin(6.0, "b", "drain")
    h.final_admin = {n: {"vs-admin": "drain"} for n in NODES}
    report = check(h.build())
    assert report.ok, report.failures
    assert report.figures["acknowledged"]["last_present"] == 1


def test_a_lost_acknowledged_write_fails() -> None:
    """b acknowledged drain at 6 s, but the nodes hold a's earlier disabled: lost."""
    h = H().admin(3.0, "a", "disabled").admin(6.0, "b", "drain")
    h.final_admin = {n: {"vs-admin": "disabled"} for n in NODES}
    report = check(h.build())
    assert report.figures["acknowledged"]["lost"] == 1
    assert any("the write of 'drain' acknowledged by b at t=6.0 is lost" in f for f in report.failures)


def test_nodes_that_disagree_at_the_end_fail() -> None:
    h = H().admin(3.0, "a", "disabled")
    h.final_admin = {"a": {"vs-admin": "disabled"}, "b": {"vs-admin": "enabled"}}
    report = check(h.build())
    assert any("disagree on vs-admin" in f for f in report.failures)


def test_a_write_from_a_clock_ahead_may_supersede_a_later_one() -> None:
    """a's clock is 30 s ahead: its write at 3 s carries a version above b's at 6 s, so
    disabled winning is the hybrid clocks' order, not a loss."""
    h = H().admin(3.0, "a", "disabled", skew=30).admin(6.0, "b", "drain")
    h.final_admin = {n: {"vs-admin": "disabled"} for n in NODES}
    report = check(h.build())
    assert report.ok, report.failures
    assert report.figures["acknowledged"]["superseded_by_clock"] == 1


def test_acceptable_states() -> None:
    writes = [
        {"t": 1.0, "state": "disabled", "acked": True, "skew": 0},
        {"t": 2.0, "state": "drain", "acked": True, "skew": 0},
        {"t": 3.0, "state": "enabled", "acked": False, "skew": 0},
    ]
    states, last = acceptable_states(writes, 1.0)
    assert last is writes[1]
    assert states == {"drain", "enabled"}  # the unacknowledged later one may have been applied
    assert acceptable_states([], 1.0) == ({"enabled"}, None)


def test_availability_that_changes_under_loss_fails_and_own_verdicts_are_counted() -> None:
    h = H(40.0).nemesis(5.0, "loss", share=0.2).nemesis(25.0, "loss", share=0.0)
    h.available[("a", "vs-b")] = [(10.0, 14.0)]
    report = check(h.build())
    loss = report.figures["loss"]
    assert loss == {
        "windows": 1,
        "seconds": 20.0,
        "availability_changes": 2,
        "own_verdict_changes": 0,
        "peers_seen_disconnected": 0,
    }
    assert any(f.startswith("a: vs-b went down at t=10.0 under loss") for f in report.failures)


def test_changes_outside_loss_are_not_flaps() -> None:
    h = H().nemesis(5.0, "loss", share=0.2).nemesis(9.0, "loss", share=0.0)
    h.available[("a", "vs-b")] = [(10.0, 14.0)]
    assert check(h.build()).ok


def test_a_traceback_in_a_log_fails() -> None:
    events = H().build()
    events.append({"t": 30.0, "kind": "logs", "node": "a", "tracebacks": 1, "excerpt": "Traceback ..."})
    report = check(events)
    assert report.failures == ["a logged 1 tracebacks; the first:\nTraceback ..."]


def test_a_history_without_setup_is_refused() -> None:
    assert check([{"t": 0.0, "kind": "end"}]).failures == ["the history has no setup event"]


def test_the_time_from_a_restart_to_the_first_answer_is_a_figure() -> None:
    h = H().nemesis(5.0, "kill", node="b").nemesis(10.0, "start", node="b", skew=0)
    h.silent.append(("b", 10.0, 12.5))
    report = check(h.build())
    assert report.figures["dns"]["b"]["restart_to_answer"] == [2.5]
    assert report.figures["dns"]["a"]["restart_to_answer"] == []
