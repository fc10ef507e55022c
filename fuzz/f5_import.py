"""Fuzz target: a file an operator imports with ``gtmcluster import f5``
(`importers.f5import.run`: read, parse tmsh or 3-DNS, map, check the result by loading it).

The input is the file's bytes as they lie on disk, so that encodings, byte-order marks, NUL
bytes, a gzip archive's magic and CRLF reach `f5import.read_text` as they would.

Invariants: `run` returns a result or raises its one declared error, `InputError` (one line
naming the file); every finding names the file and a line inside it (or the output, or an
option); the config text it returns is YAML that parses; when no finding is essential the
config loads (the import loads its own output, and a problem there is a LOST finding: an
exit 0 means it loads); no traceback is logged.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml

from fuzz.harness import Finding, no_tracebacks
from gtmcluster.importers import f5import

_top: Path | None = None


def top() -> Path:
    global _top  # noqa: PLW0603 - one folder per process
    if _top is None:
        _top = Path(tempfile.mkdtemp(prefix="fuzz-f5-"))
    return _top


def test_one_input(data: bytes) -> None:
    path = top() / "in.conf"
    path.write_bytes(data)
    lines = data.count(b"\n") + 1
    with no_tracebacks():
        try:
            result = f5import.run([str(path)])
        except f5import.InputError as e:
            if "\n" in str(e) or str(path) not in str(e):
                raise Finding(f"an input error that is not one line naming the file: {e!r}") from None
            return
    for finding in result.imported.findings:
        where = finding.where
        if where.startswith(str(path) + ":"):
            line = where.rpartition(":")[2]
            if not line.isdigit() or not 1 <= int(line) <= lines:
                raise Finding(f"a finding at a line the file does not have: {finding.render()}")
        elif not (where.startswith("output") or where.startswith("--")):
            raise Finding(f"a finding that names no place: {finding.render()}")
    try:
        yaml.safe_load(result.text)
    except yaml.YAMLError as e:
        raise Finding(f"the config written is no YAML: {e}") from None
