"""The health tracker evaluates only what changed, and always equals a whole evaluation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from gtmcluster.config.model import Config
from gtmcluster.health import tracker as tracker_module
from gtmcluster.health.status import evaluate
from gtmcluster.health.tracker import HealthTracker
from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store
from tests.support import configs
from tests.support.healthcfg import health_config, load_config, observe

OBSERVERS = ("n1", "n2", "n3")
SERVERS = ("vs1", "vs2", "vs3", "vs1-6")


def _config(tmp_path: Path) -> Config:
    return load_config(
        tmp_path,
        health_config(
            vs2={"manual_resume": True, "slow_start": 30},
            vs3={"depends_on": ["vs2"]},
            **{"vs1-6": {"depends_on": ["vs1", "vs3"]}},
        ),
    )


def _matches_whole_evaluation(tracker: HealthTracker, store: Store) -> None:
    snapshot = tracker.snapshot
    assert tracker.pending == 0
    counted = tracker.observers() if tracker.observers is not None else None
    servers, links = evaluate(tracker.config, store, counted)
    assert dict(snapshot.vs) == servers
    assert dict(snapshot.links) == links


operation = st.one_of(
    st.tuples(
        st.just("verdict"),
        st.sampled_from([("vs", n) for n in SERVERS[:3]] + [("link", "l1")]),
        st.sampled_from(OBSERVERS),
        st.booleans(),
    ),
    st.tuples(st.just("admin"), st.sampled_from(SERVERS), st.sampled_from(["enabled", "disabled", "drain", None])),
    st.tuples(st.just("release"), st.sampled_from(SERVERS)),
    st.tuples(st.just("peers"), st.frozensets(st.sampled_from(OBSERVERS[1:]))),
    st.tuples(st.just("time"), st.sampled_from([1.0, 50.0, 200.0])),
    st.tuples(st.just("bad"), st.sampled_from(SERVERS), st.sampled_from(["x", 3, None, [1]])),
    st.tuples(st.just("read")),
    st.tuples(st.just("turn")),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(operation, max_size=40), scheduled=st.booleans(), slice_=st.sampled_from([1, 2, 500]))
def test_incremental_evaluation_equals_a_whole_evaluation(
    tmp_path: Path, ops: list[tuple[object, ...]], scheduled: bool, slice_: int
) -> None:
    """Whatever records change, in whatever order, with or without batching per reactor
    turn and however small the slices, once the tracker has caught up its statuses are
    those a whole evaluation of the store gives; reads in between never fail."""
    config = _config(tmp_path)
    reactor = Clock()
    reactor.advance(1000)
    store = Store("n1", reactor.seconds)
    tracker = HealthTracker(config, store, reactor.seconds, "n1")
    peers: set[str] = {"n2", "n3"}
    if scheduled:
        tracker.schedule = lambda f: reactor.callLater(0, f)
    tracker.observers = lambda: frozenset({"n1", *peers})
    original = tracker_module.SLICE
    tracker_module.SLICE = slice_
    try:
        for op in ops:
            kind = op[0]
            if kind == "verdict":
                subject: tuple[str, str] = op[1]  # type: ignore[assignment]
                observe(store, subject[0], subject[1], str(op[2]), bool(op[3]), ttl=90)
            elif kind == "admin":
                name, state = op[1], op[2]
                if state is None:
                    store.delete(f"admin/vs/{name}")
                else:
                    store.put(f"admin/vs/{name}", {"state": state})
            elif kind == "release":
                store.delete(f"held/vs/{op[1]}")
            elif kind == "peers":
                peers.clear()
                peers.update(op[1])  # type: ignore[arg-type]
                tracker.observers_changed()
            elif kind == "time":
                reactor.advance(float(op[1]))  # type: ignore[arg-type]
                store.expire()
            elif kind == "bad":  # a value of another shape, from a peer
                key = f"admin/vs/{op[1]}" if op[2] != 3 else f"obs/vs/{op[1]}/n2"
                store.merge(Record(key, op[2], Version(int(reactor.seconds() * 1000) + 5, 0, "n2"), 90, 0))
            elif kind == "read":
                assert set(tracker.snapshot.vs) == set(config.virtual_servers)
            else:
                reactor.advance(0)
        while reactor.getDelayedCalls():
            reactor.advance(0)
        _matches_whole_evaluation(tracker, store)
    finally:
        tracker_module.SLICE = original


def _many_servers(tmp_path: Path, count: int) -> Config:
    raw = configs.base()
    configs.add_member(raw, "n2", "DC2", "127.0.0.2")
    raw["monitors"] = {"web": {"type": "tcp", "interval": 5, "timeout": 1}}
    raw["virtual_servers"] = {
        f"s{i}": {"address": f"10.1.{i // 250}.{i % 250 + 1}", "datacenter": "DC1", "monitor": "web"}
        for i in range(count)
    }
    raw["pools"] = {"p": {"members": ["s0", "s1"]}}
    raw["wideips"] = {"gslb.example.test": {"pools": ["p"]}}
    return load_config(tmp_path, raw)


def _counting(tmp_path: Path, count: int) -> tuple[HealthTracker, Store, Clock, Callable[[], int]]:
    reactor = Clock()
    reactor.advance(1000)
    store = Store("n1", reactor.seconds)
    tracker = HealthTracker(_many_servers(tmp_path, count), store, reactor.seconds, "n1")
    tracker.schedule = lambda f: reactor.callLater(0, f)
    start = tracker.evaluations

    def evaluated() -> int:
        return tracker.evaluations - start

    return tracker, store, reactor, evaluated


def test_one_verdict_costs_one_evaluation_whatever_the_config(tmp_path: Path) -> None:
    """A verdict merged from a peer re-evaluates its own server only: with 2,000 servers,
    one evaluation, as with two."""
    tracker, store, reactor, evaluated = _counting(tmp_path, 2000)
    observe(store, "vs", "s7", "n2", False)
    reactor.advance(0)
    assert evaluated() == 1
    assert not tracker.snapshot.vs["s7"].available
    assert tracker.snapshot.vs["s8"].available


def test_a_turn_of_verdicts_evaluates_each_server_once(tmp_path: Path) -> None:
    """Many verdicts on the same servers within one reactor turn (a reconcile batch)
    are evaluated together on the next turn: one evaluation per server."""
    tracker, store, reactor, evaluated = _counting(tmp_path, 500)
    for name in ("s1", "s2", "s3"):
        observe(store, "vs", name, "n2", False)
        observe(store, "vs", name, "n1", False)
    assert evaluated() == 0
    reactor.advance(0)
    assert evaluated() == 3
    assert [tracker.snapshot.vs[n].available for n in ("s1", "s2", "s3", "s4")] == [False, False, False, True]


def test_a_read_sees_the_changes_of_its_own_turn(tmp_path: Path) -> None:
    """A reader in the same turn as a change (the answer path) is never behind the store."""
    tracker, store, _, _ = _counting(tmp_path, 100)
    generation = tracker.generation
    observe(store, "vs", "s1", "n1", False)
    assert not tracker.snapshot.vs["s1"].available
    assert tracker.generation == generation + 1


def test_a_change_of_everything_is_spread_over_turns(tmp_path: Path) -> None:
    """A peer leaving touches every server: the evaluations come a slice per turn, and
    readers meanwhile get each server as it was or as it is now."""
    tracker, store, reactor, evaluated = _counting(tmp_path, 1200)
    peers = {"n2"}
    tracker.observers = lambda: frozenset({"n1", *peers})
    for i in range(1200):
        observe(store, "vs", f"s{i}", "n2", True)
        observe(store, "vs", f"s{i}", "n1", False)
    reactor.advance(0)
    assert all(s.available for s in tracker.snapshot.vs.values())
    before = evaluated()
    peers.clear()
    tracker.observers_changed()
    assert evaluated() - before == tracker_module.SLICE
    assert tracker.pending == 1200 - tracker_module.SLICE
    reactor.advance(0)
    reactor.advance(0)
    assert tracker.pending == 0
    assert not any(s.available for s in tracker.snapshot.vs.values())
    assert evaluated() - before == 1200


def test_a_reload_evaluates_only_what_it_changed(tmp_path: Path) -> None:
    """A new config re-evaluates the servers whose definition changed, not the others."""
    tracker, _, _, evaluated = _counting(tmp_path, 1000)
    raw = _many_servers(tmp_path, 1000)
    assert evaluated() == 0
    changed = configs.base()
    configs.add_member(changed, "n2", "DC2", "127.0.0.2")
    changed["monitors"] = {"web": {"type": "tcp", "interval": 5, "timeout": 1}}
    changed["virtual_servers"] = {
        f"s{i}": {"address": f"10.1.{i // 250}.{i % 250 + 1}", "datacenter": "DC1", "monitor": "web"}
        for i in range(1000)
    }
    changed["virtual_servers"]["s5"]["admin_state"] = "disabled"
    changed["pools"] = {"p": {"members": ["s0", "s1"]}}
    changed["wideips"] = {"gslb.example.test": {"pools": ["p"]}}
    tracker.reconfigure(raw)
    assert evaluated() == 0
    tracker.reconfigure(load_config(tmp_path, changed))
    assert evaluated() == 1
    assert not tracker.snapshot.vs["s5"].serving
