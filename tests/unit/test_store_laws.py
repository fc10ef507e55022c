"""Merge laws and convergence of the record store (hypothesis)."""

from __future__ import annotations

import random
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store

ORIGINS = ["gtm-a", "gtm-b", "gtm-c"]

records = st.builds(
    lambda key, value, wall, logical, origin, deleted: Record(
        f"k/{key}", None if deleted else value, Version(wall, logical, origin), None, 0.0
    ),
    key=st.integers(0, 15),
    value=st.integers(0, 5),
    wall=st.integers(1, 6),
    logical=st.integers(0, 2),
    origin=st.sampled_from(ORIGINS),
    deleted=st.booleans(),
)


def state(store: Store) -> dict[str, tuple[object, Version]]:
    return {r.key: (r.value, r.version) for r in store.all_records()}


def merged(*batches: list[Record]) -> Store:
    store = Store("observer", lambda: 0.0)
    for batch in batches:
        for record in batch:
            store.merge(record)
    return store


@given(st.lists(records, max_size=30))
def test_merge_is_idempotent(batch: list[Record]) -> None:
    """Merging the same records twice changes nothing."""
    assert state(merged(batch)) == state(merged(batch, batch))


@given(st.lists(records, max_size=30), st.lists(records, max_size=30))
def test_merge_is_commutative(a: list[Record], b: list[Record]) -> None:
    """The order two sets of records arrive in does not matter."""
    assert state(merged(a, b)) == state(merged(b, a))


@given(st.lists(records, max_size=20), st.lists(records, max_size=20), st.lists(records, max_size=20))
def test_merge_is_associative(a: list[Record], b: list[Record], c: list[Record]) -> None:
    """(a + b) + c == a + (b + c): merging a merged store gives the same state."""
    left = merged(state_records(merged(a, b)), c)
    right = merged(a, state_records(merged(b, c)))
    assert state(left) == state(right)


def state_records(store: Store) -> list[Record]:
    return list(store.all_records())


#: records as real nodes write them: a version is one write, so it fixes the value
honest_records = records.map(
    lambda r: Record(
        r.key, None if r.value is None else zlib.crc32(repr((r.key, r.version)).encode()) % 7, r.version, None, 0.0
    )
)


@settings(max_examples=60)
@given(st.lists(honest_records, min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_random_partial_delivery_then_full_exchange_converges(batch: list[Record], rng: random.Random) -> None:
    """Records delivered to random subsets of nodes, in random order and duplicated, end
    identical everywhere once every node has merged every other node's state."""
    stores = [Store(name, lambda: 0.0) for name in ORIGINS]
    for record in batch + rng.sample(batch, len(batch) // 2):
        stores[rng.randrange(len(stores))].merge(record)  # every record reaches some node
        for store in stores:
            if rng.random() < 0.5:
                store.merge(record)
    for _ in range(2):
        for a in stores:
            for b in stores:
                for record in list(b.all_records()):
                    a.merge(record)
    digests = {s.digest() for s in stores}
    assert len(digests) == 1
    assert state(stores[0]) == state(merged(batch))


@given(st.lists(records, max_size=30))
def test_digest_depends_only_on_the_state(batch: list[Record]) -> None:
    """Equal states give equal digests, and the per-origin summaries add up to the state."""
    a = merged(batch)
    b = merged(list(reversed(batch)))
    assert a.digest() == b.digest()
    assert sum(s.count for s in a.summaries().values()) == len(a)
