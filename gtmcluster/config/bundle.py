"""The config bundle: a config file and every file it names for its content, as one unit.

Config sync (issue 15) passes the group's configuration around as a bundle: what one
member publishes, every member validates, keeps and runs. A bundle holds

- ``files``: each file by the name the config gives it (the config itself under its own
  base name, `Bundle.main`): the zone files (``zones[].file``), the region address lists
  (``regions.NAME[].file``), the CA files of https monitors (``monitors.NAME.ca_file``)
  and the GeoIP databases (``geoip.country``, ``geoip.asn``);
- ``generation``: a count that grows by one with each publication, and ``based_on``, the
  generation the publisher had when it made it;
- ``publisher`` and ``published_at`` (the member, and its clock's time);
- ``digest``: SHA-256 over the files' names and contents only, so the same files have the
  same digest whoever publishes them.

What a member keeps for itself is not in a bundle: its certificates and key, its API token
file, its folders. Files are named relative to the config's ``base_dir`` (its folder by
default); a name that is absolute or leaves that folder (``..``) is refused, as is a bundle
over `MAX_BYTES`, both when a bundle is made and when one is received (its size is checked
before it is parsed). Problems are reported as config problems are:
``FILE: key.path: problem``.

Which of two bundles is newer is a total order (`newer`): generation first, then the
publisher's name, then the digest. So when two members publish at once on the same
generation, every member keeps the same one, in whatever order the two reach it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeGuard, TypeVar

import yaml

from gtmcluster.config.problems import ConfigError, KeyPath, Problem, Problems

#: the largest bundle (all files together, as sent), bytes: room for GeoIP databases
#: (GeoLite2-Country and -ASN are some 7 and 8 MB); decoded and written in the thread pool
MAX_BYTES = 64 * 1024 * 1024
#: the format of `encode`
FORMAT = 1
#: file mode of files written out
FILE_MODE = 0o640


@dataclass(frozen=True)
class Bundle:
    main: str
    files: Mapping[str, bytes]
    generation: int
    based_on: int
    publisher: str
    published_at: float
    digest: str = field(default="")

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", digest_of(self.files))

    @property
    def size(self) -> int:
        return sum(len(name.encode()) + len(data) for name, data in self.files.items())

    @property
    def config_text(self) -> bytes:
        return self.files[self.main]

    def order(self) -> tuple[int, str, str]:
        """Where the bundle stands among others (see `newer`)."""
        return (self.generation, self.publisher, self.digest)

    @property
    def header(self) -> Header:
        return Header(
            self.main, self.generation, self.based_on, self.publisher, self.published_at, self.digest, self.size
        )


@dataclass(frozen=True)
class Header:
    """A bundle without its files: what members tell each other they hold, and history."""

    main: str
    generation: int
    based_on: int
    publisher: str
    published_at: float
    digest: str
    size: int

    def order(self) -> tuple[int, str, str]:
        return (self.generation, self.publisher, self.digest)

    def to_json(self) -> dict[str, Any]:
        return {
            "main": self.main,
            "generation": self.generation,
            "based_on": self.based_on,
            "publisher": self.publisher,
            "published_at": self.published_at,
            "digest": self.digest,
            "size": self.size,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Header:
        """The header *doc* describes; raises `BadBundle` if it is not one."""
        if not isinstance(doc, dict):
            raise BadBundle("a bundle header is a JSON object")
        main, generation, based_on, publisher, published_at = _fields(doc)
        digest, size = doc.get("digest"), doc.get("size")
        if not (
            _stamp_ok(main, generation, based_on, publisher, published_at)
            and name_problem(main) is None
            and isinstance(digest, str)
            and len(digest) == 64
            and all(c in "0123456789abcdef" for c in digest)
            and type(size) is int
            and size >= 0
        ):
            raise BadBundle("a bundle header with fields missing or of the wrong type")
        return cls(main, generation, based_on, publisher, float(published_at), digest, size)


B = TypeVar("B", "Bundle", "Header")

#: a publisher is a member's name (a DNS name: `sync.certs.node_name`); it names folders
_PUBLISHER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*")


def _fields(doc: dict[str, Any]) -> tuple[Any, Any, Any, Any, Any]:
    """main, generation, based_on, publisher, published_at of *doc*, unchecked (`_stamp_ok`)."""
    return doc.get("main"), doc.get("generation"), doc.get("based_on"), doc.get("publisher"), doc.get("published_at")


def _stamp_ok(main: Any, generation: Any, based_on: Any, publisher: Any, published_at: Any) -> bool:
    """The fields a bundle and its header share are of their types and ranges."""
    return (
        isinstance(main, str)
        and type(generation) is int
        and generation >= 1
        and type(based_on) is int
        and based_on >= 0
        and publisher_ok(publisher)
        and isinstance(published_at, int | float)
        and not isinstance(published_at, bool)
    )


def publisher_ok(name: Any) -> TypeGuard[str]:
    return isinstance(name, str) and len(name) <= 253 and _PUBLISHER.fullmatch(name) is not None


def digest_of(files: Mapping[str, bytes]) -> str:
    """SHA-256 over the names and contents, in name order (each length-prefixed)."""
    h = hashlib.sha256()
    for name in sorted(files):
        raw = name.encode()
        data = files[name]
        h.update(len(raw).to_bytes(4, "big") + raw + len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def newer(a: B | None, b: B | None) -> B | None:
    """The newer of two bundles or headers (either may be None): the greater generation,
    then publisher, then digest; the same whichever is given first."""
    if a is None:
        return b
    if b is None:
        return a
    return a if a.order() >= b.order() else b


# -- making one from files ------------------------------------------------------------------


def referenced(raw: Any) -> Iterator[tuple[KeyPath, Any]]:
    """The (key path, name) of every file a parsed config names for its content. Only the
    shapes are followed here: a name that is not a string is the config reader's to
    report."""
    if not isinstance(raw, dict):
        return
    zones = raw.get("zones")
    if isinstance(zones, list):
        for i, zone in enumerate(zones):
            if isinstance(zone, dict) and "file" in zone:
                yield ("zones", i, "file"), zone["file"]
    regions = raw.get("regions")
    if isinstance(regions, dict):
        for name, value in regions.items():
            entries = [value] if isinstance(value, dict) else value
            if not isinstance(entries, list):
                continue
            for i, entry in enumerate(entries):
                if isinstance(entry, dict) and "file" in entry:
                    at: KeyPath = ("regions", name, i, "file") if isinstance(value, list) else ("regions", name, "file")
                    yield at, entry["file"]
    monitors = raw.get("monitors")
    if isinstance(monitors, dict):
        for name, monitor in monitors.items():
            if isinstance(monitor, dict) and "ca_file" in monitor:
                yield ("monitors", name, "ca_file"), monitor["ca_file"]
    geoip = raw.get("geoip")
    if isinstance(geoip, dict):
        for key in ("country", "asn"):
            if key in geoip:
                yield ("geoip", key), geoip[key]


def name_problem(name: Any) -> str | None:
    """Why *name* cannot name a file of a bundle (None: it can)."""
    if not isinstance(name, str) or not name:
        return "a file of the bundle is named by a non-empty string"
    if "\0" in name or "\\" in name:
        return f"{name!r}: a file name of the bundle has no NUL or backslash"
    path = PurePosixPath(name)
    if path.is_absolute():
        return f"{name}: an absolute path cannot be shared with the group (name it relative to base_dir)"
    if any(part == ".." for part in path.parts):
        return f"{name}: a path that leaves the config's folder cannot be shared with the group"
    if str(path) in ("", "."):
        return f"{name!r}: not a file name"
    return None


#: the top-level keys whose values name the files of a bundle (`referenced`), and base_dir
_NAMING = ("base_dir", "zones", "regions", "monitors", "geoip")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _naming(text: bytes) -> Any:
    """The parts of a config's YAML that name its files (`_NAMING`). A member makes a
    bundle of its file on a SIGHUP, in the reactor's thread, and the whole YAML of a big
    config takes seconds to parse (cutting it at every top-level key, `yamlsplit.cut`, 30
    ms): so these sections are found by their keys at the start of a line and parsed
    alone (5 ms at 5,000 servers), the regions only when their text names a file at all
    (an ISP's 20,000 networks listed inline name none). A section that does not parse alone
    (an alias to an anchor elsewhere) has the whole file parsed. (Should a section be found
    where there is none, inside a multi-line string, the files it names are only added:
    the config read from the bundle still names and checks the files it needs.)"""
    decoded = text.decode("utf-8")
    raw: dict[str, Any] = {}
    try:
        for key in _NAMING:
            section = _section(decoded, key)
            if section is None or (key == "regions" and "file" not in section):
                continue
            value = yaml.load(section, Loader=_LOADER)  # a safe loader
            if isinstance(value, dict):
                raw.update(value)
    except yaml.YAMLError:
        return yaml.load(decoded, Loader=_LOADER)
    return raw


#: after a top-level key: the colon, then a space or the end of the line
_AFTER_KEY = re.compile(r"[ \t]*:(?:[ \t]|\r?\n|$)")
#: the start of the next top-level key: a line that starts with something else than a
#: space, a comment or a sequence entry (of the section, written at column 0)
_NEXT_KEY = re.compile(r"\n[^\s#-]")


def _section(text: str, key: str) -> str | None:
    """The text of top-level *key* in *text* (from the key to the next), or None."""
    at = 0 if text.startswith(key) else text.find("\n" + key) + 1
    while (at == 0 and text.startswith(key)) or at > 0:
        if _AFTER_KEY.match(text, at + len(key)):
            after = _NEXT_KEY.search(text, at + len(key))
            return text[at : after.start() + 1 if after else len(text)]
        found = text.find("\n" + key, at + len(key))
        if found < 0:
            break
        at = found + 1
    return None


def make(
    path: str | os.PathLike[str],
    generation: int,
    based_on: int,
    publisher: str,
    published_at: float,
    max_bytes: int = MAX_BYTES,
) -> Bundle:
    """The bundle of the config at *path* and the files it names; raises `ConfigError`
    with every problem (a name that cannot be shared, a file that cannot be read, the
    whole over *max_bytes*). The config itself is not validated here: the reload's code
    does that, as for any config."""
    config_path = Path(path)
    file = str(config_path)
    problems = Problems(file)
    try:
        text = config_path.read_bytes()
    except OSError as e:
        raise ConfigError([Problem(file, (), f"cannot read it: {e.strerror or e}")]) from None
    try:
        raw = _naming(text)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError([Problem(file, (), f"not YAML: {e}")]) from None
    base = config_path.parent
    if isinstance(raw, dict) and isinstance(raw.get("base_dir"), str):
        base = base / raw["base_dir"]
    files: dict[str, bytes] = {config_path.name: text}
    for at, name in referenced(raw):
        problem = name_problem(name)
        if problem is not None:
            problems.add(at, problem)
            continue
        key = str(PurePosixPath(name))
        if key == config_path.name:
            problems.add(at, f"{name}: the config's own name")
            continue
        if key in files:
            continue  # named twice
        try:
            files[key] = (base / key).read_bytes()
        except OSError as e:
            problems.add(at, f"cannot read {base / key}: {e.strerror or e}")
    bundle = Bundle(config_path.name, files, generation, based_on, publisher, published_at)
    if bundle.size > max_bytes:
        problems.add((), f"the bundle is {bundle.size:,} bytes, over the limit of {max_bytes:,}")
    problems.raise_if_any()
    return bundle


# -- on the wire, and back --------------------------------------------------------------------


def encode(bundle: Bundle) -> bytes:
    """The bundle as canonical JSON (file contents in base64)."""
    return json.dumps(
        {
            "format": FORMAT,
            "main": bundle.main,
            "generation": bundle.generation,
            "based_on": bundle.based_on,
            "publisher": bundle.publisher,
            "published_at": bundle.published_at,
            "digest": bundle.digest,
            "files": {name: base64.b64encode(data).decode() for name, data in sorted(bundle.files.items())},
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()


class BadBundle(ValueError):
    """A bundle received that is not one (too big, malformed, inconsistent)."""


def decode(data: bytes, max_bytes: int = MAX_BYTES) -> Bundle:
    """The bundle *data* encodes; raises `BadBundle` saying what is wrong. The size is
    checked before anything is parsed (base64 makes the encoding a third larger than
    the files: the limit applies to the files, a third more to the encoding)."""
    if len(data) > max_bytes * 4 // 3 + 65536:
        raise BadBundle(f"{len(data):,} bytes, over the limit")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise BadBundle(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadBundle("not a bundle of a format this version reads")
    main, generation, based_on, publisher, published_at = _fields(doc)
    claimed = doc.get("digest")
    encoded = doc.get("files")
    if not (
        _stamp_ok(main, generation, based_on, publisher, published_at)
        and isinstance(claimed, str)
        and isinstance(encoded, dict)
    ):
        raise BadBundle("fields missing or of the wrong type")
    files: dict[str, bytes] = {}
    for name, text in encoded.items():
        problem = name_problem(name)
        if problem is not None:
            raise BadBundle(problem)
        if not isinstance(text, str):
            raise BadBundle(f"{name}: contents are not base64 text")
        try:
            files[str(PurePosixPath(name))] = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise BadBundle(f"{name}: contents are not base64") from None
    if main not in files:
        raise BadBundle(f"the config {main!r} is not among its files")
    bundle = Bundle(main, files, generation, based_on, publisher, float(published_at))
    if bundle.digest != claimed:
        raise BadBundle(f"digest {claimed[:16]} does not match its files ({bundle.digest[:16]})")
    if bundle.size > max_bytes:
        raise BadBundle(f"{bundle.size:,} bytes of files, over the limit of {max_bytes:,}")
    return bundle


def write(bundle: Bundle, directory: str | os.PathLike[str]) -> Path:
    """Write the bundle's files under *directory* (made if missing); returns the config's
    path there. Each file is written whole then renamed into place."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    resolved_root = root.resolve()
    for name, data in bundle.files.items():
        problem = name_problem(name)
        if problem is not None:
            raise BadBundle(problem)
        target = root / name
        if not target.resolve().is_relative_to(resolved_root):  # (a link in the way)
            raise BadBundle(f"{name}: leaves {root}")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(partial, target)
    return root / bundle.main
