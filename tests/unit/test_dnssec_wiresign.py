"""`gtmcluster.dnssec.wiresign`: RRSIGs made from the responder's wire pieces validate with
dnspython, carry the fields dnspython would give them, and the compact denial NSEC written as
bytes is the one dnspython builds; RRsets with names inside go through dnspython."""

from __future__ import annotations

import random
from pathlib import Path

import dns.dnssec
import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.NSEC
import dns.rdtypes.util
import dns.rrset
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.dnsdata import keys, names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_MX, RRset
from gtmcluster.dnssec import rrsets, wiresign
from gtmcluster.dnssec.signer import Signer

ORIGIN: Name = (b"Example", b"COM")
NOW = 1_780_000_000.0

label = st.text("abcXYZ019-", min_size=1, max_size=12).map(str.encode)
owners = st.lists(label | st.just(b"*"), max_size=3).map(lambda ls: (*ls, *ORIGIN))


@pytest.fixture(scope="module", params=[keys.ECDSAP256SHA256, keys.ED25519])
def signer(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Signer:
    directory = tmp_path_factory.mktemp("keys")
    keys.keygen(directory, "example.com", algorithm=request.param, split=True)
    return Signer(rrsets.to_dnspython_name(ORIGIN), keys.load(directory, "example.com"), lambda: NOW)


def validate(signer: Signer, rrset: RRset, sig: RRset, owner: Name | None = None) -> list[dns.rdtypes.ANY.RRSIG.RRSIG]:
    theirs = rrsets.to_dnspython(rrset, owner)
    rrsig = rrsets.to_dnspython(sig)
    dns.dnssec.validate(theirs, rrsig, {rrsets.to_dnspython_name(ORIGIN): signer.dnskey}, now=NOW)
    return list(rrsig)


@settings(max_examples=40, deadline=None)
@given(owners, st.lists(st.binary(min_size=4, max_size=4), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_an_address_rrset_signed_from_wire_validates(
    signer: Signer, owner: Name, addresses: list[bytes], ttl: int
) -> None:
    rrset = RRset(owner, TYPE_A, ttl, tuple((a,) for a in addresses))
    assert wiresign.signable(rrset)
    sig, _ = signer.written_rrset(("test", owner, ttl, tuple(addresses)), rrset)
    assert sig.owner == owner and sig.ttl == ttl  # in the case given
    (rd,) = validate(signer, rrset, sig)
    # the fields dnspython gives: a wildcard's labels leave out the "*" (RFC 4034 3.1.3)
    assert rd.labels == len(owner) - (owner[0] == b"*")
    assert (rd.type_covered, rd.original_ttl, rd.signer) == (TYPE_A, ttl, rrsets.to_dnspython_name(ORIGIN))
    assert rd.key_tag == next(k.tag for k in signer.zone_keys)
    assert rd.inception == int(NOW) - 3600 and rd.expiration <= int(NOW) + signer.validity


@settings(max_examples=40, deadline=None)
@given(owners, st.sets(st.sampled_from([1, 2, 5, 15, 16, 28, 33, 99, 257, 1000, 65280]), max_size=6), st.booleans())
def test_a_compact_nsec_is_dnspythons_and_its_signature_validates(
    signer: Signer, name: Name, types: set[int], nxname: bool
) -> None:
    if nxname:
        types = {rrsets.TYPE_NXNAME}
    nsec = rrsets.compact_nsec(name, types, 300)
    bitmap = dns.rdtypes.util.Bitmap.from_rdtypes(
        [dns.rdatatype.RdataType.make(t) for t in sorted({*types, rrsets.TYPE_RRSIG, rrsets.TYPE_NSEC})]
    )
    theirs = dns.rdtypes.ANY.NSEC.NSEC(
        dns.rdataclass.IN, dns.rdatatype.NSEC, dns.name.Name([b"\0", *name, b""]), bitmap.windows
    )
    assert nsec.rdatas == ((theirs.to_wire(),),)
    sig, _ = signer.written_rrset(rrsets.kept_key(nsec), nsec)
    validate(signer, nsec, sig)  # the next name in the case asked: not lowercased (RFC 6840 5.1)


def test_a_wildcard_answer_signed_at_the_name_asked(signer: Signer) -> None:
    wild = RRset(names.from_text("*.wild.example.com"), TYPE_A, 60, ((bytes([192, 0, 2, 9]),),))
    asked = names.from_text("X.wild.Example.com")
    sig, _ = signer.written_rrset(rrsets.kept_key(wild, asked), wild, asked)
    assert sig.owner == asked
    (rd,) = validate(signer, wild, sig, asked)
    assert rd.labels == 4


def test_the_dnskey_set_is_signed_by_the_ksk_from_wire(signer: Signer) -> None:
    dnskeys = rrsets.from_dnspython(signer.dnskey)
    sig, _ = signer.written_rrset(rrsets.kept_key(dnskeys), dnskeys)
    rds = validate(signer, dnskeys, sig)
    assert {rd.key_tag for rd in rds} == {k.tag for k in signer.key_keys}
    assert not {k.tag for k in signer.key_keys} & {k.tag for k in signer.zone_keys}


def test_an_rrset_with_names_is_signed_by_dnspython(signer: Signer) -> None:
    mx = RRset(ORIGIN, TYPE_MX, 300, ((b"\x00\x0a", names.from_text("Mail.Example.com")),))
    assert not wiresign.signable(mx)
    sig, _ = signer.written_rrset(rrsets.kept_key(mx), mx)
    validate(signer, mx, sig)  # (the target lowercased in the signed data, RFC 4034 6.2)


def test_a_kept_wire_signature_is_given_again_and_read_by_rrsig(tmp_path: Path) -> None:
    keys.keygen(tmp_path, "example.com")
    clock = [NOW]
    s = Signer(
        rrsets.to_dnspython_name(ORIGIN), keys.load(tmp_path, "example.com"), lambda: clock[0], rng=random.Random(1)
    )
    rrset = RRset(names.from_text("www.example.com"), TYPE_A, 30, ((bytes(4),),))
    first, refresh_at = s.written_rrset(rrsets.kept_key(rrset), rrset)
    assert s.written_rrset(rrsets.kept_key(rrset), rrset) == (first, refresh_at) and s.signed == 1
    # the same signature, through the dnspython accessor
    assert rrsets.from_dnspython(s.rrsig(rrsets.kept_key(rrset), lambda: rrsets.to_dnspython(rrset))) == first
    clock[0] = refresh_at
    assert s.written_rrset(rrsets.kept_key(rrset), rrset)[0] != first and s.signed == 2
