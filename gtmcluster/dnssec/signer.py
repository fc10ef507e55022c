"""Signatures of a zone's RRsets, made online and kept while they stay valid.

A GTM's answers differ per client, so they are signed when first given. Most answers repeat
(a kept decision gives the same addresses again), so each signature is kept, by the RRset's
contents (owner, type, TTL, records), and given again until it nears its expiration: a
repeated answer costs a dictionary lookup, not a signature.

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

from gtmcluster.dns.zone import RRset
from gtmcluster.dnssec.keys import ZoneKey
from gtmcluster.dnssec.rrsets import from_dnspython

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
    rrsig: dns.rrset.RRset
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
        return self._get(key, make).rrsig

    def written(self, key: Hashable, make: Callable[[], dns.rrset.RRset]) -> tuple[RRset, float]:
        """`rrsig` as the responder writes it (a kept signature costs a lookup, no conversion),
        and when it is due for renewal."""
        kept = self._get(key, make)
        if kept.written is None:
            kept.written = from_dnspython(kept.rrsig)
        return kept.written, kept.refresh_at

    def _get(self, key: Hashable, make: Callable[[], dns.rrset.RRset]) -> _Kept:
        now = self.clock()
        kept = self._kept.get(key)
        if kept is not None and now < kept.refresh_at:
            return kept
        rrset = make()
        signing = self.key_keys if rrset.rdtype == dns.rdatatype.DNSKEY else self.zone_keys
        rrsig = self._sign(rrset, signing, now)
        if kept is None and len(self._kept) >= self.max_kept:
            del self._kept[next(iter(self._kept))]  # the oldest
        expiration = int(rrsig[0].expiration)
        kept = self._kept[key] = _Kept(rrsig, expiration - self.refresh)
        return kept

    def dnskey_rrsig(self) -> dns.rrset.RRset:
        return self.rrsig(("DNSKEY", self.origin), lambda: self.dnskey)

    def _sign(self, rrset: dns.rrset.RRset, signing: list[ZoneKey], now: float) -> dns.rrset.RRset:
        inception = int(now) - INCEPTION_SKEW
        expiration = int(now) + self.validity - self.rng.randint(0, self.jitter)
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
