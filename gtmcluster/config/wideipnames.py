"""Wide IP names: how the config writes them, and which wide IP answers a queried name.

A wide IP answers its own name and its ``aliases``; a name written ``*.apps.example.com``
(``*`` as the whole leftmost label) is a wildcard: it answers every name below
``apps.example.com``, however many labels deeper, that no more specific wide IP answers.
`WideIPNames` finds the wide IP for a name: its exact names (wide IP names and aliases)
first, then the wildcard with the longest suffix, one dictionary lookup per label, never
a scan of the wide IPs. It is built once per config (`Config.wideip_names`) from the wide
IPs, and is an index beside `Config.wideips`, which holds each wide IP once, by its own
name. See docs/wideip-names.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar

from gtmcluster.config.problems import KeyPath
from gtmcluster.config.reader import Reader
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_CNAME, ZoneSet
from gtmcluster.runtime.slices import Steps

WILDCARD = b"*"
#: CNAME nodes checked against the wildcards per step of a config read (`gtmcluster.runtime.slices`)
STEP = 256


class Named(Protocol):
    """What the index needs of a wide IP (`config.model.WideIP`): its name and its aliases,
    as keys."""

    @property
    def labels(self) -> Name: ...

    @property
    def aliases(self) -> tuple[Name, ...]: ...


WideIP = TypeVar("WideIP", bound=Named)


def is_wildcard(name: Name) -> bool:
    """Whether *name* (labels) is written as a ``*.`` wildcard."""
    return name[:1] == (WILDCARD,)


class WideIPNames(Generic[WideIP]):
    """Which wide IP answers a name: exact names (wide IP names and aliases) first, then the
    wildcard with the longest suffix. Names are keys (lowercased labels)."""

    __slots__ = ("exact", "wildcards")

    def __init__(self, exact: Mapping[Name, WideIP] | None = None, wildcards: Mapping[Name, WideIP] | None = None):
        #: wide IP names and aliases (not wildcards) -> the wide IP
        self.exact: Mapping[Name, WideIP] = exact or {}
        #: the name below which a wildcard answers (``apps.example.com`` for
        #: ``*.apps.example.com``) -> the wide IP
        self.wildcards: Mapping[Name, WideIP] = wildcards or {}

    @classmethod
    def of(cls, wideips: Iterable[WideIP]) -> WideIPNames[WideIP]:
        """The index of *wideips* (their names must not collide: the config read checks)."""
        exact: dict[Name, WideIP] = {}
        wildcards: dict[Name, WideIP] = {}
        for wideip in wideips:
            for name in (wideip.labels, *wideip.aliases):
                if is_wildcard(name):
                    wildcards[name[1:]] = wideip
                else:
                    exact[name] = wideip
        return cls(exact, wildcards)

    def find(self, key: Name, floor: int = 0) -> WideIP | None:
        """The wide IP that answers *key*, or None. Wildcards whose suffix has fewer than
        *floor* labels are not asked: the responder passes the depth of the zone *key* is
        in, so that a wildcard of a parent zone does not answer inside a child zone."""
        wideip = self.exact.get(key)
        if wideip is not None or not self.wildcards:
            return wideip
        wildcards = self.wildcards
        for i in range(1, len(key) - floor + 1):
            wideip = wildcards.get(key[i:])
            if wideip is not None:
                return wideip
        return None

    def find_in(self, zones: ZoneSet, key: Name) -> WideIP | None:
        """The wide IP that answers *key*, a name in one of *zones* (None outside them)."""
        zone = zones.find(key)
        return None if zone is None else self.find(key, len(zone.origin_key))

    def names(self) -> Iterator[Name]:
        """Every name written in the config: exact names, and wildcards with their ``*``."""
        yield from self.exact
        for suffix in self.wildcards:
            yield (WILDCARD, *suffix)

    def __len__(self) -> int:
        return len(self.exact) + len(self.wildcards)


def read_name(r: Reader, path: KeyPath, name: Any, zones: ZoneSet, broken_zones: set[Name] | None) -> Name | None:
    """A wide IP name or alias (*name* at *path*) as a key, checked: a domain name, or a
    ``*.`` wildcard, inside a served zone, not at or below a delegation, not at a CNAME.
    None when it is not (reported, unless the zone that should hold it failed to load)."""
    try:
        labels = names.key(names.from_text(str(name)))
    except names.BadName as e:
        r.error(path, str(e))
        return None
    for i, label in enumerate(labels):
        if (b"*" in label and (i or label != WILDCARD)) or b"?" in label:
            r.error(
                path,
                f"{name!r}: a wildcard is '*' as the whole leftmost label, as in '*.apps.example.com' "
                "('?' and '*' inside a label are not supported)",
            )
            return None
    zone = zones.find(labels)
    # When the zone that should hold this name failed to load, its problem is reported already.
    loaded_depth = len(zone.origin_key) if zone is not None else -1
    if broken_zones is None:
        if zone is None:
            return None
    elif max((len(o) for o in broken_zones if names.is_subdomain(labels, o)), default=-1) > loaded_depth:
        return None
    if zone is None:
        origins = ", ".join(sorted(names.to_text(z.origin) for z in zones)) or "none"
        r.error(path, f"not inside any served zone (zones: {origins})")
        return None
    cut = zone.delegation_for(labels)
    if cut is not None:
        r.error(path, f"at or below the delegation {names.to_text(cut)} in zone {names.to_text(zone.origin)}")
        return None
    node = zone.nodes.get(labels)
    if node is not None and TYPE_CNAME in node.rrsets:
        r.error(path, f"zone {names.to_text(zone.origin)} has a CNAME at this name")
        return None
    return labels


def read_aliases(
    r: Reader, path: KeyPath, raw: Any, zones: ZoneSet, broken_zones: set[Name] | None
) -> list[tuple[KeyPath, Name]]:
    """A wide IP's ``aliases`` (*raw* at *path*): each read as `read_name` reads names."""
    out: list[tuple[KeyPath, Name]] = []
    for i, entry in enumerate(r.list(path, raw, "a list of names", allow_scalar=True) or []):
        at = (*path, i) if isinstance(raw, list) else path
        text = r.string(at, entry)
        labels = None if text is None else read_name(r, at, text, zones, broken_zones)
        if labels is not None:
            out.append((at, labels))
    return out


