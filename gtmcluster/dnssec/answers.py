"""Signing a response for a DO=1 query: RRSIGs beside the RRsets, and compact denial.

The responder builds its answer as for any query, noting where a denial ended (the name
and the types there); for a DO=1 query, `sign` then adds, for every RRset of a signed zone:

- an RRSIG after each RRset the zone is authoritative for (answers, the SOA of a negative
  answer, additional addresses within the zone), from the zone's `Signer`, which keeps it;
- for a referral, the proof that the child is unsigned: the NSEC at the cut listing NS
  (compact, like the denials), or the DS records there when the zone file has them;
- for NXDOMAIN and NODATA, the compact denial of RFC 9824: one NSEC at the name itself, with
  NXNAME for a name that does not exist, in which case the RCODE becomes NOERROR (a query
  for NSEC itself gets that NSEC as its answer).

Glue and the NS records of a delegation are not signed (they are the child's). An RRset of
a zone that is not signed is left as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.keys import ZoneKey
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_DS, TYPE_NS, RRset, Zone, ZoneSet
from gtmcluster.dnssec import rrsets
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

    def __init__(self, zones: ZoneSet, signers: Mapping[Name, Signer], clock: Callable[[], float] = time.time):
        self.zones = zones
        #: the signers' clock (wall time: signatures carry absolute times)
        self.clock = clock
        self.signers = signers
        #: the DNSKEY RRset of each signed zone, as the responder answers it
        self.dnskeys = {origin: rrsets.from_dnspython(s.dnskey) for origin, s in signers.items()}

    def __bool__(self) -> bool:
        return bool(self.signers)

    def _zone(self, owner: Name) -> tuple[Zone, Signer] | None:
        zone = self.zones.find(names.key(owner))
        if zone is None:
            return None
        signer = self.signers.get(zone.origin_key)
        return None if signer is None else (zone, signer)

    def _rrsig(self, signer: Signer, rrset: RRset, owner: Name | None) -> tuple[RRset, Name | None]:
        at = owner if owner is not None else rrset.owner
        return signer.written_rrset(rrsets.kept_key(rrset, owner), rrset, owner)[0], at

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
    ) -> Signed:
        out_answer: Records = []
        for rrset, owner in answer:
            out_answer.append((rrset, owner))
            found = self._zone(owner if owner is not None else rrset.owner)
            if found is not None:
                out_answer.append(self._rrsig(found[1], rrset, owner))
        out_authority: Records = []
        for rrset, owner in authority:
            out_authority.append((rrset, owner))
            found = self._zone(rrset.owner)
            if found is None:
                continue
            zone, signer = found
            if rrset.rtype == TYPE_NS and names.key(rrset.owner) != zone.origin_key:
                out_authority.extend(self._unsigned_child(zone, signer, rrset.owner))
            else:
                out_authority.append(self._rrsig(signer, rrset, owner))
        denied = False
        if denial is not None:
            found = self._zone(denial.name)
            if found is not None:
                zone, signer = found
                types = denial.types if denial.types is not None else frozenset((rrsets.TYPE_NXNAME,))
                if names.key(denial.name) == zone.origin_key:
                    types |= {rrsets.TYPE_DNSKEY}
                nsec = rrsets.compact_nsec(denial.name, types, zone.negative_soa.ttl)
                if qtype == rrsets.TYPE_NSEC:  # the NSEC asked for is there: it is the answer
                    out_answer += [(nsec, None), self._rrsig(signer, nsec, None)]
                    out_authority = []
                else:
                    out_authority += [(nsec, None), self._rrsig(signer, nsec, None)]
                denied = nxdomain
        out_additional: Records = []
        for rrset, owner in additional:
            out_additional.append((rrset, owner))
            found = self._zone(rrset.owner)
            if found is not None and found[0].delegation_for(names.key(rrset.owner)) is None:
                out_additional.append(self._rrsig(found[1], rrset, owner))
        return Signed(out_answer, out_authority, out_additional, denied)

    def _unsigned_child(self, zone: Zone, signer: Signer, cut: Name) -> Records:
        """The DS records at a cut (signed), or the NSEC proving there are none."""
        node = zone.nodes.get(names.key(cut))
        ds = node.rrsets.get(TYPE_DS) if node is not None else None
        if ds is not None:
            return [(ds, None), self._rrsig(signer, ds, None)]
        types = frozenset(node.rrsets) if node is not None else frozenset((TYPE_NS,))
        nsec = rrsets.compact_nsec(cut, types, zone.negative_soa.ttl)
        return [(nsec, None), self._rrsig(signer, nsec, None)]


def zone_signing(
    zones: ZoneSet, zone_keys: Mapping[Name, tuple[ZoneKey, ...]], running: HasSigning | None = None
) -> ZoneSigning:
    """The signers of *zones* that have keys (`Config.dnssec`). A zone whose keys are those of
    the *running* responder's signer keeps that signer, so a reload does not sign anew."""
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
    return ZoneSigning(zones, signers)


class HasSigning(Protocol):
    signing: ZoneSigning


def _key_set(zone_keys: Iterable[ZoneKey]) -> set[tuple[str, str, bytes]]:
    return {(k.role, k.state, k.dnskey.to_wire() or b"") for k in zone_keys}
