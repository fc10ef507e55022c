"""A config's YAML text cut where its top-level keys start, so each section composes alone.

libyaml composes a 2.4 MB config (5,000 servers, 20,000 topology records) in 0.75 s, and
composed whole, none of it is ready until all of it is. Cut at the lines where its
top-level keys start, each section composes by itself, so a reload's YAML child sends the
first sections while it still composes the big ones (`yamlsrc.sections`, ``split``).

`cut` makes the cuts only where the text shows they cannot change what the file means,
and returns None (read it whole) otherwise:

- the lines before the first key are blank, comments or ``---``;
- every line at column 0 after it is blank, a comment, a sequence entry (``-``) or a key:
  a plain name YAML reads as a string (not ``true``, ``null`` or ``1.5``), then ``:`` and
  a space or the end of the line; so the document is one block mapping, and these are
  its keys (an indented line never is);
- no character that could start an anchor or an alias (``&``, ``*`` after a space or at
  the start of a line, in a quoted string too): an alias in one section to an anchor in
  another would not compose alone.

One case the lines do not show: a key-like line at column 0 inside a multi-line quoted
string or flow collection (``a: "x`` then ``b: y"`` is one valid value). The piece before
it then does not compose alone (its quote or bracket is not closed), and `yamlsrc.sections`
finds that out when it composes the pieces (`Resplit`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import yaml

#: a top-level key at column 0: a plain name, then ":" and a space or the end of the line
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*:(?:[ \t]|$)")
#: what could start an anchor or an alias (after a space, a flow indicator or at the start)
_MARK = re.compile(r"[&*][^\s\[\]\{\},]")
_BEFORE_MARK = frozenset(" \t\r\n[{,")
#: a line with something at column 0 (the rest are indented or empty)
_AT_COLUMN_0 = re.compile(r"^[^ \t\r\n].*", re.MULTILINE)
#: a line that says nothing at column 0: blank or a comment
_NOTHING = re.compile(r"[ \t]*(?:#.*)?")
_STR_TAG = "tag:yaml.org,2002:str"
_RESOLVER = yaml.resolver.Resolver()


@dataclass(frozen=True)
class Piece:
    """One top-level key and its value's text, composed by padding it with *line* empty
    lines (so marks are the file's lines: 1.7 ms of libyaml's time per 100,000)."""

    key: str
    line: int  # 0-based, the key's line in the file
    text: str

    def padded(self) -> str:
        return "\n" * self.line + self.text

    def sha(self) -> str:
        """What the piece says (its text: a section moved by an edit above it is the same),
        as a reload remembers it."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:32]


def cut(text: str) -> list[Piece] | None:
    """*text* cut before each top-level key, or None when it must be read whole."""
    if ("&" in text or "*" in text) and any(
        m.start() == 0 or text[m.start() - 1] in _BEFORE_MARK for m in _MARK.finditer(text)
    ):
        return None
    starts: list[tuple[int, int, str]] = []  # (offset, line, key)
    line, counted = 0, 0
    for m in _AT_COLUMN_0.finditer(text):
        at = m.start()
        line += text.count("\n", counted, at)
        counted = at
        content = m.group().rstrip("\r")
        if content[:1] == "#":
            continue
        if content[:1] == "-" and starts and content[1:2] in (" ", "\t", ""):
            continue  # an entry of a sequence written at column 0 under its key
        if content.startswith("---") and not starts and _NOTHING.fullmatch(content[3:]):
            continue  # the document's start
        key = _KEY.match(content)
        if key is None or _RESOLVER.resolve(yaml.ScalarNode, key.group(1), (True, False)) != _STR_TAG:
            return None
        starts.append((at, line, key.group(1)))
    if not starts:
        return None
    if _indented_content(text[: starts[0][0]]):
        return None  # an indented document, or a preamble that says something
    ends = [at for at, _, _ in starts[1:]] + [len(text)]
    return [Piece(key, number, text[at:end]) for (at, number, key), end in zip(starts, ends, strict=True)]


def _indented_content(preamble: str) -> bool:
    """Whether the text before the first key has an indented line that says something."""
    return any(not _NOTHING.fullmatch(line) for line in preamble.splitlines() if line[:1] in (" ", "\t"))
