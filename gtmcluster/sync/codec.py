"""Records on the peer wire: compact JSON batches under AMP's 64 KiB value limit.

A record travels as ``[key, value, wall_ms, logical, origin, ttl, age]``: its TTL and how
old it is at sending, not when it was born, so the receiver computes its expiry from its
own clock (born = now - age) and clock skew between nodes neither kills nor resurrects
records. Batches are JSON arrays of such entries, each batch at most `MAX_BATCH` bytes.
Decoding validates everything and raises `BadMessage` for anything malformed: the wire
format here, and each record against the schema of its kind (`state.schema`: key, value,
TTL and size; a `BadRecord` says which kind and why). JSON's NaN and Infinity are refused
anywhere in a batch.

The anti-entropy messages (a summary per origin, an origin's bucket hashes, listings of
keys and versions, lists of keys and of bucket cursors) are made and read here too: the
replicator hands values in and gets checked values back, and never sees their bytes.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gtmcluster.groupconfig.bundle import BadBundle, Header
from gtmcluster.state import schema
from gtmcluster.state.record import BUCKETS, MAX_LOGICAL, Record, Version
from gtmcluster.state.values import compact, plain, shared, shared_text

MAX_BATCH = 60_000
#: the largest record this node accepts, encoded with age 0 (so every node measures it
#: alike): with any age (at most 16 more bytes) it still fits a batch of its own, so a
#: record merged here never becomes one that cannot be relayed or pulled
MAX_RECORD = MAX_BATCH - 2 - 16
MAX_KEY = 512
#: a version further than this ahead of our clock is refused (it would drag every
#: node's hybrid clock into the future)
MAX_FUTURE_MS = 24 * 3600 * 1000
MAX_TTL = 10 * 365 * 24 * 3600.0


#: JSON's escape of a UTF-16 surrogate (``\ud800``): alone, it makes a string that is not
#: UTF-8, which the store (hashing keys) and the wire (sending values on) cannot encode
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

#: one encoder for every record (json.dumps would make one per call)
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=plain).encode


class BadMessage(Exception):
    """A peer sent something malformed; the connection is dropped."""


class BadRecord(BadMessage):
    """A record that its kind's schema refuses (`state.schema.problem`)."""

    def __init__(self, problem: schema.Problem):
        super().__init__(problem.text)
        self.problem = problem


def _constant(name: str) -> Any:
    """JSON's NaN, Infinity and -Infinity: not numbers any record may hold."""
    raise ValueError(f"{name} is not a number")


def encode(record: Record, now: float) -> bytes:
    age = max(0.0, now - record.born)
    entry = [
        record.key,
        record.value,
        record.wall_ms,
        record.logical,
        record.origin,
        record.ttl,
        round(age, 3),
    ]
    return _encode(entry).encode()


def batches(records: Iterable[Record], now: float, limit: int = MAX_BATCH) -> Iterator[tuple[bytes, list[str]]]:
    """(JSON array, keys in it) batches of encoded records, each at most *limit* bytes.

    A record never splits across batches; expired records are left out.
    """
    parts: list[bytes] = []
    keys: list[str] = []
    size = 2
    for record in records:
        if record.ttl is not None and now - record.born >= record.ttl:
            continue  # expired on the way
        data = encode(record, now)
        if len(data) + 2 > limit:
            raise ValueError(f"record {record.key!r} is larger than a batch ({len(data)} bytes)")
        if parts and size + len(data) + 1 > limit:
            yield b"[" + b",".join(parts) + b"]", keys
            parts, keys, size = [], [], 2
        parts.append(data)
        keys.append(record.key)
        size += len(data) + 1
    if parts:
        yield b"[" + b",".join(parts) + b"]", keys


