"""Read YAML into plain values, remembering the line of every key and rejecting duplicates.

PyYAML's safe loader silently keeps the last of two equal keys; for a config that is a
silent loss (two virtual servers with one name), so mappings are built here from the node
tree, which also gives every key path its line for error messages. Keys brought in by a
merge (``<<: *anchor``) may be overridden by keys written in the mapping itself, as YAML
intends; two keys written in the same mapping are a problem.
"""

from __future__ import annotations

from typing import Any

import yaml

from gtmcluster.config.problems import ConfigError, KeyPath, Problem

_MERGE_TAG = "tag:yaml.org,2002:merge"

#: libyaml's parser when PyYAML has it (the wheels do): the same nodes and marks, faster on
#: big files (ISP lists of thousands of networks). Its syntax error messages are terser, so
#: a file it refuses is parsed again by the pure Python parser for the message.
_FAST: Any = getattr(yaml, "CSafeLoader", None)


def load(path: str, text: str) -> tuple[Any, dict[KeyPath, int], list[Problem]]:
    """Parse *text* (read from *path*).

    Returns the value, a key path -> line map, and the duplicate-key problems (the rest of
    the file is still read so they are reported with everything else). A syntax error
    raises `ConfigError`.
    """
    if _FAST is not None:
        try:
            return _parse(_FAST, path, text)
        except ConfigError:
            pass  # the same again, for the pure Python parser's message
    return _parse(yaml.SafeLoader, path, text)


def _parse(loader_class: Any, path: str, text: str) -> tuple[Any, dict[KeyPath, int], list[Problem]]:
    lines: dict[KeyPath, int] = {}
    problems: list[Problem] = []
    loader = None
    try:
        loader = loader_class(text)  # (the reader refuses control characters here)
        node = loader.get_single_node()
        if node is None:
            return None, lines, problems
        value = _build(loader, node, (), lines, problems, path)
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


def _build(
    loader: Any,
    node: yaml.Node,
    path: KeyPath,
    lines: dict[KeyPath, int],
    problems: list[Problem],
    file: str,
) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        explicit = {id(k) for k, _ in node.value if k.tag != _MERGE_TAG}
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        written: set[str] = set()  # keys written in this mapping, not merged in
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                problems.append(
                    Problem(file, path, f"a key must be a plain scalar, not {key!r}", key_node.start_mark.line + 1)
                )
                continue
            key = str(key) if not isinstance(key, str) else key
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
            out[key] = _build(loader, value_node, child, lines, problems, file)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, (*path, i), lines, problems, file) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)
