"""The F5 corpus (tests/data/f5/corpus): each input imported by the real CLI, its exit code
and its LOST and CHANGED findings compared with those written by hand from F5's documented
semantics, then its decision table asked of the decision engine on the imported config.

Each input has one expectation file: NAME.yaml beside NAME.conf (or one naming its input
with ``file:``). The format is in tests/data/f5/corpus/README.md; in short:

    exit: 1                       # 0 only where the import behaves as F5 would
    findings:                     # every LOST and CHANGED finding, by object (exactly these)
      - {level: LOST, line: 62, what: "pool a /Common/qos: load-balancing-mode quality-of-service"}
    aliases: {E: 192.0.2.10}      # short names for addresses in the rows
    decisions:                    # what F5 answers, asked of our engine
      - {wideip: ga.example.com, ldns: 10.9.0.53, down: [east.web], answer: [W]}

A row asks once (``answer``, ``action``) or many times (``cycle``: the answers take turns
in this order; ``picks``: N answers, all from a set, so many of them distinct; ``shares``:
each address's share of N answers, within a tolerance, the random source seeded). Where ours
answers otherwise than F5, the row says so with ``ours:`` and names the ``finding`` that
tells the operator.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_AAAA, TYPE_CNAME
from gtmcluster.lb.trace import Action, Decision
from tests.support.f5asker import CORPUS, Asker, ImportRun, StderrFinding, check_and_load, run_import

QTYPES = {"A": TYPE_A, "AAAA": TYPE_AAAA, "CNAME": TYPE_CNAME}
#: what a row's ``action`` may be: the engine's actions, or no_wideip (no wide IP answers the
#: name: the zone does)
ACTIONS = {*(a.value for a in Action), "no_wideip"}
#: the LDNS a row asks from when it names none: in no topology record of the corpus
DEFAULT_LDNS = "10.9.0.53"

TOP_KEYS = {"file", "args", "exit", "pending", "findings", "unmapped", "aliases", "types", "decisions", "why"}
FINDING_KEYS = {"level", "what", "line"}
ROW_KEYS = {"wideip", "type", "ldns", "down", "why", "ours", "finding", "pool", "method"}
OUTCOMES = ("answer", "action", "cycle", "picks", "shares")


class BadExpectation(Exception):
    """An expectation file that does not follow the format (the message names file and key)."""


@dataclass(frozen=True)
class Expected:
    """One LOST or CHANGED finding the import must report."""

    level: str
    what: str
    line: int | None

    def matches(self, f: StderrFinding) -> bool:
        return f.level == self.level and f.about(self.what) and (self.line is None or f.line == self.line)

    def __str__(self) -> str:
        return f"{self.line or '?'}: {self.level}: {self.what}"


@dataclass(frozen=True)
class Case:
    """An input of the corpus and what F5 does with it."""

    name: str
    source: Path
    args: tuple[str, ...]
    exit: int
    pending: str
    findings: tuple[Expected, ...]
    unmapped: tuple[str, ...]
    types: dict[str, list[str]]
    rows: tuple[dict[str, Any], ...]


def _keys(where: str, entry: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise BadExpectation(f"{where}: a mapping is needed")
    unknown = set(entry) - allowed
    if unknown:
        raise BadExpectation(f"{where}: unknown keys {sorted(unknown)} (allowed: {sorted(allowed)})")
    return entry


def read_case(path: Path) -> Case:
    """The expectation file *path*, checked against the format."""
    top = _keys(path.name, yaml.safe_load(path.read_text(encoding="utf-8")), TOP_KEYS)
    if top.get("exit") not in (0, 1):
        raise BadExpectation(f"{path.name}: exit: 0 or 1 is needed")
    source = (path.parent / top.get("file", path.with_suffix(".conf").name)).resolve()
    if not source.is_file():
        raise BadExpectation(f"{path.name}: no input {source}")
    findings = []
    for i, f in enumerate(top.get("findings") or []):
        f = _keys(f"{path.name}: findings[{i}]", f, FINDING_KEYS)
        if f.get("level") not in ("LOST", "CHANGED") or not f.get("what"):
            raise BadExpectation(f"{path.name}: findings[{i}]: level LOST or CHANGED and what are needed")
        findings.append(Expected(f["level"], str(f["what"]), f.get("line")))
    aliases = {str(k): str(v) for k, v in (top.get("aliases") or {}).items()}
    rows = []
    for i, row in enumerate(top.get("decisions") or []):
        where = f"{path.name}: decisions[{i}]"
        row = _keys(where, row, ROW_KEYS | set(OUTCOMES))
        if "wideip" not in row or sum(k in row for k in OUTCOMES) != 1:
            raise BadExpectation(f"{where}: a wideip and one of {', '.join(OUTCOMES)} are needed")
        for outcome in (row, row.get("ours") or {}):
            if "action" in outcome and outcome["action"] not in ACTIONS:
                raise BadExpectation(f"{where}: action {outcome['action']!r} is none of {sorted(ACTIONS)}")
        if "ours" in row:
            _keys(f"{where}: ours", row["ours"], set(OUTCOMES) | {"pool", "method"})
            if not any(e.what == row.get("finding") for e in findings):
                raise BadExpectation(f"{where}: 'ours' needs a 'finding' naming one of the findings' what")
        rows.append({"where": where, **_aliased(row, aliases)})
    return Case(
        path.stem,
        source,
        tuple(top.get("args") or ()),
        top["exit"],
        str(top.get("pending") or ""),
        tuple(findings),
        tuple(top.get("unmapped") or ()),
        dict(top.get("types") or {}),
        tuple(rows),
    )


def _aliased(value: Any, aliases: dict[str, str]) -> Any:
    """*value* with each string that is an alias replaced by its address (keys too)."""
    if isinstance(value, str):
        return aliases.get(value, value)
    if isinstance(value, list):
        return [_aliased(v, aliases) for v in value]
    if isinstance(value, dict):
        return {_aliased(k, aliases) if k not in ROW_KEYS else k: _aliased(v, aliases) for k, v in value.items()}
    return value


CASES = sorted(CORPUS.glob("*.yaml"))


def _id(path: Path) -> str:
    return path.stem


Importer = Callable[[Case], tuple[ImportRun, Path]]


@pytest.fixture(scope="module")
def imports(tmp_path_factory: pytest.TempPathFactory) -> Importer:
    """Each case's import, made once for the module (in a folder of its own)."""
    done: dict[str, tuple[ImportRun, Path]] = {}

    def imported(case: Case) -> tuple[ImportRun, Path]:
        if case.name not in done:
            folder = tmp_path_factory.mktemp(case.name)
            done[case.name] = (run_import(folder, case.source, args=case.args), folder)
        return done[case.name]

    return imported