def decode(
    batch: bytes, now: float, origins: frozenset[str] | None = None, version: int = schema.NEWEST_VERSION
) -> list[Record]:
    """Records from a batch; *origins*, when given, are the only writers accepted;
    *version*: the protocol version whose schema checks them (`schema.problem`)."""
    try:
        entries = json.loads(batch, parse_constant=_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise BadMessage(f"records are not JSON: {type(e).__name__}") from None
    if not isinstance(entries, list):
        raise BadMessage("records are not a list")
    out = []
    # only a batch that may hold such an escape is checked record by record (ours do not,
    # unless some text has a backslash before "ud8".."udf": then the check just passes)
    check_text = _SURROGATE_ESCAPE.search(batch) is not None
    # Re-encoded, a record may be longer than it came (up to 4.5 times: JSON's 1e15 is
    # 1000000000000000.0 in Python's form), so any batch over a fifth of the limit is
    # checked record by record; smaller ones cannot hold a record too large.
    check_size = len(batch) * 5 > MAX_RECORD
    for entry in entries:
        record = _record(entry, now, origins, check_text, version)
        if record is not None:
            if check_size and not _fits(record) and len(encode(record, record.born)) > MAX_RECORD:
                raise BadMessage(f"record {record.key!r} is larger than {MAX_RECORD} bytes")
            out.append(record)
    return out


def _fits(record: Record) -> bool:
    """Whether *record* (its value checked by its kind's schema already) surely encodes
    within `MAX_RECORD`, without encoding it: its value is within its kind's size, and a
    character of the key or origin takes at most 6 bytes (an escape), the numbers 100."""
    kind = schema.KINDS.get(record.key.partition("/")[0])
    return kind is not None and 6 * (len(record.key) + len(record.origin)) + kind.max_size + 100 <= MAX_RECORD


def _record(
    entry: Any,
    now: float,
    origins: frozenset[str] | None,
    check_text: bool = False,
    version: int = schema.NEWEST_VERSION,
) -> Record | None:
    if not isinstance(entry, list) or len(entry) != 7:
        raise BadMessage("a record is not a list of 7 fields")
    key, value, wall_ms, logical, origin, ttl, age = entry
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise BadMessage(f"bad record key {str(key)[:40]!r}")
    if not _int(wall_ms) or not _int(logical) or logical > MAX_LOGICAL:
        raise BadMessage(f"bad version for {key!r}")
    if wall_ms > now * 1000 + MAX_FUTURE_MS:
        raise BadMessage(f"version of {key!r} is more than a day ahead of this node's clock")
    if not isinstance(origin, str) or not origin or (origins is not None and origin not in origins):
        raise BadMessage(f"record {key!r} from {origin!r}, which is not a member")
    if ttl is not None and (not schema.finite(ttl) or not 0 < ttl <= MAX_TTL):
        raise BadMessage(f"bad TTL for {key!r}")
    if not schema.finite(age) or age < 0:
        raise BadMessage(f"bad age for {key!r}")
    if check_text:
        try:
            _encode([key, value, origin]).encode()
        except UnicodeEncodeError:
            raise BadMessage(f"record {key!r} holds text that is not valid UTF-8 (a lone surrogate)") from None
    problem = schema.problem(key, value, origin, ttl, version)
    if problem is not None:
        raise BadRecord(problem)
    if ttl is not None and age >= ttl:
        return None  # expired in transit
    # Origins and TTLs repeat across records: the store keeps one object of each, and
    # the value in the form it keeps (see state.values).
    origin = shared_text(origin)
    if ttl is not None:
        ttl = shared(ttl)
    return Record(key, compact(key, value), Version(wall_ms, logical, origin), ttl, now - age)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# -- anti-entropy messages: what each is, made and read here (read: checked whole, or
# `BadMessage`)


def summary(summaries: dict[str, tuple[int, int]]) -> bytes:
    """Per origin, how many records and the XOR of their hashes: ``{origin: [count, xor hex]}``."""
    return json.dumps({o: [count, f"{xor:016x}"] for o, (count, xor) in summaries.items()}).encode()


def buckets(hashes: Iterable[int]) -> bytes:
    """An origin's `BUCKETS` bucket hashes, 8 bytes each."""
    return struct.pack(f"!{BUCKETS}Q", *hashes)


def read_buckets(data: bytes) -> tuple[int, ...]:
    if len(data) != 8 * BUCKETS:
        raise BadMessage("bucket list of the wrong size")
    return struct.unpack(f"!{BUCKETS}Q", data)


def keys(names: list[str]) -> bytes:
    """Keys asked for (Pull), or left to ask for (its answer's rest)."""
    return json.dumps(names).encode()


def bucket_list(cursors: list[list[Any]]) -> bytes:
    """``[[bucket, after-key], ...]``: where a Listing starts in each bucket."""
    return json.dumps(cursors).encode()


def listing_entry(key: str, version: Version) -> list[Any]:
    """One entry of a Listing: ``[key, wall_ms, logical, origin]``."""
    return [key, version.wall_ms, version.logical, version.origin]


def listing(entries: list[list[Any]]) -> bytes:
    return json.dumps(entries).encode()


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadMessage(f"{what} is not JSON") from None


def read_keys(data: bytes, what: str) -> list[str]:
    value = _json(data, what)
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise BadMessage(f"{what} is not a list of strings")
    return value


def read_bucket_cursors(data: bytes) -> list[tuple[int, str]]:
    value = read_bucket_list(data)
    return [(b, after) for b, after in value]


def read_bucket_list(data: bytes) -> list[list[Any]]:
    value = _json(data, "bucket list")
    if not isinstance(value, list) or len(value) > BUCKETS:
        raise BadMessage("bucket list is not a list of at most 1024 entries")
    for item in value:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not isinstance(item[0], int)
            or not 0 <= item[0] < BUCKETS
            or not isinstance(item[1], str)
        ):
            raise BadMessage("bucket list entries are [bucket, after-key]")
    return value


