"""The compact form of a client subnet's figures (``client/<subnet>/<dc>``, issue 36) as the
store keeps them: up to `rum.max_subnets` x data centers of them (300,000 at the defaults).

As a dict, ``{"rtt": µs, "samples": [µs, ...], "source": "rum", "by": node}`` with 16
samples is about 700 bytes (the dict, the list and an int object per sample); kept so, a
record costs about 1 KB with what the store keeps beside it. `ClientValue` keeps the RTT
and the samples as one string of unsigned 32-bit integers (4 bytes each) and shares the
source and node names (`state.values`). It reads, compares and travels as the dict
(`state.values.Compact`): schema checks, the wire and the snapshot see the dict, and a
value of another shape (a field more, a float, a number past 32 bits) stays a dict.

Unlike paths, the kind stays indexed by the store (read per subnet, listed newest first,
withheld from older peers: `state.values.register`'s *indexed*).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from typing import Any, Final

from gtmcluster.state import keys, values

#: the integers of the packed figures: unsigned, at least 32 bits (4 bytes on every platform
#: CPython runs on: checked at import)
_TYPE: Final = "I"
_LIMIT = 1 << 32
assert array(_TYPE).itemsize == 4
#: the RTT, the first of them (read by every population recomputed: the fastest way)
_first = struct.Struct("=" + _TYPE).unpack_from


class ClientValue(values.Compact):
    """A client record's value: the RTT then the samples, packed; the source and the node's
    name shared."""

    __slots__ = ("_packed", "by", "source")
    FIELDS = ("rtt", "samples", "source", "by")

    def __init__(self, packed: bytes, source: str, by: str) -> None:
        self._packed = packed
        self.source = source
        self.by = by

    @classmethod
    def of(cls, value: dict[str, Any]) -> ClientValue | None:
        """The compact form of *value*, or None when it is not exactly a client value (the
        four fields, whole numbers in 0..2**32-1, a list of samples, text)."""
        if len(value) != len(cls.FIELDS):
            return None
        try:
            rtt, samples, source, by = value["rtt"], value["samples"], value["source"], value["by"]
        except KeyError:
            return None
        if type(rtt) is not int or type(samples) is not list or type(source) is not str or type(by) is not str:
            return None
        if not 0 <= rtt < _LIMIT or not all(type(n) is int and 0 <= n < _LIMIT for n in samples):
            return None
        packed = array(_TYPE, [rtt, *samples]).tobytes()
        return cls(packed, values.shared_text(source), values.shared_text(by))

    @property
    def rtt(self) -> int:
        rtt: int = _first(self._packed)[0]
        return rtt

    @property
    def samples(self) -> list[int]:
        """The samples, a new list each time (a caller changing it changes no record)."""
        return memoryview(self._packed).cast(_TYPE)[1:].tolist()

    def to_json(self) -> dict[str, Any]:
        figures = memoryview(self._packed).cast(_TYPE).tolist()
        return {"rtt": figures[0], "samples": figures[1:], "source": self.source, "by": self.by}

    def __getitem__(self, key: str) -> Any:
        if key == "rtt":
            return _first(self._packed)[0]
        if key == "samples":
            return self.samples
        if key == "source":
            return self.source
        if key == "by":
            return self.by
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.FIELDS)

    def __len__(self) -> int:
        return len(self.FIELDS)


values.register(keys.CLIENT, ClientValue.of, indexed=True)
