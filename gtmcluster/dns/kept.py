"""What the answer path already answered, held in one place, and the one way it hears of change.

A `KeptReplies` belongs to one responder (one config: a new config makes a new responder,
and with it a new store, so nothing kept from the old zones and wide IPs outlives them).
It holds, keyed as the paths look them up:

- `templates`: static replies by (the lowercased question, the EDNS class, the size
  limit), which the fast path fills in with a query's ID, RD and CD flags and its question;
- `static_hits`: static replies by the query's exact bytes after the ID;
- `wide_hits`: wide IP replies by (the query's bytes after the ID, the client's address),
  each with the kept decision it came from (`WideHit`);
- `stream_static_hits`, `stream_wide_hits`: the same over TCP (a reply there has no size
  limit, so it may differ from UDP's to the same bytes: kept apart);
- `client_hits`: the replies of wildcard wide IPs by (wide IP, type, EDNS class, client
  key), without their question (any name below the wildcard gets it with its own question
  put in), each with the kept decision it came from (`WideHit`); unsigned only (a signature
  covers the name);
- `replies`: encoded wide IP replies by (wide IP, or the name when signed, type, EDNS
  class, client key), each with the decision it encodes (sent again only while that
  decision is the one kept);
- `negatives`: NXDOMAIN and NODATA answers by (closest encloser, type, EDNS class), for
  every absent name below that name of the zone, with or without a client subnet
  (`dns.negative.Negative`);
- `signed_negatives`: signed (DO=1) NXDOMAIN answers by (parent name, type), one per span
  of the zone's NSEC chain the names below it fall in (`dns.signednegative.Spans`), each
  sent only until its earliest signature is due for renewal (the size limit, as for
  `negatives`, checked per query);
- `decisions`: the kept decisions themselves (`lb.cache.DecisionCache`), None when the
  node keeps none.

The fast path (`dns.fastpath`) and the UDP port's read loop (`dns.udpport`) read and fill
these dicts (the `keep_*` methods bound them); each is a plain dict, so the read loop's
lookups stay one ``dict.get``. What they hold ends in one way: `invalidate`, which the node
calls with what changed: records of the store (merged one by one or loaded in bulk), wide
IPs whose health generation grew, or everything (the node becoming ready or not). Each
change costs what it concerns (`lb.cache`'s fresh indexes), never the size of what is kept;
a static reply depends on the config alone and so on none of them (a signed negative answer
on the config and its signatures' times: it ends itself when one is due for renewal).

Every dict is capped (the ``MAX_*`` below: when full it starts again), and none is keyed by
a name the zones do not hold: a flood of random names (NXDOMAIN, NODATA, or names below a
wildcard wide IP) is answered from `negatives` and `client_hits`, keyed by the closest
encloser (a name the zone holds) and by the wide IP, and a DO=1 one under a signed zone
from `signed_negatives`, by parent and span of the chain, so it keeps nothing per name
(docs/performance.md, "Random names").
"""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from gtmcluster.dns.negative import Negative
from gtmcluster.dns.signednegative import Spans
from gtmcluster.lb.cache import DecisionCache, Entry
from gtmcluster.lb.trace import Decision
from gtmcluster.runtime.stats import Tally

#: templates kept at most; when full they start again (random names cost the general path)
MAX_TEMPLATES = 20_000
#: static replies kept by their queries' exact bytes at most; when full they start again
MAX_HITS = 50_000
#: wide IP replies kept at most, by exact bytes and by client: one per client asking (as
#: many as half the kept decisions, `lb.cache.MAX_ENTRIES`: a persistent client keeps two)
MAX_WIDE_HITS = 250_000
#: the same over TCP (fewer clients: resolvers come over TCP for what UDP truncated)
MAX_STREAM_WIDE_HITS = 50_000

#: negative answers kept at most (one per closest encloser, a name of a zone, type and EDNS class)
MAX_NEGATIVES = 10_000
#: signed negative answers kept at most, all parents and spans together (each span is a name
#: of a signed zone's chain: a zone's names bound them, this bounds the memory: each answer
#: is about 500 bytes a kept length, `negative.MAX_TAILS` lengths at most)
MAX_SIGNED_NEGATIVES = 1_000

#: the counter labels of a reply (wide IP, type, rcode, method: `QueryStats.queries`)
Counter = tuple[str, str, str, str]


class WideHit(NamedTuple):
    """A wide IP reply kept by its query's bytes and its client's address."""

    reply: bytes  # the whole reply after the ID (in `client_hits`: without the question)
    entry: Entry  # the kept decision it came from
    until: float  # when its decision's time is up (the node's clock: `DecisionCache.clock`)
    renew_at: float  # when the signature it carries is due for renewal (the signer's clock)
    counter: Counter
    tally: Tally


