"""A beacon's body checked (`gtmcluster.rum.beacon.parse`) against hostile input, and the
client subnet a POST's source counts for (`subnet_of`): what is taken, and for everything
else a 4xx and a reason of the fixed set, never an exception."""

from __future__ import annotations

import ipaddress
import json
import math
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.proximity.clients import Ranges
from gtmcluster.rum.beacon import (
    BAD_ID,
    BAD_VALUE,
    MALFORMED,
    REASONS,
    REFUSED_SOURCE,
    TOO_LARGE,
    UNKNOWN_DC,
    Beacon,
    Rejected,
    parse,
    subnet_of,
)

DCS = frozenset({"dc1", "dc2"})
MAX = 4096


def check(body: bytes) -> Beacon | Rejected:
    return parse(body, DCS, MAX)


def reason(body: bytes) -> str:
    out = check(body)
    assert isinstance(out, Rejected), out
    assert 400 <= out.status < 500 and out.reason in REASONS and out.message
    return out.reason


def test_a_good_beacon_is_taken_with_or_without_its_id() -> None:
    assert check(b'{"samples": {"dc1": 23.5, "dc2": 120}, "id": "abcdefghij0123456789"}') == Beacon(
        {"dc1": 23.5, "dc2": 120.0}, "abcdefghij0123456789"
    )
    assert check(b'{"samples": {"dc2": 0.1}}') == Beacon({"dc2": 0.1}, None)
    assert check(b'{"samples":{"dc1":59999.9}}') == Beacon({"dc1": 59999.9})


def test_each_fault_has_its_reason() -> None:
    assert reason(b"\xff\xfe") == MALFORMED
    assert reason(b"") == MALFORMED
    assert reason(b"[1, 2]") == MALFORMED
    assert reason(b'{"samples": {"dc1": 1}, "extra": 1}') == MALFORMED
    assert reason(b'{"samples": {"dc1": 1}, "samples": {"dc1": 2}}') == MALFORMED
    assert reason(b'{"samples": {"dc1": 1, "dc1": 2}}') == MALFORMED
    assert reason(b'{"samples": {}}') == MALFORMED
    assert reason(b'{"samples": [["dc1", 1]]}') == MALFORMED
    assert reason(b'{"id": "abcdefghij0123456789"}') == MALFORMED
    assert reason(b'{"samples": {"dc3": 1}}') == UNKNOWN_DC
    assert reason(b'{"samples": {"dc1": 1, "dc2": 2, "dc3": 3}}') == UNKNOWN_DC
    for bad in ("0", "-1", "60000", "1e999", "-1e999", "true", '"12"', "null", "[1]", "{}", "1" * 400):
        assert reason(b'{"samples": {"dc1": %s}}' % bad.encode()) == BAD_VALUE, bad
    for constant in ("NaN", "Infinity", "-Infinity"):
        assert reason(b'{"samples": {"dc1": %s}}' % constant.encode()) == MALFORMED
    bad_ids = ('"short"', '"ABCDEFGHIJ0123456789"', '"' + "b" * 40 + '"', "1234567890123456", '"abcdefghij01234\\n"')
    for bad_id in bad_ids:
        assert reason(b'{"samples": {"dc1": 1}, "id": %s}' % bad_id.encode()) == BAD_ID, bad_id
    assert reason(b" " * (MAX + 1)) == TOO_LARGE


def test_deep_nesting_and_huge_integers_are_malformed_not_errors() -> None:
    assert reason(b"[" * 4000 + b"]" * 4000) == TOO_LARGE  # (over the body's bound first)
    assert parse(b"[" * 4000 + b"]" * 4000, DCS, 10_000) == Rejected(400, MALFORMED, "the beacon is not JSON")
    deep = b'{"samples": ' + b'{"a":' * 1500 + b"1" + b"}" * 1501
    assert parse(deep, DCS, 10_000) == Rejected(400, MALFORMED, "the beacon is not JSON")
    assert parse(b'{"samples": {"dc1": ' + b"9" * 5000 + b"}}", DCS, 10_000) == Rejected(
        400, MALFORMED, "the beacon is not JSON"
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=MAX + 64))
def test_any_bytes_are_taken_or_refused_for_a_reason(body: bytes) -> None:
    out = check(body)
    if isinstance(out, Rejected):
        assert out.reason in REASONS and 400 <= out.status < 500
    else:
        assert set(out.samples) <= DCS


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["samples", "id", "x"]),
        json_values | st.dictionaries(st.sampled_from(["dc1", "dc2", "dc3", ""]), json_values, max_size=4),
        max_size=3,
    )
)
def test_any_json_object_is_taken_only_when_every_value_is_sound(value: dict[str, object]) -> None:
    body = json.dumps(value, allow_nan=True).encode()
    out = check(body)
    if isinstance(out, Rejected):
        assert out.reason in REASONS and 400 <= out.status < 500
        return
    samples = value["samples"]
    assert isinstance(samples, dict) and set(value) <= {"samples", "id"}
    assert out.samples == {k: float(v) for k, v in samples.items()}
    assert all(math.isfinite(ms) and 0 < ms < 60_000 for ms in out.samples.values())
    assert set(out.samples) <= DCS and len(out.samples) >= 1
    assert out.id is None or re.fullmatch(r"[a-z0-9]{16,32}", out.id)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(DCS)), st.floats(min_value=0, max_value=70e3) | st.integers(-5, 70_000)))
def test_numbers_are_kept_exactly_when_in_range(samples: dict[str, float]) -> None:
    out = check(json.dumps({"samples": samples}).encode())
    if samples and all(0 < v < 60_000 for v in samples.values()):
        assert out == Beacon({k: float(v) for k, v in samples.items()})
    else:
        assert isinstance(out, Rejected)


def test_the_subnet_is_the_sources_own_and_reserved_sources_are_refused() -> None:
    ranges = Ranges()
    assert subnet_of("203.0.114.77", ranges) == ipaddress.ip_network("203.0.114.0/24")
    assert subnet_of("::ffff:203.0.114.77", ranges) == ipaddress.ip_network("203.0.114.0/24")
    assert subnet_of("2a00:1450:4001:81a::200e", ranges) == ipaddress.ip_network("2a00:1450:4001::/48")
    for source in ("127.0.0.1", "10.1.2.3", "192.168.1.1", "::1", "fe80::1%eth0", "224.0.0.1", "0.0.0.0", "x"):
        out = subnet_of(source, ranges)
        assert isinstance(out, Rejected) and (out.status, out.reason) == (403, REFUSED_SOURCE), source
    opened = Ranges([ipaddress.ip_network("10.0.0.0/8")])
    assert subnet_of("10.1.2.3", opened) == ipaddress.ip_network("10.1.2.0/24")
    assert isinstance(subnet_of("224.0.0.1", Ranges([ipaddress.ip_network("224.0.0.0/4")])), Rejected)
