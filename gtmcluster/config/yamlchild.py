"""Parsing a config's YAML in a child process, for a reload beside a busy reactor.

Of the 2.8 s a 5,000-server config takes to read, 1.0-1.4 s is YAML, and the canonical
JSON the config digest hashes is one C call that holds the GIL for 130 ms: a stall of
every answer. For a reload (`gtmcluster.config.reload`), `parse` hands both to a child
process (``python -m gtmcluster.config.yamlchild``, the same interpreter), which runs
`yamlsrc.load` and writes what it made back as a stream of small pickles: the value a
section (or a slice of a big section) at a time, the key path -> line map a slice at a
time, the duplicate-key problems, and the canonical JSON. A thread reads them: each
pickle loads in a few milliseconds, and between two it hands the GIL over
(`gtmcluster.gil`), so the reactor never waits long.

The child gets the text on its standard input (the parent has read the file and reported
why it could not), so both see the same bytes. A file the child refuses (`ConfigError`)
comes back as its problems. A child that cannot be started or ends without its last frame
is logged and the YAML is parsed in the thread: a reload must not fail for want of a
process.

A frame is an 8-byte big-endian length and a pickle of a tuple whose first item says
what it is (see `_frames`). The pickles come from the child this module starts, with the
same code, over a pipe no one else holds.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from twisted.logger import Logger

from gtmcluster.config import yamlsrc
from gtmcluster.config.problems import ConfigError, KeyPath, Problem

log = Logger()

#: entries of a big mapping or sequence in one frame (a frame loads in under 5 ms)
SLICE = 200
#: key path -> line entries in one frame
LINE_SLICE = 4_000
#: a child still parsing after this is killed (and the YAML parsed in the thread)
TIMEOUT = 300.0
_LENGTH = struct.Struct(">Q")
#: the directory holding the gtmcluster package, so the child imports this same code
_ROOT = str(Path(__file__).resolve().parents[2])


class Parsed:
    """What `yamlsrc.load` makes of a file, and its canonical JSON (for the digest)."""

    def __init__(self, value: Any, lines: dict[KeyPath, int], problems: list[Problem], canonical: bytes):
        self.value = value
        self.lines = lines
        self.problems = problems
        self.canonical = canonical


def canonical(value: Any) -> bytes:
    """The value as the config digest hashes it: JSON with sorted keys."""
    return json.dumps(value, sort_keys=True, default=str).encode()


def here(path: str, text: str) -> Parsed:
    """Parse *text* (read from *path*) in this process (raises `ConfigError` as `yamlsrc.load` does)."""
    value, lines, problems = yamlsrc.load(path, text)
    return Parsed(value, lines, problems, canonical(value))


def parse(path: str, text: str) -> Parsed:
    """Parse *text* (read from *path*) in a child process; in this one should the child
    fail. Raises `ConfigError` for a file that cannot be parsed, as `yamlsrc.load` does."""
    try:
        return _in_child(path, text)
    except ConfigError:
        raise
    except Exception as e:
        log.warn(
            "parsing {path} in a child process failed ({error}); parsing it in the node's process",
            path=path,
            error=f"{type(e).__name__}: {e}",
            event="config_child_failed",
        )
        return here(path, text)


def _in_child(path: str, text: str) -> Parsed:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
    child = subprocess.Popen(
        [sys.executable, "-m", "gtmcluster.config.yamlchild", path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        with child.stdin:
            child.stdin.write(text.encode())  # read whole before the child writes a byte
        parsed = _read(child.stdout)
        child.wait(TIMEOUT)
        return parsed
    except BaseException:
        child.kill()
        raise
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                pipe.close()


def _read(stream: IO[bytes]) -> Parsed:
    value: Any = None
    lines: dict[KeyPath, int] = {}
    problems: list[Problem] = []
    json_bytes = b""
    while True:
        header = stream.read(_LENGTH.size)
        if len(header) < _LENGTH.size:
            raise RuntimeError("the child ended before its last frame")
        (size,) = _LENGTH.unpack(header)
        frame = stream.read(size)
        if len(frame) < size:
            raise RuntimeError("the child ended inside a frame")
        what, *items = pickle.loads(frame)
        if what == "error":
            raise ConfigError(items[0])
        if what == "whole":
            value = items[0]
        elif what == "key":  # a section of the top-level mapping (or the first slice of one)
            value[items[0]] = items[1]
        elif what == "more":  # a further slice of a section
            section = value[items[0]]
            if isinstance(section, dict):
                section.update(items[1])
            else:
                section.extend(items[1])
        elif what == "lines":
            lines.update(items[0])
        elif what == "problems":
            problems = items[0]
        elif what == "canonical":
            json_bytes = items[0]
        elif what == "end":
            return Parsed(value, lines, problems, json_bytes)
        else:
            raise RuntimeError(f"the child wrote an unknown frame {what!r}")


def _frames(path: str, text: str) -> Iterator[tuple[Any, ...]]:
    """What the child writes for *text*, frame by frame."""
    try:
        parsed = here(path, text)
    except ConfigError as e:
        yield ("error", e.problems)
        return
    value = parsed.value
    if isinstance(value, dict):
        yield ("whole", {})
        for key, section in value.items():
            if isinstance(section, dict) and len(section) > SLICE:
                items = list(section.items())
                yield ("key", key, dict(items[:SLICE]))
                for start in range(SLICE, len(items), SLICE):
                    yield ("more", key, dict(items[start : start + SLICE]))
            elif isinstance(section, list) and len(section) > SLICE:
                yield ("key", key, section[:SLICE])
                for start in range(SLICE, len(section), SLICE):
                    yield ("more", key, section[start : start + SLICE])
            else:
                yield ("key", key, section)
    else:
        yield ("whole", value)
    entries = list(parsed.lines.items())
    for start in range(0, len(entries), LINE_SLICE):
        yield ("lines", entries[start : start + LINE_SLICE])
    yield ("problems", parsed.problems)
    yield ("canonical", parsed.canonical)
    yield ("end",)


def main(argv: list[str]) -> int:
    """The child: the text on standard input, the frames on standard output."""
    import gc

    gc.disable()  # it lives for one parse, and builds nothing that is garbage
    (path,) = argv
    text = sys.stdin.buffer.read().decode()
    out = sys.stdout.buffer
    for frame in _frames(path, text):
        data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_LENGTH.pack(len(data)))
        out.write(data)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
