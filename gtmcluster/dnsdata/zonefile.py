"""Master file (RFC 1035 section 5) reader with exact line numbers.

The reader does the layout itself (entries, parentheses, comments, quoting, blank owners,
``$ORIGIN``, ``$TTL``, ``$INCLUDE``) so every problem names the line it starts on, and hands
each RDATA's text to dnspython, which knows the presentation format of every record type.
All problems are collected, not just the first.

A problem never quotes the file's text (issue 30): it says the file, the line and what is
wrong, so a file read by mistake (or by a hostile ``$INCLUDE``) is never echoed to whoever
sees the problems (a config push's 422 answer, the log).

``$INCLUDE`` reads only inside the zone file's folder (`zoneinclude`): by default a name
relative to the including file, neither absolute nor with ``..``, whose real path (links
followed) stays in that folder, which is what a config bundle carries and every member
reads alike (`included` finds them for `config.sharing`); outside config sync a config may
open further folders. Includes nest at most `MAX_INCLUDE_DEPTH` deep, a file never
includes itself (directly or not), and a zone reads at most `MAX_INCLUDES` included files
and `MAX_INCLUDED_BYTES` bytes through them.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import dns.exception
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.ttl

from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import (
    TYPE_CNAME,
    TYPE_DNAME,
    TYPE_MX,
    TYPE_NS,
    TYPE_PTR,
    TYPE_SOA,
    RData,
    RRset,
    Zone,
)
from gtmcluster.dnsdata.zoneinclude import Files, Includes, Read, Refused

MAX_TTL = 2**31 - 1  # RFC 2181 section 8
MAX_INCLUDE_DEPTH = 8
#: included files read for one zone (a file included twice counts twice)
MAX_INCLUDES = 256
#: bytes read through $INCLUDE for one zone (a config bundle's limit)
MAX_INCLUDED_BYTES = 64 * 1024 * 1024
MAX_PROBLEMS = 100
#: a reason from dnspython is given only when it quotes no word of the entry, and this long at most
_MAX_REASON = 100
_TTL_RE = re.compile(r"^(\d+|(\d+[smhdwSMHDW])+)$")
_META_TYPES = {41, 249, 250, 251, 252, 253, 254, 255}
#: directives of other servers, named in a problem (any other word is not quoted)
_OTHER_DIRECTIVES = ("$GENERATE", "$DATE")
_CLASSES = ("IN", "CH", "HS", "CS", "NONE", "ANY")
_CLASS_NUMBER = re.compile(r"CLASS\d{1,5}")
_WORD = re.compile(r"\w{3,}")
_INCLUDE = re.compile(rb"\$include", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class ZoneFileError(Exception):
    """The zone file has problems; `problems` lists them all."""

    def __init__(self, problems: list[Problem]):
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class _Token:
    text: str  # raw text, quotes and escapes kept, so dnspython can re-read it
    quoted: bool


@dataclass(frozen=True, slots=True)
class _Entry:
    file: str
    line: int
    blank_owner: bool
    tokens: list[_Token]


def _entries(path: str, text: str, problems: list[Problem]) -> Iterator[_Entry]:
    """Split master-file text into entries, joining parenthesised continuation lines."""
    tokens: list[_Token] = []
    start_line = 0
    blank_owner = False
    broken = False  # an entry with a layout error is reported once and not read further
    depth = 0
    line = 1
    i = 0
    n = len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and depth == 0:
            if tokens and not broken:
                yield _Entry(path, start_line, blank_owner, tokens)
            tokens = []
            broken = False
            start_line = line
            blank_owner = c in " \t"
            at_line_start = False
        if c == "\n":
            line += 1
            i += 1
            at_line_start = True
            continue
        if c in " \t\r":
            i += 1
            continue
        if c == ";":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == "(":
            depth += 1
            i += 1
            continue
        if c == ")":
            if depth == 0:
                problems.append(Problem(path, line, "')' without a matching '('"))
            else:
                depth -= 1
            i += 1
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    j += 1
                if j < n and text[j] == "\n":
                    break
                j += 1
            if j >= n or text[j] != '"':
                problems.append(Problem(path, line, "unterminated quoted string"))
                broken = True
                i = j
                continue
            tokens.append(_Token(text[i : j + 1], True))
            i = j + 1
            continue
        j = i
        while j < n and text[j] not in ' \t\r\n;()"':
            if text[j] == "\\" and j + 1 < n:
                j += 1
            j += 1
        tokens.append(_Token(text[i:j], False))
        i = j
    if depth:
        problems.append(Problem(path, start_line, "'(' is never closed"))
        broken = True
    if tokens and not broken:
        yield _Entry(path, start_line, blank_owner, tokens)


def _compressible(rtype: int, rdata: dns.rdata.Rdata) -> RData:
    """RDATA pieces, with names kept apart where RFC 3597 allows compressing them."""
    if rtype in (TYPE_NS, TYPE_CNAME, TYPE_PTR):
        return (names.from_dnspython(rdata.target),)  # type: ignore[attr-defined]
    if rtype == TYPE_MX:
        return (
            struct.pack("!H", rdata.preference),  # type: ignore[attr-defined]
            names.from_dnspython(rdata.exchange),  # type: ignore[attr-defined]
        )
    if rtype == TYPE_SOA:
        r = rdata
        return (
            names.from_dnspython(r.mname),  # type: ignore[attr-defined]
            names.from_dnspython(r.rname),  # type: ignore[attr-defined]
            struct.pack("!IIIII", r.serial, r.refresh, r.retry, r.expire, r.minimum),  # type: ignore[attr-defined]
        )
    return (_wire(rdata),)


def _wire(rdata: dns.rdata.Rdata) -> bytes:
    wire = rdata.to_wire()
    assert wire is not None
    return wire


class _Reader:
    def __init__(
        self,
        origin: dns.name.Name,
        problems: list[Problem],
        files: Files,
        records: bool = True,
        kept: dict[str, bytes] | None = None,
    ):
        self.zone_origin = origin
        self.problems = problems
        self.files = files
        #: False: only the directives are followed (`included`)
        self.records = records
        # (owner, type) -> [ttl, line, [rdata wire forms], {seen}]
        self.sets: dict[tuple[dns.name.Name, int], tuple[list[int], list[RData], set[bytes]]] = {}
        self.lines: dict[tuple[dns.name.Name, int], tuple[str, int]] = {}
        self.unreadable = False
        #: the included files read, in order, each once
        self.included: dict[str, None] = {}
        #: when given: the files read whole (the zone file and those included), by path
        self.kept = kept
        self.include_count = 0
        self.include_bytes = 0

    def problem(self, entry: _Entry | tuple[str, int], message: str) -> None:
        file, line = (entry.file, entry.line) if isinstance(entry, _Entry) else entry
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(file, line, message))

    def read(
        self,
        path: str,
        origin: dns.name.Name,
        depth: int,
        at: tuple[str, int] | None,
        ttl: int | None = None,
        chain: tuple[str, ...] = (),
    ) -> int | None:
        """Read one file; returns the default TTL in force at its end (for $INCLUDE).
        *chain*: the files that include it (none for the zone file)."""
        try:
            data = self.files.read(path, None if at is None else MAX_INCLUDED_BYTES - self.include_bytes + 1)
            if at is not None:
                self.include_count += 1
                self.include_bytes += len(data)
                if self.include_bytes > MAX_INCLUDED_BYTES:
                    self.problem(at, f"the files included by the zone are over {MAX_INCLUDED_BYTES:,} bytes")
                    return ttl
                self.included[path] = None
            if self.kept is not None:
                self.kept[path] = data
            if not self.records and _INCLUDE.search(data) is None:
                return ttl  # (directives alone are wanted, and it includes nothing)
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            where = at or (path, 0)
            reason = e.strerror if isinstance(e, OSError) and e.strerror else "not UTF-8 text"
            what = "the included file" if at is not None else ""
            self.problem(where, f"cannot read {what + ' ' if what else ''}{path}: {reason}")
            if depth == 0:
                self.unreadable = True
            return ttl
        chain = (*chain, path)
        last_ttl: int | None = ttl
        owner: dns.name.Name | None = None
        for entry in _entries(path, text, self.problems):
            first = entry.tokens[0].text
            if not entry.blank_owner and first.startswith("$"):
                directive = first.upper()
                args = [t.text for t in entry.tokens[1:]]
                if directive == "$ORIGIN" and len(args) == 1:
                    origin = self.name(entry, args[0], origin) or origin
                elif directive == "$TTL" and len(args) == 1:
                    ttl = self.ttl(entry, args[0])
                elif directive == "$INCLUDE" and len(args) in (1, 2):
                    inc = self.include(entry, path, args[0], depth, chain)
                    inc_origin = self.name(entry, args[1], origin) if len(args) == 2 else origin
                    if inc is not None and inc_origin is not None:
                        self.read(
                            inc,
                            inc_origin,
                            depth + 1,
                            (entry.file, entry.line),
                            ttl if ttl is not None else last_ttl,
                            chain,
                        )
                elif directive in ("$ORIGIN", "$TTL", "$INCLUDE"):
                    self.problem(
                        entry, f"{directive} takes {'1 or 2 arguments' if directive == '$INCLUDE' else '1 argument'}"
                    )
                elif self.records:
                    known = directive if directive in _OTHER_DIRECTIVES else "a directive other than these"
                    self.problem(entry, f"unsupported directive: {known} (only $ORIGIN, $TTL and $INCLUDE are read)")
                continue
            if not self.records:
                continue
            tokens = entry.tokens
            if entry.blank_owner:
                if owner is None:
                    self.problem(entry, "record with a blank owner before any owner name")
                    continue
            else:
                parsed = self.name(entry, tokens[0].text, origin)
                tokens = tokens[1:]
                if parsed is None:
                    continue
                owner = parsed
            record_ttl: int | None = None
            rdclass = "IN"
            k = 0
            bad_ttl = False
            for _ in range(2):
                if k < len(tokens) and not tokens[k].quoted:
                    word = tokens[k].text
                    if record_ttl is None and _TTL_RE.match(word):
                        record_ttl = self.ttl(entry, word)
                        bad_ttl = record_ttl is None
                        if bad_ttl:
                            break
                        k += 1
                        continue
                    if word.upper() in _CLASSES or word.upper().startswith("CLASS"):
                        rdclass = word.upper()
                        k += 1
                        continue
                break
            if bad_ttl:
                continue
            if k >= len(tokens):
                self.problem(entry, "record has no type")
                continue
            if rdclass != "IN":
                shown = rdclass if rdclass in _CLASSES or _CLASS_NUMBER.fullmatch(rdclass) else "(not IN)"
                self.problem(entry, f"class {shown} is not served (only IN)")
                continue
            type_text = tokens[k].text
            try:
                rtype = int(dns.rdatatype.from_text(type_text))
            except dns.exception.DNSException:
                self.problem(entry, "unknown record type")
                continue
            type_name = dns.rdatatype.to_text(dns.rdatatype.RdataType.make(rtype))
            if rtype in _META_TYPES:
                self.problem(entry, f"{type_name} is not a record type that can be stored")
                continue
            if rtype == TYPE_DNAME:
                self.problem(entry, "DNAME records are not supported")
                continue
            rdata_text = " ".join(t.text for t in tokens[k + 1 :])
            try:
                rdata = dns.rdata.from_text(
                    dns.rdataclass.IN, dns.rdatatype.RdataType.make(rtype), rdata_text, origin=origin, relativize=False
                )
            except (dns.exception.DNSException, ValueError, TypeError) as e:
                self.problem(entry, f"bad {type_name} data: {_reason(e, entry)}")
                continue
            if record_ttl is None:
                record_ttl = ttl if ttl is not None else last_ttl
            if record_ttl is None:
                if rtype == TYPE_SOA:
                    record_ttl = rdata.minimum  # type: ignore[attr-defined]
                else:
                    self.problem(entry, "no TTL for this record: add one or a $TTL line before it")
                    continue
            last_ttl = record_ttl
            if not owner.is_subdomain(self.zone_origin):
                self.problem(entry, f"the owner name is outside the zone {self.zone_origin}")
                continue
            self.add(entry, owner, rtype, record_ttl, rdata)
        return ttl

    def include(self, entry: _Entry, path: str, arg: str, depth: int, chain: tuple[str, ...]) -> str | None:
        """The path of the file $INCLUDE *arg* (in *path*) names, or None (a problem said)."""
        if depth >= MAX_INCLUDE_DEPTH:
            self.problem(entry, f"$INCLUDE nested more than {MAX_INCLUDE_DEPTH} deep")
            return None
        if self.include_count >= MAX_INCLUDES:
            self.problem(entry, f"more than {MAX_INCLUDES} files included by the zone")
            return None
        try:
            inc = self.files.include(path, arg)
        except Refused as e:
            self.problem(entry, str(e))
            return None
        if inc in chain:
            self.problem(entry, "$INCLUDE of a file that is being read (it includes itself, directly or not)")
            return None
        return inc

    def add(self, entry: _Entry, owner: dns.name.Name, rtype: int, ttl: int, rdata: dns.rdata.Rdata) -> None:
        k = (owner, rtype)
        if k not in self.sets:
            self.sets[k] = ([ttl], [], set())
            self.lines[k] = (entry.file, entry.line)
        ttls, rdatas, seen = self.sets[k]
        ttls[0] = min(ttls[0], ttl)  # RFC 2181 5.2: one TTL per RRset
        wire = _wire(rdata)
        if wire in seen:
            return
        seen.add(wire)
        rdatas.append(_compressible(rtype, rdata))

    def name(self, entry: _Entry, text: str, origin: dns.name.Name) -> dns.name.Name | None:
        try:
            return dns.name.from_text(text, origin=origin)
        except dns.exception.DNSException as e:
            self.problem(entry, f"bad name: {_reason(e, entry)}")
            return None

    def ttl(self, entry: _Entry, text: str) -> int | None:
        try:
            value = int(dns.ttl.from_text(text))
        except (dns.exception.DNSException, ValueError):
            self.problem(entry, "bad TTL")
            return None
        if value > MAX_TTL:
            self.problem(entry, f"the TTL is over {MAX_TTL} (RFC 2181)")
            return None
        return value


def _reason(e: Exception, entry: _Entry) -> str:
    """dnspython's reason for *e*, unless it quotes the entry (a word of three letters or
    more that is in the entry's text): then only that the text is not valid."""
    text = str(e).strip().rstrip(".")
    entry_text = " ".join(t.text for t in entry.tokens).lower()
    if not text or len(text) > _MAX_REASON or any(w.lower() in entry_text for w in _WORD.findall(text)):
        return "not valid here"
    return text


