"""GeoIP facts of an address: its country, continent and autonomous system (ASN), read
from MaxMind DB (``.mmdb``) files, for the ``country``, ``continent`` and ``asn`` topology
and region selectors.

A database is read once, when the config is (load or reload), as `runtime.files` reads what a
config names (a regular file, at most `runtime.files.GEOIP`, 512 MiB), its bytes hashed (the
config digest changes with them) and copied to a private, sealed file in memory
(``memfd_create``: no folder to fill, nothing left behind, not writable even by the node's
user), which the reader maps. So the reader maps exactly the bytes hashed, and a file
replaced or rewritten in place later (``geoipupdate``, ``cp``) cannot change the running
node's view of it, nor break it (a mapped file cut short kills the process with SIGBUS at
the next lookup); the next reload reads the new file. The copy costs its size in memory for
as long as the config runs (each answering process holds its own). Where there is no
``memfd_create`` or ``/proc``, the copy is a temporary file, unlinked once mapped. Lookups
use the C extension of ``maxminddb`` when it is installed (a few microseconds each) and are
cached per address (`GeoIP.facts`, bounded).

A country database is any whose records carry ``country.iso_code`` and ``continent.code``
(GeoLite2-Country, GeoIP2-City, DB-IP's country lite); an ASN database one whose records
carry ``autonomous_system_number`` (GeoLite2-ASN).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import maxminddb

from gtmcluster.runtime import files
from gtmcluster.runtime.slices import Steps

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: the selector kinds, and the database each needs (the key under ``geoip``)
KINDS = ("country", "continent", "asn")
DATABASE_OF = {"country": "country", "continent": "country", "asn": "asn"}
#: MaxMind's continent codes
CONTINENTS = {
    "AF": "Africa",
    "AN": "Antarctica",
    "AS": "Asia",
    "EU": "Europe",
    "NA": "North America",
    "OC": "Oceania",
    "SA": "South America",
}
MAX_ASN = 2**32 - 1
#: bytes of a database read (hashed, copied) per step
CHUNK = 1 << 20
#: addresses whose facts are kept at most; when full the cache starts again (a flood of
#: new clients costs one lookup each, as without a cache)
CACHE_ENTRIES = 100_000

#: one GeoIP fact as selectors name it: ("country", "CN"), ("continent", "AS"), ("asn", "4134")
Term = tuple[str, str]


class GeoIPError(Exception):
    """A database that cannot be read or is not a MaxMind DB."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What the databases say about one address."""

    terms: tuple[Term, ...]
    #: the longest prefix of the databases' networks holding the address: every address
    #: sharing this many leading bits has the same facts (RFC 7871 scope)
    prefix: int
    #: ``country JP, continent AS, asn 64500`` for the databases looked up (``-``: unknown)
    text: str = ""


@dataclass(frozen=True)
class Database:
    """One opened database: where it came from, its SHA-256, and its reader."""

    key: str  # "country" or "asn"
    path: Path
    sha256: str
    database_type: str
    reader: Any = None


def open_database(key: str, path: Path) -> Steps[Database]:
    """Read the database at *path* (see the module's note on the private copy), in steps
    of `CHUNK` bytes (`gtmcluster.runtime.slices`). Raises `GeoIPError` saying what is wrong,
    OSError when it cannot be read (`runtime.files.Refused`: not a regular file, too big)."""
    digest = hashlib.sha256()
    with _private_copy(key) as (copy, name), contextlib.closing(files.chunks(path, files.GEOIP, CHUNK)) as source:
        for chunk in source:
            digest.update(chunk)
            _write_all(copy, chunk)
            yield
        _seal(copy)
        try:
            reader = maxminddb.open_database(name)  # the C extension's map when installed
        except Exception as e:  # whatever the reader makes of bytes that are not a database
            raise GeoIPError(f"{path}: not a MaxMind DB (.mmdb) file: {str(e).replace(name, str(path))}") from None
    try:
        database_type = str(reader.metadata().database_type)
    except Exception as e:
        reader.close()
        raise GeoIPError(f"{path}: not a MaxMind DB (.mmdb) file: {e}") from None
    return Database(key, path, digest.hexdigest(), database_type, reader)


