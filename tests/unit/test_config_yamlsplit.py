"""A config's text cut at its top-level keys (`yamlsplit.cut`), so a reload's YAML child
composes each section alone: cut only where the lines show it cannot change the file's
meaning; what `yamlsrc.sections` makes of the pieces is what it makes of the whole file,
or it says `Resplit` (a key-like line inside a multi-line quoted value), or raises the
problems `yamlsrc.load` raises."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.config.problems import ConfigError
from gtmcluster.config.source import yamlsplit, yamlsrc


@pytest.mark.parametrize(
    "text",
    [
        "a: &x 1\nb: *x\n",  # an anchor and its alias
        "a: '2 *x'\n",  # what could be an alias, in a quoted string: whole all the same
        "%YAML 1.1\n---\na: 1\n",  # a directive
        "a: 1\n---\nb: 2\n",  # a second document
        "a: 1\n...\n",  # a document end
        "  a: 1\n  b: 2\n",  # an indented document
        "# note\n  x: 1\na: 1\n",  # a preamble with indented content
        "{a: 1, b: 2}\n",  # a flow mapping
        "- a\n- b\n",  # a sequence
        "true: 1\n",  # a key YAML reads as a bool
        "1.5: x\nb: 1\n",  # ... as a number
        "null: x\n",  # ... as null
        '"a": 1\n',  # a quoted key
        "? a\n: 1\n",  # an explicit key
        "a:b\n",  # a plain scalar, not a key
        "# only a comment\n",
        "",
    ],
)
def test_text_whose_lines_do_not_show_its_keys_is_not_cut(text: str) -> None:
    assert yamlsplit.cut(text) is None


def test_the_pieces_start_at_the_keys_with_their_lines() -> None:
    text = "---\n# the group\nsync_group: {name: g}\n\nlist:\n- a\n- b: 1\n  c: 2\n# between\ntext: |\n  x\nlast:\n"
    pieces = yamlsplit.cut(text)
    assert pieces is not None
    assert [(p.key, p.line) for p in pieces] == [("sync_group", 2), ("list", 4), ("text", 9), ("last", 11)]
    assert "".join(p.text for p in pieces) == text[text.index("sync_group") :]
    # each piece composes alone, at the file's lines
    node = yaml.compose(pieces[1].padded(), Loader=yaml.SafeLoader)
    assert node is not None and node.start_mark.line == 4


ORDER = ["c", "a"]


def events(text: str, split: bool) -> list[Any]:
    """The events of *text*, but for the sha of each section's text (only when split)."""
    return [e[:4] if e[0] == "section" else e for e in yamlsrc.sections("f.yaml", text, ORDER, split)]


names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
scalars = st.one_of(st.integers(), st.booleans(), st.none(), st.text(max_size=30), st.floats(allow_nan=False))
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=4), max_leaves=12
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(names, values, min_size=1, max_size=6), st.sampled_from([False, True]))
def test_sections_of_the_pieces_are_the_sections_of_the_whole(doc: dict[str, Any], flow: bool) -> None:
    """Any mapping, dumped in block or flow style (long strings folded over lines, at
    column 0 too): read a piece at a time it gives the same events as read whole, or it
    says `Resplit` (and the whole reading is then the one used)."""
    text = yaml.safe_dump(doc, default_flow_style=flow, sort_keys=False, width=20)
    whole = events(text, split=False)
    with contextlib.suppress(yamlsrc.Resplit):
        assert events(text, split=True) == whole


def test_a_key_like_line_inside_a_quoted_value_is_found_out() -> None:
    text = 'c: 1\na: "x\nb: y"\nlast: 2\n'
    pieces = yamlsplit.cut(text)
    assert pieces is not None and [p.key for p in pieces] == ["c", "a", "b", "last"]  # wrong
    with pytest.raises(yamlsrc.Resplit):
        events(text, split=True)
    assert yamlsrc.load("f.yaml", text)[0] == {"c": 1, "a": "x b: y", "last": 2}


@pytest.mark.parametrize("text", ["c: 1\na: [1,\nb: 2\n", "c: 1\na: 1: 2\n", "c: 1\na: 'x\n"])
def test_a_broken_piece_raises_the_problems_of_the_whole_file(text: str) -> None:
    with pytest.raises(ConfigError) as whole:
        yamlsrc.load("f.yaml", text)
    with pytest.raises(ConfigError) as split:
        events(text, split=True)
    assert split.value.problems == whole.value.problems


def test_a_section_whose_text_the_reader_holds_is_only_named() -> None:
    """Each section comes with the sha of its text; given the shas the reader holds, the
    sections with the same text come as ``same`` (not read again), whatever their line
    (an edit above a section moves it and leaves it the same)."""
    text = "c: 1\na:\n  x: [1, 2]\nb: {y: 2}\n"
    first = list(yamlsrc.sections("f.yaml", text, ORDER, True))
    shas = {e[1]: e[4] for e in first if e[0] == "section"}
    assert set(shas) == {"a", "b", "c"} and len(set(shas.values())) == 3
    edited = "# a comment\nc: 2\na:\n  x: [1, 2]\nb: {y: 2}\n"
    again = list(yamlsrc.sections("f.yaml", edited, ORDER, True, known=shas))
    assert [e[:2] for e in again if e[0] in ("section", "same")] == [("section", "c"), ("same", "a"), ("same", "b")]
    assert ("same", "a", shas["a"]) in again


def test_a_value_that_composes_but_cannot_be_built_is_a_problem_cut_or_whole() -> None:
    """An unknown tag in a section: the problem `yamlsrc.load` gives with its line, not
    PyYAML's exception (a fuzz finding: it escaped the cut file's reading)."""
    text = "a: 1\nb:\n  c: !unknown x\n"
    assert yamlsplit.cut(text) is not None
    for split in (True, False):
        with pytest.raises(ConfigError) as caught:
            list(yamlsrc.sections("c.yaml", text, (), split=split))
        (problem,) = caught.value.problems
        assert "could not determine a constructor for the tag '!unknown'" in problem.message
        assert problem.line == 3
