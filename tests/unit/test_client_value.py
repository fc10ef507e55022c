"""The compact form of client subnets' figures (`proximity.clientvalue`): the store keeps
``client/<subnet>/<dc>`` values packed, and they must be indistinguishable from the dict
they stand for wherever a value is read, checked or leaves the process (the wire, the
snapshot, the digests); a value of another shape is kept exactly as it came; the kind stays
indexed (read per subnet) and its records are withheld from older peers as before.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.proximity.clients import merge_sample, population_after
from gtmcluster.proximity.clientvalue import ClientValue
from gtmcluster.state import keys, schema, snapshot
from gtmcluster.state.store import Store
from gtmcluster.state.values import numerous
from gtmcluster.sync import codec

SUBNET = "198.51.100.0/24"
KEY = keys.client(SUBNET, "DC1")


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def figures(*samples: int, by: str = "gtm-1") -> dict[str, Any]:
    value: dict[str, Any] | None = None
    for us in samples:
        value = merge_sample(value, us, "rum", by)
    assert value is not None
    return value


def test_a_client_value_is_kept_compact_and_reads_as_its_dict() -> None:
    store = Store("gtm-1", Clock())
    plain = figures(*range(20_000, 40_000, 1_000))  # 20 samples: the last 16 kept
    record = store.put(KEY, plain, ttl=600)
    value = record.value
    assert type(value) is ClientValue
    assert (
        value == plain and plain == value and dict(value) == plain and json.loads(json.dumps(value.to_json())) == plain
    )
    assert value["rtt"] == plain["rtt"] and value["samples"] == plain["samples"] and len(value["samples"]) == 16
    assert value.get("source") == "rum" and value.get("by") == "gtm-1" and value.get("other", 7) == 7
    assert list(value) == ["rtt", "samples", "source", "by"] and len(value) == 4 and "rtt" in value
    assert value != {**plain, "by": "gtm-2"} and value != figures(5)
    # the next sample merges into it as into the dict
    assert merge_sample(value, 1, "rum", "gtm-2") == merge_sample(plain, 1, "rum", "gtm-2")


def test_its_samples_are_a_copy() -> None:
    value = Store("gtm-1", Clock()).put(KEY, figures(10, 20, 30)).value
    samples = value["samples"]
    samples.append(99)
    assert value["samples"] == [10, 20, 30]


def test_a_compact_value_is_smaller() -> None:
    """The point of it: a full record's value in a fifth of the dict's bytes."""
    plain = figures(*range(100_000, 116_000, 1_000))
    compact = ClientValue.of(plain)
    assert compact is not None
    assert _size(compact) * 4 < _size(plain), (_size(compact), _size(plain))


def _size(value: Any, seen: set[int] | None = None) -> int:
    import sys

    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, str):  # (names are shared in either form)
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(_size(v, seen) for v in value.values())
    elif isinstance(value, list):
        size += sum(_size(v, seen) for v in value)
    elif isinstance(value, ClientValue):
        size += sys.getsizeof(value._packed)
    return size


def test_values_of_another_shape_are_kept_exactly() -> None:
    """A client key holding a value another version shapes otherwise is neither compacted
    nor altered, so it is relayed and saved as it came (the schema judges it as before)."""
    store = Store("gtm-1", Clock())
    plain = figures(12_000)
    for odd in (
        {**plain, "jitter": 3},
        {**plain, "rtt": 1.5},
        {**plain, "rtt": True},
        {**plain, "samples": (12_000,)},
        {**plain, "samples": [2**32]},
        {**plain, "rtt": -1},
        {**plain, "source": 1},
        {"rtt": 1, "samples": [1], "source": "rum"},
    ):
        record = store.put(KEY, odd)
        assert type(record.value) is dict and record.value == odd


def test_the_schema_checks_it_as_the_dict() -> None:
    value = ClientValue.of(figures(12_000, 13_000))
    assert value is not None
    assert schema.problem(KEY, value, "gtm-1", 600.0) is None
    assert schema.problem(KEY, ClientValue.of({**figures(12_000), "source": "other"}), "gtm-1", 600.0) is not None
    too_slow = ClientValue.of({**figures(12_000), "rtt": schema.MAX_CLIENT_RTT + 1})
    assert too_slow is not None and schema.problem(KEY, too_slow, "gtm-1", 600.0) is not None
    # an older peer is not sent one (protocol 5, as for the dict)
    assert schema.version_needed(KEY) == 5


def test_compact_values_travel_and_persist_as_their_dicts(tmp_path: Path) -> None:
    """Wire (codec) and disk (snapshot) carry the plain dict; the receiving store holds the
    compact form again and both stores have the same digest."""
    clock = Clock()
    store = Store("gtm-1", clock)
    plain = figures(15_000, 16_000, 14_000)
    store.put(KEY, plain, ttl=600)
    store.put(keys.client(SUBNET, "DC2"), figures(90_000, by="gtm-2"), ttl=600)

    batch, _ = next(codec.batches(store.all_records(), now=1000.0))
    on_wire = {entry[0]: entry[1] for entry in json.loads(batch)}
    assert on_wire[KEY] == plain

    received = Store("gtm-2", clock)
    for record in codec.decode(batch, now=1000.0):
        received.merge(record)
    assert received.digest() == store.digest()
    held = received.get(KEY)
    assert held is not None and type(held.value) is ClientValue and held.value == plain

    snapshot.write(tmp_path / snapshot.FILENAME, snapshot.rows(store, 50_000.0, 1000.0), "gtm-1")
    restored = Store("gtm-1", clock)
    assert snapshot.read(tmp_path / snapshot.FILENAME, restored, 50_000.0) == 2
    assert restored.digest() == store.digest()
    back = restored.get(KEY)
    assert back is not None and type(back.value) is ClientValue and back.value == plain


def test_the_kind_stays_indexed() -> None:
    """A subnet's figures from every data center are read together (`Store.children`)."""
    store = Store("gtm-1", Clock())
    for dc, us in (("DC1", 10_000), ("DC2", 20_000), ("DC3", 30_000)):
        store.put(keys.client(SUBNET, dc), figures(us), ttl=600)
    store.put(keys.client("203.0.113.0/24", "DC1"), figures(5), ttl=600)
    assert not numerous("client")
    held = store.children(f"{keys.CLIENT}{keys.subnet_text(SUBNET)}/")
    assert sorted(r.value["rtt"] for r in held) == [10_000, 20_000, 30_000]
    assert len(list(store.scan(keys.CLIENT))) == 4


def test_a_population_reads_compact_figures() -> None:
    store = Store("gtm-1", Clock())
    store.put(KEY, figures(10_000), ttl=600)

    def held(name: str) -> dict[str, int]:
        record = store.get(keys.client(keys.subnet_of_text(name), "DC1"))
        return {} if record is None else {"DC1": record.value["rtt"]}

    pop = population_after(None, ipaddress.ip_network(SUBNET), held)
    assert pop == {"subnets": {"198.51.100.0_24": 1}, "rtt": {"DC1": 10_000}, "n": 1}


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.lists(st.integers(0, 2**32 - 1), max_size=20),
    st.sampled_from(["rum", "probe", ""]),
    st.text(max_size=10),
)
def test_any_value_of_the_shape_comes_back_exactly(rtt: int, samples: list[int], source: str, by: str) -> None:
    plain = {"rtt": rtt, "samples": samples, "source": source, "by": by}
    compact = ClientValue.of(plain)
    assert compact is not None and compact.to_json() == plain and compact == plain and dict(compact) == plain
