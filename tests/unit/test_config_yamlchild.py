"""A config's YAML parsed in a child process (for a reload), section by section in the
builder's order, gives exactly what parsing it in the node's process gives, and what
`yamlsrc.load` gives in file order: the values, every key's line, the duplicate-key
problems, the refusals, and the config digest; with the text cut at its top-level keys
(``--split``, as a reload runs it: `yamlsplit`) or composed whole. Each test runs the real
child process and reads its output as the reactor does."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from gtmcluster.config.load import SECTION_ORDER, build, load
from gtmcluster.config.model import Config
from gtmcluster.config.problems import ConfigError
from gtmcluster.config.source import yamlchild, yamlframes, yamlsrc
from gtmcluster.runtime import slices
from tests.support import configs


def child_output(path: str, text: str, order: Sequence[str] = SECTION_ORDER, split: bool = True) -> bytes:
    """What the real child process writes for *text*."""
    args = [sys.executable, "-m", "gtmcluster.config.source.yamlframes", *(["--split"] if split else []), path, *order]
    return subprocess.run(args, input=text.encode(), capture_output=True, check=True, timeout=60).stdout


def from_child(path: str, text: str, split: bool = True) -> yamlchild.Parsed:
    """*text* parsed by a real child, its output read as the reactor reads it."""
    child = yamlchild.Child(None, path, text, SECTION_ORDER, split)  # type: ignore[arg-type]  # (read only)
    child.outReceived(child_output(path, text, split=split))
    assert child.parsed.ended
    slices.whole(child.parsed.complete())  # (raises the child's ConfigError)
    return child.parsed


def load_apart(path: Path) -> Config:
    """The config at *path*, its YAML parsed in a child process (as for a reload)."""
    return slices.whole(build(str(path), from_child(str(path), path.read_text())))


def same(path: str, text: str) -> yamlchild.Parsed:
    """Parse *text* here, in a child, and with `yamlsrc.load` (which builds in file order);
    assert every part is equal; the child's."""
    here = yamlchild.here(path, text, SECTION_ORDER)
    apart = from_child(path, text)
    value, lines, problems = yamlsrc.load(path, text)
    for parsed in (here, apart, from_child(path, text, split=False)):
        assert parsed.value == value
        assert list(parsed.value or ()) == list(value or ())  # the file's order
        assert parsed.lines == lines
        assert sorted(parsed.problems, key=repr) == sorted(problems, key=repr)
        assert parsed.canonical == yamlframes.canonical(value)
    return apart


def test_big_sections_come_back_whole_and_in_order() -> None:
    """Sections bigger than one frame (a mapping and a sequence) are sent in slices and
    put together in the order written, with the line of every key."""
    n = yamlframes.SLICE * 3 + 7
    value = {
        "virtual_servers": {f"vs{i}": {"address": f"10.0.{i // 250}.{i % 250}", "port": 80} for i in range(n)},
        "topology": [{"ldns": f"region r{i}", "server": "datacenter DC1", "weight": i} for i in range(n)],
        "small": {"a": [1, 2.5, True, None, "x"]},
    }
    text = yaml.safe_dump(value, sort_keys=False)
    apart = same("big.yaml", text)
    assert list(apart.value["virtual_servers"]) == [f"vs{i}" for i in range(n)]
    assert apart.value["topology"][-1]["weight"] == n - 1
    assert len(apart.lines) > yamlframes.LINE_SLICE  # more than one frame of lines
    # each server is three lines from line 2 (its name, address, port)
    assert apart.lines[("virtual_servers", f"vs{n - 1}", "port")] == 3 * (n - 1) + 4


@pytest.mark.parametrize(
    "text",
    [
        "",  # nothing
        "{}\n",  # an empty mapping
        "- a\n- b\n",  # not a mapping at all (the reader says so)
        "when: 2026-12-01\nanchored: &a {x: 1}\nmerged: {<<: *a, y: 2}\n",  # a date, a merge
        "pools:\n  p: {ttl: 30}\n  p: {ttl: 60}\n",  # a duplicate key: a problem, the rest read
        # cut at its keys: a header, comments, entries at column 0, a block scalar, a key
        # written twice at the top level (a problem at its line, the first one kept)
        "---\n# the group\nsync_group: {name: g}\n\nlist:\n- a\n- b: 1\n  c: 2\n# between\n"
        "text: |\n  two\n  lines\nsync_group: {name: h}\nlast:\n",
    ],
)
def test_small_files_and_their_problems_are_the_same(text: str) -> None:
    same("small.yaml", text)


def test_a_duplicate_key_is_reported_with_its_line() -> None:
    apart = same("dup.yaml", "pools:\n  p: {ttl: 30}\n  p: {ttl: 60}\n")
    (problem,) = apart.problems
    assert (problem.path, problem.line) == (("pools", "p"), 3)