def read_listing(data: bytes) -> list[tuple[str, Version]]:
    value = _json(data, "listing")
    out = []
    if not isinstance(value, list):
        raise BadMessage("listing is not a list")
    for item in value:
        if (
            not isinstance(item, list)
            or len(item) != 4
            or not isinstance(item[0], str)
            or not isinstance(item[1], int)
            or not isinstance(item[2], int)
            or not isinstance(item[3], str)
        ):
            raise BadMessage("listing entries are [key, wall_ms, logical, origin]")
        out.append((item[0], Version(item[1], item[2], item[3])))
    return out


def read_summary(data: bytes) -> dict[str, tuple[int, int]]:
    value = _json(data, "summary")
    if not isinstance(value, dict):
        raise BadMessage("summary is not a mapping")
    out = {}
    for origin, item in value.items():
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], int) or not isinstance(item[1], str):
            raise BadMessage("summary entries are [count, xor]")
        try:
            out[origin] = (item[0], int(item[1], 16))
        except ValueError:
            raise BadMessage("summary xor is not hex") from None
    return out


# -- config sync ------------------------------------------------------------------------------

#: reasons a member gives for refusing a bundle, and their length
MAX_REASONS = 50
MAX_REASON = 1000


@dataclass(frozen=True)
class ConfigView:
    """What a member says of its config (`ConfigState`): the newest bundle it holds, what
    it runs (the generation and digest of a bundle, 0 and "" for its own file; and the
    config's digest), and the bundle it refused to run, with why."""

    held: Header | None
    generation: int
    digest: str
    config_digest: str
    refused: Header | None = None
    reasons: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "held": self.held.to_json() if self.held else None,
            "running": {"generation": self.generation, "digest": self.digest, "config_digest": self.config_digest},
            "refused": {"bundle": self.refused.to_json(), "reasons": list(self.reasons)} if self.refused else None,
        }


def config_state(view: ConfigView) -> bytes:
    return json.dumps(view.to_json(), sort_keys=True, separators=(",", ":")).encode()


def read_config_state(data: bytes) -> ConfigView:
    doc = _json(data, "config state")
    if not isinstance(doc, dict):
        raise BadMessage("config state: not an object")
    running = doc.get("running")
    refused = doc.get("refused")
    try:
        held = Header.from_json(doc["held"]) if doc.get("held") is not None else None
        if not isinstance(running, dict):
            raise BadMessage("config state: running is not an object")
        generation, digest, config_digest = (
            running.get("generation"),
            running.get("digest"),
            running.get("config_digest"),
        )
        if not (
            type(generation) is int
            and generation >= 0
            and isinstance(digest, str)
            and len(digest) <= 64
            and isinstance(config_digest, str)
            and len(config_digest) <= 128
        ):
            raise BadMessage("config state: running has fields missing or of the wrong type")
        refused_header, reasons = None, ()
        if refused is not None:
            if not isinstance(refused, dict) or not isinstance(refused.get("reasons"), list):
                raise BadMessage("config state: refused is not {bundle, reasons}")
            refused_header = Header.from_json(refused.get("bundle"))
            raw = refused["reasons"]
            if len(raw) > MAX_REASONS or not all(isinstance(r, str) and len(r) <= MAX_REASON for r in raw):
                raise BadMessage(f"config state: reasons are at most {MAX_REASONS} texts of {MAX_REASON} characters")
            reasons = tuple(raw)
    except BadBundle as e:
        raise BadMessage(f"config state: {e}") from None
    return ConfigView(held, generation, digest, config_digest, refused_header, reasons)
