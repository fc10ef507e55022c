"""Compact forms of record values: the store's most numerous values, kept small.

A record's value is JSON-able data. The most numerous kind, path records (millions in a
large proximity table), are dicts of eight fields: several hundred bytes each as a dict.
Their compact form keeps the same fields in slots, with repeated strings and numbers
shared. A compact value reads like the dict it stands for (a read-only Mapping, equal to
that dict) and becomes that dict again where values leave the process, as JSON on the
wire and on disk (`plain`).

A form is registered for a key prefix by the module that owns that kind of record
(`proximity.table` for paths, `proximity.clientvalue` for client subnets' figures); the
store applies it to every value it keeps (`compact`).
A value that does not have exactly the form's shape stays as it is, so a record a newer
version shapes otherwise is kept, relayed and saved unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

#: shared values at most, of each kind (they are few: completion rates, TTLs, ...)
MAX_SHARED = 4096
_shared: dict[tuple[type, Any], Any] = {}
Number = TypeVar("Number", int, float)


class Compact(Mapping[str, Any]):
    """A read-only Mapping standing for the dict `to_json` returns."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Compact):
            return self.to_json() == other.to_json()
        if isinstance(other, Mapping):
            return self.to_json() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # like the dict it stands for

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_json()!r})"


Form = Callable[[dict[str, Any]], Compact | None]
_forms: dict[str, Form] = {}
_numerous: set[str] = set()


def register(prefix: str, form: Form, *, indexed: bool = False) -> None:
    """Keep values of keys under *prefix* in the form *form* makes (None: not its shape).
    Unless *indexed*, the kind comes by the million and the store keeps no index of it
    (see `numerous`); an indexed kind (client subnets: read per subnet, listed newest
    first, withheld from older peers) is compact and indexed as well."""
    _forms[prefix] = form
    if indexed:
        _numerous.discard(prefix)
    else:
        _numerous.add(prefix)


def numerous(kind: str) -> bool:
    """Whether records of *kind* (a key's first segment, as "path") come by the million:
    the kinds with a compact form that are not indexed. The store indexes the other kinds
    (see Store.scan)."""
    return f"{kind}/" in _numerous


def compact(key: str, value: Any) -> Any:
    """*value* in the compact form registered for *key*, or as it is."""
    if type(value) is dict:
        for prefix, form in _forms.items():
            if key.startswith(prefix):
                made = form(value)
                return value if made is None else made
    return value


def plain(value: Any) -> Any:
    """`json.dumps`'s default: a compact value as its dict; anything else is not JSON."""
    if isinstance(value, Compact):
        return value.to_json()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def shared_text(text: str) -> str:
    """One object for equal strings that repeat across records (protocols, node names)."""
    return sys.intern(text)


def shared(value: Number) -> Number:
    """One object for equal numbers that repeat across records (completion rates, TTLs),
    up to `MAX_SHARED` of them; others stay as they are."""
    key = (type(value), value)  # 60 and 60.0 stay apart
    held: Number | None = _shared.get(key)
    if held is not None:
        return held
    if len(_shared) < MAX_SHARED:
        _shared[key] = value
    return value
