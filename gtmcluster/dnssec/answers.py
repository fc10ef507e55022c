"""Signing a response for a DO=1 query: RRSIGs beside the RRsets, and compact denial.

The responder builds its answer as for any query, noting where a denial ended (the name
and the types there); for a DO=1 query, `sign` then adds, for every RRset of a signed zone:

- an RRSIG after each RRset the zone is authoritative for (answers, the SOA of a negative
  answer, additional addresses within the zone), from the zone's `Signer`, which keeps it;
- for a referral, the proof that the child is unsigned: the NSEC at the cut listing NS
  (compact, like the denials), or the DS records there when the zone file has them;
- for NXDOMAIN, the NSECs of the zone's chain that cover the name and the wildcard at its
  closest encloser (`dnssec.chain`: signed once, so a random name costs no signature); the
  RCODE stays NXDOMAIN;
- for NODATA, the compact denial of RFC 9824: one NSEC at the name itself listing the types
  there (a query for NSEC itself gets that NSEC as its answer); and for an NXDOMAIN at a name
  that exists (a wide IP's failure response), the same NSEC with NXNAME, the RCODE then
  NOERROR.

The SOA of a negative answer has the negative TTL (RFC 2308 5); its RRSIG is the SOA
RRset's own, whose Original TTL is the zone's SOA TTL (RFC 4034 3.1.4), written with the
negative TTL. A fresh signature for a query over UDP is spent from `budget.FreshSignatures`
(a cap): past it `sign` raises `budget.OverBudget` and the responder answers with TC.

Glue and the NS records of a delegation are not signed (they are the child's). An RRset of
a zone that is not signed is left as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gtmcluster.config.model import WideIP
from gtmcluster.config.wideipnames import WideIPNames
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.keys import ZoneKey
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_DS, TYPE_NS, RRset, Zone, ZoneSet
from gtmcluster.dnssec import rrsets
from gtmcluster.dnssec.budget import FreshSignatures
from gtmcluster.dnssec.chain import Chain
from gtmcluster.dnssec.signer import Signer

Records = list[tuple[RRset, Name | None]]


@dataclass(frozen=True, slots=True)
class Denial:
    """Where a negative answer ended: the name, and the types there (empty: none at all,
    or None: the name does not exist)."""

    name: Name
    types: frozenset[int] | None


@dataclass(slots=True)
class Signed:
    answer: Records
    authority: Records
    additional: Records
    nxdomain_denied: bool  # the NXDOMAIN became a NOERROR with NXNAME


class ZoneSigning:
    """The signers of a config's signed zones, by lowercased origin labels."""

    def __init__(
        self,
        zones: ZoneSet,
        signers: Mapping[Name, Signer],
        clock: Callable[[], float] = time.time,
        wideip_types: Mapping[Name, frozenset[int]] | None = None,
        fresh: FreshSignatures | None = None,
    ):
        self.zones = zones
        #: the signers' clock (wall time: signatures carry absolute times)
        self.clock = clock
        self.signers = signers
        #: the DNSKEY RRset of each signed zone, as the responder answers it
        self.dnskeys = {origin: rrsets.from_dnspython(s.dnskey) for origin, s in signers.items()}
        #: the types of the wide IP at each name (wildcards with their ``*``), for the chain
        self.wideip_types = wideip_types or {}
        #: the cap on fresh signatures for UDP answers (`dnssec.budget`)
        self.fresh = fresh if fresh is not None else FreshSignatures(time.monotonic)
        #: each signed zone's NSEC chain, made on its first NXDOMAIN
        self.chains: dict[Name, Chain] = {}
        #: each chain NSEC given, with its RRSIG and when that is due (by zone and index)
        self._proofs: dict[tuple[Name, int], tuple[RRset, RRset, float]] = {}
        #: each zone's RRSIG over its SOA, as a negative answer writes it, and when it is due
        self._negative_soa: dict[Name, tuple[RRset, float]] = {}

    def __bool__(self) -> bool:
        return bool(self.signers)

    def _zone(self, owner: Name) -> tuple[Zone, Signer] | None:
        zone = self.zones.find(names.key(owner))
        if zone is None:
            return None
        signer = self.signers.get(zone.origin_key)
        return None if signer is None else (zone, signer)

    def _rrsig(
        self, signer: Signer, rrset: RRset, owner: Name | None, spend: Callable[[], None] | None = None
    ) -> tuple[RRset, Name | None]:
        at = owner if owner is not None else rrset.owner
        return signer.written_rrset(rrsets.kept_key(rrset, owner), rrset, owner, spend)[0], at

    def _negative_soa_rrsig(self, zone: Zone, signer: Signer) -> tuple[RRset, Name | None]:
        """The RRSIG over the zone's SOA RRset (Original TTL: the SOA's TTL), written with the
        negative answer's TTL, as the SOA there is (RFC 4034 3.1.4, RFC 2308 5)."""
        kept = self._negative_soa.get(zone.origin_key)
        if kept is None or signer.clock() >= kept[1]:
            written, refresh_at = signer.written_rrset(rrsets.kept_key(zone.soa), zone.soa)
            ttl = zone.negative_soa.ttl
            kept = RRset(written.owner, written.rtype, ttl, written.rdatas, written.rclass), refresh_at
            self._negative_soa[zone.origin_key] = kept
        return kept[0], None

    def _nxdomain_proof(self, zone: Zone, signer: Signer, key: Name) -> Records | None:
        """The chain's signed NSECs that deny *key*, or None when it exists (`Chain.nxdomain`)."""
        chain = self.chains.get(zone.origin_key)
        if chain is None:
            chain = Chain(zone, self.wideip_types, lambda key: self.zones.find(key) is zone)
            self.chains[zone.origin_key] = chain
        found = chain.nxdomain(key)
        if found is None:
            return None
        out: Records = []
        now = signer.clock()
        for index in found:
            proof = self._proofs.get((zone.origin_key, index))
            if proof is None or now >= proof[2]:
                nsec = chain.nsec(index)
                rrsig, refresh_at = signer.written_rrset(rrsets.kept_key(nsec), nsec)
                proof = self._proofs[zone.origin_key, index] = (nsec, rrsig, refresh_at)
            out += [(proof[0], None), (proof[1], None)]
        return out

    def rrsig_of(self, rrset: RRset) -> tuple[RRset, float] | None:
        """The RRSIG RRset over *rrset*, an answer at its own name, and when it is due for
        renewal (`clock` time); None if its zone is not signed."""
        found = self._zone(rrset.owner)
        if found is None:
            return None
        return found[1].written_rrset(rrsets.kept_key(rrset), rrset)

    def sign(
        self,
        answer: Records,
        authority: Records,
        additional: Records,
        denial: Denial | None,
        nxdomain: bool,
        qtype: int = 0,
        capped: bool = False,
    ) -> Signed:
        """*answer*, *authority* and *additional* with their RRSIGs and the denial; *capped*
        (a query over UDP): a fresh signature is spent from the cap, which may raise
        `budget.OverBudget`."""
        spend = self.fresh.spend if capped else None
        out_answer: Records = []
        for rrset, owner in answer:
            out_answer.append((rrset, owner))
            found = self._zone(owner if owner is not None else rrset.owner)
            if found is not None:
                out_answer.append(self._rrsig(found[1], rrset, owner, spend))
        out_authority: Records = []
        for rrset, owner in authority:
            out_authority.append((rrset, owner))
            found = self._zone(rrset.owner)
            if found is None:
                continue
            zone, signer = found
            if rrset is zone.negative_soa:
                out_authority.append(self._negative_soa_rrsig(zone, signer))
            elif rrset.rtype == TYPE_NS and names.key(rrset.owner) != zone.origin_key:
                out_authority.extend(self._unsigned_child(zone, signer, rrset.owner, spend))
            else:
                out_authority.append(self._rrsig(signer, rrset, owner, spend))
        denied = False
        if denial is not None:
            found = self._zone(denial.name)
            if found is not None:
                zone, signer = found
                proof = None
                if denial.types is None and nxdomain:
                    proof = self._nxdomain_proof(zone, signer, names.key(denial.name))
                if proof is not None:
                    out_authority += proof
                else:
                    out_answer, out_authority = self._compact(
                        zone, signer, denial, qtype, spend, out_answer, out_authority
                    )
                    denied = nxdomain
        out_additional: Records = []
        for rrset, owner in additional:
            out_additional.append((rrset, owner))
            found = self._zone(rrset.owner)
            if found is not None and found[0].delegation_for(names.key(rrset.owner)) is None:
                out_additional.append(self._rrsig(found[1], rrset, owner, spend))
        return Signed(out_answer, out_authority, out_additional, denied)

    def _compact(
        self,
        zone: Zone,
        signer: Signer,
        denial: Denial,
        qtype: int,
        spend: Callable[[], None] | None,
        out_answer: Records,
        out_authority: Records,
    ) -> tuple[Records, Records]:
        """The answer and authority with the compact denial at *denial*'s name (RFC 9824)."""
        types = denial.types if denial.types is not None else frozenset((rrsets.TYPE_NXNAME,))
        if names.key(denial.name) == zone.origin_key:
            types |= {rrsets.TYPE_DNSKEY}
        nsec = rrsets.compact_nsec(denial.name, types, zone.negative_soa.ttl)
        if qtype == rrsets.TYPE_NSEC:  # the NSEC asked for is there: it is the answer
            return [*out_answer, (nsec, None), self._rrsig(signer, nsec, None, spend)], []
        return out_answer, [*out_authority, (nsec, None), self._rrsig(signer, nsec, None, spend)]

    def _unsigned_child(
        self, zone: Zone, signer: Signer, cut: Name, spend: Callable[[], None] | None = None
    ) -> Records:
        """The DS records at a cut (signed), or the NSEC proving there are none."""
        node = zone.nodes.get(names.key(cut))
        ds = node.rrsets.get(TYPE_DS) if node is not None else None
        if ds is not None:
            return [(ds, None), self._rrsig(signer, ds, None, spend)]
        types = frozenset(node.rrsets) if node is not None else frozenset((TYPE_NS,))
        nsec = rrsets.compact_nsec(cut, types, zone.negative_soa.ttl)
        return [(nsec, None), self._rrsig(signer, nsec, None, spend)]


