"""Signatures of a zone's RRsets, made online and kept while they stay valid.

A GTM's answers differ per client, so they are signed when first given. Most answers repeat
(a kept decision gives the same addresses again), so each signature is kept, by the RRset's
contents (owner, type, TTL, records), and given again until it nears its expiration: a
repeated answer costs a dictionary lookup, not a signature. A new signature over an RRset
whose records hold no names (a compact denial's NSEC, addresses, the DNSKEY set) is made from
the responder's wire pieces (`dnssec.wiresign`); other RRsets are signed through dnspython.

Times (RFC 4034 3.1.5, RFC 6781 4.4.2): inception one hour in the past (for validators whose
clocks lag); expiration `validity` ahead less a random jitter of up to `jitter`, so that
signatures made together (after a start or a reload) do not all expire together; a kept
signature is replaced once less than `refresh` of it remains, which must exceed the longest
TTL a validator may keep it for. The kept signatures are bounded (`max_kept`): when full, the
oldest is dropped.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import dns.dnssec
import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from gtmcluster.dnsdata.keys import ZoneKey
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import RRset
from gtmcluster.dnssec import wiresign
from gtmcluster.dnssec.rrsets import TYPE_DNSKEY, from_dnspython, to_dnspython

DAY = 86400
#: what a validator's clock may lag behind ours
INCEPTION_SKEW = 3600
VALIDITY = 7 * DAY
JITTER = DAY
REFRESH = 2 * DAY
MAX_KEPT = 50_000
DNSKEY_TTL = 3600


@dataclass(slots=True)
class _Kept:
    #: the RRSIG RRset as dnspython's (None when signed from wire pieces: made on demand)
    rrsig: dns.rrset.RRset | None
    refresh_at: float
    #: the RRSIG RRset as the responder writes it (made once, on first use)
    written: RRset | None = None


class Signer:
    """Signs the RRsets of one zone with its keys, keeping the signatures."""

    def __init__(
        self,
        origin: dns.name.Name,
        keys: list[ZoneKey],
        clock: Callable[[], float] = time.time,
        *,
        validity: int = VALIDITY,
        jitter: int = JITTER,
        refresh: int = REFRESH,
        max_kept: int = MAX_KEPT,
        rng: random.Random | None = None,
        dnskey_ttl: int = DNSKEY_TTL,
    ):
        if not 0 <= jitter < validity - refresh:
            raise ValueError("the jitter must be less than the validity less the refresh time")
        self.origin = origin
        self.keys = keys
        self.clock = clock
        self.validity = validity
        self.jitter = jitter
        self.refresh = refresh
        self.max_kept = max_kept
        self.rng = rng or random.Random()
        self.zone_keys = [k for k in keys if k.signs_zone]
        self.key_keys = [k for k in keys if k.signs_keys]
        labels = tuple(origin.labels[:-1])
        self._wire_zone_keys = [wiresign.WireKey.of(k, labels) for k in self.zone_keys]
        self._wire_key_keys = [wiresign.WireKey.of(k, labels) for k in self.key_keys]
        #: the DNSKEY RRset at the apex, as every member serves it
        self.dnskey = dns.rrset.from_rdata_list(origin, dnskey_ttl, [k.dnskey for k in keys])
        self._kept: dict[Hashable, _Kept] = {}
        #: signatures made (not given from the kept ones), for the cost to be seen
        self.signed = 0

    def __len__(self) -> int:
        return len(self._kept)

    def rrsig(self, key: Hashable, make: Callable[[], dns.rrset.RRset]) -> dns.rrset.RRset:
        """The RRSIG RRset over the RRset that *make* builds, kept under *key*, which must
        tell RRsets apart by owner (in lower case), type, TTL and records."""
        kept = self._get(key, make)
        if kept.rrsig is None:
            assert kept.written is not None
            kept.rrsig = to_dnspython(kept.written)
        return kept.rrsig

    def written_rrset(
        self, key: Hashable, rrset: RRset, owner: Name | None = None, spend: Callable[[], None] | None = None
    ) -> tuple[RRset, float]:
        """`written` for the responder's *rrset* (at *owner*, for a wildcard answer): signed
        from its wire pieces (`dnssec.wiresign`) when its records hold no names, else by
        dnspython. Kept under *key* as `rrsig` keeps it; *spend* is called before a fresh
        signature is made (`budget.FreshSignatures.spend`, which may refuse it)."""
        if not wiresign.signable(rrset):
            return self.written(key, lambda: to_dnspython(rrset, owner), spend)
        now = self.clock()
        kept = self._kept.get(key)
        if kept is None or now >= kept.refresh_at:
            if spend is not None:
                spend()
            inception, expiration = self._times(now)
            signing = self._wire_key_keys if rrset.rtype == TYPE_DNSKEY else self._wire_zone_keys
            written = wiresign.rrsig(rrset, owner, signing, inception, expiration)
            self.signed += len(signing)
            kept = self._keep(key, kept, _Kept(None, expiration - self.refresh, written))
        if kept.written is None:
            assert kept.rrsig is not None
            kept.written = from_dnspython(kept.rrsig)
        return kept.written, kept.refresh_at

    def written(
        self, key: Hashable, make: Callable[[], dns.rrset.RRset], spend: Callable[[], None] | None = None
    ) -> tuple[RRset, float]:
        """`rrsig` as the responder writes it (a kept signature costs a lookup, no conversion),
        and when it is due for renewal (*spend*: as for `written_rrset`)."""
        kept = self._get(key, make, spend)
        if kept.written is None:
            assert kept.rrsig is not None
            kept.written = from_dnspython(kept.rrsig)
        return kept.written, kept.refresh_at

    def _get(
        self, key: Hashable, make: Callable[[], dns.rrset.RRset], spend: Callable[[], None] | None = None
    ) -> _Kept:
        now = self.clock()
        kept = self._kept.get(key)
        if kept is not None and now < kept.refresh_at:
            return kept
        if spend is not None:
            spend()
        rrset = make()
        signing = self.key_keys if rrset.rdtype == dns.rdatatype.DNSKEY else self.zone_keys
        rrsig = self._sign(rrset, signing, now)
        expiration = int(rrsig[0].expiration)
        return self._keep(key, kept, _Kept(rrsig, expiration - self.refresh))

    def _keep(self, key: Hashable, old: _Kept | None, new: _Kept) -> _Kept:
        if old is None and len(self._kept) >= self.max_kept:
            del self._kept[next(iter(self._kept))]  # the oldest
        self._kept[key] = new
        return new

    def _times(self, now: float) -> tuple[int, int]:
        """A new signature's inception and expiration (see the module's docstring)."""
        return int(now) - INCEPTION_SKEW, int(now) + self.validity - self.rng.randint(0, self.jitter)

    def dnskey_rrsig(self) -> dns.rrset.RRset:
        return self.rrsig(("DNSKEY", self.origin), lambda: self.dnskey)

    def _sign(self, rrset: dns.rrset.RRset, signing: list[ZoneKey], now: float) -> dns.rrset.RRset:
        inception, expiration = self._times(now)
        sigs = []
        for key in signing:
            sigs.append(
                dns.dnssec.sign(
                    rrset,
                    key.private,
                    self.origin,
                    key.dnskey,
                    inception=inception,
                    expiration=expiration,
                    origin=self.origin,
                )
            )
            self.signed += 1
        return dns.rrset.from_rdata_list(rrset.name, rrset.ttl, sigs)
