"""The package table of docs/architecture.md, written from the code: `make docs`.

One row per package and loose module of ``gtmcluster/``: its layer (its place in the list of
pyproject.toml's layers contract, 1 at the top), its modules and lines (every ``.py`` file in
it, counted as ``wc -l`` does) and its concern (the first paragraph of its docstring). The
table goes between the two markers in docs/architecture.md; nothing else of the page is
touched. ``python -m tools.packagetable`` writes it; with ``--check`` it only says whether the
page holds what it would write. ``tests/unit/test_docs_table.py`` fails when it does not, so a
package moved or a docstring changed without `make docs` fails `make test`.

It reads the code without importing it (the docstrings from the AST).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = "gtmcluster"
PAGE = Path("docs/architecture.md")
BEGIN = "<!-- begin: packages (make docs writes this table) -->"
END = "<!-- end: packages -->"
HEADER = """\
Written by `make docs` from the code (`tools/packagetable.py`): a package's layer is its place
in the layers contract of `pyproject.toml` (1 at the top), its concern the first paragraph of
its docstring; `make test` fails when this table is out of date."""


@dataclass(frozen=True)
class Row:
    name: str  # `api/` for a package, `tap.py` for a loose module
    layer: int | None
    modules: int
    lines: int
    concern: str


def layers(root: Path = ROOT) -> dict[str, int]:
    """Each package's layer in pyproject.toml's layers contract over gtmcluster, 1 at the top."""
    with (root / "pyproject.toml").open("rb") as f:
        config = tomllib.load(f)
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract.get("type") == "layers" and CODE in contract.get("containers", []):
            return {
                name.strip(): number
                for number, layer in enumerate(contract["layers"], 1)
                for name in re.split(r"[:|]", layer)
                if name.strip()
            }
    raise LookupError("pyproject.toml has no layers contract over gtmcluster")


def concern(source: str) -> str:
    """The first paragraph of a module's docstring, on one line, as Markdown for a table cell."""
    doc = ast.get_docstring(ast.parse(source)) or "(no docstring)"
    paragraph = " ".join(line.strip() for line in doc.split("\n\n", 1)[0].splitlines())
    return paragraph.replace("``", "`").replace("|", "\\|")


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def rows(root: Path = ROOT) -> list[Row]:
    """The table's rows, from the top layer down, by name within a layer."""
    layer_of = layers(root)
    found: list[Row] = []
    for entry in sorted((root / CODE).iterdir()):
        if entry.is_dir() and (entry / "__init__.py").is_file():
            files = sorted(entry.rglob("*.py"))
            name, init = entry.name, entry / "__init__.py"
            shown = f"{name}/"
        elif entry.suffix == ".py" and entry.name != "__init__.py":
            files = [entry]
            name, init = entry.stem, entry
            shown = entry.name
        else:
            continue
        lines = sum(count_lines(f) for f in files)
        text = concern(init.read_text(encoding="utf-8"))
        found.append(Row(shown, layer_of.get(name), len(files), lines, text))
    return sorted(found, key=lambda r: (r.layer if r.layer is not None else 1_000, r.name))


def table(root: Path = ROOT) -> str:
    """The table, with the markers around it."""
    found = rows(root)
    out = [BEGIN, "", HEADER, "", "| package | layer | modules | lines | concern |", "| --- | --- | --- | --- | --- |"]
    for row in found:
        layer = str(row.layer) if row.layer is not None else "none"
        out.append(f"| `{row.name}` | {layer} | {row.modules} | {row.lines:,} | {row.concern} |")
    modules = sum(r.modules for r in found)
    out.append(f"| all | | {modules} | {sum(r.lines for r in found):,} | |")
    out += ["", END]
    return "\n".join(out)


def render(page: str, root: Path = ROOT) -> str:
    """The page with the table between its markers written anew."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise LookupError(f"{PAGE} lacks the markers {BEGIN} ... {END}")
    return page[:start] + table(root) + page[end + len(END) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the page is up to date")
    args = parser.parse_args(argv)
    path = ROOT / PAGE
    page = path.read_text(encoding="utf-8")
    wanted = render(page)
    if wanted == page:
        return 0
    if args.check:
        print(f"{PAGE}: the package table is out of date: run make docs", file=sys.stderr)
        return 1
    path.write_text(wanted, encoding="utf-8")
    print(f"{PAGE}: the package table written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
