"""`zones[].dnssec: {keys: DIR}`: a zone to sign online, read with the config.

DIR (relative to the member's base directory, like its certificates: the keys are the
member's own files, not the group's content) holds the zone's keys as `gtmcluster dnssec
keygen` writes them. They are read when the config is read, so a missing or unreadable key
is a config error naming the key path, not a failure at the first signed answer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.dnsdata import keys


def read_zone_dnssec(
    r: Reader, zone: Mapping, origin: str | None, resolve: Callable[[str], Path]
) -> tuple[keys.ZoneKey, ...] | None:
    """The keys of a zone entry's ``dnssec`` mapping, or None without one (or after a problem)."""
    if not zone.has("dnssec"):
        return None
    m = r.mapping(zone.at("dnssec"), zone.get("dnssec"), "a mapping {keys: DIR}")
    if m is None:
        return None
    directory = r.string(m.at("keys"), m.require("keys", "the directory of the zone's keys (gtmcluster dnssec keygen)"))
    m.done()
    if directory is None or origin is None:
        return None
    try:
        return tuple(keys.load(resolve(directory), origin))
    except keys.DnssecKeyError as e:
        r.error(m.at("keys"), str(e))
        return None
