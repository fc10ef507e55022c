"""F5's brace syntax: a tokenizer and a parser to a tree of statements with line numbers.

Both F5 forms share it: tmsh's ``bigip_gtm.conf`` (``gtm pool a /Common/web { members {
... } }``) and 3-DNS's ``wideip.conf`` (``wideip { name "www" pool { ... } }``). A statement
is the words on one line (up to a newline, ``;``, ``{`` or ``}``), optionally followed by a
``{ block }`` of statements; after a block the statement ends, so one-line forms such as
``members { a { order 0 } b { order 1 } }`` read as they would on several lines.

Words are barewords or double-quoted strings (``\\"`` and ``\\\\`` are escapes; other
backslash sequences, such as a monitor's ``\\r\\n``, are kept as written). A quoted part glued
to a bareword joins it, as in a shell: ``dc."CNC"`` is the word ``dc.CNC``. Comments run from
``#`` or ``//`` at the start of a word to the end of the line, or between ``/*`` and ``*/``.
Malformed input (an unterminated string or comment, an unbalanced brace) raises
`F5SyntaxError` naming the file and line.

A whole tmsh file (a ``bigip.conf`` from a UCS holds iRules, scripts and APM policies that are
not this syntax) is first cut into `Stanza` pieces by `stanzas`: tmsh writes each top-level
object from column 0, so a line that starts at column 0 with a module word (``gtm``, ``ltm``,
``sys`` ...) begins the next piece, and each piece is parsed, or skipped, on its own.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

#: token kinds
WORD = "word"
OPEN = "{"
CLOSE = "}"
END = "end"  # a newline or ';': the end of a statement


class F5SyntaxError(Exception):
    """Input that is not F5 brace syntax, at *file*:*line*."""

    def __init__(self, file: str, line: int, message: str) -> None:
        super().__init__(f"{file}:{line}: {message}")
        self.file = file
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Token:
    """One token: its kind, its text (a word unquoted) and where it starts."""

    kind: str
    text: str
    line: int
    #: the word as written (quotes and escapes kept)
    raw: str = ""


@dataclass
class Node:
    """A statement: its words, its block (None without braces) and where it starts."""

    words: list[str]
    line: int
    file: str
    block: list[Node] | None = None
    #: the words as written (quotes and escapes kept)
    raw: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def key(self) -> str:
        return self.words[0] if self.words else ""

    def children(self) -> list[Node]:
        return self.block or []

    def text(self) -> str:
        """The statement's words as F5 would show them (for comments and messages)."""
        return " ".join(self.raw or self.words)


_SPECIAL = set('{};"')


def tokenize(text: str, file: str = "<input>", line: int = 1) -> Iterator[Token]:
    """The tokens of *text*, whose first line is *line* of *file*; raises `F5SyntaxError` on
    an unterminated string or comment."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            yield Token(END, "\n", line)
            line += 1
            i += 1
        elif c.isspace():  # (every blank a word ends at: a no-break space, \x1f ... too)
            i += 1
        elif c == "#" or text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise F5SyntaxError(file, line, "a '/*' comment is never closed")
            line += text.count("\n", i, end)
            i = end + 2
        elif c == ";":
            yield Token(END, ";", line)
            i += 1
        elif c in "{}":
            yield Token(OPEN if c == "{" else CLOSE, c, line)
            i += 1
        else:
            start, start_line = i, line
            parts: list[str] = []
            while i < n and not text[i].isspace() and text[i] not in "{};":
                if text[i] == '"':
                    i, line, part = _string(text, i, line, file)
                    parts.append(part)
                else:
                    j = i
                    while j < n and not text[j].isspace() and text[j] not in _SPECIAL:
                        j += 1
                    parts.append(text[i:j])
                    i = j
            yield Token(WORD, "".join(parts), start_line, text[start:i])


def _string(text: str, i: int, line: int, file: str) -> tuple[int, int, str]:
    """The quoted string at *i* (its opening quote): (index after it, line after it, value)."""
    start_line = line
    out: list[str] = []
    i += 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            return i + 1, line, "".join(out)
        if c == "\\" and i + 1 < n and text[i + 1] in '"\\':
            out.append(text[i + 1])
            i += 2
            continue
        if c == "\n":
            line += 1
        out.append(c)
        i += 1
    raise F5SyntaxError(file, start_line, "a quoted string is never closed")


def parse(text: str, file: str = "<input>", line: int = 1) -> list[Node]:
    """The top-level statements of *text* (its first line is *line* of *file*); raises
    `F5SyntaxError` on malformed input."""
    return list(statements(text, file, line))


def statements(text: str, file: str = "<input>", line: int = 1) -> Iterator[Node]:
    """The top-level statements of *text*, each given as soon as it is complete (so those
    before a syntax error are had before `F5SyntaxError` is raised)."""
    stack: list[tuple[list[Node], int]] = [([], 0)]  # (statements of a block, line of its '{')
    current: Node | None = None
    top: Node | None = None  # the top-level statement being read
    for tok in tokenize(text, file, line):
        if tok.kind == WORD:
            if current is None:
                current = Node([], tok.line, file)
                if len(stack) == 1:
                    top = current
                else:
                    stack[-1][0].append(current)
            current.words.append(tok.text)
            current.raw.append(tok.raw)
        elif tok.kind == END:
            current = None
            if len(stack) == 1 and top is not None:
                yield top
                top = None
        elif tok.kind == OPEN:
            if current is None:
                raise F5SyntaxError(file, tok.line, "a '{' with no name before it")
            current.block = []
            stack.append((current.block, tok.line))
            current = None
        else:  # CLOSE
            if len(stack) == 1:
                raise F5SyntaxError(file, tok.line, "a '}' that closes nothing")
            stack.pop()
            current = None
            if len(stack) == 1 and top is not None:
                yield top
                top = None
    if len(stack) > 1:
        raise F5SyntaxError(file, stack[-1][1], "this '{' is never closed")
    if top is not None:
        yield top


@dataclass(frozen=True)
class Stanza:
    """A top-level piece of a file: its text from its first line (*line*) up to the next
    piece's, and the words of its first line before any ``{`` (``ltm rule /Common/r``);
    the text before a file's first stanza is a piece with no words."""

    file: str
    line: int
    text: str
    head: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def stanzas(text: str, file: str, starts: Collection[str]) -> list[Stanza]:
    """*text* cut before each line that starts at column 0 with one of the words *starts*
    followed by a blank (tmsh's top-level objects); whatever a piece holds (Tcl, junk) stays
    in it, for its reader to parse or skip. Text before the first such line (comments, or a
    whole file of another form) is a piece with no head."""
    found: list[int] = []
    if starts:
        words = "|".join(map(re.escape, sorted(starts)))
        found = [m.start() for m in re.finditer(rf"^(?:{words})[ \t]", text, re.MULTILINE)]
    preamble = found[:1] != [0]  # text before the first stanza
    begins = [0, *found] if preamble else found
    out: list[Stanza] = []
    line = 1
    for start, end in zip(begins, [*begins[1:], len(text)], strict=True):
        head: tuple[str, ...] = ()
        if start or not preamble:
            eol = text.find("\n", start, end)
            head = tuple(text[start : eol if eol >= 0 else end].split("{", 1)[0].split())
        out.append(Stanza(file, line, text[start:end], head))
        line += text.count("\n", start, end)
    return out


def pairs(node: Node) -> Iterator[tuple[str, Node]]:
    """The statements of *node*'s block by their first word (for ``key value`` settings)."""
    for child in node.children():
        if child.words:
            yield child.key, child
