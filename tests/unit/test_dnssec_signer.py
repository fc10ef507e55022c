"""`gtmcluster.dnssec.signer`: signatures that validate, kept per RRset and reused while valid
(no new signing), renewed before they expire, with jittered expiration and a bounded store."""

from __future__ import annotations

import random

import dns.dnssec
import dns.exception
import dns.name
import dns.rrset
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtmcluster.dnsdata import keys
from gtmcluster.dnssec import signer
from gtmcluster.dnssec.signer import Signer

ORIGIN = dns.name.from_text("example.com")
NOW = 1_780_000_000.0


class FakeClock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module", params=[(13, False), (15, False), (13, True)], ids=["csk13", "csk15", "ksk-zsk"])
def zone_keys(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[keys.ZoneKey]:
    algorithm, split = request.param
    directory = tmp_path_factory.mktemp("keys")
    keys.keygen(directory, "example.com", algorithm, split)
    return keys.load(directory, "example.com")


@pytest.fixture(scope="module")
def csk(tmp_path_factory: pytest.TempPathFactory) -> list[keys.ZoneKey]:
    directory = tmp_path_factory.mktemp("csk")
    keys.keygen(directory, "example.com")
    return keys.load(directory, "example.com")


def a_rrset(*addresses: str, ttl: int = 30) -> dns.rrset.RRset:
    return dns.rrset.from_text("www.example.com.", ttl, "IN", "A", *addresses)


def test_signatures_validate_with_the_zone_dnskey_set(zone_keys: list[keys.ZoneKey]) -> None:
    clock = FakeClock()
    s = Signer(ORIGIN, zone_keys, clock)
    rrset = a_rrset("192.0.2.1", "192.0.2.2")
    rrsig = s.rrsig("www-a", lambda: rrset)
    dns.dnssec.validate(rrset, rrsig, {ORIGIN: s.dnskey}, now=clock.now)
    dns.dnssec.validate(s.dnskey, s.dnskey_rrsig(), {ORIGIN: s.dnskey}, now=clock.now)
    # with a KSK/ZSK pair the ZSK signs the data, the KSK the DNSKEY set
    zsk_tags = {k.tag for k in zone_keys if k.signs_zone}
    ksk_tags = {k.tag for k in zone_keys if k.signs_keys}
    assert {r.key_tag for r in rrsig} == zsk_tags
    assert {r.key_tag for r in s.dnskey_rrsig()} == ksk_tags
    # a changed record no longer validates under the signature
    with pytest.raises(dns.exception.ValidationFailure):
        dns.dnssec.validate(a_rrset("192.0.2.1", "192.0.2.3"), rrsig, {ORIGIN: s.dnskey}, now=clock.now)


def test_a_kept_signature_is_given_again_without_signing(zone_keys: list[keys.ZoneKey]) -> None:
    clock = FakeClock()
    s = Signer(ORIGIN, zone_keys, clock)
    made: list[int] = []

    def make() -> dns.rrset.RRset:
        made.append(1)
        return a_rrset("192.0.2.1")

    first = s.rrsig("k", make)
    signed = s.signed
    clock.now += signer.VALIDITY - signer.JITTER - signer.REFRESH - 1  # still fresh, whatever the jitter
    assert s.rrsig("k", make) is first
    assert (len(made), s.signed) == (1, signed)
    other = s.rrsig("other", lambda: a_rrset("192.0.2.9"))
    assert other is not first and s.signed == 2 * signed


def test_a_signature_is_renewed_before_it_expires(zone_keys: list[keys.ZoneKey]) -> None:
    clock = FakeClock()
    s = Signer(ORIGIN, zone_keys, clock)
    first = s.rrsig("k", lambda: a_rrset("192.0.2.1"))
    expiration = first[0].expiration
    clock.now = expiration - signer.REFRESH  # less than REFRESH left: renewed
    second = s.rrsig("k", lambda: a_rrset("192.0.2.1"))
    assert second is not first
    assert second[0].expiration > expiration
    dns.dnssec.validate(a_rrset("192.0.2.1"), second, {ORIGIN: s.dnskey}, now=clock.now)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32))
def test_inception_and_expiration_with_jitter(csk: list[keys.ZoneKey], seed: int) -> None:
    s = Signer(ORIGIN, csk, FakeClock(), rng=random.Random(seed))
    (sig,) = s.rrsig("k", lambda: a_rrset("192.0.2.1"))
    assert sig.inception == NOW - signer.INCEPTION_SKEW
    assert NOW + signer.VALIDITY - signer.JITTER <= sig.expiration <= NOW + signer.VALIDITY
    # the signature outlives its refresh point by more than any TTL we serve
    assert sig.expiration - signer.REFRESH > NOW + signer.VALIDITY - signer.JITTER - signer.REFRESH - 1


def test_expirations_are_spread(csk: list[keys.ZoneKey]) -> None:
    s = Signer(ORIGIN, csk, FakeClock(), rng=random.Random(7))
    expirations = {s.rrsig(i, lambda: a_rrset("192.0.2.1"))[0].expiration for i in range(20)}
    assert len(expirations) > 10


def test_the_store_is_bounded_dropping_the_oldest(csk: list[keys.ZoneKey]) -> None:
    s = Signer(ORIGIN, csk, FakeClock(), max_kept=3)
    kept = [s.rrsig(i, lambda: a_rrset("192.0.2.1")) for i in range(3)]
    s.rrsig(3, lambda: a_rrset("192.0.2.1"))
    assert len(s) == 3
    assert s.rrsig(1, lambda: a_rrset("192.0.2.1")) is kept[1]
    assert s.rrsig(0, lambda: a_rrset("192.0.2.1")) is not kept[0]  # dropped, signed again


def test_jitter_must_leave_room_for_refresh(csk: list[keys.ZoneKey]) -> None:
    with pytest.raises(ValueError, match="jitter"):
        Signer(ORIGIN, csk, FakeClock(), validity=10, jitter=5, refresh=6)
