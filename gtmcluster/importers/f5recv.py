"""What an F5 http(s) monitor's ``recv`` means, for checks that judge the status and the body.

F5 searches ``recv``, a regular expression, in the whole response: status line, headers and
body. Ours judge the status (`expect_status`) and the body (`expect_body_regex`,
`reject_body_regex`) apart. So a ``recv`` is read by what it matches:

- a **status form** matches the status line where the version or the code is
  (``HTTP/1.``, ``HTTP/1.1``, ``200``, ``200 OK``, ``HTTP/1.0 200``, ``^HTTP/1\\.[01] [23]``,
  ``302 Found``): it becomes the statuses whose status line it matches, tried on
  ``HTTP/1.0 NNN Reason`` and ``HTTP/1.1 NNN Reason`` for every code from 100 to 599 (the
  version is not a condition: a server answers with its own). What it also matches in a
  body (``200`` in ``Content-Length: 1200``) is F5's accident, not the operator's meaning;
- a **body form** matches none of the status line and does not look like a header: it
  stays a regular expression on the body (``Welcome``, ``"status":"ok"``), with any status;
- what cannot be mapped says why (`Meaning.problem`): a pattern for a header
  (``Server: nginx``, ``Content-Type``), one that also matches the reason phrase of some
  status line (``OK`` matched every ``200 OK`` on F5, whatever the body), alternatives of
  both forms, one that runs from the status line into what follows, one Python cannot read.

Pure functions; `f5monitors` turns a meaning into our monitor.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from http import HTTPStatus

#: every status our checks accept, and F5's "any HTTP reply"
ALL_STATUSES = frozenset(range(100, 600))
VERSIONS = ("1.0", "1.1")
#: the statuses a health page answers with in practice: a pattern that matches one of
#: their reason phrases (``OK``, ``Found``) decided F5's verdict on them whatever the body
COMMON = (200, 201, 202, 204, 301, 302, 303, 304, 307, 308, 400, 401, 403, 404, 500, 502, 503, 504)
#: response headers whose names a header pattern starts with
HEADERS = (
    "Server", "Content-Type", "Content-Length", "Content-Encoding", "Date", "Connection", "Location",
    "Set-Cookie", "Cache-Control", "Transfer-Encoding", "Last-Modified", "ETag", "Expires", "Vary",
    "Keep-Alive", "Pragma", "Accept-Ranges", "Age", "Via", "WWW-Authenticate", "X-Powered-By",
)  # fmt: skip
#: ``Name:`` (or ``Name\\:``) at the start of a pattern: a header line
_HEADER_LINE = re.compile(r"^\^?[A-Za-z][A-Za-z0-9-]*(?:\\)?:")


@dataclass(frozen=True)
class Meaning:
    """A ``recv``'s meaning: statuses (a status form) or a body pattern, or a problem."""

    statuses: frozenset[int] = ALL_STATUSES
    body: str | None = None
    #: why it cannot be mapped as F5 used it (then `statuses` and `body` are the closest)
    problem: str | None = None


def phrase(code: int) -> str:
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return "Unknown"


#: (code, where its reason phrase starts, the status line) for each code and version
_LINES = [
    (code, len(f"HTTP/{version} {code}"), f"HTTP/{version} {code} {phrase(code)}\r\n")
    for code in sorted(ALL_STATUSES)
    for version in VERSIONS
]


def status_matches(pattern: re.Pattern[str]) -> tuple[frozenset[int], frozenset[int]]:
    """The codes whose status line *pattern* matches at its version or code, and the
    `COMMON` ones whose line it matches only in the reason phrase."""
    at_code: set[int] = set()
    in_reason: set[int] = set()
    for code, reason_at, line in _LINES:
        found = pattern.search(line)
        if found is None:
            continue
        if found.start() < reason_at:
            at_code.add(code)
        elif code in COMMON:
            in_reason.add(code)
    return frozenset(at_code), frozenset(in_reason - at_code)


def alternatives(pattern: str) -> list[str]:
    """*pattern* split at its top-level ``|`` (not inside parentheses or a class)."""
    out: list[str] = []
    depth, start, i, in_class = 0, 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]":  # (``[]abc]``: the first ] is a member)
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth = max(0, depth - 1)
        elif c == "|" and depth == 0:
            out.append(pattern[start:i])
            start = i + 1
        i += 1
    return [*out, pattern[start:]]


def is_header(pattern: str) -> bool:
    """Whether *pattern* is written for a header line (``Server: nginx``, ``Content-Type``)."""
    if _HEADER_LINE.match(pattern):
        return True
    try:
        compiled = re.compile(pattern)
    except re.error:
        return False
    return any(compiled.fullmatch(name) for name in HEADERS)


@functools.lru_cache(maxsize=4096)  # (monitors share their recv strings)
def meaning(recv: str) -> Meaning:
    """What *recv* (as F5 holds it) means for a check of the status and the body."""
    shown = repr(recv)
    try:
        compiled = re.compile(recv)
    except re.error as e:
        return Meaning(problem=f"recv {shown} is no regular expression we read ({e}): any HTTP reply is up")
    statuses, reason_only = status_matches(compiled)
    if statuses and not reason_only:
        parts = alternatives(recv)
        bodies = [p for p in parts if p and not status_matches(re.compile(p))[0]]
        if len(parts) > 1 and bodies:
            why = (
                f"recv {shown}: its alternatives {', '.join(map(repr, bodies))} match the body, the others"
                " the status line; F5 was up when either matched, ours check the status only"
            )
            return Meaning(statuses, problem=why)
        return Meaning(statuses)
    if is_header(recv):
        why = (
            f"recv {shown} matches a response header; ours see the status and the body only:"
            " imported as any HTTP reply (decide whether a status or a body pattern will do)"
        )
        return Meaning(problem=why)
    if reason_only or statuses:
        lines = sorted(reason_only | statuses)
        example = f"HTTP/1.1 {lines[0]} {phrase(lines[0])}"
        why = (
            f"recv {shown} also matches the status line of {len(lines)} status(es) (e.g. {example!r}): F5 was up"
            " for those whatever the body; ours require the body to match"
        )
        return Meaning(body=recv, problem=why)
    if "HTTP/" in recv or "HTTP\\/" in recv:
        why = f"recv {shown} runs from the status line into the headers or body; ours check them apart"
        return Meaning(problem=why + ": imported as any HTTP reply")
    return Meaning(body=recv)


def reversed_meaning(found: Meaning) -> Meaning:
    """F5's ``reverse``: up when the pattern is absent. A status form keeps the other
    statuses; a body form becomes a body that must not match (`Meaning.body` is then the
    pattern to reject)."""
    if found.problem is None and found.body is None:
        return Meaning(ALL_STATUSES - found.statuses)
    return found
