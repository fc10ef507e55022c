"""Load-balancing methods: pure functions ranking candidates for one client.

Each method takes the *available* candidates (pool members, or pools at the wide IP level)
in configured order and returns a `Ranking`: the candidates it would answer with, best
first (empty when it has nothing to offer, so the chain moves on), the scores it used and
the RFC 7871 scope of its choice. Methods read the `Context`; the only state they advance is
the context's rotation counters.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from gtmcluster.lb import dynamic, links
from gtmcluster.lb.context import Context
from gtmcluster.lb.ranking import C, Candidate, Method, Ranking, Slot
from gtmcluster.lb.weighted import in_turn, ratio_schedule

__all__ = ["METHODS", "Candidate", "Method", "Ranking", "Slot", "ratio_schedule"]


def round_robin(cands: Sequence[C], ctx: Context, slot: Slot) -> Ranking:
    if len(cands) < 2:
        return Ranking(tuple(cands))  # no turn to take: the answer cannot vary
    start = ctx.turn(slot.rotation) % len(cands)
    return Ranking(tuple(cands[start:]) + tuple(cands[:start]))


def ratio(cands: Sequence[C], ctx: Context, slot: Slot) -> Ranking:
    weighted = [c for c in cands if c.ratio > 0]
    scores = tuple((c.name, float(c.ratio)) for c in cands)
    if not weighted:
        return Ranking((), scores, note="every ratio is 0")
    if len(weighted) == 1:
        return Ranking((weighted[0],), scores)  # no turn to take: the answer cannot vary
    return Ranking(in_turn(weighted, tuple(c.ratio for c in weighted), ctx, slot), scores)


def global_availability(cands: Sequence[C], ctx: Context, slot: Slot) -> Ranking:
    return Ranking(tuple(cands))


def random_choice(cands: Sequence[C], ctx: Context, slot: Slot) -> Ranking:
    order = list(cands)
    ctx.shuffle(order)
    return Ranking(tuple(order))


def topology(cands: Sequence[C], ctx: Context, slot: Slot) -> Ranking:
    match = ctx.topology_match()
    scored: list[tuple[int, int, Candidate]] = []
    scores = []
    for position, c in enumerate(cands):
        hit = ctx.topology.score(match, c.topology_mask)
        if hit is None:
            continue
        scores.append((c.name, float(hit[0])))
        if hit[0] > 0:
            scored.append((hit[0], position, c))
    geo = f"client {match.geo}" if match.geo else ""  # the GeoIP facts the records were matched by
    if not scored:
        note = "no topology record matches" if not scores else "every matching record scores 0"
        return Ranking((), tuple(scores), match.scope, "; ".join(filter(None, (geo, note))))
    scored.sort(key=lambda t: (-t[0], t[1]))
    best = [c for s, _, c in scored if s == scored[0][0]]
    rest = [c for s, _, c in scored if s != scored[0][0]]
    note = ""
    if len(best) > 1:  # equal best scores share the load in turn
        start = ctx.turn(slot.rotation) % len(best)
        best = best[start:] + best[:start]
        note = f"{len(best)} tied at the best score, taken in turn"
    return Ranking(tuple(best + rest), tuple(scores), match.scope, "; ".join(filter(None, (geo, note))))


def static_persist(cands: Sequence[C], ctx: Context, slot: Slot) -> Ranking:
    """Weighted rendezvous hashing of the client network over the candidates.

    Every candidate gets a score from a hash of (client network, candidate name); the
    highest wins. The same client keeps its candidate while it is available, and when one
    goes away only the clients it had move (to their second choice). Any node computes the
    same ranking: the hash is fixed (BLAKE2b), not Python's per-process `hash`. The
    network is the client's at the slot's prefix, also when its client subnet is shorter
    (its zero-padded address's): the scope, that prefix, names the network hashed.
    """
    prefix = slot.static_persist.for_version(ctx.client.address.version)
    network = ctx.client.network(prefix)
    seed = network.network_address.packed + bytes([network.prefixlen])
    ranked = []
    for c in cands:
        if c.ratio <= 0:
            continue
        digest = hashlib.blake2b(seed + c.name.encode(), digest_size=8).digest()
        u = ((int.from_bytes(digest, "big") >> 12) + 0.5) / 2.0**52  # exactly inside (0, 1)
        ranked.append((-c.ratio / math.log(u), c))
    ranked.sort(key=lambda sc: -sc[0])
    scores = tuple((c.name, round(s, 6)) for s, c in ranked)
    return Ranking(tuple(c for _, c in ranked), scores, prefix, f"client network {network}")


METHODS: dict[str, Method] = {
    "round_robin": round_robin,
    "ratio": ratio,
    "global_availability": global_availability,
    "random": random_choice,
    "topology": topology,
    "static_persist": static_persist,
    **dynamic.METHODS,
    **links.METHODS,
}