def test_every_input_has_one_expectation() -> None:
    """A corpus file without an expectation would be tested for nothing."""
    named = collections.Counter(read_case(p).source for p in CASES)
    inputs = {p.resolve() for p in CORPUS.glob("*.conf")}
    assert inputs - set(named) == set(), "inputs without an expectation file"
    assert [s for s, n in named.items() if n > 1] == [], "inputs with two expectation files"


def test_a_bad_expectation_is_refused_with_file_and_key(tmp_path: Path) -> None:
    """A misspelt key, or a row saying ours differs without the finding that says so, is
    an error naming the file and the row, not a row silently not checked."""
    (tmp_path / "x.conf").write_text("gtm datacenter /Common/D { }\n")
    (tmp_path / "x.yaml").write_text("exit: 0\ndecisions:\n  - {wideip: a.example.com, answr: [192.0.2.1]}\n")
    with pytest.raises(BadExpectation, match=r"x.yaml: decisions\[0\]: unknown keys \['answr'\]"):
        read_case(tmp_path / "x.yaml")
    (tmp_path / "x.yaml").write_text(
        "exit: 0\ndecisions:\n  - {wideip: a.example.com, ours: {action: drop}, action: drop}\n"
    )
    with pytest.raises(BadExpectation, match="'ours' needs a 'finding'"):
        read_case(tmp_path / "x.yaml")


@pytest.mark.parametrize("path", CASES, ids=_id)
def test_exit_code_and_findings(path: Path, imports: Importer, request: pytest.FixtureRequest) -> None:
    """The import exits 0 only where it behaves as F5 would, and reports exactly the LOST
    and CHANGED findings written down for it (by object and line)."""
    case = read_case(path)
    if case.pending:
        request.applymarker(pytest.mark.xfail(reason=case.pending, strict=True))
    run, _ = imports(case)
    essential = run.essential()
    missing = [str(e) for e in case.findings if not any(e.matches(f) for f in essential)]
    unexpected = [f"{f.line}: {f.level}: {f.text}" for f in essential if not any(e.matches(f) for e in case.findings)]
    assert (missing, unexpected) == ([], []), run.stderr
    notes = [f for f in run.findings if f.level == "not mapped"]
    assert [w for w in case.unmapped if not any(f.about(w) for f in notes)] == [], run.stderr
    assert run.returncode == case.exit, run.stderr
    assert (run.returncode == 0) == (not essential)


