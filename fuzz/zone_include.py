"""Fuzz target: a zone file and the files it ``$INCLUDE``s (`dnsdata.zonefile.load` and
`zonefile.included`, what a config bundle's zones go through on every member).

The input's first byte picks the mode (even: shared, as under config sync; odd: a node's
own config with ``include_dirs`` opening ``zone/opened``); the rest is the zone file, then
included files: ``ZONE \\0 NAME \\0 CONTENT \\0 NAME \\0 CONTENT ...``, written in a
folder ``zone/`` (a name is kept to letters, digits, ``.``, ``-``, ``_`` and ``/``, never
``..``). Beside the folder lies ``secret.env``, and in it ``notes.inc`` and a link
``link.inc`` to the secret: both hold a marker that no problem may quote.

Invariants: `load` gives the zone or its one declared error, `ZoneFileError`; it reads no
file whose real path is outside ``zone/`` (and ``zone/opened`` when opened); no problem's
message holds the marker (unless the input itself holds it); `included` names the same
files from the disk as from the files given to it in memory (a bundle's), links aside;
no traceback is logged.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from fuzz.harness import Finding, no_tracebacks
from gtmcluster.dnsdata import zonefile, zoneinclude

MARKER = "QZXs3cr3tW0rd"
SECRET = f"API_TOKEN={MARKER} {MARKER}\nPASSWORD {MARKER}\n{MARKER} IN A 192.0.2.1\nx IN TXT {MARKER}\n"
_SAFE = re.compile(r"[^A-Za-z0-9._/-]")
_top: Path | None = None


def top() -> Path:
    global _top  # noqa: PLW0603 - one folder per process
    if _top is None:
        _top = Path(tempfile.mkdtemp(prefix="fuzz-zone-"))
        (_top / "secret.env").write_text(SECRET)
    return _top


def _name(raw: bytes) -> str | None:
    name = _SAFE.sub("_", raw.decode("utf-8", "replace")).strip("/")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts or len(parts) > 4 or any(len(p) > 40 for p in parts):
        return None
    return "/".join(parts)


def _layout(data: bytes) -> tuple[Path, dict[str, bytes]]:
    root = top()
    folder = root / "zone"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "opened").mkdir(parents=True)
    zone, *rest = data.split(b"\0")
    files = {"z.zone": zone, "notes.inc": SECRET.encode()}
    for raw, content in zip(rest[::2], rest[1::2], strict=False):
        name = _name(raw)
        if name is not None and name != "link.inc":
            files.setdefault(name, content)
    for name, content in list(files.items()):
        path = folder / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        except OSError:  # a name that is also a folder
            del files[name]
    (folder / "link.inc").symlink_to(root / "secret.env")
    return folder, files


def test_one_input(data: bytes) -> None:
    if not data:
        return
    shared = data[0] % 2 == 0
    folder, files = _layout(data[1:])
    includes = zoneinclude.Includes(shared, () if shared else (str(folder / "opened"),))
    allowed = [os.path.realpath(folder)]
    read: list[str] = []
    disk = zoneinclude._disk

    def recording(path: str, limit: int | None = None) -> bytes:
        read.append(path)
        return disk(path, limit)

    zoneinclude._disk = recording
    try:
        with no_tracebacks():
            try:
                zonefile.load(str(folder / "z.zone"), "example.test", includes)
                problems: list[zonefile.Problem] = []
            except zonefile.ZoneFileError as e:
                problems = e.problems
            on_disk, _ = zonefile.included("z.zone", includes, base=str(folder))
            in_memory, _ = zonefile.included("z.zone", includes, read=_reader(files))
    finally:
        zoneinclude._disk = disk
    for path in read:
        real = os.path.realpath(path)
        if not any(real == a or real.startswith(a + os.sep) for a in allowed):
            raise Finding(f"read {path}, outside the zone's folder")
    if MARKER.lower() not in data.decode("utf-8", "replace").lower():
        for problem in problems:
            if MARKER.lower() in problem.message.lower():
                raise Finding(f"a problem quotes a file: {problem}")
    if shared and [n for n in on_disk if n != "link.inc"] != [n for n in in_memory if n != "link.inc"]:
        raise Finding(f"included from disk {on_disk[:5]}, from memory {in_memory[:5]}")


def _reader(files: dict[str, bytes]) -> zoneinclude.Read:
    def read(name: str) -> bytes:
        if name not in files:
            raise FileNotFoundError(2, "not in the bundle")
        return files[name]

    return read
