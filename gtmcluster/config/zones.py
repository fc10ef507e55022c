"""The ``zones`` section: each zone's origin and file (loaded with `dnsdata.zonefile`), its
online signing keys (``dnssec``) and its ``transfer`` settings.

A zone file's ``$INCLUDE``s read inside its own folder (`zoneinclude.Includes`); a config not
shared by config sync (``sync_group.config_sync: false``) may open further folders for a
zone with ``include_dirs: [DIR, ...]`` (relative to ``base_dir``, or absolute). A shared
config cannot: its bundle carries the included files, named inside the zone's folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gtmcluster.config import transfer
from gtmcluster.config.dnssec import read_zone_dnssec
from gtmcluster.config.dnsserver import TSIGKey, ZoneTransfer
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.dnsdata import names, zonefile, zoneinclude
from gtmcluster.dnsdata.keys import ZoneKey
from gtmcluster.dnsdata.names import Name


def read_zones(
    r: Reader,
    top: Mapping,
    resolve: Any,
    own: Any,
    zone_keys: dict[Name, tuple[ZoneKey, ...]],
    keys: dict[str, TSIGKey],
    transfers: dict[Name, ZoneTransfer],
    shared: bool = True,
) -> tuple[list[zonefile.ZoneData], set[Name] | None]:
    """The zones that load, and the origins of those that do not (None: unknown ones too);
    the zones' ``transfer`` settings go into *transfers*, their signing keys into *zone_keys*.
    *shared*: the config is (or may be) a config sync bundle: no ``include_dirs``."""
    out: list[zonefile.ZoneData] = []
    broken: set[Name] | None = set()
    raw = top.require("zones", "the zones this sync group serves: [{origin, file}]")
    entries = r.list(top.at("zones"), raw)
    if entries is None:
        return out, None
    origins: dict[Name, int] = {}
    for i, entry in enumerate(entries):
        path = ("zones", i)
        m = r.mapping(path, entry, "a mapping {origin, file}")
        origin = r.string(m.at("origin"), m.require("origin", "the zone's name")) if m else None
        file_name = r.string(m.at("file"), m.require("file", "the zone file")) if m else None
        signing = read_zone_dnssec(r, m, origin, own) if m else None
        settings = (
            transfer.read_transfer(r, m.at("transfer"), m.get("transfer"), keys) if m and m.has("transfer") else None
        )
        if m is not None and m.has("transfer") and m.has("dnssec"):
            # (a transfer carries the zone file, unsigned: a secondary would serve the zone
            # unsigned under the parent's DS, and every validator would fail it)
            r.error(
                m.at("transfer"), "a zone signed online (dnssec) is not transferred yet: its copy would be unsigned"
            )
            settings = None
        dirs = _include_dirs(r, m, resolve, shared) if m is not None and m.has("include_dirs") else ()
        if m is not None:
            m.done()
        labels: Name | None = None
        if origin is not None:
            try:
                labels = names.key(names.from_text(origin))
            except names.BadName as e:
                r.error(m.at("origin") if m else path, str(e))
        if labels is None:
            broken = None  # a zone we cannot even name: any wide IP might belong to it
            continue
        if m is None or origin is None or file_name is None:
            if broken is not None:
                broken.add(labels)
            continue
        if labels in origins:
            r.error(m.at("origin"), f"zone {origin!r} is listed twice (also zones[{origins[labels]}])")
            continue
        origins[labels] = i
        if signing is not None:
            zone_keys[labels] = signing
        if settings is not None:
            transfers[labels] = settings
        zone_path = resolve(file_name)
        try:
            out.append(zonefile.load(str(zone_path), origin, zoneinclude.Includes(shared, dirs or ())))
        except zonefile.ZoneFileError as e:
            if broken is not None:
                broken.add(labels)
            for p in e.problems:
                where = f"{p.file}:{p.line}" if p.line else p.file
                r.error(m.at("file"), f"{where}: {p.message}")
    return out, broken


def _include_dirs(r: Reader, m: Mapping, resolve: Any, shared: bool) -> tuple[str, ...] | None:
    """``zones[i].include_dirs``: folders the zone's ``$INCLUDE`` may read from besides its
    own (outside config sync); None after a problem (nothing more is opened)."""
    at = m.at("include_dirs")
    if shared:
        r.error(
            at,
            "opens folders to $INCLUDE only outside config sync (sync_group.config_sync: false): a config the "
            "group shares carries its included files in the bundle, inside the zone file's folder",
        )
        return None
    items = r.list(at, m.get("include_dirs"), "a list of folders")
    dirs: list[str] = []
    for i, item in enumerate(items or []):
        name = r.string((*at, i), item)
        if name is None:
            continue
        folder: Path = resolve(name)
        if not folder.is_dir():
            r.error((*at, i), f"{folder} is not a folder")
            continue
        dirs.append(os.path.realpath(folder))
    return tuple(dirs) if items is not None else None