def _has_table(path: Path) -> bool:
    try:
        case = read_case(path)
    except BadExpectation:
        return True  # (the test says what is wrong with it)
    return bool(case.rows or case.types)


@pytest.mark.parametrize("path", [p for p in CASES if _has_table(p)], ids=_id)
def test_decisions(path: Path, imports: Importer) -> None:
    """Every row of the decision table: what F5 answers (or, where the findings say ours
    differs, what ours answers instead), asked of the decision engine on the imported
    config; an import that exits 0 passes `gtmcluster check` first."""
    case = read_case(path)
    run, folder = imports(case)
    assert run.stdout, run.stderr
    if run.returncode == 0:
        config = check_and_load(folder, run.stdout)
    else:
        (folder / "cluster.yaml").write_text(run.stdout, encoding="utf-8")
        config = load(folder / "cluster.yaml")
    wrong = [
        f"wide IP {name}: types {types_of(config, name)}, F5's {want}"
        for name, want in case.types.items()
        if types_of(config, name) != want
    ]
    for row in case.rows:
        expected = row.get("ours", row)
        problem = outcome_problem(config, row, expected)
        if problem:
            wrong.append(f"{row['where']} ({row['wideip']}, LDNS {row.get('ldns', DEFAULT_LDNS)}): {problem}")
    assert not wrong, "\n".join(wrong)


def types_of(config: Config, name: str) -> list[str]:
    for w in config.wideips.values():
        if w.name == name:
            return sorted(k for k, v in QTYPES.items() if v in w.types)
    return []


def _ask(config: Config, row: dict[str, Any], asker: Asker) -> Decision:
    return asker.ask(row["wideip"], row.get("ldns", DEFAULT_LDNS), QTYPES[row.get("type", "A")])


def _answers(d: Decision) -> list[str]:
    if d.action is not Action.ANSWER:
        return [d.action.value]
    return [str(a) for a in d.addresses] or [t.text for t in d.targets]


def outcome_problem(config: Config, row: dict[str, Any], want: dict[str, Any]) -> str:
    """What is wrong with the engine's answers to *row* against *want* ("" when right)."""
    asker = Asker(config)
    asker.availability.down = set(row.get("down", ()))
    try:
        asker.wideip(row["wideip"])
    except KeyError:
        return "" if want.get("action") == "no_wideip" else "no wide IP answers this name"
    if want.get("action") == "no_wideip":
        return f"{asker.wideip(row['wideip']).name} answers it"
    if "answer" in want or "action" in want:
        d = _ask(config, row, asker)
        got = _answers(d)
        expected = [str(a) for a in want["answer"]] if "answer" in want else [want["action"]]
        for key, value in (("pool", d.pool), ("method", d.method)):
            if key in want and want[key] != value:
                return f"{key} {value}, expected {want[key]} (answer {got})"
        return "" if got == expected else f"answered {got}, expected {expected}"
    if "cycle" in want:
        order = [str(a) for a in want["cycle"]]
        got = [", ".join(_answers(_ask(config, row, asker))) for _ in range(2 * len(order))]
        start = order.index(got[0]) if got[0] in order else 0
        turns = [order[(start + i) % len(order)] for i in range(len(got))]
        return "" if got == turns else f"answered {got}, expected turns in the order {order}"
    if "picks" in want:
        spec = want["picks"]
        got = [", ".join(_answers(_ask(config, row, asker))) for _ in range(int(spec["asks"]))]
        allowed = {str(a) for a in spec["from"]}
        if not set(got) <= allowed:
            return f"answered {sorted(set(got) - allowed)}, not among {sorted(allowed)}"
        distinct = len(set(got))
        return "" if distinct == int(spec["distinct"]) else f"{distinct} distinct answers {sorted(set(got))}"
    spec = want["shares"]
    asks = int(spec["asks"])
    counts = collections.Counter(", ".join(_answers(_ask(config, row, asker))) for _ in range(asks))
    shares = {str(a): float(s) for a, s in spec["of"].items()}
    got_shares = {a: round(n / asks, 3) for a, n in counts.items()}
    off = [a for a in set(shares) | set(counts) if abs(counts.get(a, 0) / asks - shares.get(a, 0.0)) > spec["within"]]
    return "" if not off else f"shares {got_shares}, expected {shares} within {spec['within']}"