@contextlib.contextmanager
def _private_copy(key: str) -> Iterator[tuple[int, str]]:
    """A new private file to copy a database into: its descriptor and a name that opens it.
    Gone when left (the reader's map, once made, keeps what it maps)."""
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None:
        fd = memfd(f"gtm-geoip-{key}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            name = f"/proc/self/fd/{fd}"
            if os.path.exists(name):
                yield fd, name
                return
        finally:
            os.close(fd)
    fd, name = tempfile.mkstemp(prefix="gtm-geoip-", suffix=".mmdb")
    try:
        yield fd, name
    finally:
        os.close(fd)
        os.unlink(name)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _seal(fd: int) -> None:
    """No more changes to the copy, by anyone (a memfd; a temporary file cannot be sealed)."""
    with contextlib.suppress(OSError, AttributeError):
        seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)


class GeoIP:
    """The configured databases, and the facts of addresses, cached."""

    def __init__(self, databases: Iterable[Database], cache_entries: int = CACHE_ENTRIES):
        self.databases = {db.key: db for db in databases}
        self.cache_entries = cache_entries
        self._cache: dict[tuple[IPAddress, frozenset[str]], Facts] = {}

    def has(self, key: str) -> bool:
        return key in self.databases

    def facts(self, address: IPAddress, keys: frozenset[str] = frozenset(("country", "asn"))) -> Facts:
        """The facts of *address* from the databases named by *keys* (those configured)."""
        cache_key = (address, keys)
        found = self._cache.get(cache_key)
        if found is None:
            if len(self._cache) >= self.cache_entries:
                self._cache.clear()
            found = self._cache[cache_key] = self._lookup(address, keys)
        return found

    def _lookup(self, address: IPAddress, keys: frozenset[str]) -> Facts:
        terms: list[Term] = []
        prefix = 0
        for key in ("country", "asn"):
            db = self.databases.get(key)
            if db is None or key not in keys:
                continue
            try:
                record, plen = db.reader.get_with_prefix_len(address)
            except (ValueError, maxminddb.InvalidDatabaseError):
                # an IPv6 address in an IPv4-only database, or a corrupt part: nothing known
                record, plen = None, 0
            prefix = max(prefix, plen)
            if not isinstance(record, dict):
                continue
            if key == "country":
                terms.extend(_country_terms(record))
            else:
                number = record.get("autonomous_system_number")
                if type(number) is int and 0 <= number <= MAX_ASN:
                    terms.append(("asn", str(number)))
        found = dict(terms)
        looked_up = [kind for kind in KINDS if DATABASE_OF[kind] in keys and DATABASE_OF[kind] in self.databases]
        return Facts(tuple(terms), prefix, ", ".join(f"{kind} {found.get(kind, '-')}" for kind in looked_up))

    def close(self) -> None:
        for db in self.databases.values():
            db.reader.close()


def _country_terms(record: dict[str, Any]) -> list[Term]:
    out: list[Term] = []
    country = record.get("country")
    if isinstance(country, dict) and isinstance(country.get("iso_code"), str):
        out.append(("country", country["iso_code"].upper()))
    continent = record.get("continent")
    if isinstance(continent, dict) and isinstance(continent.get("code"), str):
        out.append(("continent", continent["code"].upper()))
    return out


def term_problem(kind: str, value: str) -> tuple[Term | None, str]:
    """The term ``KIND VALUE`` normalised, or None and why it is not one."""
    if kind == "country":
        if len(value) == 2 and value.isascii() and value.isalpha():
            return (kind, value.upper()), ""
        return None, f"{value!r} is not a country: use its ISO 3166-1 alpha-2 code, e.g. CN, US, JP"
    if kind == "continent":
        if value.upper() in CONTINENTS:
            return (kind, value.upper()), ""
        codes = ", ".join(f"{c} ({n})" for c, n in CONTINENTS.items())
        return None, f"{value!r} is not a continent: use one of {codes}"
    text = value[2:] if value[:2].upper() == "AS" else value
    if text.isascii() and text.isdigit() and int(text) <= MAX_ASN:
        return (kind, str(int(text))), ""
    return None, f"{value!r} is not an autonomous system number: use a number such as 4134 (or AS4134)"