def zone_signing(
    zones: ZoneSet,
    zone_keys: Mapping[Name, tuple[ZoneKey, ...]],
    running: HasSigning | None = None,
    wideip_names: WideIPNames[WideIP] | None = None,
) -> ZoneSigning:
    """The signers of *zones* that have keys (`Config.dnssec`). A zone whose keys are those of
    the *running* responder's signer keeps that signer, so a reload does not sign anew (and
    the cap on fresh signatures goes on). *wideip_names*: the wide IPs, whose types are
    listed in the NSEC chain at their names."""
    old = running.signing.signers if running is not None else {}
    signers = {}
    for origin, zone_key_set in zone_keys.items():
        zone = zones.by_origin.get(origin)
        if zone is None:
            continue
        name = rrsets.to_dnspython_name(zone.origin)
        signer = old.get(origin)
        if signer is None or signer.origin != name or _key_set(signer.keys) != _key_set(zone_key_set):
            signer = Signer(name, list(zone_key_set))
        signers[origin] = signer
    types: dict[Name, frozenset[int]] = {}
    if wideip_names is not None:
        types = {key: wideip.types for key, wideip in wideip_names.exact.items()}
        types.update({(b"*", *suffix): wideip.types for suffix, wideip in wideip_names.wildcards.items()})
    fresh = running.signing.fresh if running is not None else None
    return ZoneSigning(zones, signers, wideip_types=types, fresh=fresh)


class HasSigning(Protocol):
    signing: ZoneSigning


def _key_set(zone_keys: Iterable[ZoneKey]) -> set[tuple[str, str, bytes]]:
    return {(k.role, k.state, k.dnskey.to_wire() or b"") for k in zone_keys}
