"""Parsing a config's YAML in a child process, for a reload beside a busy reactor.

Of the 2.8 s a 5,000-server config takes to read, 1.0-1.4 s is YAML, and the canonical
JSON the config digest hashes is one C call that holds the GIL for 130 ms: a stall of
every answer. For a reload (`gtmcluster.config.reload`), `Child` hands both to a child
process (``python -m gtmcluster.config.source.yamlframes``, the same interpreter; it imports no
more than it needs and starts in 0.15 s), which runs `yamlsrc.sections` and writes what
it makes as a stream of small pickles, a section (or a slice of a big section) at a
time, in the order the config's builder reads them (`load.SECTION_ORDER`). The reactor
reads the stream (each pickle loads in a few milliseconds) into a `Parsed` that fills as
it comes, and the builder starts on the first sections while the child still builds the
big ones: it waits (`Parsed.wanted`) only for a section not there yet.

The child gets the text on its standard input (the parent has read the file and reported
why it could not), so both see the same bytes. A file the child refuses (`ConfigError`)
comes back as its problems. A child that cannot be started, or ends before its first
frame, is logged and the YAML is parsed in a thread of the node's process: a reload must
not fail for want of a process. One that ends after the build started on what it sent
fails the reload (the running config stays), naming why.

The frames are `yamlframes`'. The pickles come from the child this module starts, with
the same code, over a pipe no one else holds.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twisted.internet import defer, protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from gtmcluster.config.problems import ConfigError, KeyPath, Problem
from gtmcluster.config.source import yamlsrc
from gtmcluster.config.source.yamlframes import LENGTH, assembled, frames
from gtmcluster.runtime import gil, slices
from gtmcluster.runtime.gcpause import collection_paused
from gtmcluster.runtime.reactors import Spawning, to_pool

log = Logger()

#: the directory holding the gtmcluster package, so the child imports this same code
_ROOT = str(Path(__file__).resolve().parents[2])
#: a section that has not come yet (in `Parsed.value`, under its key)
PENDING: Any = type("Pending", (), {"__repr__": lambda self: "PENDING"})()


class Memory:
    """The sections of the last config read, by the sha of their text (a file cut at its
    keys: `yamlsplit`), with their values and canonical JSON. A reload's child names a
    section whose text is the same (``same``) rather than reading it again: a reload
    costs the sections that changed. The values are shared by the reads (the builder
    only reads them). Their lines are not kept: a read that used some and found a
    problem is read again without them (`reload.read`), for the problem's line."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, Any, bytes]] = {}

    def known(self) -> dict[str, str]:
        return {key: sha for key, (sha, _, _) in self._held.items()}

    def get(self, key: str, sha: str) -> tuple[Any, bytes] | None:
        held = self._held.get(key)
        return None if held is None or held[0] != sha else (held[1], held[2])

    def snapshot(self) -> Memory:
        """What is held now, for one read: the sections it tells its child it has are the
        ones it takes, even when another read (a bundle vetted while one runs: reads are
        not one at a time) keeps its own sections here meanwhile."""
        copy = Memory()
        copy._held = dict(self._held)
        return copy

    def keep(self, parsed: Parsed) -> None:
        """Remember the sections of *parsed* (its config was built), and only those."""
        self._held = {key: (sha, parsed.value[key], part) for key, (sha, part) in parsed.pieces.items()}


#: what this process read last (reads may overlap: each child works from a `snapshot`)
MEMORY = Memory()


class Parsed:
    """What `yamlsrc.sections` makes of a file, and its canonical JSON (for the digest);
    filled as the child's frames come (`wanted`, `complete`), or whole (`here`). A
    section the child names as the same (``same``) is taken from *memory*."""

    def __init__(self, memory: Memory | None = None) -> None:
        self.value: Any = None
        self.lines: dict[KeyPath, int] = {}
        self.problems: list[Problem] = []
        self.canonical = b""
        self.memory = memory
        #: key -> (sha, canonical JSON) of each section, when the file was cut at its keys
        self.pieces: dict[str, tuple[str, bytes]] = {}
        #: the sections taken from *memory* (their lines are not here)
        self.reused: set[str] = set()
        self._arrived: set[str] = set()
        self._ended = False
        self._failure: Failure | None = None
        self._waiting: list[tuple[tuple[str, ...], defer.Deferred[None]]] = []

    def wanted(self, *keys: str) -> slices.Steps[None]:
        """Steps that end when the top-level sections *keys* are here (at once for a key
        the file does not have); raises `ConfigError` when the file is refused."""
        while not self._here(keys):
            waited: defer.Deferred[None] = defer.Deferred()
            self._waiting.append((keys, waited))
            yield waited  # (`slices.run` waits for it)
        if self._failure is not None:
            self._failure.raiseException()

    @property
    def awaited(self) -> list[tuple[str, ...]]:
        """The sections steps wait for now (``("",)``: everything)."""
        return [keys for keys, _ in self._waiting]

    def complete(self) -> slices.Steps[None]:
        """Steps that end when everything is here (the problems, the canonical JSON)."""
        yield from self.wanted("")

    def _here(self, keys: tuple[str, ...]) -> bool:
        if self._ended or self._failure is not None:
            return True
        if keys == ("",):
            return False
        if not isinstance(self.value, dict):
            return False
        return all(k not in self.value or k in self._arrived for k in keys)

    def _progress(self) -> None:
        waiting, self._waiting = self._waiting, []
        for keys, waited in waiting:
            if self._here(keys):
                waited.callback(None)
            else:
                self._waiting.append((keys, waited))

    # -- filled from events or frames

    def take(self, what: str, *items: Any) -> bool:
        """Take one frame; True when it was the last."""
        if what == "error":
            self.fail(Failure(ConfigError(items[0])))
            return True
        if what == "resplit":
            self.fail(Failure(yamlsrc.Resplit(items[0])))
            return True
        if what == "whole":
            self.value = items[0]
        elif what == "keys":
            self.value = dict.fromkeys(items[0], PENDING)
        elif what == "key":  # a section (or the first slice of one)
            self.value[items[0]] = items[1]
        elif what == "more":  # a further slice of a section
            section = self.value[items[0]]
            if isinstance(section, dict):
                section.update(items[1])
            else:
                section.extend(items[1])
        elif what == "piece":
            key, sha, part = items
            self.pieces[key] = (sha, part)
        elif what == "same":
            key, sha = items
            held = None if self.memory is None else self.memory.get(key, sha)
            if held is None:
                raise RuntimeError(f"the child named a section this node does not hold: {key}")
            self.value[key], part = held
            self.pieces[key] = (sha, part)
            self.reused.add(key)
            self._arrived.add(key)
            self._progress()
        elif what == "arrived":
            self._arrived.add(items[0])
            self._progress()
        elif what == "lines":
            self.lines.update(items[0])
        elif what == "problems":
            self.problems = items[0]
        elif what == "canonical":
            self.canonical = items[0]
        elif what == "end":
            if self.pieces:
                self.canonical = assembled({key: part for key, (_, part) in self.pieces.items()})
            self._ended = True
            self._progress()
            return True
        else:
            raise RuntimeError(f"the child wrote an unknown frame {what!r}")
        return False

    def fail(self, failure: Failure) -> None:
        self._failure = failure
        self._progress()

    @property
    def ended(self) -> bool:
        return self._ended or self._failure is not None


