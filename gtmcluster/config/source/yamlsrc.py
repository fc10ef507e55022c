"""Read YAML into plain values, remembering the line of every key and rejecting duplicates.

PyYAML's safe loader silently keeps the last of two equal keys; for a config that is a
silent loss (two virtual servers with one name), so mappings are built here from the node
tree, which also gives every key path its line for error messages. Keys brought in by a
merge (``<<: *anchor``) may be overridden by keys written in the mapping itself, as YAML
intends; two keys written in the same mapping are a problem.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from gtmcluster.config.problems import ConfigError, KeyPath, Problem
from gtmcluster.config.source import yamlsplit

_MERGE_TAG = "tag:yaml.org,2002:merge"
#: a plain string scalar: its value is the node's, with none of the constructor's machinery
#: (most of a big config's 200,000 scalars)
_STR_TAG = "tag:yaml.org,2002:str"

#: libyaml's parser when PyYAML has it (the wheels do): the same nodes and marks, faster on
#: big files (ISP lists of thousands of networks). Its syntax error messages are terser, so
#: a file it refuses is parsed again by the pure Python parser for the message.
_FAST: Any = getattr(yaml, "CSafeLoader", None)
#: values a file may expand to: aliases of aliases multiply (a "billion laughs" file is a
#: few lines), and a reload must not take the node's memory; plain files stay far below
MAX_VALUES = 500_000


class _Refused(Exception):
    """A file whose structure cannot be read into values (the problem says why)."""

    def __init__(self, problem: Problem):
        super().__init__(problem.message)
        self.problem = problem


def load(path: str, text: str) -> tuple[Any, dict[KeyPath, int], list[Problem]]:
    """Parse *text* (read from *path*).

    Returns the value, a key path -> line map, and the duplicate-key problems (the rest of
    the file is still read so they are reported with everything else). A syntax error
    raises `ConfigError`.
    """
    try:
        if _FAST is not None:
            try:
                return _parse(_FAST, path, text)
            except ConfigError:
                pass  # the same again, for the pure Python parser's message
        return _parse(yaml.SafeLoader, path, text)
    except _Refused as e:
        raise ConfigError([e.problem]) from None
    except RecursionError:
        raise ConfigError([Problem(path, (), "YAML nested too deeply to read")]) from None


def parse(file: str, text: bytes) -> Any:
    """The config *text* (read from *file*) as the config reader reads it (`load`: its keys
    parsed, quoted or not); raises `ConfigError`. A big config takes a second or more: a
    member parses its own in a child process (`groupconfig.shared`), or takes what it last
    read (`config.load.config_value`)."""
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError([Problem(file, (), f"cannot read the config: {e}")]) from None
    return load(file, decoded)[0]


class Resplit(Exception):
    """The file could not be read a section at a time after all (see `yamlsplit`): read it
    whole. Raised by `sections` after some sections, for a file that is valid YAML."""


def sections(
    path: str, text: str, first: Sequence[str] = (), split: bool = False, known: Mapping[str, str] | None = None
) -> Iterator[tuple[Any, ...]]:
    """What `load` makes of *text*, a top-level section at a time: the sections named in
    *first* in that order, then the others in file order (a reader that needs some before
    others can start on them while the rest is built). Events:

    - ``("keys", [key, ...])``: the top-level keys, in file order, before any section;
    - ``("section", key, value, lines, sha)``: a section's value and the lines of its key
      paths (*sha*: with *split*, of its text, else None);
    - ``("same", key, sha)`` instead, with *split*, for a section whose text's sha is the
      one *known* names (the caller holds its value from an earlier read);
    - ``("end", problems, lines)``: the duplicate-key problems, and the lines of the rest;
    - ``("whole", value, lines, problems)`` instead of all of these, for a document whose
      top level is not a plain mapping (or that the fast parser refuses).

    Raises `ConfigError` as `load` does (after some sections, when a later one cannot be
    built). The values, lines and problems are `load`'s (it builds in file order, this in
    *first*'s: problems are ordered by their lines, see `problems.Problems.raise_if_any`),
    but for a file that expands past `MAX_VALUES`: the path named is the first past it in
    this order.

    With *split*, the text is cut at its top-level keys (`yamlsplit.cut`) and each section
    is composed when its turn comes, so the first are given before the rest is composed;
    `Resplit` is raised when the cut turns out not to hold (the caller reads the file
    whole)."""
    pieces = yamlsplit.cut(text) if split and _FAST is not None else None
    if pieces is not None:
        yield from _pieces(path, text, pieces, first, known or {})
        return
    root = None
    loader: Any = None
    if _FAST is not None:
        try:
            loader = _FAST(text)
            root = loader.get_single_node()
        except (yaml.YAMLError, RecursionError):
            root = None
    if root is None or not isinstance(root, yaml.MappingNode) or any(k.tag == _MERGE_TAG for k, _ in root.value):
        if loader is not None:
            loader.dispose()
        yield ("whole", *load(path, text))
        return
    lines: dict[KeyPath, int] = {}
    problems: list[Problem] = []
    builder = _Builder(loader, lines, problems, path)
    try:
        # the top level as `_Builder._build` reads a mapping (no merge key: see above)
        builder.values += 1
        lines[()] = root.start_mark.line + 1
        nodes: dict[str, yaml.Node] = {}
        for key_node, value_node in root.value:
            key = builder.key(key_node, ())
            if key is None:
                continue
            if key in nodes:
                message = "duplicate key (it appears earlier in the same mapping)"
                problems.append(Problem(path, (key,), message, key_node.start_mark.line + 1))
                continue
            lines[(key,)] = key_node.start_mark.line + 1
            nodes[key] = value_node
        yield ("keys", list(nodes))
        order = [k for k in first if k in nodes] + [k for k in nodes if k not in first]
        for key in order:
            # a problem at the section's own path is at its key's line (as in `load`)
            section_lines: dict[KeyPath, int] = {(key,): lines[(key,)]}
            builder.lines = section_lines
            builder.open.add(id(root))
            value = builder.build(nodes[key], (key,))
            yield ("section", key, value, section_lines, None)
        yield ("end", problems, lines)
    except _Refused as e:
        raise ConfigError([e.problem]) from None
    except RecursionError:
        raise ConfigError([Problem(path, (), "YAML nested too deeply to read")]) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        line = mark.line + 1 if mark else None
        message = " ".join(str(x) for x in (e.context, e.problem) if x) or str(e)
        raise ConfigError([Problem(path, (), f"YAML syntax: {message}", line)]) from None
    except yaml.YAMLError as e:
        raise ConfigError([Problem(path, (), f"YAML syntax: {e}")]) from None
    finally:
        loader.dispose()


def _pieces(
    path: str, text: str, pieces: list[yamlsplit.Piece], first: Sequence[str], known: Mapping[str, str]
) -> Iterator[tuple[Any, ...]]:
    """`sections` of a text cut into *pieces*, each composed in its turn (but those
    *known*: the same text, its value held by the caller)."""
    lines: dict[KeyPath, int] = {(): pieces[0].line + 1}
    problems: list[Problem] = []
    builder = _Builder(None, lines, problems, path)
    builder.values += 1  # the top level
    by_key: dict[str, yamlsplit.Piece] = {}
    twice: list[yamlsplit.Piece] = []
    for piece in pieces:
        if piece.key in by_key:
            message = "duplicate key (it appears earlier in the same mapping)"
            problems.append(Problem(path, (piece.key,), message, piece.line + 1))
            twice.append(piece)
            continue
        lines[(piece.key,)] = piece.line + 1
        by_key[piece.key] = piece
    yield ("keys", list(by_key))
    order = [k for k in first if k in by_key] + [k for k in by_key if k not in first]
    try:
        for key in order:
            piece = by_key[key]
            sha = piece.sha()
            if known.get(key) == sha:
                yield ("same", key, sha)
                continue
            node = _compose_piece(path, text, builder, piece)
            section_lines: dict[KeyPath, int] = {(key,): lines[(key,)]}
            builder.lines = section_lines
            value = builder.build(node, (key,))
            yield ("section", key, value, section_lines, sha)
        for piece in twice:  # not read (as `load` keeps the first), but it must be YAML
            _compose_piece(path, text, builder, piece)
        yield ("end", problems, lines)
    except _Refused as e:
        raise ConfigError([e.problem]) from None
    except RecursionError:
        raise ConfigError([Problem(path, (), "YAML nested too deeply to read")]) from None
    except yaml.YAMLError:  # a value that composes but cannot be built (an unknown tag): as read whole
        load(path, text)  # raises ConfigError with its line
        raise
    finally:
        if builder.loader is not None:
            builder.loader.dispose()


def _compose_piece(path: str, text: str, builder: _Builder, piece: yamlsplit.Piece) -> yaml.Node:
    """The value node of *piece*, composed alone; when it does not compose alone, or is
    not the one key the cut saw, the file is read whole: it raises `ConfigError` with
    `load`'s problems, or `Resplit` when it is valid after all."""
    if builder.loader is not None:
        builder.loader.dispose()
    builder.loader = _FAST(piece.padded())
    try:
        root = builder.loader.get_single_node()
    except (yaml.YAMLError, RecursionError):
        root = None
    if (
        isinstance(root, yaml.MappingNode)
        and len(root.value) == 1
        and root.value[0][0].tag == _STR_TAG
        and root.value[0][0].value == piece.key
    ):
        node: yaml.Node = root.value[0][1]
        return node
    load(path, text)  # raises ConfigError for a file that is not valid
    raise Resplit(f"line {piece.line + 1}: {piece.key!r} is not where a top-level key starts")


