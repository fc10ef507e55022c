"""docs/architecture.md's package table is what tools/packagetable.py writes from the live
tree (`make docs`), and it follows the code: a package's layer, its modules, lines, docstring."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from tools import packagetable
from tools.packagetable import BEGIN, END, render, rows


def test_the_package_table_is_up_to_date() -> None:
    page = (packagetable.ROOT / packagetable.PAGE).read_text(encoding="utf-8")
    wanted = render(page)
    diff = "".join(difflib.unified_diff(page.splitlines(True), wanted.splitlines(True), "committed", "make docs"))
    assert wanted == page, f"{packagetable.PAGE}'s package table is out of date: run make docs\n{diff}"


PYPROJECT = """\
[tool.importlinter]
root_package = "gtmcluster"

[[tool.importlinter.contracts]]
name = "layers"
type = "layers"
containers = ["gtmcluster"]
layers = ["cli", "node : api | dns", "values"]
"""


def small_tree(root: Path) -> None:
    files = {
        "pyproject.toml": PYPROJECT,
        "gtmcluster/__init__.py": '"""The product."""\n',
        "gtmcluster/cli/__init__.py": '"""The command.\n\nMore about it."""\n',
        "gtmcluster/cli/main.py": "x = 1\ny = 2\n",
        "gtmcluster/dns/__init__.py": '"""DNS: ``wire`` | zones,\n   and the responder."""\n',
        "gtmcluster/node.py": "",
        "gtmcluster/values.py": '"""Values."""\n',
        "gtmcluster/extra.py": '"""Not in the contract."""\n',
        "gtmcluster/py.typed": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_rows_give_the_layer_modules_lines_and_first_paragraph(tmp_path: Path) -> None:
    small_tree(tmp_path)
    assert [(r.name, r.layer, r.modules, r.lines, r.concern) for r in rows(tmp_path)] == [
        ("cli/", 1, 2, 5, "The command."),
        ("dns/", 2, 1, 2, "DNS: `wire` \\| zones, and the responder."),
        ("node.py", 2, 1, 0, "(no docstring)"),
        ("values.py", 3, 1, 1, "Values."),
        ("extra.py", None, 1, 1, "Not in the contract."),
    ]


def test_the_table_goes_between_the_markers_and_follows_a_move(tmp_path: Path) -> None:
    small_tree(tmp_path)
    page = f"# Title\n\nbefore\n\n{BEGIN}\nold table\n{END}\n\nafter\n"
    written = render(page, tmp_path)
    assert written.startswith("# Title\n\nbefore\n\n" + BEGIN)
    assert written.endswith(END + "\n\nafter\n")
    assert "old table" not in written
    assert "| `cli/` | 1 | 2 | 5 | The command. |" in written
    assert "| `extra.py` | none | 1 | 1 | Not in the contract. |" in written
    assert "| all | | 6 | 9 | |" in written
    assert render(written, tmp_path) == written

    (tmp_path / "gtmcluster/cli/main.py").rename(tmp_path / "gtmcluster/dns/main.py")
    moved = render(written, tmp_path)
    assert moved != written
    assert "| `cli/` | 1 | 1 | 3 | The command. |" in moved


def test_a_page_without_the_markers_is_refused(tmp_path: Path) -> None:
    small_tree(tmp_path)
    with pytest.raises(LookupError, match="markers"):
        render("# Title\n", tmp_path)
