"""The F5 brace-syntax tokenizer and parser: words, blocks, line numbers, malformed input;
a whole file cut into top-level stanzas; tmsh one-line listings cut into statements."""

from __future__ import annotations

from itertools import islice

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.importers import f5oneline, f5parse
from gtmcluster.importers.f5parse import F5SyntaxError, Node, parse, stanzas, tokenize
from gtmcluster.importers.f5tmsh import MODULES
from gtmcluster.importers.model import Imported


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


def test_every_unicode_blank_ends_a_word() -> None:
    """A no-break space (pasted from a web page), a unit separator (a gzip file's first
    byte) or a line separator ends a word as a space does (main stood still at one, making
    empty words until memory ran out)."""
    tokens = islice(tokenize("a\xa0b\x1fc\u2028d\x85e\n"), 10)
    assert [t.text for t in tokens] == ["a", "b", "c", "d", "e", "\n"]


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

#: (with tmsh keys, that the one-line cut would place)
WORD = st.text(alphabet=st.sampled_from("abcXYZ019-_./:*%"), min_size=1, max_size=8).filter(
    lambda w: not w.startswith(("#", "//", "/*"))
) | st.sampled_from(["members", "ttl", "monitor", "and", "min", "of", "disabled", "none", "a", "pools", "order"])
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
@given(st.text(alphabet=st.sampled_from('ab {}";#/*\\\n\xa0\x1f'), max_size=40))
def test_any_input_parses_or_fails_cleanly(text: str) -> None:
    """Arbitrary input never raises anything but F5SyntaxError (with a line inside the text)."""
    try:
        parse(text, "fuzz.conf")
        list(tokenize(text))
    except F5SyntaxError as e:
        assert 1 <= e.line <= text.count("\n") + 1


# -- a file cut into stanzas, each parsed on its own -------------------------------------------


def test_statements_keep_the_lines_of_the_file_a_piece_came_from() -> None:
    """A piece parsed alone (its first line given) reports the file's lines, in its nodes
    and in its errors."""
    assert shape(parse("a {\n  b 1\n}\n", "f.conf", 40)) == [(["a"], 40, [(["b", "1"], 41, None)])]
    with pytest.raises(F5SyntaxError) as e:
        parse('x {\n  y "open\n', "f.conf", 7)
    assert (e.value.line, e.value.message) == (8, "a quoted string is never closed")


def test_statements_are_given_before_a_later_syntax_error() -> None:
    """Each top-level statement is had as soon as it is complete: an error after it loses
    only what follows."""
    it = f5parse.statements("gtm a { x 1 }\ngtm b { y 2 }\n} junk\n", "f.conf")
    assert [next(it).words, next(it).words] == [["gtm", "a"], ["gtm", "b"]]
    with pytest.raises(F5SyntaxError, match="closes nothing"):
        next(it)


UCS = """#TMSH-VERSION: 15.1.0
ltm rule /Common/r {
when HTTP_REQUEST {
  if { [HTTP::uri] eq "\\{" } { reject }
}
}
gtmx rule
  gtm pool a /Common/indented { }
gtm pool a /Common/p { ttl 30 }
apm policy policy-item /Common/i {
    rules {
        {
            caption fallback
        }
    }
}
gtm\twideip a /Common/www.example.com {
    pools {
        /Common/p { }
    }
}
"""


def test_stanzas_start_at_column_0_with_a_module_word() -> None:
    """A line starting at column 0 with a module word and a blank starts a stanza (its head
    the words before '{'); whatever follows, Tcl at column 0 or junk, stays in it until the
    next; text before the first is a piece with no head; a file of another form is one."""
    pieces = stanzas(UCS, "bigip.conf", MODULES)
    assert [(p.line, p.head) for p in pieces] == [
        (1, ()),
        (2, ("ltm", "rule", "/Common/r")),
        (9, ("gtm", "pool", "a", "/Common/p")),
        (10, ("apm", "policy", "policy-item", "/Common/i")),
        (17, ("gtm", "wideip", "a", "/Common/www.example.com")),
    ]
    assert "".join(p.text for p in pieces) == UCS
    assert pieces[1].text.endswith("}\n}\ngtmx rule\n  gtm pool a /Common/indented { }\n")
    assert [(p.line, p.head) for p in stanzas("wideip {\n}\n", "wideip.conf", MODULES)] == [(1, ())]


# -- tmsh one-line listings ------------------------------------------------------------------


