"""Smooth weighted round robin: the cycle of turns for a set of weights, and the order of
candidates at the next turn. Shared by `ratio` (`lb.methods`), `dynamic_ratio`
(`lb.dynamic`) and `bandwidth_ratio` / `link_capacity` (`lb.links`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from gtmcluster.lb.context import Context
from gtmcluster.lb.ranking import C, Slot

#: the longest ratio cycle kept exactly; larger weight sums are scaled down to it
MAX_CYCLE = 10_000


@functools.lru_cache(maxsize=4096)
def ratio_schedule(weights: tuple[int, ...]) -> tuple[int, ...]:
    """One cycle of smooth weighted round robin: index i appears weights[i] times, spread out.

    Slot k of member i sits at (2k+1)/(2w_i) of the cycle (Webster's divisor method), so a
    3:1 pair gives 0,0,1,0 rather than 0,0,0,1.
    """
    total = sum(weights)
    if total > MAX_CYCLE:
        weights = tuple(max(1, round(w * MAX_CYCLE / total)) if w else 0 for w in weights)
    divisor = math.gcd(*weights)
    weights = tuple(w // divisor for w in weights)
    slots = sorted(((2 * k + 1) / (2 * w), i) for i, w in enumerate(weights) for k in range(w))
    return tuple(i for _, i in slots)


def in_turn(weighted: Sequence[C], weights: tuple[int, ...], ctx: Context, slot: Slot) -> tuple[C, ...]:
    """*weighted* (each of weight > 0, *weights* in the same order) in the order of the
    slot's next turn of the cycle: the one whose turn it is first, then the others as their
    turns come."""
    schedule = ratio_schedule(weights)
    start = ctx.turn(slot.rotation) % len(schedule)
    order: list[C] = []
    for i in schedule[start:] + schedule[:start]:
        if weighted[i] not in order:
            order.append(weighted[i])
            if len(order) == len(weighted):
                break
    return tuple(order)
