"""Records on the peer wire: round trips, batch limits, validation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet import task

from gtmcluster.state import schema
from gtmcluster.state.record import BUCKETS, Record, Version
from gtmcluster.state.store import Store
from gtmcluster.sync import antientropy, codec
from gtmcluster.sync import replicator as rep

KEY = "probe/192.0.2.1"


def rec(key: str = KEY, value: object = None, ttl: float | None = 60.0, born: float = 100.0) -> Record:
    return Record(key, {"by": "gtm-a"} if value is None else value, Version(5000, 2, "gtm-a"), ttl, born)


def entry(key: str = KEY, value: object = None, ttl: float | None = 60.0, origin: str = "gtm-a") -> list[object]:
    """A record as it travels: [key, value, wall_ms, logical, origin, ttl, age]."""
    return [key, {"by": "gtm-a"} if value is None else value, 5000, 0, origin, ttl, 0]


def wire(*entries: list[object]) -> bytes:
    return json.dumps(list(entries)).encode()


def test_round_trip_carries_age_not_birth() -> None:
    """The receiver computes birth from the age it was sent with, on its own clock."""
    batch, keys = next(codec.batches([rec(born=100.0)], now=130.0))
    assert keys == [KEY]
    (back,) = codec.decode(batch, now=9000.0)
    assert back.version == Version(5000, 2, "gtm-a")
    assert back.born == pytest.approx(8970.0)
    assert back.remaining(9000.0) == pytest.approx(30.0)


def test_expired_records_are_not_sent_nor_kept() -> None:
    """A record past its TTL is left out of batches; one that expires in transit is dropped."""
    assert list(codec.batches([rec(ttl=10, born=0)], now=20)) == []
    stale = json.dumps([[KEY, {"by": "gtm-a"}, 5000, 0, "gtm-a", 10, 11]]).encode()
    assert codec.decode(stale, now=50) == []


def test_batches_stay_under_the_limit_and_never_split_a_record() -> None:
    """Many records make several batches, each within the limit, together holding all."""
    records = [rec(f"probe/10.0.{i // 250}.{i % 250}", {"by": "gtm-a", "note": "x" * 100}) for i in range(2000)]
    out = list(codec.batches(records, now=100.0))
    assert len(out) > 1
    assert all(len(batch) <= codec.MAX_BATCH for batch, _ in out)
    assert sum(len(keys) for _, keys in out) == 2000
    assert sum(len(codec.decode(b, 100.0)) for b, _ in out) == 2000


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"not json", "not JSON"),
        (b"{}", "not a list"),
        (b"[[1,2,3]]", "7 fields"),
        (json.dumps([["", 1, 5, 0, "gtm-a", None, 0]]).encode(), "bad record key"),
        (json.dumps([["k" * 600, 1, 5, 0, "gtm-a", None, 0]]).encode(), "bad record key"),
        (json.dumps([["k", 1, -5, 0, "gtm-a", None, 0]]).encode(), "bad version"),
        (json.dumps([["k", 1, 5, True, "gtm-a", None, 0]]).encode(), "bad version"),
        (json.dumps([["k", 1, 5, 0, "stranger", None, 0]]).encode(), "not a member"),
        (json.dumps([["k", 1, 5, 0, "gtm-a", -1, 0]]).encode(), "bad TTL"),
        (b'[["k", 1, 5, 0, "gtm-a", NaN, 0]]', "not JSON"),
        (b'[["admin/vs/a", {"state": "enabled", "load": Infinity}, 5, 0, "gtm-a", null, 0]]', "not JSON"),
        (json.dumps([["k", 1, 5, 0, "gtm-a", None, -1]]).encode(), "bad age"),
        (json.dumps([["k", 1, 10**15, 0, "gtm-a", None, 0]]).encode(), "a day ahead"),
        (b"[" * 50000 + b"]" * 50000, "not JSON"),
        # integers past a float's range (JSON reads hundreds of digits exactly): refused,
        # never an OverflowError out of the decoder
        (b'[["k", 1, 5, 0, "gtm-a", 1' + b"0" * 400 + b", 0]]", "bad TTL"),
        (b'[["k", 1, 5, 0, "gtm-a", null, 1' + b"0" * 400 + b"]]", "bad age"),
        (b'[["metrics/vs/a", {"capacity": 1' + b"0" * 400 + b', "by": "gtm-a"}, 5, 0, "gtm-a", 30, 0]]', "capacity"),
        (
            b'[["held/vs/a", {"since": -1' + b"0" * 400 + b', "reason": "r", "by": "gtm-a"}, 5, 0, "gtm-a", null, 0]]',
            "since",
        ),
    ],
)
def test_malformed_batches_raise_bad_message(payload: bytes, why: str) -> None:
    """Anything malformed is one declared error, naming what is wrong."""
    with pytest.raises(codec.BadMessage, match=why):
        codec.decode(payload, now=1000.0, origins=frozenset({"gtm-a", "gtm-b"}))


def test_a_full_send_reads_the_store_a_chunk_at_a_time_and_ages_each_chunk_when_encoded() -> None:
    """SendAll's batches: every live record of the origin once (across chunk boundaries,
    none of another origin, none expired), read from the store as the batches are asked
    for, each chunk encoded with the time it is encoded at."""
    clock = task.Clock()
    clock.advance(1000)
    store = Store("n1", clock.seconds)
    count = antientropy.SEND_ALL_CHUNK * 2 + 7
    for i in range(count):
        store.merge(Record(f"k/{i}", i, Version(5000 + i, 0, "gtm-a"), 600.0, 1000.0))
    store.merge(Record("other", 1, Version(5000, 0, "gtm-b"), None, 1000.0))
    store.merge(Record("dead", 1, Version(5000, 0, "gtm-a"), 10.0, 900.0))  # (encoding checks no schema)
    r = rep.Replicator(store, clock, node="n1", group="g", datacenter="DC1", members=["n1"], config_digest="x")
    batches = r.anti_entropy._batches_of("gtm-a")
    first_batch, _ = next(batches)
    clock.advance(100)  # the rest is encoded 100 s later
    ages = {entry[0]: entry[6] for entry in json.loads(first_batch)}
    keys: list[str] = list(ages)
    for batch, batch_keys in batches:
        keys += batch_keys
        ages.update({entry[0]: entry[6] for entry in json.loads(batch)})
    assert sorted(keys) == sorted(f"k/{i}" for i in range(count))
    assert set(ages.values()) == {0.0, 100.0}  # each chunk aged when it was encoded


@pytest.mark.parametrize("field", ["key", "value"])
def test_text_that_is_not_utf8_is_refused(field: str) -> None:
    """JSON may escape a lone UTF-16 surrogate; such a string cannot be hashed (keys) nor sent
    on (values), so a record holding one is malformed."""
    key = '"admin/vs/k\\ud800"' if field == "key" else '"admin/vs/k"'
    value = '{"state":"enabled","by":"\\udfff"}' if field == "value" else '{"state":"enabled"}'
    batch = f'[[{key},{value},5000,0,"gtm-a",null,0]]'.encode()
    with pytest.raises(codec.BadMessage, match="not valid UTF-8"):
        codec.decode(batch, now=10.0)


def test_an_escaped_surrogate_pair_is_ordinary_text() -> None:
    """A pair of escaped surrogates is one character outside the BMP: accepted."""
    (record,) = codec.decode(
        b'[["admin/vs/k",{"state":"drain","by":"\\ud83d\\ude00"},5000,0,"gtm-a",null,0]]', now=10.0
    )
    assert record.value["by"] == "\U0001f600"


def test_the_largest_record_accepted_can_always_be_sent_on() -> None:
    """The largest record any kind allows (a key of MAX_KEY characters, a value of its kind's
    largest size) is accepted and still fits a batch when sent on a year later (its age then
    longer): well within MAX_RECORD, which stays the wire's own bound. A value one byte over
    its kind's size is refused."""
    largest = schema.KINDS["admin"]
    assert largest.max_size == max(k.max_size for k in schema.KINDS.values())
    key = "admin/vs/" + "v" * (codec.MAX_KEY - len("admin/vs/"))

    def sized(size: int) -> bytes:
        value = {"state": "enabled", "note": ""}
        value["note"] = "r" * (size - schema.size_of(value))
        assert schema.size_of(value) == size
        return json.dumps([[key, value, 5000, 0, "gtm-a", None, 0.0]], separators=(",", ":")).encode()

    (record,) = codec.decode(sized(largest.max_size), now=10.0)
    assert len(codec.encode(record, record.born)) < codec.MAX_RECORD
    ((batch, keys),) = list(codec.batches([record], now=10.0 + 365 * 86400.123))
    assert keys == [key] and len(batch) <= codec.MAX_BATCH
    with pytest.raises(codec.BadRecord, match=f"over {largest.max_size} bytes"):
        codec.decode(sized(largest.max_size + 1), now=10.0)


