"""Fuzz target: `gtmcluster import f5` (`importers.f5import.run`) on files an operator brings
from another system: tmsh ``bigip_gtm.conf`` and ``bigip.conf``, one-line listings, 3-DNS
``wideip.conf``, in any encoding.

The input's first byte picks the options: bits 0-1 the ``--zone`` list (`ZONES`), bit 2
``--site`` options (`SITES`), bit 3 two files: the rest is cut at the first `SPLIT` line
into ``bigip_gtm.conf`` and ``wideip.conf`` (else it is all ``bigip_gtm.conf``). The files
are written as bytes, so byte-order marks, UTF-16, NUL bytes, gzip magic and CRLF all reach
`f5import.read_text`.

Invariants: `run` gives a `Result` or its one declared error, `InputError`, whose message
is one line naming an input file (and, with a line, a line of it); no traceback is logged;
every finding's ``where`` is ``FILE:LINE`` of an input file (or ``--site``, for a site
option); the config text is YAML, a mapping; the importer's own check of it, a load as
``gtmcluster check`` does, finds no problem (a problem there is a mapping the loader
refuses); the findings render one per line, as the command prints them.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import yaml

from fuzz.harness import Finding, no_tracebacks
from gtmcluster.cli.importcmd import render_findings
from gtmcluster.importers import f5import

#: the ``--zone`` lists (bits 0-1 of the first byte)
ZONES: tuple[list[str], ...] = ([], ["example.com"], ["example.net", "wip.example.com."], ["Example.COM", "com"])
#: the ``--site`` options (bit 2)
SITES = {"DC1": "192.0.2.1", "CNC": "2001:db8::53", "dc-east": "198.51.100.7"}
#: where the input is cut into two files (bit 3)
SPLIT = b"\n#--next-file--\n"
#: the text `verify` gives a problem of the imported config
NOT_LOADED = "the imported config does not load"
_WHERE = re.compile(r"(.*):(\d+)")
_top: Path | None = None


def top() -> Path:
    global _top  # noqa: PLW0603 - one folder per process
    if _top is None:
        _top = Path(tempfile.mkdtemp(prefix="fuzz-f5-"))
    return _top


def _files(data: bytes, two: bool) -> dict[str, bytes]:
    """The input files by path (written), and their contents."""
    first, cut, second = data.partition(SPLIT) if two else (data, b"", b"")
    contents = {"bigip_gtm.conf": first, **({"wideip.conf": second} if cut else {})}
    out = {}
    for name, content in contents.items():
        path = top() / name
        path.write_bytes(content)
        out[str(path)] = content
    return out


def _in_file(where: str, files: dict[str, bytes]) -> bool:
    """Whether *where* is ``FILE:LINE`` with FILE an input and LINE one of its lines (at most
    its newline bytes and one: UTF-16 and UTF-32 have one in each newline too)."""
    m = _WHERE.fullmatch(where)
    return m is not None and m[1] in files and 1 <= int(m[2]) <= files[m[1]].count(b"\n") + 1


def test_one_input(data: bytes) -> None:
    if not data:
        return
    options, rest = data[0], data[1:]
    files = _files(rest, bool(options & 8))
    sites = SITES if options & 4 else {}
    try:
        with no_tracebacks():
            result = f5import.run(list(files), sites, ZONES[options & 3])
    except f5import.InputError as e:
        message = str(e)
        if len(message.splitlines()) != 1:
            raise Finding(f"InputError of {len(message.splitlines())} lines: {message!r}") from None
        where = message.split(": ", 1)[0]
        if where not in files and not _in_file(where, files):
            raise Finding(f"InputError names no input file (and a line of it): {message!r}") from None
        return
    findings = result.imported.findings
    for f in findings:
        if f.why.startswith(NOT_LOADED):
            raise Finding(f"the importer made a config the loader refuses: {f.render()}")
        if not (_in_file(f.where, files) or (f.where == "--site" and sites)):
            raise Finding(f"a finding not at a line of an input file: {f.render()}")
    lines = render_findings(findings)
    if any(len(line.splitlines()) != 1 for line in lines):
        raise Finding(f"a finding renders as several lines: {next(x for x in lines if len(x.splitlines()) != 1)!r}")
    try:
        loaded = yaml.safe_load(result.text)
    except yaml.YAMLError as e:
        raise Finding(f"the config text is no YAML: {e}") from None
    if not isinstance(loaded, dict):
        raise Finding(f"the config text is YAML but no mapping: {type(loaded).__name__}")