def _parse(loader_class: Any, path: str, text: str) -> tuple[Any, dict[KeyPath, int], list[Problem]]:
    lines: dict[KeyPath, int] = {}
    problems: list[Problem] = []
    loader = None
    try:
        loader = loader_class(text)  # (the reader refuses control characters here)
        node = loader.get_single_node()
        if node is None:
            return None, lines, problems
        value = _Builder(loader, lines, problems, path).build(node, ())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        last_line = text.count("\n")
        if mark is None or (e.context_mark is not None and mark.line >= last_line):
            mark = e.context_mark or mark  # an error found at the end points back to its start
        line = mark.line + 1 if mark else None
        message = " ".join(str(x) for x in (e.context, e.problem) if x) or str(e)
        raise ConfigError([Problem(path, (), f"YAML syntax: {message}", line)]) from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        raise ConfigError([Problem(path, (), f"YAML syntax: {e.reason} ({e.character:#x})", line)]) from None
    except yaml.YAMLError as e:
        raise ConfigError([Problem(path, (), f"YAML syntax: {e}")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return value, lines, problems


class _Builder:
    """Builds values from the node tree, refusing recursive aliases and expansions past
    `MAX_VALUES` (PyYAML would recurse forever, or build until memory runs out)."""

    def __init__(self, loader: Any, lines: dict[KeyPath, int], problems: list[Problem], file: str):
        self.loader = loader
        self.lines = lines
        self.problems = problems
        self.file = file
        self.values = 0
        self.open: set[int] = set()  # the nodes being built (an alias to one is a cycle)

    def build(self, node: yaml.Node, path: KeyPath) -> Any:
        self.values += 1
        if self.values > MAX_VALUES:
            message = f"the file expands to more than {MAX_VALUES} values (aliases of aliases?)"
            raise _Refused(Problem(self.file, path, message, node.start_mark.line + 1))
        if node.__class__ is yaml.ScalarNode:  # holds nothing, so no cycle through it
            self.lines.setdefault(path, node.start_mark.line + 1)
            return node.value if node.tag == _STR_TAG else self.loader.construct_object(node, deep=True)
        if id(node) in self.open:
            message = "an alias inside the value it names (a recursive structure)"
            raise _Refused(Problem(self.file, path, message, node.start_mark.line + 1))
        self.open.add(id(node))
        try:
            return self._build(node, path)
        finally:
            self.open.discard(id(node))

    def key(self, key_node: yaml.Node, path: KeyPath) -> str | None:
        """The key *key_node* names in the mapping at *path*, as a string; None (a problem
        noted) when it is not a plain scalar."""
        key = key_node.value if key_node.tag == _STR_TAG else self.loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) or key is None:
            message = f"a key must be a plain scalar, not {key!r}"
            self.problems.append(Problem(self.file, path, message, key_node.start_mark.line + 1))
            return None
        return key if isinstance(key, str) else str(key)

    def _build(self, node: yaml.Node, path: KeyPath) -> Any:
        loader, lines, problems, file = self.loader, self.lines, self.problems, self.file
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            explicit = {id(k) for k, _ in node.value if k.tag != _MERGE_TAG}
            loader.flatten_mapping(node)
            out: dict[Any, Any] = {}
            written: set[str] = set()  # keys written in this mapping, not merged in
            for key_node, value_node in node.value:
                key = self.key(key_node, path)
                if key is None:
                    continue
                is_explicit = id(key_node) in explicit
                if key in written and is_explicit:
                    problems.append(
                        Problem(
                            file,
                            (*path, key),
                            "duplicate key (it appears earlier in the same mapping)",
                            key_node.start_mark.line + 1,
                        )
                    )
                    continue
                if is_explicit:
                    written.add(key)
                child = (*path, key)
                lines[child] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, child)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return loader.construct_object(node, deep=True)