def test_a_value_that_grows_when_re_encoded_is_measured_as_it_would_be_sent() -> None:
    """Numbers written short (1e15) are longer in the form this node sends them: a value of
    3 KB of them on the wire is over its kind's 8192 bytes once re-encoded, and refused."""
    raw = b'[["admin/vs/a",{"state":"enabled","n":[' + b",".join([b"1e15"] * 600) + b']},5000,0,"gtm-a",null,0]]'
    assert len(raw) < 3_100 and schema.STATE_SIZE == 8192
    with pytest.raises(codec.BadRecord, match="over 8192 bytes"):
        codec.decode(raw, now=10.0)


def test_anti_entropy_messages_read_back_what_was_made() -> None:
    """Each message the replicator sends is made and read by the codec: what is read is
    what was made, checked."""
    assert codec.read_summary(codec.summary({"gtm-a": (3, 0xABC)})) == {"gtm-a": (3, 0xABC)}
    hashes = tuple(range(BUCKETS))
    assert codec.read_buckets(codec.buckets(hashes)) == hashes
    assert codec.read_keys(codec.keys(["k/1", "k/2"]), "keys") == ["k/1", "k/2"]
    assert codec.read_bucket_cursors(codec.bucket_list([[7, "k/1"]])) == [(7, "k/1")]
    entry = codec.listing_entry("k/1", Version(1000, 2, "gtm-b"))
    assert codec.read_listing(codec.listing([entry])) == [("k/1", Version(1000, 2, "gtm-b"))]


@pytest.mark.parametrize(
    ("read", "data", "why"),
    [
        (codec.read_summary, b'{"gtm-a": [3, "xyz"]}', "not hex"),
        (codec.read_summary, b"[]", "not a mapping"),
        (codec.read_buckets, b"\0" * 8, "wrong size"),
        (lambda d: codec.read_keys(d, "keys"), b'["a", 1]', "not a list of strings"),
        (codec.read_bucket_cursors, b'[[99999, ""]]', "entries are"),
        (codec.read_listing, b'[["k", 1, 2]]', "entries are"),
        (codec.read_listing, b"{", "not JSON"),
    ],
)
def test_a_malformed_anti_entropy_message_is_refused(read: Any, data: bytes, why: str) -> None:
    with pytest.raises(codec.BadMessage, match=why):
        read(data)
