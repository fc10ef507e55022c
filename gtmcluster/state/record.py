"""A record of the store, and its version: what every piece of shared state is.

A record has a key, a JSON-able value, the node that wrote it (origin), a version and an
optional TTL. Versions are hybrid logical clock stamps (wall-clock milliseconds, a logical
counter, the origin), so they order writes made on different nodes and never go backwards
on one node. A value of None is a deletion (a tombstone), kept until its TTL ends so that
it wins over older copies arriving later. Keys are paths whose first segment is their kind
(`kind_of`).

For anti-entropy, each record's (key, version) hashes to a 64-bit `fingerprint`, and its
key to one of `BUCKETS` buckets (`bucket_of`): the store keeps the XOR of the fingerprints
per origin and bucket (`store.Store`).
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from dataclasses import FrozenInstanceError, dataclass
from typing import Any

from gtmcluster.state.values import Compact

TOMBSTONE_TTL = 3600.0
#: keys are spread over this many buckets per origin for anti-entropy
BUCKETS = 1024


@dataclass(frozen=True, slots=True, order=True)
class Version:
    wall_ms: int
    logical: int
    origin: str


class Record:
    """One record, immutable: `Record(key, value, version, ttl, born)`.

    A store holds millions, so a record keeps its version's parts itself (`wall_ms`,
    `logical`, `origin`) rather than a `Version` object; `version` makes one when asked.
    """

    __slots__ = ("born", "key", "logical", "origin", "ttl", "value", "wall_ms")

    key: str
    value: Any  # JSON-able; None marks a deletion
    wall_ms: int
    logical: int
    origin: str
    ttl: float | None  # seconds of life, counted from `born`
    born: float  # this node's clock when the record's life began

    def __init__(self, key: str, value: Any, version: Version, ttl: float | None, born: float) -> None:
        init = object.__setattr__
        init(self, "key", key)
        init(self, "value", value)
        init(self, "wall_ms", version.wall_ms)
        init(self, "logical", version.logical)
        init(self, "origin", version.origin)
        init(self, "ttl", ttl)
        init(self, "born", born)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    @property
    def version(self) -> Version:
        return Version(self.wall_ms, self.logical, self.origin)

    def _fields(self) -> tuple[Any, ...]:
        return (self.key, self.value, self.wall_ms, self.logical, self.origin, self.ttl, self.born)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"Record(key={self.key!r}, value={self.value!r}, version={self.version!r}, "
            f"ttl={self.ttl!r}, born={self.born!r})"
        )

    def newer_than(self, other: Record) -> bool:
        """Whether this record's version is greater than *other*'s."""
        return (self.wall_ms, self.logical, self.origin) > (other.wall_ms, other.logical, other.origin)

    def same_version(self, other: Record) -> bool:
        return self.wall_ms == other.wall_ms and self.logical == other.logical and self.origin == other.origin

    def live(self, now: float) -> bool:
        return self.ttl is None or now < self.born + self.ttl

    def expires(self) -> float | None:
        return None if self.ttl is None else self.born + self.ttl

    def remaining(self, now: float) -> float | None:
        return None if self.ttl is None else self.born + self.ttl - now


def canonical(value: Any) -> str:
    """*value* as canonical JSON (what breaks a tie between two values of one version)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_or_str)


def _json_or_str(value: Any) -> Any:
    return value.to_json() if isinstance(value, Compact) else str(value)


def kind_of(key: str) -> str:
    """A key's kind: its first segment ("path" of "path/192.0.2.1/DC1")."""
    return key.partition("/")[0]


def bucket_of(key: str) -> int:
    return zlib.crc32(key.encode()) % BUCKETS


def fingerprint(key: str, version: Version) -> int:
    """A 64-bit hash of (key, version): what the digests are made of."""
    return fingerprint_of(key, version.wall_ms, version.logical, version.origin)


def fingerprint_of(key: str, wall_ms: int, logical: int, origin: str) -> int:
    data = key.encode() + b"\0" + struct.pack("!QI", wall_ms, logical) + origin.encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


#: the largest logical counter a version may carry (the peer wire refuses larger ones)
MAX_LOGICAL = 2**31 - 1


@dataclass(slots=True)
class OriginSummary:
    """What a store holds of one origin: how many records, and the XOR of their hashes."""

    count: int = 0
    xor: int = 0
