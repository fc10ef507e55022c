"""A config read again while the node runs (gtmcluster.config.reload): its YAML parsed in
a child process (the real one: its real output is what these tests feed the reactor's
side), sent section by section in the builder's order; the model built in the reactor
thread over many turns, starting on the first sections while the child still sends the
rest; the collector paused meanwhile and what was built frozen; a refused config freezes
nothing; a child that dies or cannot start; and the replaced config freed in turns."""

from __future__ import annotations

import gc
import pickle
import struct
import subprocess
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from twisted.internet import defer, error
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from gtmcluster.config import reload
from gtmcluster.config.load import SECTION_ORDER, build, load
from gtmcluster.config.model import Config
from gtmcluster.config.problems import ConfigError
from gtmcluster.config.source import yamlchild
from gtmcluster.runtime import slices
from tests.support import bigconfig


def child_output(path: Path) -> bytes:
    """What the real child process writes for the file at *path* (cut at its keys, as a
    reload runs it)."""
    args = [sys.executable, "-m", "gtmcluster.config.source.yamlframes", "--split", str(path), *SECTION_ORDER]
    return subprocess.run(args, input=path.read_bytes(), capture_output=True, check=True, timeout=60).stdout


def frames(output: bytes) -> list[bytes]:
    """*output* cut into its frames (each with its length)."""
    out = []
    while output:
        (size,) = struct.unpack_from(">Q", output)
        out.append(output[: 8 + size])
        output = output[8 + size :]
    return out


class InlinePool(ThreadPool):
    """A thread pool that runs each call at once (in this thread)."""

    def callInThreadWithCallback(self, onResult: Any, func: Any, *args: Any, **kw: Any) -> None:
        try:
            result = func(*args, **kw)
        except BaseException:
            onResult(False, Failure())
        else:
            onResult(True, result)


class Reactor(MemoryReactorClock):
    """Runs the real child at once when asked to spawn it, and counts turns of work."""

    def __init__(self) -> None:
        super().__init__()
        self.turns = 0
        self.spawn_error: OSError | None = None
        self.outputs: list[bytes] = []  # what each child wrote

    def getThreadPool(self) -> InlinePool:
        return InlinePool()

    def callFromThread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        f(*args, **kwargs)

    def callLater(self, delay: float, callable: Callable[..., object], *args: object, **kw: object) -> IDelayedCall:
        self.turns += delay == 0  # work left for the next turn
        return super().callLater(delay, callable, *args, **kw)

    def spawnProcess(self, proto: Any, executable: Any, args: Any = (), env: Any = None, *a: Any, **k: Any) -> Any:
        if self.spawn_error is not None:
            raise self.spawn_error
        ran = subprocess.run(
            list(args), check=False, input=proto.text.encode(), capture_output=True, env=env, timeout=60
        )
        self.outputs.append(ran.stdout)
        proto.outReceived(ran.stdout)
        proto.processEnded(Failure(error.ProcessDone(0)))
        return None


def settle(reactor: Reactor, d: defer.Deferred[Any]) -> None:
    """Run the reactor's turns until *d* fires."""
    while not d.called:
        assert reactor.getDelayedCalls(), "nothing left to run, and it did not end"
        reactor.advance(0)


def failure_of(d: defer.Deferred[Any]) -> Failure:
    failures: list[Failure] = []
    d.addErrback(failures.append)
    (failure,) = failures
    return failure


@pytest.fixture
def big(tmp_path: Path) -> Path:
    """1,000 virtual servers, 100 pools, 400 wide IPs, 4,000 topology records."""
    shape = bigconfig.Shape(servers=1000, pools=100, wideips=400, topology=4000, regions=40, members=2)
    return bigconfig.write(tmp_path, shape, ["127.0.0.1", "127.0.0.2"], make_certs=False)


def test_a_big_config_is_built_over_many_turns_and_frozen(big: Path) -> None:
    reactor = Reactor()
    frozen_before = gc.get_freeze_count()
    try:
        d = reload.read(reactor, str(big))
        settle(reactor, d)
        config = d.result
        assert isinstance(config, Config)
        assert config.digest == load(big).digest
        assert len(config.virtual_servers) == 1000
        assert reactor.turns > 5, reactor.turns  # a slice per turn (gtmcluster.runtime.slices.BUDGET)
        assert gc.isenabled()
        assert gc.get_freeze_count() > frozen_before + 100_000
    finally:
        gc.unfreeze()


