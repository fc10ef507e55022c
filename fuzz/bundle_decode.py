"""Fuzz target: a config bundle received (`groupconfig.bundle.decode`), written out
(`bundle.write`) and checked (`bundle.check`), what a peer or ``POST /api/v1/config`` sends.

The input's first byte picks how the rest is read:

    even  the bytes as they came over the wire (any bytes into `decode`)
    odd   files, ``NAME \\0 CONTENT \\0 NAME \\0 CONTENT ...`` (the first is the config),
          made into a bundle with its digest and encoded: so the names themselves are
          fuzzed past the digest check (``../x``, ``/etc/x``, ``a//b``, ``a`` and ``a/b``...)

Invariants: `decode` gives a bundle or its one declared error, `BadBundle`; a bundle it
accepts encodes to bytes that decode to the same bundle, and its digest is its files'
(whoever encodes it); written out under a fresh folder, it leaves there exactly its files,
nothing beside that folder (or `BadBundle`/`OSError`, declared: a name too long for the
file system); `check` on it gives problems, never an exception (its YAML: `ConfigError`),
and reads no file from disk; no traceback is logged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from fuzz.harness import Finding, no_tracebacks
from gtmcluster.config.problems import ConfigError
from gtmcluster.config.source import yamlsrc
from gtmcluster.dnsdata import zoneinclude
from gtmcluster.groupconfig import bundle
from gtmcluster.groupconfig.bundle import BadBundle, Bundle

_top: Path | None = None


def top() -> Path:
    """A folder per process; each input writes under ``top/out`` (emptied first), and
    ``top/beside`` must stay empty."""
    global _top  # noqa: PLW0603 - one folder per process
    if _top is None:
        _top = Path(tempfile.mkdtemp(prefix="fuzz-bundle-"))
        (_top / "beside").mkdir()
    return _top


def _files(data: bytes) -> bytes:
    parts = data.split(b"\0")
    files: dict[str, bytes] = {}
    for name, content in zip(parts[::2], parts[1::2], strict=False):
        files.setdefault(name.decode("utf-8", "replace"), content)
    if not files:
        return b""
    main = next(iter(files))
    return bundle.encode(Bundle(main, files, 1, 0, "n1", 0.0))


def _no_disk(path: str, limit: int | None = None) -> bytes:
    raise Finding(f"bundle.check read {path} from disk")


def test_one_input(data: bytes) -> None:
    if not data:
        return
    wire = data[1:] if data[0] % 2 == 0 else _files(data[1:])
    with no_tracebacks():
        try:
            got = bundle.decode(wire)
        except BadBundle:
            return
        if bundle.digest_of(got.files) != got.digest:
            raise Finding("an accepted bundle's digest is not its files'")
        again = bundle.encode(got)
        if bundle.decode(again) != got or bundle.encode(bundle.decode(again)) != again:
            raise Finding("an accepted bundle does not travel as itself")
        _written(got)
        disk, zoneinclude._disk = zoneinclude._disk, _no_disk  # (check reads the bundle's files only)
        try:
            with contextlib.suppress(ConfigError):
                bundle.check(got, yamlsrc.parse(got.main, got.config_text))
        finally:
            zoneinclude._disk = disk


def _written(got: Bundle) -> None:
    root = top()
    out = root / "out"
    shutil.rmtree(out, ignore_errors=True)
    try:
        bundle.write(got, out)
    except (BadBundle, OSError):
        return
    found = {os.path.relpath(os.path.join(d, f), out) for d, _, names in os.walk(out) for f in names}
    if found != set(got.files):
        raise Finding(f"written out, the folder holds {sorted(found)[:5]}, not the bundle's files")
    if sorted(p.name for p in root.iterdir()) != ["beside", "out"] or any((root / "beside").iterdir()):
        raise Finding("writing a bundle out made something outside its folder")
