"""F5 imports for behaviour tests: the real CLI on a sample, and the decision engine on
what it wrote.

`gtmcluster` runs the CLI in a subprocess; `run_import` imports files as an operator would
(config on stdout, findings on stderr, zone files in the folder) and returns what came out,
with the LOST and CHANGED findings parsed; `imported` insists on an import that exits 0 and
a config that `gtmcluster check` passes, and loads it. `Asker` puts the decision engine
(`lb.engine.Balancer`) over a loaded config: every virtual server up except those a test
takes down by name, no measurements (the dynamic methods yield nothing, as on a BIG-IP DNS
that has not measured yet), no persistence record older than the test, a fixed random seed.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gtmcluster.config.load import load
from gtmcluster.config.model import Config, WideIP
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.zone import TYPE_A
from gtmcluster.lb.engine import Balancer
from gtmcluster.lb.trace import Decision
from gtmcluster.state.persistence import StorePersistence
from gtmcluster.state.store import Store
from tests.support.lbfakes import FakeAvailability, FakeClock, client

#: the F5 samples (tests/data/f5) and the corpus written from F5's tmsh reference
DATA = Path(__file__).parent.parent / "data" / "f5"
CORPUS = DATA / "corpus"

#: one finding line of `gtmcluster import f5` on stderr: ``where: LEVEL: what: why``
_FINDING = re.compile(r"^(?P<where>.+?): (?P<level>LOST|CHANGED|not mapped): (?P<rest>.*)$")


def gtmcluster(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the gtmcluster CLI in *cwd* (a subprocess, as an operator runs it)."""
    return subprocess.run(
        [sys.executable, "-m", "gtmcluster.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@dataclass(frozen=True)
class StderrFinding:
    """A finding as the CLI printed it: the line of the input, the level, and the rest
    (``what: why``, with ``(also lines ...)`` for repeats)."""

    line: int | None
    level: str
    text: str

    def about(self, what: str) -> bool:
        """Whether this finding is about *what* (its text starts with ``what:``)."""
        return self.text.startswith(what + ":")


@dataclass(frozen=True)
class ImportRun:
    """What one `gtmcluster import f5` printed and returned."""

    returncode: int
    stdout: str
    stderr: str
    findings: tuple[StderrFinding, ...]

    def essential(self) -> list[StderrFinding]:
        """The LOST and CHANGED findings."""
        return [f for f in self.findings if f.level in ("LOST", "CHANGED")]


def _finding(line: str) -> StderrFinding | None:
    m = _FINDING.match(line)
    if m is None:
        return None
    number = m["where"].rpartition(":")[2]
    return StderrFinding(int(number) if number.isdigit() else None, m["level"], m["rest"])


def run_import(cwd: Path, *files: Path | str, args: tuple[str, ...] = ()) -> ImportRun:
    """Import *files* (paths, or names under tests/data/f5) with the real CLI in *cwd*."""
    paths = [str(f if Path(f).is_absolute() else DATA / f) for f in files]
    done = gtmcluster("import", "f5", *paths, *args, cwd=cwd)
    assert "Traceback" not in done.stderr, done.stderr
    parsed = [_finding(line) for line in done.stderr.splitlines()]
    return ImportRun(done.returncode, done.stdout, done.stderr, tuple(f for f in parsed if f is not None))


def check_and_load(cwd: Path, text: str) -> Config:
    """Write *text* as cluster.yaml in *cwd*, pass it through `gtmcluster check`, load it."""
    (cwd / "cluster.yaml").write_text(text, encoding="utf-8")
    checked = gtmcluster("check", "--config", "cluster.yaml", cwd=cwd)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("cluster.yaml: OK"), checked.stdout
    return load(cwd / "cluster.yaml")


def imported(tmp_path: Path, sample: Path | str) -> Config:
    """Import *sample* with the real CLI (stdout), check it with the real CLI, load it."""
    done = run_import(tmp_path, sample)
    assert done.returncode == 0, done.stderr
    return check_and_load(tmp_path, done.stdout)


class Asker:
    """The decision engine over an imported config, with virtual servers taken down by name
    (in `availability.down`); queried names are found as the DNS server finds them."""

    def __init__(self, config: Config, seed: int = 1) -> None:
        self.config = config
        self.availability = FakeAvailability()
        clock = FakeClock()
        self.balancer = Balancer(
            config.topology, self.availability, StorePersistence(Store("n1", clock)), clock, random.Random(seed)
        )

    def wideip(self, name: str) -> WideIP:
        """The wide IP that answers the queried *name*, as the DNS server finds it (its own
        name or an alias, in a served zone)."""
        found = self.config.wideip_names.find_in(self.config.zones, names.key(names.from_text(name)))
        if found is None:
            raise KeyError(f"no wide IP answers {name}")
        return found

    def ask(self, name: str, ldns: str, qtype: int = TYPE_A) -> Decision:
        """The decision for a query of *name* (a wide IP's name or alias) from *ldns*."""
        return self.balancer.decide(self.wideip(name), qtype, client(ldns))

    def answer(self, name: str, ldns: str, qtype: int = TYPE_A) -> list[str]:
        return [str(a) for a in self.ask(name, ldns, qtype).addresses]
