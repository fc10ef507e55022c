"""Config problems: each names the file, the key path and what is wrong."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: a key path: mapping keys (str) and sequence indexes (int), from the top of the file
KeyPath = tuple["str | int", ...]

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def format_path(path: KeyPath) -> str:
    """``pools.web.members[1]``; keys with dots or spaces are quoted: ``wideips."www.a.b".ttl``."""
    if not path:
        return "(top level)"
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part if _PLAIN_KEY.match(part) else '"' + part.replace('"', '\\"') + '"'
            out += ("." if out else "") + text
    return out


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    path: KeyPath
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f" (line {self.line})" if self.line else ""
        return f"{self.file}: {format_path(self.path)}: {self.message}{where}"


class ConfigError(Exception):
    """The config cannot be used. `problems` holds every problem found, in file order."""

    def __init__(self, problems: list[Problem]):
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


class Problems:
    """Collects problems while a config is read, so all of them are reported at once."""

    def __init__(self, file: str, lines: dict[KeyPath, int] | None = None):
        self.file = file
        self.lines = lines or {}
        self.found: list[Problem] = []

    def add(self, path: KeyPath, message: str) -> None:
        line = None
        for n in range(len(path), -1, -1):
            line = self.lines.get(path[:n])
            if line is not None:
                break
        self.found.append(Problem(self.file, path, message, line))

    def __bool__(self) -> bool:
        return bool(self.found)

    def raise_if_any(self) -> None:
        if self.found:
            ordered = sorted(self.found, key=lambda p: p.line or 0)
            raise ConfigError(ordered)
