"""The YAML child's side of a reload (`yamlchild`): a config's text in, frames out.

Run as ``python -m gtmcluster.config.source.yamlframes [--split [--have KEY=SHA ...]] FILE
[SECTION ...]`` with the text on standard input (``--split``: cut at its top-level keys,
`yamlsplit`; ``--have``: a section the reader holds, by the sha of its text). It imports
only the YAML reader (the child starts in 0.15 s; with the parent's Twisted side,
0.45 s). A frame is an 8-byte big-endian length and a pickle of a
tuple whose first item says what it is: ``keys``, then per section its ``lines``, its
value (``key``, then ``more`` slices), with ``--split`` its sha and canonical JSON
(``piece``), and ``arrived``, or ``same`` for a section the reader holds; at the end the
rest of the ``lines``, the ``problems``, the ``canonical`` JSON (not with ``--split``: the
reader puts it together from the pieces) and ``end`` (or ``whole`` for a
document that is not a plain mapping, or ``error`` with the problems of a refused file;
or, after some sections, ``resplit`` when the cut did not hold: read the file whole).
"""

from __future__ import annotations

import json
import pickle
import struct
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gtmcluster.config.problems import ConfigError, KeyPath
from gtmcluster.config.source import yamlsrc

#: entries of a big mapping or sequence in one frame (a frame loads in under 5 ms)
SLICE = 200
#: key path -> line entries in one frame
LINE_SLICE = 4_000
LENGTH = struct.Struct(">Q")


def canonical(value: Any) -> bytes:
    """The value as the config digest hashes it: JSON with sorted keys."""
    return json.dumps(value, sort_keys=True, default=str).encode()


def assembled(parts: Mapping[str, bytes]) -> bytes:
    """`canonical` of a mapping, from the `canonical` of each of its values by key (what
    ``json.dumps`` writes for it: its items in key order, the same separators)."""
    return b"{" + b", ".join(json.dumps(key).encode() + b": " + parts[key] for key in sorted(parts)) + b"}"


def frames(
    path: str,
    text: str,
    order: Sequence[str],
    slice_size: int | None = SLICE,
    split: bool = False,
    known: Mapping[str, str] | None = None,
) -> Iterator[tuple[Any, ...]]:
    """The frames for *text*: in the child, slices of big sections; whole here. Cut at
    its keys (*split*), each section comes with its sha and canonical JSON (``piece``),
    and a section *known* by its sha is only named (``same``): the reader holds it."""

    def sliced(key: str, section: Any) -> Iterator[tuple[Any, ...]]:
        if slice_size is not None and isinstance(section, dict) and len(section) > slice_size:
            items = list(section.items())
            yield ("key", key, dict(items[:slice_size]))
            for start in range(slice_size, len(items), slice_size):
                yield ("more", key, dict(items[start : start + slice_size]))
        elif slice_size is not None and isinstance(section, list) and len(section) > slice_size:
            yield ("key", key, section[:slice_size])
            for start in range(slice_size, len(section), slice_size):
                yield ("more", key, section[start : start + slice_size])
        else:
            yield ("key", key, section)

    def lines_of(lines: dict[KeyPath, int]) -> Iterator[tuple[Any, ...]]:
        if slice_size is None:
            yield ("lines", lines)
            return
        entries = list(lines.items())
        for start in range(0, len(entries), LINE_SLICE):
            yield ("lines", entries[start : start + LINE_SLICE])

    value: Any = None
    parted = False  # sections came as pieces: the reader puts the canonical JSON together
    try:
        for event in yamlsrc.sections(path, text, order, split, known):
            kind = event[0]
            if kind == "whole":
                _, value, lines, problems = event
                yield ("whole", value)
                yield from lines_of(lines)
                yield ("problems", problems)
            elif kind == "keys":
                value = dict.fromkeys(event[1])
                yield event
            elif kind == "section":
                _, key, section, lines, sha = event
                value[key] = section
                yield from lines_of(lines)
                yield from sliced(key, section)
                if sha is not None:
                    parted = True
                    yield ("piece", key, sha, canonical(section))
                yield ("arrived", key)
            elif kind == "same":
                parted = True
                yield event
            else:  # "end"
                _, problems, lines = event
                yield from lines_of(lines)
                yield ("problems", problems)
    except ConfigError as e:
        yield ("error", e.problems)
        return
    except yamlsrc.Resplit as e:
        yield ("resplit", str(e))
        return
    if not parted:
        yield ("canonical", canonical(value))
    yield ("end",)


def main(argv: list[str]) -> int:
    """The child: the text on standard input, the frames on standard output."""
    import gc

    gc.disable()  # it lives for one parse, and builds nothing that is garbage
    split = argv[:1] == ["--split"]
    if split:
        argv = argv[1:]
    known: dict[str, str] = {}
    while argv[:1] == ["--have"]:  # --have KEY=SHA: a section the reader holds
        key, _, sha = argv[1].partition("=")
        known[key] = sha
        argv = argv[2:]
    path, *order = argv
    text = sys.stdin.buffer.read().decode()
    out = sys.stdout.buffer
    for frame in frames(path, text, order, split=split, known=known):
        data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(LENGTH.pack(len(data)))
        out.write(data)
        if frame[0] == "arrived":
            out.flush()  # the builder may start on it
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