def cut(text: str) -> tuple[list[object], list[tuple[str, str, str]]]:
    """The shape of *text*'s gtm object after the one-line cut, and the findings."""
    imp = Imported()
    (node,) = parse(text, "one.conf")
    f5oneline.split(node, imp)
    return shape([node])[0][2], [(f.level, f.what, f.why) for f in imp.findings]  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "gtm pool a /Common/p1 { alternate-mode round-robin fallback-mode return-to-dns load-balancing-mode "
            "round-robin members { /Common/lb1:/Common/vs1 { member-order 0 ratio 2 } } }",
            [
                (["alternate-mode", "round-robin"], 1, None),
                (["fallback-mode", "return-to-dns"], 1, None),
                (["load-balancing-mode", "round-robin"], 1, None),
                (["members"], 1, [(["/Common/lb1:/Common/vs1"], 1, [(["member-order", "0"], 1, None),
                                                                     (["ratio", "2"], 1, None)])]),
            ],
        ),
        (
            "gtm wideip a /Common/www.example.com { aliases { a.example.com b.example.com } last-resort-pool a "
            "/Common/p persistence enabled pool-lb-mode round-robin pools { /Common/p1 { order 0 } } rules none }",
            [
                (["aliases"], 1, [(["a.example.com", "b.example.com"], 1, None)]),
                (["last-resort-pool", "a", "/Common/p"], 1, None),
                (["persistence", "enabled"], 1, None),
                (["pool-lb-mode", "round-robin"], 1, None),
                (["pools"], 1, [(["/Common/p1"], 1, [(["order", "0"], 1, None)])]),
                (["rules", "none"], 1, None),
            ],
        ),
        (
            "gtm server /Common/lb1 { datacenter /Common/DC1 disabled monitor /Common/a and /Common/b product "
            "bigip virtual-servers { /Common/vs1 { destination 192.0.2.1:80 enabled monitor min 1 of { /Common/a "
            "/Common/b } } } }",
            [
                (["datacenter", "/Common/DC1"], 1, None),
                (["disabled"], 1, None),
                (["monitor", "/Common/a", "and", "/Common/b"], 1, None),
                (["product", "bigip"], 1, None),
                (["virtual-servers"], 1, [(["/Common/vs1"], 1, [
                    (["destination", "192.0.2.1:80"], 1, None),
                    (["enabled"], 1, None),
                    (["monitor", "min", "1", "of"], 1, [(["/Common/a", "/Common/b"], 1, None)]),
                ])]),
            ],
        ),
        (
            'gtm monitor http /Common/m1 { defaults-from /Common/http destination *:* interval 10 recv "200 OK" '
            'send "GET / HTTP/1.0\\r\\n\\r\\n" timeout 31 }',
            [
                (["defaults-from", "/Common/http"], 1, None),
                (["destination", "*:*"], 1, None),
                (["interval", "10"], 1, None),
                (["recv", "200 OK"], 1, None),
                (["send", "GET / HTTP/1.0\\r\\n\\r\\n"], 1, None),
                (["timeout", "31"], 1, None),
            ],
        ),
        (
            "gtm monitor external /Common/x { interval 5 user-defined HOST www.example.com run /Common/script }",
            [
                (["interval", "5"], 1, None),
                (["user-defined", "HOST", "www.example.com"], 1, None),
                (["run", "/Common/script"], 1, None),
            ],
        ),
        (
            "gtm topology ldns: subnet 10.0.0.0/8 server: datacenter /Common/DC1 { order 1 score 100 }",
            [(["order", "1"], 1, None), (["score", "100"], 1, None)],
        ),
        (
            "gtm region /Common/r { region-members { subnet 10.0.0.0/8 { } not subnet 10.1.0.0/16 { } } }",
            [(["region-members"], 1, [(["subnet", "10.0.0.0/8"], 1, []), (["not", "subnet", "10.1.0.0/16"], 1, [])])],
        ),
        (
            'gtm datacenter /Common/DC1 { contact "noc" disabled location "hall 2" metadata { k { value v } } }',
            [
                (["contact", "noc"], 1, None),
                (["disabled"], 1, None),
                (["location", "hall 2"], 1, None),
                (["metadata"], 1, [(["k"], 1, [(["value", "v"], 1, None)])]),
            ],
        ),
        (  # v11: untyped pools, last-resort-pool without the type
            "gtm wideip /Common/w.example.com { last-resort-pool /Common/p pools { /Common/p { order 0 } } }",
            [
                (["last-resort-pool", "/Common/p"], 1, None),
                (["pools"], 1, [(["/Common/p"], 1, [(["order", "0"], 1, None)])]),
            ],
        ),
    ],
)  # fmt: skip
def test_one_line_objects_are_cut_into_the_statements_tmsh_prints(text: str, expected: list[object]) -> None:
    """Each setting by its shape in F5's tmsh reference: flags, ``key value``, blocks or
    ``none``, ``monitor a and b`` / ``min 1 of { }``, ``last-resort-pool a p``, two-word
    ``user-defined``; quoted strings are one word; nothing to report."""
    assert cut(text) == (expected, [])


def test_a_word_the_table_cannot_place_is_a_changed_finding() -> None:
    """An unknown setting is read up to the next known one, and the guess is CHANGED at its
    line (the known settings around it are still cut right)."""
    tree, found = cut("gtm pool a /Common/p { ttl 30 surprise-mode fast safe members { /Common/s:/Common/v { } } }")
    assert tree == [
        (["ttl", "30"], 1, None),
        (["surprise-mode", "fast", "safe"], 1, None),
        (["members"], 1, [(["/Common/s:/Common/v"], 1, [])]),
    ]
    assert found == [
        (
            "CHANGED",
            "gtm pool a /Common/p: surprise-mode",
            "one-line listing: 'surprise-mode' is no tmsh setting this import knows here; read as "
            "'surprise-mode fast safe', up to the next known setting (check that line)",
        )
    ]
    # alone in its statement, it is what the multi-line form gives: no guess, no finding here
    assert cut("gtm pool a /Common/p { surprise-mode fast }") == ([(["surprise-mode", "fast"], 1, None)], [])


@settings(max_examples=200, deadline=None)
@given(statements())
def test_the_multi_line_form_is_never_cut(stmts: list[tuple[list[tuple[str, bool]], object]]) -> None:
    """One statement a line (tmsh's listing without one-line) is left as parsed, whatever
    its words, in every kind of gtm object."""
    for kind in ("pool a /Common/p", "wideip a w.example.com", "server s", "monitor http m", "region r"):
        lines = [f"gtm {kind} {{"]
        expected = render(stmts, "    ", lines)
        assert cut("\n".join([*lines, "}"]) + "\n") == (expected, [])
