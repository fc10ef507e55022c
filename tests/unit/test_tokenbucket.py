"""`runtime.tokenbucket.Buckets`: a token bucket per key for a bounded number of keys, the
least recently used forgotten (and counted), a forgotten key starting full, and new rates
taken by the buckets kept."""

from __future__ import annotations

from gtmcluster.runtime.tokenbucket import Buckets


def test_each_key_has_its_bucket_and_the_table_is_bounded_least_recently_used_first() -> None:
    buckets: Buckets[str] = Buckets(1.0, 2.0, size=2)
    assert [buckets.take("a", 0.0) for _ in range(3)] == [True, True, False]
    assert buckets.take("b", 0.0)
    assert buckets.take("a", 1.0)  # (a token flowed in; "a" is now the most recent)
    assert buckets.take("c", 1.0) and len(buckets) == 2 and buckets.forgotten == 1  # "b" forgotten
    assert buckets.take("a", 1.0) is False  # (kept: still empty)
    assert [buckets.take("b", 1.0) for _ in range(3)] == [True, True, False]  # forgotten: full again


def test_new_rates_apply_to_the_buckets_kept_and_the_bound_at_once() -> None:
    buckets: Buckets[int] = Buckets(1.0, 10.0, size=10)
    for key in range(10):
        buckets.take(key, 0.0)
    buckets.configure(100.0, 1.0, size=4)
    assert len(buckets) == 4 and buckets.forgotten == 6
    assert buckets.bucket(9, 0.0).tokens == 1.0  # (capped at the new capacity)
    assert buckets.take(9, 0.0) and not buckets.take(9, 0.0) and buckets.take(9, 0.01)
