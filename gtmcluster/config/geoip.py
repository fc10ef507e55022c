"""The ``geoip`` section (``{country: FILE.mmdb, asn: FILE.mmdb}``) and the GeoIP terms of
topology selectors and regions (``country CN``, ``continent AS``, ``asn 4134``).

A term needs its database: ``country`` and ``continent`` the ``country`` one, ``asn`` the
``asn`` one; one used without it is a problem at the term's key path naming the key to set.
The databases are read with the config (`topology.geoip.open_database`), so a reload reads
them again, and their SHA-256 is part of the config's digest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gtmcluster.config.problems import KeyPath
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.runtime.slices import Steps
from gtmcluster.topology.geoip import DATABASE_OF, KINDS, Database, GeoIP, GeoIPError, Term, open_database, term_problem

#: the keys of the section, and what a database of each must not be (by its metadata)
DATABASES = {"country": "ASN", "asn": "Country"}


def read_geoip(r: Reader, top: Mapping, content: Callable[[str], Path]) -> Steps[GeoIP | None]:
    """The databases of ``geoip`` (None when the section is absent)."""
    if not top.has("geoip"):
        return None
    m = r.mapping(("geoip",), top.get("geoip"), "a mapping {country: FILE.mmdb, asn: FILE.mmdb}")
    if m is None:
        r.broken.add(("geoip", "*"))  # the terms that need it are not reported too
        return GeoIP(())
    databases: list[Database] = []
    for key, wrong in DATABASES.items():
        if not m.has(key):
            continue
        name = r.string(m.at(key), m.get(key))
        database = None
        if name is not None:
            path = content(name)
            try:
                database = yield from open_database(key, path)
            except OSError as e:
                r.error(m.at(key), f"cannot read {path}: {e.strerror or e}")
            except GeoIPError as e:
                r.error(m.at(key), str(e))
        if database is not None and wrong in database.database_type.split("-"):
            r.error(m.at(key), f"{database.path} is a {database.database_type} database, not one of {key} data")
            database = None
        if database is None:
            r.broken.add(("geoip", key))
        else:
            databases.append(database)
    m.done()
    return GeoIP(databases)


def term(r: Reader, path: KeyPath, kind: str, value: Any, geoip: GeoIP | None) -> Term | None:
    """The term ``KIND VALUE`` at *path*, checked, or None (the problem reported)."""
    if isinstance(value, bool):  # YAML 1.1 reads a bare NO (Norway) or ON as a boolean
        r.error(path, f"{value} is read as a boolean by YAML: quote the code, e.g. '{kind}: \"NO\"'")
        return None
    if not isinstance(value, str | int):
        r.error(path, f"a {kind} is a code or number, not {type(value).__name__}")
        return None
    found, why = term_problem(kind, str(value))
    if found is None:
        r.error(path, why)
        return None
    key = DATABASE_OF[kind]
    if geoip is None or not geoip.has(key):
        if ("geoip", "*") not in r.broken and ("geoip", key) not in r.broken:
            r.error(path, f"'{kind} {value}' needs a GeoIP database: set geoip.{key} to a MaxMind DB (.mmdb) file")
        return None
    return found


def region_terms(r: Reader, m: Mapping, geoip: GeoIP | None) -> list[Term]:
    """The terms of a region entry ``{country: CN}`` (or a list: ``{country: [CN, JP]}``),
    ``{continent: ...}``, ``{asn: ...}``."""
    out: list[Term] = []
    for kind in KINDS:
        if not m.has(kind):
            continue
        raw = m.get(kind)
        for i, value in enumerate(r.list(m.at(kind), raw, f"a {kind} or a list of them", allow_scalar=True) or []):
            found = term(r, (*m.at(kind), i) if isinstance(raw, list) else m.at(kind), kind, value, geoip)
            if found is not None:
                out.append(found)
    return out


def has_terms(m: Mapping) -> bool:
    return any(m.has(kind) for kind in KINDS)
