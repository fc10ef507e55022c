"""A config read again while the node runs (gtmcluster.config.reload): its YAML parsed in
a child process (a real one), the model built in the reactor thread over many turns, the
collector paused meanwhile and what was built frozen; a refused config freezes nothing."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from gtmcluster import gil
from gtmcluster.config import load as load_module
from gtmcluster.config import reload
from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.config.problems import ConfigError
from gtmcluster.config.yamlchild import Parsed
from tests.support import bigconfig


class InlinePool:
    """A thread pool that runs each call at once (in this thread)."""

    def callInThreadWithCallback(self, done: Callable[[bool, Any], None], f: Callable[..., Any], *a: Any) -> None:
        try:
            result = f(*a)
        except BaseException:
            done(False, Failure())
        else:
            done(True, result)


class Reactor(MemoryReactorClock):
    def __init__(self) -> None:
        super().__init__()
        self.pool = InlinePool()

    def getThreadPool(self) -> InlinePool:
        return self.pool

    def callFromThread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        f(*args, **kwargs)

    def callLater(self, delay: float, callable: Callable[..., object], *args: object, **kw: object) -> IDelayedCall:
        self.turns += delay == 0  # work left for the next turn
        return super().callLater(delay, callable, *args, **kw)

    turns = 0


def turns_until(reactor: Reactor, d: Any) -> int:
    """Run the reactor until *d* fires; how many turns the work took."""
    while not d.called:
        assert reactor.getDelayedCalls(), "nothing left to run, and the read did not end"
        reactor.advance(0)
    return reactor.turns + 1


@pytest.fixture
def big(tmp_path: Path) -> Path:
    """1,000 virtual servers, 100 pools, 400 wide IPs, 4,000 topology records."""
    shape = bigconfig.Shape(servers=1000, pools=100, wideips=400, topology=4000, regions=40, members=2)
    return bigconfig.write(tmp_path, shape, ["127.0.0.1", "127.0.0.2"])


def test_a_big_config_is_built_over_many_turns_and_frozen(big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parsing: list[tuple[float, bool]] = []  # the switch interval and the collector while parsing

    def parse_file(path: str, apart: bool = False) -> Parsed:
        parsing.append((sys.getswitchinterval(), gc.isenabled()))
        assert apart
        return load_module.parse_file(path, apart)

    monkeypatch.setattr(reload, "parse_file", parse_file)
    reactor = Reactor()
    frozen_before = gc.get_freeze_count()
    try:
        d = reload.read(reactor, str(big))
        turns = turns_until(reactor, d)
        config = d.result
        assert isinstance(config, Config)
        assert config.digest == load(big).digest
        assert len(config.virtual_servers) == 1000
        # built a slice per turn (gtmcluster.slices.BUDGET): not in one turn
        assert turns > 5, turns
        # parsed in the thread with the GIL handed over often and the collector paused
        ((interval, collecting),) = parsing
        assert interval == pytest.approx(gil.SHORT) and not collecting
        assert gc.isenabled()
        assert gc.get_freeze_count() > frozen_before + 100_000
    finally:
        gc.unfreeze()


def test_a_refused_config_fails_the_read_and_freezes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    shape = bigconfig.Shape(servers=20, pools=2, wideips=4, topology=8, regions=2, members=2)
    raw = bigconfig.config(shape, ["127.0.0.1", "127.0.0.2"])
    raw["virtual_servers"][bigconfig.vs_name(0)]["port"] = "eighty"
    path.write_text(yaml.safe_dump(raw))
    reactor = Reactor()
    frozen_before = gc.get_freeze_count()
    d = reload.read(reactor, str(path))
    turns_until(reactor, d)
    failures: list[Failure] = []
    d.addErrback(failures.append)
    (failure,) = failures
    assert isinstance(failure.value, ConfigError)
    problems = [str(p) for p in failure.value.problems]
    assert any(f"virtual_servers.{bigconfig.vs_name(0)}.port" in p for p in problems), problems
    assert gc.isenabled() and gc.get_freeze_count() == frozen_before


def test_a_file_that_cannot_be_parsed_fails_the_read_at_once(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("pools: [1, 2\n")
    reactor = Reactor()
    d = reload.read(reactor, str(path))
    failures: list[Failure] = []
    d.addErrback(failures.append)
    (failure,) = failures
    assert isinstance(failure.value, ConfigError)
    assert "YAML syntax" in str(failure.value.problems[0])
    assert gc.isenabled()


def one_turn(clock: Clock) -> int:
    """Run the calls pending now, as one reactor turn does (not those they schedule); how many."""
    pending = list(clock.getDelayedCalls())
    for call in pending:
        clock.calls.remove(call)  # type: ignore[arg-type]
        call.func(*call.args, **call.kw)  # type: ignore[attr-defined]
    return len(pending)


def test_a_replaced_config_is_freed_a_part_per_turn(tmp_path: Path) -> None:
    shape = bigconfig.Shape(servers=20, pools=2, wideips=4, topology=8, regions=2, members=2)
    config = load(bigconfig.write(tmp_path, shape, ["127.0.0.1", "127.0.0.2"], make_certs=False))
    whole, topology = weakref.ref(config), weakref.ref(config.topology)
    clock = Clock()
    reload.free_in_turns(clock, config)
    del config
    assert whole() is not None  # nothing freed in the turn of the switch
    one_turn(clock)
    assert whole() is None and topology() is not None  # the config itself first
    turns = 1
    while one_turn(clock):
        turns += 1
    assert topology() is None
    assert turns >= 5, turns