@pytest.mark.parametrize(
    "text",
    [
        "pools: [1, 2\n",  # a syntax error
        "a: &x [*x]\n",  # a recursive alias
        "a: [1,\nb: 2\n",  # a syntax error across the cut: the piece before it is not closed
        "a: 1\nb: 2: 3\n",  # a syntax error in the second piece
    ],
)
def test_a_file_refused_in_the_child_raises_the_same_problems(text: str) -> None:
    with pytest.raises(ConfigError) as classic:
        yamlsrc.load("bad.yaml", text)
    with pytest.raises(ConfigError) as here:
        yamlchild.here("bad.yaml", text, SECTION_ORDER)
    with pytest.raises(ConfigError) as apart:
        from_child("bad.yaml", text)
    with pytest.raises(ConfigError) as whole:
        from_child("bad.yaml", text, split=False)
    assert apart.value.problems == whole.value.problems == here.value.problems == classic.value.problems


def test_a_config_read_for_a_reload_is_the_config_read_at_start(tmp_path: Path) -> None:
    """The whole config, its YAML parsed apart: the same model and the same digest."""
    path = configs.write(tmp_path, configs.base("127.0.0.1", 5353))
    at_start = load(path)
    for_reload = load_apart(path)
    assert for_reload.digest == at_start.digest
    assert for_reload.virtual_servers == at_start.virtual_servers
    assert for_reload.wideips == at_start.wideips


def test_a_config_problem_found_after_parsing_apart_names_its_line(tmp_path: Path) -> None:
    """The lines came back from the child: a problem the model finds still names one."""
    raw = configs.base("127.0.0.1", 5353)
    raw["virtual_servers"]["vs1"]["port"] = "eighty"
    path = configs.write(tmp_path, raw)
    with pytest.raises(ConfigError) as at_start:
        load(path)
    with pytest.raises(ConfigError) as for_reload:
        load_apart(path)
    assert [str(p) for p in for_reload.value.problems] == [str(p) for p in at_start.value.problems]
    assert any(p.line for p in for_reload.value.problems)


def test_a_key_like_line_inside_a_quoted_value_makes_the_child_read_it_whole() -> None:
    """``b: y"`` at column 0 looks like a key, but is inside the quoted value of ``a``: the
    piece cut before it does not compose alone, and the child says so (``resplit``) after
    the sections it sent, which were right; read whole, the file gives its real value."""
    text = 'first: 1\na: "x\nb: y"\nlast: 2\n'
    frames = list(yamlframes.frames("q.yaml", text, ["first", "a", "b", "last"], split=True))
    assert frames[0] == ("keys", ["first", "a", "b", "last"])
    assert ("key", "first", 1) in frames
    assert frames[-1][0] == "resplit"
    with pytest.raises(yamlsrc.Resplit):
        from_child("q.yaml", text)
    assert from_child("q.yaml", text, split=False).value == {"first": 1, "a": "x b: y", "last": 2}


def test_a_read_takes_the_sections_it_was_told_of_while_another_read_keeps_its_own(tmp_path: Path) -> None:
    """Two reads overlap (a bundle received is vetted while another is run: the CI race of
    test_two_pushes_at_once): the first one's child names sections as the same as those held
    when it started; the second read ends first and keeps its own sections. The first still
    takes the sections it was told of (before, "the child named a section this node does not
    hold", and the bundle was refused with an internal error)."""
    memory = yamlchild.Memory()
    first = configs.write(tmp_path / "a", configs.base()).read_text()
    other = configs.base()
    other["virtual_servers"]["vs9"] = {"address": "10.0.9.9", "datacenter": "DC1"}
    second = yaml.safe_dump(other)
    kept = yamlchild.Child(None, "a.yaml", first, SECTION_ORDER, True, memory)  # type: ignore[arg-type]
    kept.outReceived(child_output("a.yaml", first))
    memory.keep(kept.parsed)
    reading = yamlchild.Child(None, "a.yaml", first, SECTION_ORDER, True, memory)  # type: ignore[arg-type]
    have = [arg for key, sha in memory.known().items() for arg in ("--have", f"{key}={sha}")]
    args = [sys.executable, "-m", "gtmcluster.config.source.yamlframes", "--split", *have, "a.yaml", *SECTION_ORDER]
    output = subprocess.run(args, input=first.encode(), capture_output=True, check=True, timeout=60).stdout
    meanwhile = yamlchild.Child(None, "b.yaml", second, SECTION_ORDER, True, memory)  # type: ignore[arg-type]
    meanwhile.outReceived(child_output("b.yaml", second))
    memory.keep(meanwhile.parsed)  # the overlapping read ends first
    reading.outReceived(output)
    assert reading.parsed.ended and "virtual_servers" in reading.parsed.reused
    slices.whole(reading.parsed.complete())
    assert reading.parsed.value == yaml.safe_load(first)
