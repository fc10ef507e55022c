"""What of a config is shared with the group (config sync): the files it names for its
content, by the names it gives them, and what it holds that may not be shared.

The files are the zone files (``zones[].file``) and the files they ``$INCLUDE``
(`zonefile.included`), the region address lists (``regions.NAME[].file``), the CA files of
https monitors (``monitors.NAME.ca_file``) and the GeoIP databases (``geoip.country``,
``geoip.asn``), found in the parsed YAML (`yamlsrc.parse`: a quoted ``"zones":`` is the same
key). Each is named relative to the config's folder: a name that is absolute or leaves it
(``..``) cannot be shared (`name_problem`), nor can an inline secret (`secrets`). The
group's bundle carries exactly these files (`groupconfig.bundle`); the config's reader holds
a bundle written out to them when it reads one (`load.build`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath
from typing import Any

from gtmcluster.config.problems import KeyPath
from gtmcluster.dnsdata import zonefile, zoneinclude


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


def secrets(raw: Any) -> Iterator[tuple[KeyPath, str]]:
    """The inline secrets a parsed config holds, with why a bundle cannot carry them: the
    group shares its bundles with every member, keeps them in each one's history and serves
    them to ``config pull``; a member's secrets stay in its own files."""
    if not isinstance(raw, dict):
        return
    api = raw.get("api")
    if isinstance(api, dict) and "token" in api:
        yield (
            ("api", "token"),
            "an inline token is not published to the group (a bundle never carries a secret): name the "
            "member's own file with api.token_file, or set sync_group.config_sync: false",
        )
    keys = raw.get("tsig_keys")
    if isinstance(keys, dict):
        for name, key in keys.items():
            if isinstance(key, dict) and "secret" in key:
                yield (
                    ("tsig_keys", name, "secret"),
                    "an inline secret is not published to the group (a bundle never carries a secret): name "
                    "the member's own file with secret_file, or set sync_group.config_sync: false",
                )


def named(raw: Any, main: str) -> tuple[dict[str, KeyPath], list[tuple[KeyPath, str]]]:
    """The name of every file config *raw* (named *main*) itself names, with its key path,
    and the problems that keep a name out; no file is read (`names` adds what the zone
    files include)."""
    found, problems, _ = _named(raw, main)
    return found, problems


def _named(raw: Any, main: str) -> tuple[dict[str, KeyPath], list[tuple[KeyPath, str]], list[tuple[KeyPath, str]]]:
    """`named`, and the (key path, name) of each zone file, as often as it is named."""
    found: dict[str, KeyPath] = {}
    problems: list[tuple[KeyPath, str]] = []
    zones: list[tuple[KeyPath, str]] = []
    for at, name in referenced(raw):
        problem = name_problem(name)
        if problem is not None:
            problems.append((at, problem))
            continue
        key = str(PurePosixPath(name))
        if key == main:
            problems.append((at, f"{name}: the config's own name"))
            continue
        found.setdefault(key, at)
        if at[0] == "zones":
            zones.append((at, key))
    return found, problems, zones


def names(
    raw: Any,
    main: str,
    base: str | os.PathLike[str] | None = None,
    files: Mapping[str, bytes] | None = None,
    kept: dict[str, bytes] | None = None,
) -> tuple[dict[str, KeyPath], list[tuple[KeyPath, str]]]:
    """The name of every file the bundle of config *raw* (named *main*) holds besides the
    config, with the key path that names it (an ``$INCLUDE``d file: its zone's ``file``),
    and the problems that keep a name out. The zone files are read for their includes
    (`zonefile.included`), from *files* (a bundle's) or from the disk under *base* (the
    included files' real paths must be in their zone file's folder); a zone file that
    cannot be read is the caller's to report. *kept*: filled with the zone files and
    included files read from disk, whole, by name (`make` carries them as read)."""
    found, problems, zones = _named(raw, main)
    for at, zone in zones:
        if files is not None:
            read = _reader(files)
            included, zone_problems = zonefile.included(zone, zoneinclude.Includes(), read=read)
        else:
            included, zone_problems = zonefile.included(
                zone, zoneinclude.Includes(), base=os.fspath(base or "."), kept=kept
            )
        for p in zone_problems:
            problems.append((at, str(p) if p.line else f"{p.file}: {p.message}"))
        for name in included:
            if name == main:
                problems.append((at, f"{name}: $INCLUDE of the config itself"))
            else:
                found.setdefault(name, at)
    return found, problems


def _reader(files: Mapping[str, bytes]) -> zoneinclude.Read:
    def read(name: str) -> bytes:
        data = files.get(name)
        if data is None:
            raise FileNotFoundError(2, "not in the bundle")
        return data

    return read
