"""docs/architecture.md's package list is what tools/packagetable.py writes from the live
tree (`make docs`), and it follows the code: a package's layer, its modules, docstring,
the names the rest of the code imports from it and what the layers contract lets it import."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from tools import packagetable
from tools.packagetable import BEGIN, END, render, rows

#: the sizes in the table ("4 modules, 836 lines", "In all: ... 47,240 lines"): an edit inside
#: a module changes its lines, not what the table says of the package's place, so the check
#: leaves the line counts out (`make docs` still writes them)
LINES = re.compile(r"[\d,]+ lines")


def test_the_package_table_is_up_to_date() -> None:
    page = LINES.sub("N lines", (packagetable.ROOT / packagetable.PAGE).read_text(encoding="utf-8"))
    wanted = LINES.sub("N lines", render(page))
    diff = "".join(difflib.unified_diff(page.splitlines(True), wanted.splitlines(True), "committed", "make docs"))
    assert wanted == page, f"{packagetable.PAGE}'s package table is out of date: run make docs\n{diff}"


PYPROJECT = """\
[tool.importlinter]
root_package = "gtmcluster"

[[tool.importlinter.contracts]]
name = "layers"
type = "layers"
containers = ["gtmcluster"]
layers = ["cli : demo", "node | dns", "values"]
ignore_imports = ["gtmcluster.values -> gtmcluster.dns.wire"]
"""


def small_tree(root: Path) -> None:
    files = {
        "pyproject.toml": PYPROJECT,
        "gtmcluster/__init__.py": '"""The product."""\n',
        "gtmcluster/cli/__init__.py": '"""The command.\n\nMore about it."""\n',
        # the same name twice from one module counts once; an import within the package is not public
        "gtmcluster/cli/main.py": "from gtmcluster.dns import wire\nfrom gtmcluster.dns.wire import Message, parse\n"
        "from gtmcluster.dns.wire import parse as p2\nfrom gtmcluster.cli.other import x\n",
        "gtmcluster/cli/other.py": "x = 1\n",
        "gtmcluster/demo/__init__.py": '"""The demo."""\n',
        "gtmcluster/dns/__init__.py": '"""DNS: ``wire`` | zones,\n   and the responder."""\n',
        "gtmcluster/dns/wire.py": "from gtmcluster.values import Value\n\n\ndef parse() -> None: ...\n",
        # an import in a function counts, so does a relative one
        "gtmcluster/node.py": "from .values import Value\n\n\ndef f() -> None:\n"
        "    from gtmcluster.dns.wire import parse\n",
        "gtmcluster/values.py": '"""Values."""\n',
        "gtmcluster/extra.py": '"""Not in the contract."""\nfrom gtmcluster.values import Other, Value\n',
        "gtmcluster/py.typed": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_rows_give_the_layer_modules_lines_and_first_paragraph(tmp_path: Path) -> None:
    small_tree(tmp_path)
    assert [(r.name, r.layer, r.modules, r.lines, r.concern) for r in rows(tmp_path)] == [
        ("cli/", 1, 3, 8, "The command."),
        ("demo/", 1, 1, 1, "The demo."),
        ("dns/", 2, 2, 6, "DNS: `wire` | zones, and the responder."),
        ("node.py", 2, 1, 5, "(no docstring)"),
        ("values.py", 3, 1, 1, "Values."),
        ("extra.py", None, 1, 2, "Not in the contract."),
    ]


def test_public_names_are_what_the_rest_imports_the_most_imported_first(tmp_path: Path) -> None:
    small_tree(tmp_path)
    public = {r.name: r.public for r in rows(tmp_path)}
    assert public["dns/"] == ("wire.parse", "wire", "wire.Message")
    assert public["values.py"] == ("Value", "Other")
    assert public["cli/"] == ()  # cli.main imports cli.other: inside the package, not public
    assert public["node.py"] == ()


def test_what_a_package_may_import_follows_the_layers_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small_tree(tmp_path)
    may = {r.name: r.may_import for r in rows(tmp_path)}
    assert may["cli/"] == "It may import layers 2–3: `node`, `dns`, `values`, and its sibling `demo`."
    assert may["dns/"] == "It may import layer 3: `values` (not its sibling `node`)."
    ignored = "the contract still lets `values` import `dns.wire`"
    assert may["values.py"] == f"It may import nothing of gtmcluster; {ignored}."
    assert may["extra.py"] == "It is not in the layers contract."
    monkeypatch.setattr(packagetable, "LISTED_BELOW", 1)
    may = {r.name: r.may_import for r in rows(tmp_path)}
    assert may["cli/"] == "It may import layers 2–3: `node`, `dns` and every package below, and its sibling `demo`."


def test_the_list_goes_between_the_markers_and_follows_a_move(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small_tree(tmp_path)
    page = f"# Title\n\nbefore\n\n{BEGIN}\nold table\n{END}\n\nafter\n"
    written = render(page, tmp_path)
    assert written.startswith("# Title\n\nbefore\n\n" + BEGIN)
    assert written.endswith(END + "\n\nafter\n")
    assert "old table" not in written
    assert "**`cli/`** (layer 1, 3 modules, 8 lines).\nThe command.\nNothing outside it imports from it.\n" in written
    assert "**`dns/`** (layer 2, 2 modules, 6 lines).\n" in written
    assert "**`values.py`** (layer 3, 1 module, 1 line).\n" in written
    assert "Others import `wire.parse`, `wire`, `wire.Message`.\n" in written
    assert "**`extra.py`** (no layer, 1 module, 2 lines).\nNot in the contract.\n" in written
    assert "In all: 6 packages and loose modules, 9 modules, 23 lines." in written
    assert render(written, tmp_path) == written

    monkeypatch.setattr(packagetable, "SHOWN_NAMES", 2)
    assert "Others import `wire.parse`, `wire` (+1 more).\n" in render(written, tmp_path)
    monkeypatch.undo()

    (tmp_path / "gtmcluster/cli/other.py").rename(tmp_path / "gtmcluster/dns/other.py")
    moved = render(written, tmp_path)
    assert moved != written
    assert "**`cli/`** (layer 1, 2 modules, 7 lines)." in moved
    main = tmp_path / "gtmcluster/cli/main.py"
    main.write_text(main.read_text(encoding="utf-8").replace("cli.other", "dns.other"), encoding="utf-8")
    assert "Others import `wire.parse`, `other.x`, `wire`, `wire.Message`." in render(moved, tmp_path)


def test_a_page_without_the_markers_is_refused(tmp_path: Path) -> None:
    small_tree(tmp_path)
    with pytest.raises(LookupError, match="markers"):
        render("# Title\n", tmp_path)