@dataclass(frozen=True, slots=True)
class ZoneData:
    """What a zone file holds; `Zone` adds the names that exist only as wide IPs."""

    origin: Name
    rrsets: tuple[RRset, ...]
    #: the files its zone file included, each once, in order, as `included` names them
    included: tuple[str, ...] = ()

    def build(self, extra_names: Iterable[Name] = ()) -> Zone:
        return Zone(self.origin, self.rrsets, extra_names)


def included(
    path: str,
    includes: Includes | None = None,
    read: Read | None = None,
    base: str = "",
    kept: dict[str, bytes] | None = None,
) -> tuple[list[str], list[Problem]]:
    """The files the zone file at *path* includes (each once, as `load` names them: made
    from *path*), and the problems that keep some from being read, found as `load` finds
    them without reading the records (a file that has no ``$INCLUDE`` is not even split).
    *read*: the files' contents by path (a config bundle's); else they are read from disk,
    *path* and the names made from it relative to *base* when given. *includes*: the
    shared rule by default (`zoneinclude.Includes`). *kept*: filled with what was read
    (the zone file and each file included, whole), by path."""
    problems: list[Problem] = []
    reader = _Reader(dns.name.root, problems, Files(path, includes or Includes(), read, base), False, kept)
    reader.read(path, dns.name.root, 0, None)
    if reader.unreadable:
        return [], []  # (the zone file itself: its reader says so)
    return list(reader.included), problems