def test_the_build_starts_on_the_first_sections_while_the_child_sends_the_rest(big: Path) -> None:
    """The child sends the small sections first, then servers, regions, pools, topology
    and wide IPs: the model is built from what came while the rest is on its way."""
    reactor = Reactor()
    child = yamlchild.Child(reactor, str(big), big.read_text(), SECTION_ORDER)
    pieces = frames(child_output(big))
    built: defer.Deferred[Config] | None = None
    sent = 0
    for frame in pieces:
        child.outReceived(frame)
        sent += 1
        if built is None:
            assert child.started.called  # the first frame: the build may start
            built = slices.run(build(str(big), child.parsed), reactor)
        while reactor.getDelayedCalls():
            reactor.advance(0)  # every turn the build can take with what came
        if b"regions" in frame and b"arrived" in frame:
            break
    assert built is not None and not built.called
    assert child.parsed.awaited == [("pools",)]  # done with the servers and regions
    assert sum(map(len, pieces[:sent])) < sum(map(len, pieces)) / 2  # the biggest still to come
    for frame in pieces[sent:]:
        child.outReceived(frame)
    settle(reactor, built)
    config = built.result
    assert isinstance(config, Config) and config.digest == load(big).digest


def test_a_child_that_ends_before_its_last_frame_fails_the_read(big: Path) -> None:
    reactor = Reactor()
    child = yamlchild.Child(reactor, str(big), big.read_text(), SECTION_ORDER)
    pieces = frames(child_output(big))
    for frame in pieces[: len(pieces) // 2]:
        child.outReceived(frame)
    built = slices.run(build(str(big), child.parsed), reactor)
    child.processEnded(Failure(error.ProcessTerminated(exitCode=1)))
    settle(reactor, built)
    failure = failure_of(built)
    assert failure.check(RuntimeError) and "ended before its last frame" in failure.getErrorMessage()


def test_a_child_that_cannot_start_is_logged_and_the_yaml_parsed_in_a_thread(big: Path) -> None:
    reactor = Reactor()
    reactor.spawn_error = OSError(24, "Too many open files")
    with capturedLogs() as events:
        d = reload.read(reactor, str(big))
        settle(reactor, d)
    try:
        config = d.result
        assert isinstance(config, Config) and config.digest == load(big).digest
    finally:
        gc.unfreeze()
    (failed,) = [e for e in events if e.get("event") == "config_child_failed"]
    assert "Too many open files" in failed["error"]


def test_a_refused_config_fails_the_read_and_freezes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    shape = bigconfig.Shape(servers=20, pools=2, wideips=4, topology=8, regions=2, members=2)
    raw = bigconfig.config(shape, ["127.0.0.1", "127.0.0.2"])
    raw["virtual_servers"][bigconfig.vs_name(0)]["port"] = "eighty"
    path.write_text(yaml.safe_dump(raw))
    reactor = Reactor()
    frozen_before = gc.get_freeze_count()
    d = reload.read(reactor, str(path))
    settle(reactor, d)
    failure = failure_of(d)
    assert isinstance(failure.value, ConfigError)
    problems = [str(p) for p in failure.value.problems]
    assert any(f"virtual_servers.{bigconfig.vs_name(0)}.port" in p for p in problems), problems
    assert gc.isenabled() and gc.get_freeze_count() == frozen_before


def test_a_file_that_cannot_be_parsed_fails_the_read(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("pools: [1, 2\n")
    reactor = Reactor()
    d = reload.read(reactor, str(path))
    settle(reactor, d)
    failure = failure_of(d)
    assert isinstance(failure.value, ConfigError)
    assert "YAML syntax" in str(failure.value.problems[0])
    assert gc.isenabled()


def test_a_file_the_child_cannot_cut_after_all_is_read_whole(tmp_path: Path) -> None:
    """A line inside a quoted value that looks like a top-level key: the child finds the
    cut wrong after some sections; the read starts again with the file read whole, says
    so, and builds the config the file means."""
    shape = bigconfig.Shape(servers=20, pools=2, wideips=4, topology=8, regions=2, members=2)
    path = bigconfig.write(tmp_path, shape, ["127.0.0.1", "127.0.0.2"], make_certs=False)
    text = path.read_text()
    assert "\nstate_dir: state/{node}\n" in text
    path.write_text(text.replace("\nstate_dir: state/{node}\n", '\nstate_dir: "state/\nx: {node}"\n'))
    reactor = Reactor()
    with capturedLogs() as events:
        d = reload.read(reactor, str(path))
        settle(reactor, d)
    config = d.result
    assert isinstance(config, Config)
    assert config.state_dir == "state/ x: {node}"
    assert config.digest == load(path).digest
    assert [e["why"] for e in events if e.get("event") == "config_read_whole"]
    gc.unfreeze()


def kinds(output: bytes) -> list[tuple[str, Any]]:
    """What each frame of a child's *output* is, and for a section which."""
    out = []
    for frame in frames(output):
        what = pickle.loads(frame[8:])
        out.append((what[0], what[1] if what[0] in ("same", "piece") else None))
    return out


def test_a_reload_reads_again_only_the_sections_whose_text_changed(big: Path) -> None:
    """The node read its config at start; a reload of the same file has the child name
    every section as the same (nothing of it read again, nor sent); after an edit of the
    wide IPs, the child reads and sends that section alone. Each time the config is the
    one the file says."""
    load(big)  # at start
    reactor = Reactor()
    try:
        d = reload.read(reactor, str(big))
        settle(reactor, d)
        assert isinstance(d.result, Config) and d.result.digest == load(big).digest
        sent = kinds(reactor.outputs[-1])
        named = {key for what, key in sent if what == "same"}
        assert named >= {"virtual_servers", "regions", "topology", "pools", "wideips", "sync_group"}
        assert not [key for what, key in sent if what == "piece"]
        assert len(reactor.outputs[-1]) < 20_000  # of megabytes

        raw = yaml.safe_load(big.read_text())
        name = next(iter(raw["wideips"]))
        raw["wideips"][name]["failure_response"] = "servfail"
        text = big.read_text()
        start, end = text.index("\nwideips:") + 1, text.index("\nzones:") + 1  # (zones come next)
        big.write_text(text[:start] + yaml.safe_dump({"wideips": raw["wideips"]}, sort_keys=False) + text[end:])
        d = reload.read(reactor, str(big))
        settle(reactor, d)
        assert isinstance(d.result, Config), d.result
        assert [w.failure_response for w in d.result.wideips.values() if w.name == name] == ["servfail"]
        assert d.result.digest == load(big).digest
        assert [key for what, key in kinds(reactor.outputs[-1]) if what == "piece"] == ["wideips"]
    finally:
        gc.unfreeze()


def test_a_problem_in_a_section_taken_from_memory_still_names_its_line(big: Path) -> None:
    """The servers' section is the same, but the data center it names is gone: the read
    that took it from memory (without its lines) is done again in full, and the problem
    names its line as a read at start does."""
    load(big)
    text = big.read_text()
    assert "\n- DC2\n" in text
    big.write_text(text.replace("\n- DC2\n", "\n- DC9\n", 1))
    with pytest.raises(ConfigError) as at_start:
        load(big)
    load_again = big.read_text()
    big.write_text(text)
    load(big)  # the memory holds the good file's sections
    big.write_text(load_again)
    reactor = Reactor()
    d = reload.read(reactor, str(big))
    settle(reactor, d)
    failure = failure_of(d)
    assert isinstance(failure.value, ConfigError)
    assert [str(p) for p in failure.value.problems] == [str(p) for p in at_start.value.problems]
    assert all(p.line for p in failure.value.problems if p.path[:1] == ("virtual_servers",))
    assert len(reactor.outputs) == 2  # read again, in full
    assert any(what == "same" for what, _ in kinds(reactor.outputs[0]))
    assert not any(what == "same" for what, _ in kinds(reactor.outputs[1]))


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
