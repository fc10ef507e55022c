"""The F5 brace-syntax tokenizer and parser: words, blocks, line numbers, malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.importers.f5parse import F5SyntaxError, Node, parse, tokenize


def shape(nodes: list[Node]) -> list[object]:
    return [(n.words, n.line, None if n.block is None else shape(n.block)) for n in nodes]


def test_tmsh_statement_with_nested_blocks_and_lines() -> None:
    """Each statement keeps its words and first line; blocks nest; comments vanish."""
    text = (
        "# a comment line\n"
        "gtm pool a /Common/web {   # trailing comment\n"
        "    members {\n"
        "        /Common/s1:/Common/vs1 {\n"
        "            member-order 0\n"
        "        }\n"
        "    }\n"
        '    description "two words"\n'
        "}\n"
    )
    assert shape(parse(text, "f.conf")) == [
        (
            ["gtm", "pool", "a", "/Common/web"],
            2,
            [
                (["members"], 3, [(["/Common/s1:/Common/vs1"], 4, [(["member-order", "0"], 5, None)])]),
                (["description", "two words"], 8, None),
            ],
        )
    ]


def test_one_line_blocks_split_into_statements() -> None:
    """``a { order 0 } b { order 1 }`` on one line reads as two statements."""
    nodes = parse("pools { a { order 0 } b { order 1 } }\n")
    assert shape(nodes) == [
        (["pools"], 1, [(["a"], 1, [(["order", "0"], 1, None)]), (["b"], 1, [(["order", "1"], 1, None)])])
    ]


def test_threedns_glued_quotes_slash_comments_and_semicolons() -> None:
    """``dc."CNC"`` is one word; ``//`` and ``/* */`` are comments; ``;`` ends a statement."""
    text = 'topology { // 4 Items\n  dc."CNC" 202.106.0.0/16 100 /* old\n record */\n  dc."TEL" 0.0.0.0/0 1; x 2\n}\n'
    nodes = parse(text, "wideip.conf")
    assert shape(nodes) == [
        (
            ["topology"],
            1,
            [
                (["dc.CNC", "202.106.0.0/16", "100"], 2, None),
                (["dc.TEL", "0.0.0.0/0", "1"], 4, None),
                (["x", "2"], 4, None),
            ],
        )
    ]
    assert nodes[0].children()[0].text() == 'dc."CNC" 202.106.0.0/16 100'


def test_escapes_in_strings() -> None:
    r"""``\"`` and ``\\`` are escapes; ``\r\n`` stays as written (the monitor reads it)."""
    (node,) = parse(r'send "GET / HTTP/1.0\r\n\"x\" \\ end"' + "\n")
    assert node.words == ["send", 'GET / HTTP/1.0\\r\\n"x" \\ end']


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("gtm pool a p {\n  members {\n  }\n", 1, "this '{' is never closed"),
        ("a {\n}\n}\n", 3, "a '}' that closes nothing"),
        ('a {\n  b "open\n  c\n}\n', 2, "a quoted string is never closed"),
        ("a\n/* never\nclosed\n", 2, "a '/*' comment is never closed"),
        ("\n\n{ x }\n", 3, "a '{' with no name before it"),
    ],
)
def test_malformed_input_names_file_and_line(text: str, line: int, message: str) -> None:
    with pytest.raises(F5SyntaxError) as e:
        parse(text, "bad.conf")
    assert (e.value.file, e.value.line, e.value.message) == ("bad.conf", line, message)
    assert str(e.value) == f"bad.conf:{line}: {message}"


# -- property: whatever words and blocks are written, they are read back ---------------------

WORD = st.text(alphabet=st.sampled_from("abcXYZ019-_./:*%"), min_size=1, max_size=8).filter(
    lambda w: not w.startswith(("#", "//", "/*"))
)
QUOTED = st.text(alphabet=st.sampled_from('ab {};#/"\\ \t'), max_size=8)


@st.composite
def statements(draw: st.DrawFn, depth: int = 0) -> list[tuple[list[tuple[str, bool]], object]]:
    out: list[tuple[list[tuple[str, bool]], object]] = []
    for _ in range(draw(st.integers(0, 3))):
        word = st.one_of(WORD.map(lambda w: (w, False)), QUOTED.map(lambda w: (w, True)))
        words = draw(st.lists(word, min_size=1, max_size=4))
        block = draw(statements(depth + 1)) if depth < 3 and draw(st.booleans()) else None
        out.append((words, block))
    return out


def render(stmts: list[tuple[list[tuple[str, bool]], object]], indent: str, lines: list[str]) -> list[object]:
    """Write *stmts* one per line (as tmsh does); return the shape parse should give."""
    expected: list[object] = []
    for words, block in stmts:
        text = " ".join('"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"' if q else w for w, q in words)
        line = len(lines) + 1
        if block is None:
            lines.append(indent + text)
            expected.append(([w for w, _ in words], line, None))
        else:
            lines.append(indent + text + " {")
            assert isinstance(block, list)
            inner = render(block, indent + "    ", lines)
            lines.append(indent + "}")
            expected.append(([w for w, _ in words], line, inner))
    return expected


@settings(max_examples=200, deadline=None)
@given(statements())
def test_written_statements_read_back_with_their_lines(stmts: list[tuple[list[tuple[str, bool]], object]]) -> None:
    lines: list[str] = []
    expected = render(stmts, "", lines)
    assert shape(parse("\n".join(lines) + "\n", "gen.conf")) == expected


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from('ab {}";#/*\\\n'), max_size=40))
def test_any_input_parses_or_fails_cleanly(text: str) -> None:
    """Arbitrary input never raises anything but F5SyntaxError (with a line inside the text)."""
    try:
        parse(text, "fuzz.conf")
        list(tokenize(text))
    except F5SyntaxError as e:
        assert 1 <= e.line <= text.count("\n") + 1