def load(path: str, origin: str, includes: Includes | None = None) -> ZoneData:
    """Read the zone file at *path* for *origin*, its ``$INCLUDE``s as *includes* allows.
    Raises `ZoneFileError` with every problem."""
    problems: list[Problem] = []
    try:
        zone_origin = dns.name.from_text(origin, origin=dns.name.root)
    except dns.exception.DNSException as e:
        raise ZoneFileError([Problem(path, 0, f"bad origin {origin!r}: {e}")]) from None
    reader = _Reader(zone_origin, problems, Files(path, includes or Includes()))
    reader.read(path, zone_origin, 0, None)
    if reader.unreadable:
        raise ZoneFileError(problems)
    rrsets = []
    by_owner: dict[dns.name.Name, set[int]] = {}
    for (owner, rtype), (ttls, rdatas, _) in reader.sets.items():
        by_owner.setdefault(owner, set()).add(rtype)
        rrsets.append(RRset(names.from_dnspython(owner), rtype, ttls[0], tuple(rdatas)))
    for (owner, rtype), where in reader.lines.items():
        count = len(reader.sets[(owner, rtype)][1])
        if rtype == TYPE_SOA and owner != zone_origin:
            reader.problem(where, f"an SOA record below the zone apex {zone_origin}")
        if rtype == TYPE_SOA and count > 1:
            reader.problem(where, "more than one SOA record at the apex")
        if rtype == TYPE_CNAME and count > 1:
            reader.problem(where, "more than one CNAME record at this name")
        if rtype == TYPE_CNAME and len(by_owner[owner]) > 1:
            others = sorted(
                dns.rdatatype.to_text(dns.rdatatype.RdataType.make(t)) for t in by_owner[owner] if t != TYPE_CNAME
            )
            reader.problem(where, f"a CNAME beside other data at this name ({', '.join(others)})")
    apex = by_owner.get(zone_origin, set())
    if TYPE_SOA not in apex:
        problems.append(Problem(path, 0, f"no SOA record at the zone apex {zone_origin}"))
    if TYPE_NS not in apex:
        problems.append(Problem(path, 0, f"no NS records at the zone apex {zone_origin}"))
    if problems:
        problems.sort(key=lambda p: (p.file != path, p.file, p.line))
        raise ZoneFileError(problems)
    return ZoneData(names.from_dnspython(zone_origin), tuple(rrsets), tuple(reader.included))
