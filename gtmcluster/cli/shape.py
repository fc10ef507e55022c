"""The shape a node's JSON answer must have before a command reads it.

A command renders a node's answer by reading its fields; an answer missing one, or holding
a list where an object should be, would otherwise end the command in a traceback. Each
command states what it reads as a spec, and `check` refuses an answer that does not fit
with where and how (``peers[0].connected: not true or false``). Fields a command does not
read are not checked, and fields the spec does not name are let through (newer nodes add
fields).

A spec is one of: ``str``, ``int`` (a whole number), ``float`` (any number), ``bool``,
``object`` (anything, present), or `Obj`, `ListOf`, `MapOf`, `Maybe` of specs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gtmcluster.cli.terminal import escape

#: how much of a key an error shows
SHOWN_KEY = 40


@dataclass(frozen=True)
class Obj:
    """A JSON object with these fields (and any others)."""

    fields: Mapping[str, Spec]
    optional: Mapping[str, Spec] = field(default_factory=dict)


@dataclass(frozen=True)
class ListOf:
    """A JSON list of items of one spec."""

    item: Spec


@dataclass(frozen=True)
class MapOf:
    """A JSON object of any keys, each value of one spec."""

    value: Spec


@dataclass(frozen=True)
class Maybe:
    """null, or the spec."""

    spec: Spec


Spec = type | Obj | ListOf | MapOf | Maybe


class Malformed(Exception):
    """An answer that does not fit its spec: where, and what is wrong there."""


_WORDS = {str: "text", int: "a whole number", float: "a number", bool: "true or false"}


def check(value: Any, spec: Spec, where: str = "") -> None:
    """Raise `Malformed` unless *value* fits *spec*."""
    if isinstance(spec, Maybe):
        if value is not None:
            check(value, spec.spec, where)
        return
    if isinstance(spec, Obj):
        if not isinstance(value, dict):
            raise Malformed(f"{where or 'the answer'}: not an object")
        for name, inner in spec.fields.items():
            if name not in value:
                raise Malformed(f"{_at(where, name)}: missing")
            check(value[name], inner, _at(where, name))
        for name, inner in spec.optional.items():
            if name in value:
                check(value[name], inner, _at(where, name))
        return
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            raise Malformed(f"{where or 'the answer'}: not a list")
        for n, item in enumerate(value):
            check(item, spec.item, f"{where}[{n}]")
        return
    if isinstance(spec, MapOf):
        if not isinstance(value, dict):
            raise Malformed(f"{where or 'the answer'}: not an object")
        for key, item in value.items():
            check(item, spec.value, f"{where}[{_key(key)}]")
        return
    if spec is object or _fits(value, spec):
        return
    raise Malformed(f"{where or 'the answer'}: not {_WORDS.get(spec, spec.__name__)}")


def _fits(value: Any, spec: type) -> bool:
    if spec is bool:
        return isinstance(value, bool)
    if spec is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if spec is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, spec)


def _at(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _key(key: str) -> str:
    shown = key if len(key) <= SHOWN_KEY else key[:SHOWN_KEY] + "..."
    return f"'{escape(shown)}'"
