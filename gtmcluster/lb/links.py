"""Methods that choose by the candidates' links (Sangfor's link methods, BIG-IP DNS's link
limits): a pool member's link is its virtual server's `link`; a pool's links are those of
its members (each counted once).

- `bandwidth_ratio` (Sangfor's 带宽比例): new clients shared in proportion to each
  candidate's configured `bandwidth_mbps` (a pool: the sum over its links), as `ratio`
  shares by weight. No measurements needed.
- `link_capacity`: shared in proportion to the bandwidth left free on each candidate's
  links (`bandwidth_mbps` minus the measured traffic, `lb.linkload`). Until every
  candidate's links have a figure it yields nothing (comparing only the measured would
  favour whichever was measured first), and so when no link has room left.
- `lowest_cost`: the candidate whose link is cheapest (`cost`: a pool, its cheapest link),
  candidates of equal cost in turn, the others after them by cost.

A link over its `max_utilisation` takes no new clients whatever the method: its servers
are not available (`health.status`), so they are no candidates here. The config makes
sure every member of a pool using these methods has a link with what they read
(`config.links.check_methods`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gtmcluster.config.model import Link
from gtmcluster.lb import linkload
from gtmcluster.lb.context import Context
from gtmcluster.lb.ranking import Candidate, Method, Ranking, Slot
from gtmcluster.lb.weighted import in_turn


def links_of(c: Candidate) -> tuple[Link, ...]:
    """The links of *c*'s virtual servers, once each, in member order."""
    seen: dict[str, Link] = {}
    for vs in c.members:
        if vs.link is not None and vs.link.name not in seen:
            seen[vs.link.name] = vs.link
    return tuple(seen.values())


def _shared(cands: Sequence[Candidate], weights: Sequence[int], ctx: Context, slot: Slot) -> tuple[Candidate, ...]:
    """*cands* in the order of the next turn of a smooth weighted round robin by *weights*
    (those of weight 0 left out)."""
    weighted = [(c, w) for c, w in zip(cands, weights, strict=True) if w > 0]
    if len(weighted) <= 1:
        return tuple(c for c, _ in weighted)
    divisor = math.gcd(*(w for _, w in weighted))  # (1000:100 Mbit/s is 10:1, before any scaling)
    return in_turn([c for c, _ in weighted], tuple(w // divisor for _, w in weighted), ctx, slot)


def bandwidth_ratio(cands: Sequence[Candidate], ctx: Context, slot: Slot) -> Ranking:
    mbps = [sum(link.bandwidth_mbps or 0.0 for link in links_of(c)) for c in cands]
    scores = tuple((c.name, m) for c, m in zip(cands, mbps, strict=True))
    # (weights in whole kbit/s: ratio_schedule scales a large sum down to its cycle)
    order = _shared(cands, [round(m * 1000) for m in mbps], ctx, slot)
    if not order:
        return Ranking((), scores, note="no candidate has a link with bandwidth")
    return Ranking(order, scores)


def link_capacity(cands: Sequence[Candidate], ctx: Context, slot: Slot) -> Ranking:
    m = ctx.measurements
    if m is None:
        return Ranking((), note="no measurements on this node")
    if not m.ready:
        return Ranking((), note="not ready: reconciling with peers after a start")
    free: list[float] = []
    unmeasured: list[str] = []
    for c in cands:
        total = 0.0
        for link in links_of(c):
            left = linkload.free_bps(link, m.link_load(link.name))
            if left is None:
                if link.name not in unmeasured:
                    unmeasured.append(link.name)
                continue
            total += left
        free.append(total)
    if unmeasured:
        return Ranking((), note=f"no traffic figure for link {', '.join(unmeasured)} yet")
    scores = tuple((c.name, round(f / 1e6, 3)) for c, f in zip(cands, free, strict=True))
    # (weights in hundredths of the most free, at least 1 for any room: a cycle of at most
    # 100 per candidate, whose schedule is cheap to make when a new figure changes them)
    top = max(free)
    order = _shared(cands, [max(1, round(100 * f / top)) if f > 0 else 0 for f in free], ctx, slot)
    if not order:
        return Ranking((), scores, note="no link has bandwidth free")
    return Ranking(order, scores, note="shared by bandwidth free (Mbit/s)")


def lowest_cost(cands: Sequence[Candidate], ctx: Context, slot: Slot) -> Ranking:
    costs: dict[str, float] = {}
    for c in cands:
        known = [link.cost for link in links_of(c) if link.cost is not None]
        if known:
            costs[c.name] = min(known)
    if not costs:
        return Ranking((), note="no candidate has a link with a cost")
    ranked = sorted((i for i, c in enumerate(cands) if c.name in costs), key=lambda i: (costs[cands[i].name], i))
    scores = tuple((cands[i].name, costs[cands[i].name]) for i in ranked)
    cheapest = costs[cands[ranked[0]].name]
    tied = [cands[i] for i in ranked if costs[cands[i].name] == cheapest]
    rest = [cands[i] for i in ranked if costs[cands[i].name] != cheapest]
    note = ""
    if len(tied) > 1:
        start = ctx.turn(slot.rotation) % len(tied)
        tied = tied[start:] + tied[:start]
        note = f"{len(tied)} tied at the lowest cost, taken in turn"
    return Ranking(tuple(tied + rest), scores, note=note)


METHODS: dict[str, Method] = {
    "bandwidth_ratio": bandwidth_ratio,
    "link_capacity": link_capacity,
    "lowest_cost": lowest_cost,
}
