"""Signed NXDOMAIN kept per span of the zone's NSEC chain: a DO=1 random name costs no general path.

Under a signed zone, a DO=1 query for a name that does not exist is answered with the SOA and
the chain's NSECs that cover the name and the wildcard at its closest encloser, with their
RRSIGs (`dnssec.chain`, `dnssec.answers`). For the names below one parent, those records
depend on the name only through the span of the chain it falls in (the NSEC covering it):
the closest encloser is the parent when it exists, else the same name above it for all of
them, so the wildcard's NSEC is the same; the SOA and its RRSIG are the zone's. So the
general path's reply is kept as a `dns.negative.Negative` (made with the parent as its
encloser) per (parent, type, span), and every other absent name below the parent in a span
already asked is answered from it: its question put in, the pointers of its names moved by
the name's length, as the unsigned negative answers are (`dns.negative`), the reply's fit
in the client's size checked per query, so one answer serves every size limit. Unlike an
unsigned one, it is kept per parent, not per closest encloser: the parent fixes the closest
encloser (so the NSEC that proves its wildcard absent), and a name's span is found from
the parent's sort key and the name's first label.

`Spans` holds the answers below one parent: the index of a name's span is found by
``bisect`` on the chain's canonical sort keys (`Chain.order`) with the name's key (the
parent's, with the label added), one comparison of tuples per step. A span asked for the
first time, a name whose reply would not fit the client's size (TC), a name over 255
bytes (FORMERR), and an answer whose
earliest signature is due for renewal (`Negative.renew_at`, the signer's clock: a signature
made anew changes the bytes) go to the general path, which answers and (for the first and
the last) keeps the answer for the span again.

Everything here is bounded by the zone, not by the names asked: a span is a name of the
chain, and the answers are kept in `KeptReplies.signed_negatives`, capped in all
(`kept.MAX_SIGNED_NEGATIVES` answers, then it starts again). What they depend on (the zone,
its chain, its keys, the wide IPs' types in the chain's bitmaps) changes only with a new
config, which makes a new responder and with it a new `KeptReplies`; the signatures' renewal
is `renew_at`'s.
"""

from __future__ import annotations

from bisect import bisect_right

from gtmcluster.dns.negative import Negative


class Spans:
    """The signed negative answers below one parent, one per span of the chain (see the
    module's doc)."""

    __slots__ = ("covers", "key", "order", "spans")

    def __init__(self, key: tuple[bytes, ...], order: list[tuple[bytes, ...]], first: Negative):
        #: the parent's canonical sort key (its labels from the root down)
        self.key = key
        #: the chain's sort keys (`Chain.order`): the span of a name is its place there
        self.order = order
        #: whether a label below the parent is an absent name (`Negative.covers`: the same
        #: for every span, as the parent is)
        self.covers = first.covers
        #: the answer by the index of the chain's NSEC that covers the name
        self.spans: dict[int, Negative] = {}

    def span(self, label: bytes) -> int:
        """The index of the chain's NSEC covering the name *label* (lowercased) below the parent."""
        return bisect_right(self.order, (*self.key, label)) - 1

    def get(self, label: bytes) -> Negative | None:
        """The answer kept for the span the absent name *label* (lowercased) below the parent
        falls in, or None when none is kept for it yet."""
        return self.spans.get(bisect_right(self.order, (*self.key, label)) - 1)
