"""The config bundle: a config file and every file it names for its content, as one unit.

Config sync (issue 15) passes the group's configuration around as a bundle: what one
member publishes, every member validates, keeps and runs. A bundle holds

- ``files``: exactly the files the config names (the config itself under its own base
  name, `Bundle.main`), each by the name the config gives it: the zone files
  (``zones[].file``) and the files they ``$INCLUDE`` (`zonefile.included`), the region
  address lists (``regions.NAME[].file``), the CA files of https monitors
  (``monitors.NAME.ca_file``) and the GeoIP databases (``geoip.country``, ``geoip.asn``),
  found by parsing the YAML as the config reader does (`sharing.names`; issue 30: a text
  search missed a quoted ``"zones":``);
- ``generation``: a count that grows by one with each publication, and ``based_on``, the
  generation the publisher had when it made it;
- ``publisher`` and ``published_at`` (the member, and its clock's time);
- ``digest``: SHA-256 over the files' names and contents only, so the same files have the
  same digest whoever publishes them.

What a member keeps for itself is not in a bundle: its certificates and key, its API token
file, its folders; nor is a secret (`sharing.secrets`). Files are named relative to the
config's ``base_dir`` (its folder by default); a name that is absolute or leaves that folder
(``..``) is refused, as is a bundle over `MAX_BYTES`, both when a bundle is made and when
one is received (its size is checked before it is parsed), and `check` refuses a bundle
that carries a file its config does not name, or an inline secret. Problems are reported
as config problems are: ``FILE: key.path: problem``.

Each file is read once to make a bundle (`read_and_make`), as the config's reader reads
it (`runtime.files`: a regular file, capped, never blocking): the config's text parsed is
the text carried, and a zone file read for its includes is carried as read.

Which of two bundles is newer is a total order (`newer`): generation first, then the
publisher's name, then the digest. So when two members publish at once on the same
generation, every member keeps the same one, in whatever order the two reach it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeGuard, TypeVar

from gtmcluster.config import sharing
from gtmcluster.config.problems import ConfigError, KeyPath, Problem, Problems
from gtmcluster.config.source import yamlsrc
from gtmcluster.runtime import files as configfiles

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
            and sharing.name_problem(main) is None
            and isinstance(digest, str)
            and len(digest) == 64
            and all(c in "0123456789abcdef" for c in digest)
            and type(size) is int
            and size >= 0
        ):
            raise BadBundle("a bundle header with fields missing or of the wrong type")
        return cls(main, generation, based_on, publisher, float(published_at), digest, size)


B = TypeVar("B", "Bundle", "Header")

#: a publisher is a member's name (a DNS name: `config.membername.check`); it names folders
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


def check(candidate: Bundle, raw: Any) -> list[Problem]:
    """Why *candidate*, whose config parses to *raw*, cannot be published or run (none: it
    can): a name that cannot be shared, a file it names or includes that it does not carry,
    a file it carries that its config does not name (a bundle holds exactly those), an
    inline secret. The config's own problems are the config reader's."""
    problems = Problems(candidate.main)
    wanted, found = sharing.names(raw, candidate.main, files=candidate.files)
    for at, problem in found:
        problems.add(at, problem)
    for name, at in wanted.items():
        if name not in candidate.files:
            problems.add(at, f"{name}: named, but not in the bundle")
    for name in sorted(set(candidate.files) - set(wanted) - {candidate.main}):
        problems.add(
            (),
            f"{name}: the bundle carries a file its config does not name (refused: a bundle holds "
            "exactly the files its config names and their zones include)",
        )
    for at, problem in sharing.secrets(raw):
        problems.add(at, problem)
    return problems.found


def _kind(at: KeyPath) -> configfiles.Kind:
    """How a file named at key path *at* is read (`runtime.files`): as the config's reader
    reads it (zone files and the files they include: as zone files)."""
    return {"regions": configfiles.ADDRESS_LIST, "monitors": configfiles.PEM, "geoip": configfiles.GEOIP}.get(
        str(at[0]) if at else "", configfiles.ZONE_FILE
    )


def read_config(path: str | os.PathLike[str]) -> bytes:
    """The text of the config at *path*, read once to make its bundle, as the config's
    reader reads it (`runtime.files`: a regular file of at most `files.CONFIG`, never
    blocking: a FIFO or a device put at the config's path is refused, neither waited on
    nor read without end). Raises `ConfigError`."""
    try:
        return configfiles.read_bytes(path, configfiles.CONFIG)
    except OSError as e:
        raise ConfigError([Problem(str(Path(path)), (), f"cannot read the config: {e.strerror or e}")]) from None


def read_and_make(
    path: str | os.PathLike[str],
    generation: int,
    based_on: int,
    publisher: str,
    published_at: float,
    parse: Callable[[str, bytes], Any] = yamlsrc.parse,
    max_bytes: int = MAX_BYTES,
) -> tuple[Bundle, Any]:
    """The bundle of the config at *path* (see `from_text`) and its parsed value: the
    config read once (`read_config`), that text parsed with *parse* (`yamlsrc.parse`, or
    `load.config_value`: what the reader last read) and that same text carried, so what
    decides the files a bundle holds is the config it carries. Raises `ConfigError`.

    A member's reload does the same in three steps, the parse in its YAML child between
    two turns of the thread pool (`groupconfig.shared`): `read_config`, then `from_text`."""
    text = read_config(path)
    raw = parse(str(Path(path)), text)
    return from_text(path, text, raw, generation, based_on, publisher, published_at, max_bytes), raw


def make(
    path: str | os.PathLike[str],
    generation: int,
    based_on: int,
    publisher: str,
    published_at: float,
    max_bytes: int = MAX_BYTES,
) -> Bundle:
    """The bundle of the config at *path* (`read_and_make`, its config parsed here)."""
    return read_and_make(path, generation, based_on, publisher, published_at, max_bytes=max_bytes)[0]


def from_text(
    path: str | os.PathLike[str],
    text: bytes,
    raw: Any,
    generation: int,
    based_on: int,
    publisher: str,
    published_at: float,
    max_bytes: int = MAX_BYTES,
) -> Bundle:
    """The bundle of the config at *path*, whose text is *text* (read by `read_config`:
    the config is not read again here) parsed to *raw*, and of the files it names (and
    the files its zone files ``$INCLUDE``, each read once: a zone file read for its
    includes is carried as read); raises `ConfigError` with every problem (a name that
    cannot be shared, a file that cannot be read, the whole over *max_bytes*). The config
    itself is not validated here: the reload's code does that, as for any config; nor are
    its secrets (`check`)."""
    config_path = Path(path)
    problems = Problems(str(config_path))
    base = config_path.parent
    if isinstance(raw, dict) and isinstance(raw.get("base_dir"), str):
        base = base / raw["base_dir"]
    carried: dict[str, bytes] = {config_path.name: text}
    read: dict[str, bytes] = {}
    wanted, found = sharing.names(raw, config_path.name, base=base, kept=read)
    for at, problem in found:
        problems.add(at, problem)
    size = len(text)
    for key, at in wanted.items():
        if size > max_bytes:
            break  # (said below: no further file is read)
        kind = _kind(at)
        data = read.get(key) if kind is configfiles.ZONE_FILE else None
        if data is None:
            try:
                # (as the config's reader reads each: a regular file, never blocking, capped)
                data = configfiles.read_bytes(base / key, kind)
            except OSError as e:
                problems.add(at, f"cannot read {base / key}: {e.strerror or e}")
                continue
        carried[key] = data
        size += len(key.encode()) + len(data)
    bundle = Bundle(config_path.name, carried, generation, based_on, publisher, published_at)
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
        problem = sharing.name_problem(name)
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
    folders = {str(parent) for name in files for parent in PurePosixPath(name).parents}
    clash = sorted(folders & set(files))
    if clash:
        raise BadBundle(f"{clash[0]}: a file of the bundle that is also the folder of another")
    bundle = Bundle(main, files, generation, based_on, publisher, float(published_at))
    if bundle.digest != claimed:
        raise BadBundle(f"digest {claimed[:16]} does not match its files ({bundle.digest[:16]})")
    if bundle.size > max_bytes:
        raise BadBundle(f"{bundle.size:,} bytes of files, over the limit of {max_bytes:,}")
    return bundle


def write(bundle: Bundle, directory: str | os.PathLike[str]) -> Path:
    """Write the bundle's files under *directory* (made if missing); returns the config's
    path there. Each file is written whole under a name of its own (made, never opened if
    there: no link followed, no file of the bundle overwritten), then renamed into place;
    a name that would leave *directory* (a link in the way) raises `BadBundle`."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    resolved_root = root.resolve()
    for name, data in bundle.files.items():
        problem = sharing.name_problem(name)
        if problem is not None:
            raise BadBundle(problem)
        target = root / name
        if not target.resolve().is_relative_to(resolved_root):  # (a link in the way)
            raise BadBundle(f"{name}: leaves {root}")
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(prefix=".partial-", dir=target.parent)  # (O_EXCL: made here)
        try:
            os.fchmod(fd, FILE_MODE)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(partial, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise
    return root / bundle.main
