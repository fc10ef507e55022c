"""`gtmcluster.dnssec.rrsets`: the responder's RRsets signed through dnspython and written
back, and RFC 9824 compact denial NSEC records that validate and cover no other name."""

from __future__ import annotations

import ipaddress

import dns.dnssec
import dns.message
import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.dns import wire
from gtmcluster.dns.wire import Section
from gtmcluster.dnsdata import keys, names
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_MX, TYPE_SOA, RRset
from gtmcluster.dnssec import rrsets
from gtmcluster.dnssec.signer import Signer

ORIGIN = dns.name.from_text("example.com")
NOW = 1_780_000_000.0


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    directory = tmp_path_factory.mktemp("keys")
    keys.keygen(directory, "example.com")
    return Signer(ORIGIN, keys.load(directory, "example.com"), lambda: NOW)


@given(st.lists(st.ip_addresses(v=4), min_size=1, max_size=8, unique=True), st.integers(0, 2**31 - 1))
def test_address_rrsets_convert_both_ways(addresses: list[ipaddress.IPv4Address], ttl: int) -> None:
    ours = RRset(names.from_text("WWW.example.com"), TYPE_A, ttl, tuple((a.packed,) for a in addresses))
    theirs = rrsets.to_dnspython(ours)
    assert theirs == dns.rrset.from_text("www.example.com.", ttl, "IN", "A", *map(str, addresses))
    assert rrsets.from_dnspython(theirs) == ours


def test_a_signed_mx_validates_as_the_responder_writes_it(signer: Signer) -> None:
    mx = RRset(names.from_text("example.com"), TYPE_MX, 300, ((b"\x00\x0a", names.from_text("Mail.Example.com")),))
    sig = rrsets.from_dnspython(signer.rrsig(rrsets.kept_key(mx), lambda: rrsets.to_dnspython(mx)))
    assert sig.rtype == rrsets.TYPE_RRSIG and sig.ttl == 300
    # written into a response (the MX target compressed) and read back by dnspython
    reply = wire.write_response(
        1,
        wire.QR | wire.AA,
        0,
        b"\x07example\x03com\x00\x00\x0f\x00\x01",
        mx.owner,
        [Section([(mx, None), (sig, None)]), Section([]), Section([])],
        None,
        4096,
    )
    message = dns.message.from_wire(reply)
    answer = message.find_rrset(message.answer, ORIGIN, dns.rdataclass.IN, dns.rdatatype.MX)
    rrsig = message.find_rrset(message.answer, ORIGIN, dns.rdataclass.IN, dns.rdatatype.RRSIG, dns.rdatatype.MX)
    dns.dnssec.validate(answer, rrsig, {ORIGIN: signer.dnskey}, now=NOW)


def test_a_wildcard_answer_is_kept_and_signed_at_the_name_asked(signer: Signer) -> None:
    star = RRset(names.from_text("*.example.com"), TYPE_A, 60, ((b"\xc0\x00\x02\x01",),))
    owner = names.from_text("a.example.com")
    assert rrsets.kept_key(star, owner) != rrsets.kept_key(star)
    assert rrsets.kept_key(star, owner) == rrsets.kept_key(star, names.from_text("A.EXAMPLE.COM"))
    signed = rrsets.to_dnspython(star, owner)
    assert signed.name == dns.name.from_text("a.example.com")
    rrsig = signer.rrsig(rrsets.kept_key(star, owner), lambda: signed)
    assert rrsig[0].labels == 3
    dns.dnssec.validate(signed, rrsig, {ORIGIN: signer.dnskey}, now=NOW)


def test_compact_nxdomain_nsec(signer: Signer) -> None:
    name = names.from_text("Nope.Example.com")
    nsec = rrsets.to_dnspython(rrsets.compact_nsec(name, [rrsets.TYPE_NXNAME], 300))
    (rd,) = nsec
    # covers only the name itself: the next name is the least name after it
    assert rd.next == dns.name.from_text("\\000.nope.example.com")
    assert dns.name.from_text("nope.example.com") < rd.next < dns.name.from_text("\\000.\\000.nope.example.com")
    assert sorted(t for w in rd.windows for t in _types(w)) == [rrsets.TYPE_RRSIG, rrsets.TYPE_NSEC, rrsets.TYPE_NXNAME]
    dns.dnssec.validate(nsec, signer.rrsig(("nsec", name), lambda: nsec), {ORIGIN: signer.dnskey}, now=NOW)


def test_compact_nodata_nsec_lists_the_types_there() -> None:
    nsec = rrsets.to_dnspython(rrsets.compact_nsec(names.from_text("www.example.com"), [TYPE_A, 28], 300))
    (rd,) = nsec
    assert sorted(t for w in rd.windows for t in _types(w)) == [TYPE_A, 28, rrsets.TYPE_RRSIG, rrsets.TYPE_NSEC]
    assert TYPE_SOA not in {t for w in rd.windows for t in _types(w)}


def _types(window: tuple[int, bytes]) -> list[int]:
    number, bitmap = window
    return [number * 256 + i * 8 + j for i, byte in enumerate(bitmap) for j in range(8) if byte & (0x80 >> j)]