class Claims:
    """The names wide IPs and their aliases take, while the config is read: a name taken
    twice is reported at the second place, naming the first."""

    def __init__(self, r: Reader):
        self.r = r
        #: name -> (wide IP name, whether as an alias, where)
        self.taken: dict[Name, tuple[str, bool, KeyPath]] = {}

    def take(self, path: KeyPath, labels: Name, wideip: str, alias: bool) -> bool:
        """Take *labels* for *wideip* (as an alias or its own name); False when taken."""
        other = self.taken.get(labels)
        if other is None:
            self.taken[labels] = (wideip, alias, path)
            return True
        owner, as_alias, _ = other
        if not alias and not as_alias:
            self.r.error(path, f"duplicate wide IP (same name as {owner!r})")
        elif owner == wideip:
            self.r.error(path, f"{_text(labels)} is already this wide IP's name or alias")
        else:
            what = f"an alias of wide IP {owner!r}" if as_alias else f"the name of wide IP {owner!r}"
            self.r.error(path, f"{_text(labels)} is already {what}")
        return False

    def wildcards(self) -> dict[Name, KeyPath]:
        """The wildcards taken (by their suffix) and where each was written."""
        return {name[1:]: at for name, (_, _, at) in self.taken.items() if is_wildcard(name)}


def check_cnames(r: Reader, wildcards: Mapping[Name, KeyPath], zones: ZoneSet) -> Steps[None]:
    """A CNAME in a zone at a name a wildcard covers is an error, as it is at a wide IP's own
    name: the name would answer its wide IP's types and alias everything else. (Zone data
    below a delegation is not answered from the zone, so it is left alone.)"""
    if not wildcards:
        return
    checked = 0
    for zone in zones:
        floor = len(zone.origin_key)
        for key, node in zone.nodes.items():
            if TYPE_CNAME not in node.rrsets or zone.delegation_for(key) is not None:
                continue
            checked += 1
            if checked % STEP == 0:
                yield
            for i in range(1, len(key) - floor + 1):
                at = wildcards.get(key[i:])
                if at is not None:
                    where = f"zone {names.to_text(zone.origin)} has a CNAME at {names.to_text(key)}"
                    r.error(at, f"{where}, a name this wildcard covers")
                    break


def _text(labels: Name) -> str:
    return names.to_text(labels).rstrip(".")
