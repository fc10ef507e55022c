"""Twin nodes for the fast path's tests: a reference that answers every query by the
general path, and a fast node answering through `FastPath`, from one config and one clock."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.node import Node
from tests.support import configs

ZONE = configs.ZONE + "".join(f'big IN TXT "{"x" * 200} {i}"\n' for i in range(12))
#: a delegation, and the apex, with more glue than 512 bytes hold: what fits depends on the
#: client's size (at the apex the glue is optional: left out without TC)
ZONE += "".join(
    f"deep IN NS ns{i}.deep\nns{i}.deep IN A 192.0.2.{i}\nns{i}.deep IN AAAA 2001:db8::{i}\n" for i in range(14)
)
ZONE += "".join(f"@ IN NS apex{i}\napex{i} IN A 192.0.2.{i}\napex{i} IN AAAA 2001:db8::{i}\n" for i in range(14))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Twins:
    """A reference node (general path) and a fast node, from the same config and clock."""

    def __init__(self, tmp_path: Path, mutate: Callable[[dict[str, Any]], None] | None = None):
        raw = configs.base()
        if mutate:
            mutate(raw)
        config = load(configs.write(tmp_path, raw, ZONE))
        self.clock = Clock()
        self.reference = Node(config, "n1", clock=self.clock, rng=random.Random(7))
        self.node = Node(config, "n1", clock=self.clock, rng=random.Random(7))
        self.reference.ready = self.node.ready = True
        self.fast = FastPath(self.node.responder)

    def ask(self, data: bytes, source: str = "127.0.0.1") -> bytes | None:
        expected = self.reference.responder.handle(data, source)
        got = self.fast.handle(data, source)
        assert got == expected, f"fast {got!r}\ngeneral {expected!r}"
        return got

    def general_path_off(self) -> None:
        """From now on the fast node's general path fails the test: what it answers, it
        answers from what it kept."""

        def refuse(*args: object) -> Any:
            raise AssertionError(f"the general path was asked: {args!r}")

        self.fast.responder.answer = refuse  # type: ignore[method-assign, assignment]

    def both(self, change: Callable[[Node], object]) -> None:
        """Apply the same change of state to both nodes."""
        change(self.reference)
        change(self.node)


def wire_name(name: str) -> bytes:
    return b"".join(bytes([len(label)]) + label.encode() for label in name.split(".") if label) + b"\0"


def make_query(
    name: str,
    qtype: int = 1,
    *,
    qid: int = 0x1234,
    rd: bool = False,
    cd: bool = False,
    edns: bool = False,
    do: bool = False,
    payload: int = 1232,
    ecs: tuple[int, int, bytes] | None = None,
    cookie: bool = False,
) -> bytes:
    flags = (0x0100 if rd else 0) | (0x0010 if cd else 0)
    use_edns = edns or do or ecs is not None or cookie
    out = struct.pack("!HHHHHH", qid, flags, 1, 0, 0, 1 if use_edns else 0) + wire_name(name)
    out += struct.pack("!HH", qtype, 1)
    if use_edns:
        options = b""
        if cookie:
            options += struct.pack("!HH", 10, 8) + b"\x01" * 8
        if ecs is not None:
            family, source, address = ecs
            body = struct.pack("!HBB", family, source, 0) + address
            options += struct.pack("!HH", 8, len(body)) + body
        out += b"\0" + struct.pack("!HHIH", 41, payload, 0x8000 if do else 0, len(options)) + options
    return out