class Encoded(NamedTuple):
    """A wide IP reply encoded from a kept decision (ID and flags filled in per query)."""

    decision: Decision  # the decision it encodes: reused only while this one is kept
    reply: bytes  # the header and what follows the question (the query's question goes between)
    counter: Counter
    tally: Tally
    renew_at: float  # when the signature it carries is due for renewal (inf: none)


class KeptReplies:
    """The replies and decisions one responder's answer paths keep (see the module's doc)."""

    def __init__(self, decisions: DecisionCache | None = None):
        self.decisions = decisions
        self.templates: dict[tuple[bytes, int, int], tuple[bytes, int, Counter]] = {}
        self.static_hits: dict[bytes, tuple[bytes, Counter]] = {}
        self.wide_hits: dict[tuple[bytes, str], WideHit] = {}
        self.stream_static_hits: dict[bytes, tuple[bytes, Counter]] = {}
        self.stream_wide_hits: dict[tuple[bytes, str], WideHit] = {}
        self.client_hits: dict[tuple[object, ...], WideHit] = {}
        self.replies: dict[tuple[object, ...], Encoded] = {}
        self.negatives: dict[tuple[bytes, int, int], Negative] = {}
        self.signed_negatives: dict[tuple[bytes, int], Spans] = {}
        #: the answers `signed_negatives` holds, all spans together
        self.signed_count = 0

    def invalidate(
        self, *, keys: Collection[str] = (), wideips: Collection[str] = (), everything: bool = False
    ) -> None:
        """Tell what is kept of a change: what depended on it is not sent again (the
        decisions concerned lose their fresh marks, or all of them end). *keys*: the store's
        records that changed (merged, written, loaded in bulk); *wideips*: wide IPs whose
        health generation grew (a server's standing, an admin state); *everything*: every
        kept decision ends (the node became ready, or stopped being so)."""
        decisions = self.decisions
        if decisions is None:
            return
        if everything:
            decisions.clear()
            return
        for key in keys:
            decisions.changed(key)
        if wideips:
            decisions.stale(wideips)

    def keep_template(self, key: tuple[bytes, int, int], kept: tuple[bytes, int, Counter]) -> None:
        templates = self.templates
        if len(templates) >= MAX_TEMPLATES:
            templates.clear()
        templates[key] = kept

    def keep_static(self, tail: bytes, reply_tail: bytes, counter: Counter, stream: bool = False) -> None:
        hits = self.stream_static_hits if stream else self.static_hits
        if len(hits) >= MAX_HITS:
            hits.clear()
        hits[tail] = (reply_tail, counter)

    def keep_wide(self, tail: bytes, source: str, hit: WideHit, stream: bool = False) -> None:
        hits = self.stream_wide_hits if stream else self.wide_hits
        if len(hits) >= (MAX_STREAM_WIDE_HITS if stream else MAX_WIDE_HITS):
            hits.clear()
        hits[(tail, source)] = hit

    def keep_encoded(self, key: tuple[object, ...], encoded: Encoded) -> Encoded:
        replies = self.replies
        if len(replies) >= MAX_WIDE_HITS:
            replies.clear()
        replies[key] = encoded
        return encoded

    def keep_client(self, key: tuple[object, ...], hit: WideHit) -> None:
        hits = self.client_hits
        if len(hits) >= MAX_WIDE_HITS:
            hits.clear()
        hits[key] = hit

    def keep_negative(self, key: tuple[bytes, int, int], negative: Negative) -> None:
        negatives = self.negatives
        if len(negatives) >= MAX_NEGATIVES:
            negatives.clear()
        negatives[key] = negative

    def keep_signed_negative(
        self,
        key: tuple[bytes, int],
        parent: tuple[bytes, ...],
        order: list[tuple[bytes, ...]],
        span: int,
        negative: Negative,
    ) -> None:
        """Keep *negative*, the signed answer for the names below a parent (*key*: its wire
        name and the type; *parent*: its canonical sort key) in the *span*-th span of
        the chain whose sort keys are *order*."""
        spans = self.signed_negatives.get(key)
        if spans is None or spans.order is not order:
            spans = Spans(parent, order, negative)
        if span not in spans.spans:
            if self.signed_count >= MAX_SIGNED_NEGATIVES:
                self.signed_negatives.clear()
                self.signed_count = 0
                spans = Spans(parent, order, negative)
            self.signed_count += 1
        spans.spans[span] = negative
        self.signed_negatives[key] = spans
