"""Names of code in the docs that no longer exist: files, modules, functions, classes, tests.

`python -m tools.docnames` lists each as ``FILE:LINE: `NAME`: why`` and exits 1 when there is
one; ``tests/unit/test_docs_names.py`` runs it on the live tree. It reads the code without
importing it (the AST of each module), so it takes about two seconds.

It reads the Markdown files of the repository (README.md, docs/, bench/, certs/, tests/data/),
outside fenced code blocks, and the docstrings of the Python trees (the code, tests, benchmarks,
tools, fuzz targets): what is written between single backticks, and the targets of links.

- **Links** to a relative target must reach a file or folder (from the Markdown file's folder).
- **Paths** (any word of a backticked text, commands included) under a root of the repository
  (``gtmcluster/``, ``tests/``, ``bench/``, ``fuzz/``, ``tools/``, ``docs/``, ``etc/``,
  ``certs/``, ``twistd-plugins/``) must exist, and so must a Python file or a folder under a
  package of ``gtmcluster/`` written without it (``lb/cache.py``, ``groupconfig/``). A glob
  (``monitors-*.conf``) must match a file. ``FILE.py::NAME`` (a pytest node id) must define the
  test NAME (a glob too), and ``tests/support/configs.base()`` the function ``base``.
- **A bare file name** ending in ``.py`` (``test_workers.py``, ``service.py``, with or without
  ``::NAME``) must name a file of the code, tests, benchmarks, tools or fuzz targets.
- **Dotted names** (the whole backticked text, ``()`` after it allowed) whose first part is
  ``gtmcluster``, ``tests``, ``bench``, ``fuzz`` or ``tools``, a package or loose module of
  ``gtmcluster`` (``config.load.load``), the last part of any of its modules' names
  (``wideipnames.Named``: any module of that name may hold it) or one of its classes
  (``FastPath.handle``): the module must exist and define the name that follows, and a class
  the attribute after it (in its body, as ``self.NAME`` in a method, or in a base class; a
  base from outside the code may hold anything). ``python -m MODULE`` in a command likewise.

Not code, so not checked: a dotted name that does not resolve in the code but is a module of
an installed library (``dns.message``, dnspython's), or whose every part is a word quoted
in ``gtmcluster/``'s code (config key paths like ``api.token_file``, keys of the API's JSON
like ``bundle.refused``); domain names (``www.example.com``); file names with other extensions
(``state.sqlite``); names with placeholders (``<node>``, ``...``, ``NAME`` in capitals).

Names the docs give for what is to come (`PLANNED`) or for what a module was called before a
move (`FORMER`) are allowed by name; one that exists fails the check, so both lists only shrink.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = "gtmcluster"
# folders of the repository a path in the docs may start with
ROOTS = ("gtmcluster", "tests", "bench", "fuzz", "tools", "docs", "etc", "certs", "twistd-plugins")
# packages of the repository a dotted name may start with
DOTTED_ROOTS = ("gtmcluster", "tests", "bench", "fuzz", "tools")
# where bare file names are looked for
PY_TREES = ("gtmcluster", "tests", "bench", "fuzz", "tools", "twistd-plugins")
MARKDOWN = ("README.md", "docs", "bench", "certs", "tests/data")
# docs/architecture.md's plan names these before they exist (issue 33)
PLANNED: frozenset[str] = frozenset()
# docs/architecture.md's account of issue 33's moves names these as they were called before
FORMER = frozenset({"health.admin", "proximity.ranges", "config.shared", "health.linkload"})
# a dotted name ending so is a domain name or a file, not code
DOMAINS = frozenset({"com", "net", "org", "test", "example", "arpa", "local", "invalid", "localhost", "io"})
FILE_TYPES = frozenset(
    {"py", "md", "yaml", "yml", "conf", "sqlite", "pem", "key", "zone", "json", "jsonl", "txt", "html", "mmdb"}
    | {"dnstap", "inc", "service", "sh", "toml", "cfg", "crt", "log", "gz", "png", "proto", "old", "next"}
)

BACKTICKS = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
MODULE_FLAG = re.compile(r"(?:^|\s)-m\s+([A-Za-z_][\w.]*)")
PLACEHOLDER = re.compile(r"<|\.\.\.|\$|\{|\b[A-Z][A-Z0-9_]{2,}\b")
CAPITALS = re.compile(r"[A-Z][A-Z0-9_]+")  # a placeholder inside a dotted name: links.NAME.monitor
QUOTED = re.compile(r"[\"']([A-Za-z_][\w-]*)[\"']")
CLASS = re.compile(r"^class\s+(\w+)", re.MULTILINE)
FENCE = re.compile(r"^\s*(```|~~~)")


Docable = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: `{self.name}`: {self.why}"


@dataclass
class Module:
    """One module's top-level names and its classes, from its AST."""

    path: Path
    names: set[str] = field(default_factory=set)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)


