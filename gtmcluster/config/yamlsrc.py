"""Read YAML into plain values, remembering the line of every key and rejecting duplicates.

PyYAML's safe loader silently keeps the last of two equal keys; for a config that is a
silent loss (two virtual servers with one name), so mappings are built here from the node
tree, which also gives every key path its line for error messages.
"""

from __future__ import annotations

from typing import Any

import yaml

from gtmcluster.config.problems import ConfigError, KeyPath, Problem


def load(path: str, text: str) -> tuple[Any, dict[KeyPath, int]]:
    """Parse *text* (read from *path*). Returns the value and a key path -> line map."""
    loader = yaml.SafeLoader(text)
    lines: dict[KeyPath, int] = {}
    problems: list[Problem] = []
    try:
        node = loader.get_single_node()
        if node is None:
            return None, lines
        value = _build(loader, node, (), lines, problems, path)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        message = " ".join(str(x) for x in (e.context, e.problem) if x) or str(e)
        raise ConfigError([Problem(path, (), f"YAML syntax: {message}", line)]) from None
    except yaml.YAMLError as e:
        raise ConfigError([Problem(path, (), f"YAML syntax: {e}")]) from None
    finally:
        loader.dispose()
    if problems:
        raise ConfigError(problems)
    return value, lines


def _build(
    loader: yaml.SafeLoader,
    node: yaml.Node,
    path: KeyPath,
    lines: dict[KeyPath, int],
    problems: list[Problem],
    file: str,
) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                problems.append(
                    Problem(file, path, f"a key must be a plain scalar, not {key!r}", key_node.start_mark.line + 1)
                )
                continue
            key = str(key) if not isinstance(key, str) else key
            if key in out:
                problems.append(
                    Problem(
                        file,
                        (*path, key),
                        "duplicate key (it appears earlier in the same mapping)",
                        key_node.start_mark.line + 1,
                    )
                )
                continue
            child = (*path, key)
            lines[child] = key_node.start_mark.line + 1
            out[key] = _build(loader, value_node, child, lines, problems, file)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, (*path, i), lines, problems, file) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)
