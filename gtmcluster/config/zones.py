"""The ``zones`` section: each zone's origin and file (loaded with `dns.zonefile`), its
online signing keys (``dnssec``) and its ``transfer`` settings."""

from __future__ import annotations

from typing import Any

from gtmcluster.config import transfer
from gtmcluster.config.model import TSIGKey, ZoneTransfer
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.dns import names, zonefile
from gtmcluster.dns.names import Name
from gtmcluster.dnssec.config import read_zone_dnssec
from gtmcluster.dnssec.keys import ZoneKey


def read_zones(
    r: Reader,
    top: Mapping,
    resolve: Any,
    own: Any,
    zone_keys: dict[Name, tuple[ZoneKey, ...]],
    keys: dict[str, TSIGKey],
    transfers: dict[Name, ZoneTransfer],
) -> tuple[list[zonefile.ZoneData], set[Name] | None]:
    """The zones that load, and the origins of those that do not (None: unknown ones too);
    the zones' ``transfer`` settings go into *transfers*, their signing keys into *zone_keys*."""
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
            out.append(zonefile.load(str(zone_path), origin))
        except zonefile.ZoneFileError as e:
            if broken is not None:
                broken.add(labels)
            for p in e.problems:
                where = f"{p.file}:{p.line}" if p.line else p.file
                r.error(m.at("file"), f"{where}: {p.message}")
    return out, broken
