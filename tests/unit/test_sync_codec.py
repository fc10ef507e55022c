"""Records on the peer wire: round trips, batch limits, validation."""

from __future__ import annotations

import json

import pytest
from twisted.internet import task

from gtmcluster.state.store import Record, Store, Version
from gtmcluster.sync import codec
from gtmcluster.sync import replicator as rep


def rec(key: str = "k", value: object = 1, ttl: float | None = 60.0, born: float = 100.0) -> Record:
    return Record(key, value, Version(5000, 2, "gtm-a"), ttl, born)


def test_round_trip_carries_age_not_birth() -> None:
    """The receiver computes birth from the age it was sent with, on its own clock."""
    batch, keys = next(codec.batches([rec(born=100.0)], now=130.0))
    assert keys == ["k"]
    (back,) = codec.decode(batch, now=9000.0)
    assert back.version == Version(5000, 2, "gtm-a")
    assert back.born == pytest.approx(8970.0)
    assert back.remaining(9000.0) == pytest.approx(30.0)


def test_expired_records_are_not_sent_nor_kept() -> None:
    """A record past its TTL is left out of batches; one that expires in transit is dropped."""
    assert list(codec.batches([rec(ttl=10, born=0)], now=20)) == []
    stale = json.dumps([["k", 1, 5000, 0, "gtm-a", 10, 11]]).encode()
    assert codec.decode(stale, now=50) == []


def test_batches_stay_under_the_limit_and_never_split_a_record() -> None:
    """Many records make several batches, each within the limit, together holding all."""
    records = [rec(f"key/{i}", "x" * 100) for i in range(2000)]
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
        (b'[["k", 1, 5, 0, "gtm-a", NaN, 0]]', "bad TTL"),
        (json.dumps([["k", 1, 5, 0, "gtm-a", None, -1]]).encode(), "bad age"),
        (json.dumps([["k", 1, 10**15, 0, "gtm-a", None, 0]]).encode(), "a day ahead"),
        (b"[" * 50000 + b"]" * 50000, "not JSON"),
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
    count = rep.SEND_ALL_CHUNK * 2 + 7
    for i in range(count):
        store.merge(Record(f"k/{i}", i, Version(5000 + i, 0, "gtm-a"), 600.0, 1000.0))
    store.merge(Record("other", 1, Version(5000, 0, "gtm-b"), None, 1000.0))
    store.merge(Record("dead", 1, Version(5000, 0, "gtm-a"), 10.0, 900.0))
    r = rep.Replicator(store, clock, node="n1", group="g", datacenter="DC1", members=["n1"], config_digest="x")
    batches = r._batches_of("gtm-a")
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
    key = '"k\\ud800"' if field == "key" else '"k"'
    value = '"\\udfff"' if field == "value" else "1"
    batch = f'[[{key},{value},5000,0,"gtm-a",null,0]]'.encode()
    with pytest.raises(codec.BadMessage, match="not valid UTF-8"):
        codec.decode(batch, now=10.0)


def test_an_escaped_surrogate_pair_is_ordinary_text() -> None:
    """A pair of escaped surrogates is one character outside the BMP: accepted."""
    (record,) = codec.decode(b'[["k","\\ud83d\\ude00",5000,0,"gtm-a",null,0]]', now=10.0)
    assert record.value == "\U0001f600"


def test_the_largest_record_accepted_can_always_be_sent_on() -> None:
    """A record of MAX_RECORD bytes (encoded with age 0) is accepted and still fits a batch
    when sent on a year later (its age then longer); one byte more is refused."""

    def entry(size: int) -> bytes:
        base = ["k", "", 5000, 0, "gtm-a", None, 0.0]
        base[1] = "v" * (size - len(json.dumps(base, separators=(",", ":"))))
        return json.dumps([base], separators=(",", ":")).encode()

    (record,) = codec.decode(entry(codec.MAX_RECORD), now=10.0)
    ((batch, keys),) = list(codec.batches([record], now=10.0 + 365 * 86400.123))
    assert keys == ["k"] and len(batch) <= codec.MAX_BATCH
    with pytest.raises(codec.BadMessage, match="larger than"):
        codec.decode(entry(codec.MAX_RECORD + 1), now=10.0)


def test_a_record_that_grows_when_re_encoded_is_measured_as_it_would_be_sent() -> None:
    """Numbers written short (1e15) are longer in the form this node sends them: a batch of
    14 KB of them holds a record over MAX_RECORD once re-encoded, and is refused."""
    value = [1e15] * 3500  # "1e15" on the wire, "1000000000000000.0" when sent on
    raw = b'[["k",[' + b",".join([b"1e15"] * len(value)) + b'],5000,0,"gtm-a",null,0]]'
    assert len(raw) < 20_000
    with pytest.raises(codec.BadMessage, match="larger than"):
        codec.decode(raw, now=10.0)
