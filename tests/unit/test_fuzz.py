"""The fuzz targets (``fuzz/``): the seed corpus holds every invariant, and each target
runs briefly under atheris without a finding. Longer runs: ``make fuzz``."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from twisted.logger import Logger

from fuzz import harness, run

ROOT = Path(__file__).resolve().parents[2]
#: the short run of each target: this many inputs or this many seconds, whichever ends
#: first (the config loader does some 30 a second, the DNS parser thousands), from a fixed
#: seed so that a failure here is the same on every run (longer runs: make fuzz)
RUNS = 3000
SECONDS = 5


def seeds(target: str) -> list[Path]:
    return sorted((ROOT / "fuzz" / "corpus" / target).iterdir())


@pytest.mark.parametrize("target", list(run.TARGETS))
def test_seed_corpus_holds_the_invariants(target: str) -> None:
    """Every checked-in seed of a target passes its invariants (replayed in this process)."""
    module = importlib.import_module(f"fuzz.{target}")
    found = seeds(target)
    assert len(found) >= 5
    for seed in found:
        module.test_one_input(seed.read_bytes())


@pytest.mark.slow
@pytest.mark.parametrize("target", list(run.TARGETS))
def test_target_runs_under_atheris_without_a_finding(target: str, tmp_path: Path) -> None:
    """atheris runs the target from its seeds (mutating them for a few seconds): no
    invariant breaks, no exception escapes, and the run reports its executions."""
    result = run.run(target, seconds=SECONDS, runs=RUNS, work=tmp_path, extra=["-seed=1"])
    assert not result.crashed, result.output[-6000:]
    assert result.executions > len(seeds(target)), result.output[-3000:]
    assert not list(tmp_path.glob("crash-*"))


def test_a_logged_traceback_is_a_finding() -> None:
    """Code that logs a failure (a traceback) under `no_tracebacks` breaks the rule."""
    log = Logger()
    with pytest.raises(harness.Finding, match="a traceback was logged: boom"), harness.no_tracebacks():
        try:
            raise ValueError("inner")
        except ValueError:
            log.failure("boom")
    with harness.no_tracebacks() as events:
        log.warn("a clear error")
    assert [e["log_format"] for e in events] == ["a clear error"]


def test_a_finding_stops_the_run_and_keeps_the_input(tmp_path: Path) -> None:
    """A target that breaks an invariant on some input: atheris stops, the run reports a
    finding, and the input is saved for replay."""
    (tmp_path / "selftest_target.py").write_text(
        "from fuzz.harness import Finding\n\n"
        "def test_one_input(data: bytes) -> None:\n"
        "    if data.startswith(b'boom'):\n"
        "        raise Finding('boom')\n"
    )
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "seed").write_bytes(b"boom!")
    work = tmp_path / "work"
    result = run.run(
        "selftest", seconds=None, runs=100, work=work, extra=[], module="selftest_target", seeds=seeds, path=(tmp_path,)
    )
    assert result.crashed
    assert "Finding: boom" in result.output
    (saved,) = work.glob("crash-selftest-*")
    assert saved.read_bytes() == b"boom!"
