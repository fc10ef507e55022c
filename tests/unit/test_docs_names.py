"""The docs name only files, modules, functions and tests that exist (tools/docnames.py): on
the live tree, and its rules on a small tree of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import docnames
from tools.docnames import Tree, check_text

_tree = Tree()


def test_the_docs_name_only_what_exists() -> None:
    found = docnames.problems(tree=_tree)
    assert not found, "the docs name what does not exist:\n" + "\n".join(map(str, found))


def test_the_docstrings_name_only_what_exists() -> None:
    found = docnames.docstring_problems(tree=_tree)
    assert not found, "docstrings name what does not exist:\n" + "\n".join(map(str, found))


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


MODEL = '''"""The model."""

class Base:
    inherited = 1


class Model(Base):
    kind = "token_file"

    def __init__(self) -> None:
        self.store = {"api": 1}

    def check(self) -> None:
        pass


def load() -> Model:
    return Model()
'''

TESTS = """
def test_a():
    pass


class TestGroup:
    def test_b(self):
        pass
"""


def small_tree(root: Path) -> Tree:
    write(
        root,
        {
            "gtmcluster/__init__.py": "",
            "gtmcluster/config/__init__.py": '"""Config."""',
            "gtmcluster/config/model.py": MODEL,
            "gtmcluster/dns/__init__.py": "",
            "gtmcluster/dns/server.py": "PORT = 53\n",
            "gtmcluster/tap.py": "",
            "tests/__init__.py": "",
            "tests/unit/__init__.py": "",
            "tests/unit/test_x.py": TESTS,
            "etc/cluster.yaml": "",
            "docs/other.md": "",
        },
    )
    return Tree(root)


def problems(root: Path, text: str) -> list[tuple[int, str]]:
    """(line, name) of each problem of a doc docs/page.md holding text."""
    return [(p.line, p.name) for p in check_text(small_tree(root), text, root / "docs" / "page.md")]


def test_paths_under_the_roots_and_the_packages_must_exist(tmp_path: Path) -> None:
    text = """\
`gtmcluster/dns/server.py` and `gtmcluster/dns/gone.py`, `dns/server.py` and `dns/gone.py`
`config/` and `nothere/`; `config/bigip.conf` is a UCS's file; `etc/cluster.yaml`, `etc/gone.yaml`
`tests/unit/test_*.py` `tests/unit/nothing_*.py` `.venv/bin/python bench/gone.py --x`
`gtmcluster/config/model.load()` and `gtmcluster/config/model.unload()`
"""
    assert problems(tmp_path, text) == [
        (1, "gtmcluster/dns/gone.py"),
        (1, "dns/gone.py"),
        (2, "etc/gone.yaml"),
        (3, "tests/unit/nothing_*.py"),
        (3, "bench/gone.py"),
        (4, "gtmcluster/config/model.unload"),
    ]


def test_tests_named_by_node_id_must_be_defined(tmp_path: Path) -> None:
    text = """\
`test_x.py` `test_y.py` `test_x.py::test_a` `test_x.py::test_gone` `test_x.py::TestGroup::test_b`
`tests/unit/test_x.py::test_a[1-2]` `tests/unit/test_x.py::test_z*` `tests/unit/test_x.py::test_*`
"""
    assert problems(tmp_path, text) == [
        (1, "test_y.py"),
        (1, "test_x.py::test_gone"),
        (2, "tests/unit/test_x.py::test_z*"),
    ]


def test_dotted_names_of_the_code_must_resolve(tmp_path: Path) -> None:
    text = """\
`config.model.load` `config.model.unload` `gtmcluster.dns.server.PORT` `dns.server.HOST`
`model.Model.check` `model.Model.gone` `Model.store` `Model.inherited` `Model.gone` `model.load()`
`python -m gtmcluster.dns.server` and `python -m gtmcluster.dns.client`; `tap.py` `gone.py`
"""
    assert problems(tmp_path, text) == [
        (1, "config.model.unload"),
        (1, "dns.server.HOST"),
        (2, "model.Model.gone"),
        (2, "Model.gone"),
        (3, "gtmcluster.dns.client"),
        (3, "gone.py"),
    ]


def test_what_only_looks_like_code_is_not_checked(tmp_path: Path) -> None:
    """Config key paths (all of their parts quoted in the code), other libraries' modules,
    domain names, file names, placeholders and fenced code are left alone."""
    text = """\
`api.token_file` `dns.message` `dns.query.xfr` `www.example.com` `bench.test`
`state.sqlite` `sync_group.tls` `config.NAME.ca_file` `var/state/<node>/` `config/...`
```
`gtmcluster/gone.py`
```
"""
    assert problems(tmp_path, text) == []


def test_relative_links_must_reach_a_file(tmp_path: Path) -> None:
    text = "[a](other.md) [b](gone.md#part) [c](../etc/cluster.yaml) [d](https://x.test/gone) [e](#here)\n"
    assert problems(tmp_path, text) == [(1, "gone.md")]


def test_a_planned_or_former_name_that_exists_must_leave_its_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(docnames, "PLANNED", frozenset({"probe/kinds.py"}))  # (none is planned today)
    assert "config.shared" in docnames.FORMER
    text = "`probe/kinds.py` `config.shared`\n"
    assert problems(tmp_path, text) == []
    write(
        tmp_path,
        {"gtmcluster/probe/__init__.py": "", "gtmcluster/probe/kinds.py": "", "gtmcluster/config/shared.py": ""},
    )
    assert problems(tmp_path, text) == [(1, "probe/kinds.py"), (1, "config.shared")]


def test_docstrings_are_read_at_their_lines(tmp_path: Path) -> None:
    small_tree(tmp_path)
    write(
        tmp_path,
        {"gtmcluster/dns/zone.py": '"""Zones.\n\nSee `dns.server.HOST`."""\n\n\ndef f():\n    """`Model.gone`"""\n'},
    )
    found = docnames.docstring_problems(tmp_path, Tree(tmp_path))
    assert [(p.file, p.line, p.name) for p in found] == [
        ("gtmcluster/dns/zone.py", 3, "dns.server.HOST"),
        ("gtmcluster/dns/zone.py", 7, "Model.gone"),
    ]
