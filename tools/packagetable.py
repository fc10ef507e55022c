"""The package list of docs/architecture.md, written from the code: `make docs`.

One paragraph per package and loose module of ``gtmcluster/``: its layer (its place in the list
of pyproject.toml's layers contract, 1 at the top), its modules and lines (every ``.py`` file in
it, counted as ``wc -l`` does), its concern (the first paragraph of its docstring), its public
names (what the modules of ``gtmcluster/`` outside it import from it, the most imported first:
a name imported by more modules is more of its interface) and what it may import (the layers
below its own, its siblings where the contract lets them import each other, and the upward
imports the contract still ignores). The list goes between the two markers in
docs/architecture.md; nothing else of the page is touched. ``python -m tools.packagetable``
writes it; with ``--check`` it only says whether the page holds what it would write.
``tests/unit/test_docs_table.py`` fails when it does not (its line counts aside), so a package moved, a docstring
changed or a new name imported across packages without `make docs` fails `make test`.

It reads the code without importing it (the docstrings and imports from the AST, about a
second for the whole tree).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = "gtmcluster"
PAGE = Path("docs/architecture.md")
BEGIN = "<!-- begin: packages (make docs writes this table) -->"
END = "<!-- end: packages -->"
SHOWN_NAMES = 8  # public names shown per package, the most imported first; the rest counted
LISTED_BELOW = 8  # the packages a package may import are named when no more than this
HEADER = """\
Written by `make docs` from the code (`tools/packagetable.py`); `make test` fails when it is out
of date. For each package: its layer (its place in the layers contract of `pyproject.toml`, 1
at the top), its size, its concern (the first paragraph of its docstring), its public names
(what the rest of `gtmcluster/` imports from it, the most imported first, relative to the
package) and what it may import (the layers below its own; siblings of a layer written with
`|` may not import each other, those written with `:` may)."""


@dataclass(frozen=True)
class Contract:
    """pyproject.toml's layers contract over gtmcluster: each package's layer (1 at the top),
    the layers' members, whether a layer's members may import each other, and the imports it
    ignores (importer's package -> imported module)."""

    layer_of: dict[str, int]
    members: list[list[str]]
    open_layers: frozenset[int]  # layers written with ':' (their members may import each other)
    ignored: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Row:
    name: str  # `api/` for a package, `tap.py` for a loose module
    layer: int | None
    modules: int
    lines: int
    concern: str
    public: tuple[str, ...] = ()  # the names others import from it, the most imported first
    may_import: str = ""


def contract(root: Path = ROOT) -> Contract:
    """pyproject.toml's layers contract over gtmcluster."""
    with (root / "pyproject.toml").open("rb") as f:
        config = tomllib.load(f)
    for found in config["tool"]["importlinter"]["contracts"]:
        if found.get("type") == "layers" and CODE in found.get("containers", []):
            members = [[n.strip() for n in re.split(r"[:|]", layer) if n.strip()] for layer in found["layers"]]
            ignored = []
            for entry in found.get("ignore_imports", []):
                importer, _, imported = (part.strip() for part in entry.partition("->"))
                ignored.append((importer.removeprefix(CODE + "."), imported.removeprefix(CODE + ".")))
            return Contract(
                layer_of={name: number for number, names in enumerate(members, 1) for name in names},
                members=members,
                open_layers=frozenset(n for n, layer in enumerate(found["layers"], 1) if ":" in layer),
                ignored=ignored,
            )
    raise LookupError("pyproject.toml has no layers contract over gtmcluster")


def layers(root: Path = ROOT) -> dict[str, int]:
    """Each package's layer in pyproject.toml's layers contract over gtmcluster, 1 at the top."""
    return contract(root).layer_of


def concern(source: str) -> str:
    """The first paragraph of a module's docstring, on one line, as Markdown."""
    doc = ast.get_docstring(ast.parse(source)) or "(no docstring)"
    paragraph = " ".join(line.strip() for line in doc.split("\n\n", 1)[0].splitlines())
    return paragraph.replace("``", "`")


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def imported_names(path: Path, module: str) -> set[str]:
    """The names of gtmcluster that one module imports, dotted from gtmcluster's top
    (``lb.methods.pick``, ``runtime.slices``), imports in functions and under TYPE_CHECKING
    included; ``module`` is the importer's dotted name (for relative imports)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            found.update(a.name.removeprefix(CODE + ".") for a in node.names if a.name.startswith(CODE + "."))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: -node.level]
                base = ".".join(package + ([base] if base else []))
            if base == CODE:
                found.update(a.name for a in node.names)
            elif base.startswith(CODE + "."):
                base = base.removeprefix(CODE + ".")
                found.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
    return found


def public_names(root: Path = ROOT) -> dict[str, list[str]]:
    """For each package and loose module of gtmcluster, the names the modules outside it
    import from it (relative to it), the most imported first (by how many modules import
    them), then by name."""
    counts: dict[str, Counter[str]] = {}
    for path in sorted((root / CODE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        own = parts[1] if len(parts) > 1 else ""
        own = own.removesuffix(".py")
        for name in imported_names(path, module if parts[-1] != "__init__" else module + ".__init__"):
            top, _, rest = name.partition(".")
            if top != own and rest:
                counts.setdefault(top, Counter())[rest] += 1
    return {top: [n for n, _ in sorted(c.items(), key=lambda item: (-item[1], item[0]))] for top, c in counts.items()}


def plural(count: int, word: str) -> str:
    return word if count == 1 else word + "s"


def may_import(name: str, rules: Contract) -> str:
    """What a package may import, in words: the layers below its own (named when few), its
    siblings of an open layer, and the upward imports the contract ignores for it."""
    layer = rules.layer_of.get(name)
    if layer is None:
        return "It is not in the layers contract."
    below = [n for members in rules.members[layer:] for n in members]
    last = len(rules.members)
    siblings = [n for n in rules.members[layer - 1] if n != name]
    if not below:
        words = "It may import nothing of gtmcluster"
    elif len(below) <= LISTED_BELOW:
        span = f"layer {last}" if layer + 1 == last else f"layers {layer + 1}–{last}"
        words = f"It may import {span}: {', '.join(f'`{n}`' for n in below)}"
    else:
        first = rules.members[layer]
        named = ", ".join(f"`{n}`" for n in first)
        span = f"{named} and every package below"
        words = f"It may import layers {layer + 1}–{last}: {span}"
    if siblings and layer in rules.open_layers:
        words += f", and its {plural(len(siblings), 'sibling')} {', '.join(f'`{n}`' for n in siblings)}"
    elif siblings:
        words += f" (not its {plural(len(siblings), 'sibling')} {', '.join(f'`{n}`' for n in siblings)})"
    ups = [(importer, imported) for importer, imported in rules.ignored if importer.split(".")[0] == name]
    if ups:
        words += "; the contract still lets " + ", ".join(f"`{i}` import `{t}`" for i, t in ups)
    return words + "."


def rows(root: Path = ROOT) -> list[Row]:
    """The list's rows, from the top layer down, by name within a layer."""
    rules = contract(root)
    public = public_names(root)
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
        names = tuple(public.get(name, []))
        found.append(Row(shown, rules.layer_of.get(name), len(files), lines, text, names, may_import(name, rules)))
    return sorted(found, key=lambda r: (r.layer if r.layer is not None else 1_000, r.name))


def names_sentence(names: tuple[str, ...]) -> str:
    """The public names, the first SHOWN_NAMES of them, the rest counted."""
    if not names:
        return "Nothing outside it imports from it."
    shown = ", ".join(f"`{n}`" for n in names[:SHOWN_NAMES])
    more = f" (+{len(names) - SHOWN_NAMES} more)" if len(names) > SHOWN_NAMES else ""
    return f"Others import {shown}{more}."


def paragraph(row: Row) -> str:
    """One package's paragraph: a line for each sentence (Markdown joins them)."""
    layer = f"layer {row.layer}" if row.layer is not None else "no layer"
    modules = f"{row.modules} {plural(row.modules, 'module')}"
    lines = f"{row.lines:,} {plural(row.lines, 'line')}"
    concern_text = row.concern if row.concern.endswith((".", ")")) else row.concern + "."
    head = f"**`{row.name}`** ({layer}, {modules}, {lines})."
    return "\n".join([head, concern_text, names_sentence(row.public), row.may_import])


def table(root: Path = ROOT) -> str:
    """The package list, with the markers around it."""
    found = rows(root)
    out = [BEGIN, "", HEADER, ""]
    for row in found:
        out += [paragraph(row), ""]
    modules, lines = sum(r.modules for r in found), sum(r.lines for r in found)
    out += [f"In all: {len(found)} packages and loose modules, {modules} modules, {lines:,} lines."]
    out += ["", END]
    return "\n".join(out)


def render(page: str, root: Path = ROOT) -> str:
    """The page with the list between its markers written anew."""
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
        print(f"{PAGE}: the package list is out of date: run make docs", file=sys.stderr)
        return 1
    path.write_text(wanted, encoding="utf-8")
    print(f"{PAGE}: the package list written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
