"""Fuzz target: the peer protocol's decoders, what a peer's message values go through.

The input's first byte picks the decoder, the rest is the value a peer sent:

    0  a Publish batch (`sync.codec.decode`), then merged into a store
    1  a Pull request's keys          2  a Listing request's bucket cursors
    3  a Summary answer               4  a Listing answer's entries
    5  a Listing answer's rest        6  a Pull answer's rest

Invariants: each gives its value or the one declared error, `BadMessage`; a record it
accepts can be kept and passed on: it merges into a store, re-encodes to the same bytes
(so relaying it works and does not change it) and its key and origin are Unicode text
that SQLite snapshots can store; no traceback is logged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import gtmcluster.proximity.table  # registers the compact form of path values
import gtmcluster.state.persistence  # noqa: F401 - and of persistence values
from fuzz.harness import Finding, no_tracebacks
from gtmcluster.state.store import Store
from gtmcluster.sync import codec
from gtmcluster.sync.codec import BadMessage

NOW = 1_000_000.0
ORIGINS = frozenset({"gtm-a", "gtm-b", "gtm-c"})


def _publish(value: bytes) -> None:
    records = codec.decode(value, NOW, ORIGINS)
    store = Store("gtm-a", lambda: NOW)
    for record in records:
        store.merge(record)
        for text in (record.key, record.origin):
            try:
                text.encode()
            except UnicodeEncodeError:
                raise Finding(f"accepted a record whose key or origin is not Unicode text: {text!r}") from None
        try:
            encoded = codec.encode(record, NOW)
        except Exception as e:
            raise Finding(f"an accepted record cannot be sent on: {type(e).__name__}: {e}") from None
        (again,) = codec.decode(b"[" + encoded + b"]", NOW, ORIGINS)
        if codec.encode(again, NOW) != encoded:
            raise Finding(f"{record.key!r} changes when relayed: {encoded!r}")
    store.digest()


DECODERS: list[Callable[[bytes], Any]] = [
    _publish,
    lambda v: codec.read_keys(v, "keys"),
    codec.read_bucket_cursors,
    codec.read_summary,
    codec.read_listing,
    codec.read_bucket_list,
    lambda v: codec.read_keys(v, "rest"),
]


def test_one_input(data: bytes) -> None:
    if not data:
        return
    decoder = DECODERS[data[0] % len(DECODERS)]
    with no_tracebacks(), contextlib.suppress(BadMessage):
        decoder(data[1:])