def here(path: str, text: str, order: Sequence[str] = (), split: bool = False) -> Parsed:
    """Parse *text* (read from *path*) in this process, whole, or cut at its keys
    (*split*: with each section's sha, for `Memory`); raises `ConfigError` as
    `yamlsrc.load` does."""
    parsed = Parsed()
    for frame in frames(path, text, order, slice_size=None, split=split):
        parsed.take(*frame)
    if parsed._failure is not None:
        if split and parsed._failure.check(yamlsrc.Resplit):
            return here(path, text, order)
        parsed._failure.raiseException()
    return parsed


class Child(protocol.ProcessProtocol):
    """Parses a file's text in a child process; `parsed` fills as its frames come."""

    def __init__(
        self,
        reactor: Spawning,
        path: str,
        text: str,
        order: Sequence[str],
        split: bool = True,
        memory: Memory | None = None,
    ):
        self.reactor = reactor
        self.path = path
        self.text = text
        self.order = order
        self.split = split
        self.parsed = Parsed(memory.snapshot() if split and memory is not None else None)
        #: fires with `parsed` when its first frame came (the builder may start), or when
        #: the child failed and the text was parsed in a thread instead
        self.started: defer.Deferred[Parsed] = defer.Deferred()
        self._buffer = bytearray()
        self._stderr = bytearray()

    def start(self) -> defer.Deferred[Parsed]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
        args = [sys.executable, "-m", "gtmcluster.config.source.yamlframes"]
        if self.split:
            args.append("--split")
            for key, sha in ({} if self.parsed.memory is None else self.parsed.memory.known()).items():
                args += ["--have", f"{key}={sha}"]
        args += [self.path, *self.order]
        try:
            self.reactor.spawnProcess(self, sys.executable, args, env=env)
        except OSError as e:
            self._instead(f"{type(e).__name__}: {e}")
        return self.started

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(self.text.encode())
        self.transport.closeStdin()  # the child reads all of it before it writes

    def outReceived(self, data: bytes) -> None:
        self._buffer += data
        buffer = self._buffer
        while len(buffer) >= LENGTH.size:
            (size,) = LENGTH.unpack_from(buffer)
            if len(buffer) < LENGTH.size + size:
                break
            frame = bytes(buffer[LENGTH.size : LENGTH.size + size])
            del buffer[: LENGTH.size + size]
            last = self.parsed.take(*pickle.loads(frame))
            if not self.started.called:
                self.started.callback(self.parsed)
            if last:
                return

    def errReceived(self, data: bytes) -> None:
        self._stderr += data[-2000:]
        del self._stderr[:-2000]

    def processEnded(self, reason: Failure) -> None:
        if self.parsed.ended:
            return
        why = reason.getErrorMessage()
        if self._stderr:
            why += f" ({bytes(self._stderr).decode(errors='replace').strip().splitlines()[-1]})"
        if not self.started.called:
            self._instead(why)
        else:  # the builder has started on what came: the rest will not come
            self.parsed.fail(Failure(RuntimeError(f"the YAML child process ended before its last frame: {why}")))

    def _instead(self, why: str) -> None:
        log.warn(
            "parsing {path} in a child process failed ({error}); parsing it in the node's process",
            path=self.path,
            error=why,
            event="config_child_failed",
        )
        to_pool(self.reactor, _here_beside, self).chainDeferred(self.started)


def _here_beside(child: Child) -> Parsed:
    # in a thread beside the reactor: the GIL handed over often, the collector paused
    with gil.yielding_often(), collection_paused():
        return here(child.path, child.text, child.order)