def bound_names(node: ast.stmt) -> Iterator[str]:
    """The names a statement of a module or class body binds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            yield from (sub.id for sub in ast.walk(target) if isinstance(sub, ast.Name))
    elif isinstance(node, ast.Import | ast.ImportFrom):
        yield from ((alias.asname or alias.name).split(".")[0] for alias in node.names)
    elif isinstance(node, ast.If | ast.Try | ast.With):
        bodies = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
        bodies += [handler.body for handler in getattr(node, "handlers", [])]
        for body in bodies:
            for child in body:
                yield from bound_names(child)


def class_names(cls: ast.ClassDef) -> set[str]:
    """What a class defines: its body's names and the ``self.NAME`` its methods assign."""
    names = {name for node in cls.body for name in bound_names(node)}
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.update([node.attr] if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"} else [])
    return names


class Tree:
    """The repository's modules, read lazily, by dotted name, by last part and by file."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self._parsed: dict[Path, Module | None] = {}
        self._syntax: dict[Path, ast.Module | None] = {}

    @cached_property
    def modules(self) -> dict[str, Path]:
        """Every module and package of the Python trees, by dotted name."""
        found: dict[str, Path] = {}
        for top in DOTTED_ROOTS:
            for path in sorted((self.root / top).rglob("*.py")):
                parts = path.relative_to(self.root).with_suffix("").parts
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
        return found

    @cached_property
    def top_level(self) -> frozenset[str]:
        """gtmcluster's packages and loose modules."""
        return frozenset(name.split(".")[1] for name in self.modules if name.startswith(CODE + "."))

    @cached_property
    def by_last_part(self) -> dict[str, list[str]]:
        """gtmcluster's modules by the last part of their names (``wideipnames``)."""
        found: dict[str, list[str]] = {}
        for name in self.modules:
            if name.startswith(CODE + "."):
                found.setdefault(name.rsplit(".", 1)[-1], []).append(name)
        return found

    @cached_property
    def class_files(self) -> dict[str, list[Path]]:
        """The files of gtmcluster that may define a top-level class, by its name (read
        without their syntax: quick)."""
        found: dict[str, list[Path]] = {}
        for name, path in self.modules.items():
            if name.startswith(CODE + "."):
                for cls_name in CLASS.findall(path.read_text(encoding="utf-8")):
                    found.setdefault(cls_name, []).append(path)
        return found

    def classes(self, name: str) -> list[tuple[Module, ast.ClassDef]]:
        """gtmcluster's top-level classes of a name."""
        modules = [m for m in map(self.parse, self.class_files.get(name, [])) if m is not None]
        return [(m, m.classes[name]) for m in modules if name in m.classes]

    @cached_property
    def files(self) -> dict[str, list[Path]]:
        """The Python files of the repository by name."""
        found: dict[str, list[Path]] = {}
        for top in PY_TREES:
            for path in sorted((self.root / top).rglob("*.py")):
                found.setdefault(path.name, []).append(path)
        return found

    @cached_property
    def literals(self) -> frozenset[str]:
        """Every word quoted in gtmcluster's code: the config's keys, the API's, event names."""
        found: set[str] = set()
        for name, path in self.modules.items():
            if name.startswith(CODE + "."):
                found.update(QUOTED.findall(path.read_text(encoding="utf-8")))
        return frozenset(found)

    def syntax(self, path: Path) -> ast.Module | None:
        """A file's AST (read once)."""
        if path not in self._syntax:
            try:
                self._syntax[path] = ast.parse(path.read_text(encoding="utf-8"))
            except (OSError, SyntaxError, UnicodeDecodeError):
                self._syntax[path] = None
        return self._syntax[path]

    def parse(self, path: Path) -> Module | None:
        """A module's names (read once)."""
        if path not in self._parsed:
            tree = self.syntax(path)
            if tree is None:
                self._parsed[path] = None
                return None
            module = Module(path)
            for node in tree.body:
                module.names.update(bound_names(node))
                if isinstance(node, ast.ClassDef):
                    module.classes[node.name] = node
            self._parsed[path] = module
        return self._parsed[path]

    # -- does a name exist --

    def class_has(self, module: Module, cls: ast.ClassDef, attr: str, depth: int = 0) -> bool:
        """Whether a class, or one of its bases, defines attr; a base from outside the code
        may define anything (so does a class of bases too deep to follow)."""
        if attr in class_names(cls) or depth > 8:
            return True
        for base in cls.bases:
            node = base.value if isinstance(base, ast.Subscript) else base
            name = node.id if isinstance(node, ast.Name) else None
            if name in {"object", "Protocol", "Generic"}:
                continue
            if name in module.classes:
                found = [(module, module.classes[name])]
            elif name and self.classes(name):
                found = self.classes(name)
            else:
                return True  # a base from outside the code
            if any(self.class_has(m, c, attr, depth + 1) for m, c in found):
                return True
        return False

    def defines(self, module: Module, rest: list[str]) -> bool:
        """Whether a module defines a chain of names (``Class.method``); past a function or a
        value, attributes are not followed."""
        if rest[0] not in module.names:
            return False
        if len(rest) == 1 or rest[0] not in module.classes:
            return True
        return self.class_has(module, module.classes[rest[0]], rest[1])

    def resolves(self, dotted: str) -> bool:
        """Whether a full dotted name is a module, or a module and names it defines."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            name = ".".join(parts[:cut])
            if name in self.modules:
                module = self.parse(self.modules[name])
                return cut == len(parts) or (module is not None and self.defines(module, parts[cut:]))
        return False

    def dotted_problem(self, name: str) -> str | None:
        """Why a dotted name written in a doc is not there; None when it is, or is not code."""
        parts = name.split(".")
        first = parts[0]
        if parts[-1] in DOMAINS or parts[-1] in FILE_TYPES:
            return None
        if first in DOTTED_ROOTS:
            candidates = [name]
        elif first in self.top_level or first in self.by_last_part:
            modules = self.by_last_part.get(first, [])
            candidates = [f"{module}.{'.'.join(parts[1:])}" for module in modules]
        elif self.classes(first):
            if any(self.class_has(m, c, parts[1]) for m, c in self.classes(first)):
                return None
            return f"class {first} has no attribute {parts[1]}"
        else:
            return None
        if any(self.resolves(c) for c in candidates) or installed(name):
            return None
        if all(part in self.literals for part in parts):
            return None  # a key path of the config or the API (api.token_file)
        return f"no such module or name (looked for {', '.join(candidates)})"

    def path_problem(self, word: str) -> str | None:
        """Why a path written in a doc is not there; None when it is, or is not ours."""
        word, _, test = word.partition("::")
        first = word.split("/", 1)[0]
        if first not in ROOTS:
            if first not in self.top_level or not (word.endswith(("/", ".py")) or test):
                return None
            word = f"{CODE}/{word}"
        attr: list[str] = []
        folder, _, last = word.rpartition("/")
        stem, dot, rest = last.partition(".")
        if dot and rest.split(".")[-1] not in FILE_TYPES and (self.root / folder / f"{stem}.py").is_file():
            word, attr = f"{folder}/{stem}.py", rest.split(".")  # tests/support/configs.base
        if "*" in word or "?" in word:
            return None if any(self.root.glob(word.rstrip("/"))) else "no file matches"
        path = self.root / word
        if not path.exists():
            return "no such file or folder"
        if word.endswith("/") and not path.is_dir():
            return "not a folder"
        if attr or test:
            module = self.parse(path)
            if module is None:
                return "not a Python file"
            if attr and not self.defines(module, attr):
                return f"{word} defines no {'.'.join(attr)}"
            if test and not self.defines_test(module, test):
                return f"{word} has no test {test}"
        return None

    def defines_test(self, module: Module, pattern: str) -> bool:
        """Whether a test module defines a test (or a test class's test) matching pattern."""
        pattern = pattern.split("[", 1)[0]
        names = set(module.names)
        for cls in module.classes.values():
            names.update(f"{cls.name}::{name}" for node in cls.body for name in bound_names(node))
        return any(fnmatch.fnmatchcase(name, pattern) for name in names)

    def file_problem(self, word: str) -> str | None:
        """Why a bare file name (``test_workers.py::test_x``) is not there."""
        name, _, test = word.partition("::")
        if name not in self.files:
            return "no Python file of that name in the repository"
        if test:
            modules = [m for m in map(self.parse, self.files[name]) if m is not None]
            if not any(self.defines_test(m, test) for m in modules):
                return f"{name} has no test {test}"
        return None


def installed(name: str) -> bool:
    """Whether a dotted name starts with a module of an installed library (``dns.message``:
    dnspython's), found without importing it (its parent packages are)."""
    parts = name.split(".")
    if parts[0] in DOTTED_ROOTS:
        return False
    for cut in range(len(parts), 0, -1):
        try:
            if importlib.util.find_spec(".".join(parts[:cut])) is not None:
                return cut > 1 or len(parts) == 1
        except (ImportError, ValueError):
            continue
    return False


def spans(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line, text, whether a link target) of each backticked text and relative link
    target, outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for match in BACKTICKS.finditer(line):
            yield number, match.group(1).strip(), False
        for match in LINK.finditer(line):
            target = match.group(1).split("#", 1)[0]
            if target and "://" not in target and not target.startswith("mailto:"):
                yield number, target, True


def check_span(tree: Tree, span: str) -> Iterator[tuple[str, str]]:
    """The names of one backticked text that are not there, and why."""
    for match in MODULE_FLAG.finditer(span):
        module = match.group(1)
        if module.split(".")[0] in DOTTED_ROOTS and module not in tree.modules:
            yield module, "no such module"
    if DOTTED.fullmatch(span.removesuffix("()")):
        name = span.removesuffix("()")
        if name in FORMER:
            if tree.resolves(f"{CODE}.{name}"):
                yield name, "exists now: take it off tools/docnames.py's FORMER"
        elif not any(CAPITALS.fullmatch(part) for part in name.split(".")[:-1]) and (why := tree.dotted_problem(name)):
            yield name, why
        if name.rsplit(".", 1)[-1] != "py":
            return
    for word in span.split():
        word = word.strip(",;:()[]'\"").removesuffix("()")
        if word in PLANNED:
            if (tree.root / (word if word.split("/", 1)[0] in ROOTS else f"{CODE}/{word}")).exists():
                yield word, "exists now: take it off tools/docnames.py's PLANNED"
        elif PLACEHOLDER.search(word):
            continue
        elif "/" in word and not word.startswith(("/", ".", "~")):
            if why := tree.path_problem(word):
                yield word, why
        elif re.fullmatch(r"[\w-]+\.py(::\S+)?", word) and (why := tree.file_problem(word)):
            yield word, why


def check_text(tree: Tree, text: str, file: Path) -> Iterator[Problem]:
    """The problems of one Markdown file's text."""
    shown = str(file.relative_to(tree.root)) if file.is_relative_to(tree.root) else str(file)
    for line, span, is_link in spans(text):
        if is_link:
            if not (file.parent / span).exists():
                yield Problem(shown, line, span, f"the link's target is not there (from {file.parent.name}/)")
        else:
            yield from (Problem(shown, line, name, why) for name, why in check_span(tree, span))


def markdown_files(root: Path = ROOT) -> list[Path]:
    files: list[Path] = []
    for entry in MARKDOWN:
        path = root / entry
        files.extend([path] if path.is_file() else sorted(path.rglob("*.md")))
    return files


def problems(root: Path = ROOT, tree: Tree | None = None) -> list[Problem]:
    """Every name the repository's Markdown files give that is not there."""
    tree = tree or Tree(root)
    return [p for file in markdown_files(root) for p in check_text(tree, file.read_text(encoding="utf-8"), file)]


def docstring_problems(root: Path = ROOT, tree: Tree | None = None) -> list[Problem]:
    """Every name the docstrings (of modules, classes and functions) of the Python trees give
    that is not there, by the same rules."""
    tree = tree or Tree(root)
    found: list[Problem] = []
    for top in PY_TREES:
        for path in sorted((root / top).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if not any(next(check_span(tree, m.group(1).strip()), None) for m in BACKTICKS.finditer(text)):
                continue  # nothing missing anywhere in the file (read without its syntax: quick)
            syntax = tree.syntax(path)
            for node in documented(syntax) if syntax else ():
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    first = node.body[0].lineno
                    for p in check_text(tree, doc, path):
                        found.append(Problem(p.file, first + p.line - 1, p.name, p.why))
    return found


def documented(node: Docable) -> Iterator[Docable]:
    """A module and the classes and functions in it, at any depth of bodies."""
    yield node
    stack: list[ast.stmt] = list(node.body)
    while stack:
        child = stack.pop()
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            yield child
        for field_name in ("body", "orelse", "finalbody"):
            stack.extend(getattr(child, field_name, []))
        for handler in getattr(child, "handlers", []):
            stack.extend(handler.body)


def main() -> int:
    tree = Tree()
    found = problems(tree=tree) + docstring_problems(tree=tree)
    for problem in found:
        print(problem)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
