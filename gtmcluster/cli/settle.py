"""Whether the members' digests differ for good, or only while a change travels: what
`gtmcluster status` fails on.

Members answer at slightly different moments, and a change written on one (a record, a
config push) reaches the others a moment later: one round of answers can show digests that
differ only in flight. So when a round's digests differ, the members are asked again, every
`POLL` seconds for at most `SETTLE` seconds (the clock and the wait are passed in); the
first round where they agree ends it. A difference still there at the end is a lasting one,
except a state difference among records still moving: per origin (the member that wrote
them; `state.origin_digests`, from nodes that report it), a member behind on an origin's
records that took in some of them while polled is catching up, not stuck. Only when every
member behind on every differing origin moved is the difference counted in flight; a member
that holds other records than the rest and did not move in `SETTLE` seconds is a lasting
difference, as is any difference where a member does not report its origins.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: how long `gtmcluster status` waits at most for differing digests to agree (seconds)
SETTLE = 3.0
#: the most `--settle` may ask for (seconds)
MAX_SETTLE = 60.0
#: how often it asks again meanwhile (seconds)
POLL = 0.75

Statuses = dict[str, dict[str, Any]]


@dataclass
class Settled:
    """The last round of answers, and how it was reached."""

    statuses: Statuses
    #: rounds asked (1: the digests agreed at once, or waiting was off)
    polls: int = 1
    #: seconds between the first round and the last
    waited: float = 0.0
    #: origins whose records differ among members still taking them in (in flight)
    moving: list[str] = field(default_factory=list)


def settle(
    ask: Callable[[], Statuses],
    agree: Callable[[Statuses], bool],
    clock: Callable[[], float],
    wait: Callable[[float], None],
    within: float = SETTLE,
    every: float = POLL,
) -> Settled:
    """Ask (`ask`) until a round's digests agree (`agree`) or *within* seconds have passed,
    every *every* seconds (`wait`); then, when they still differ, which origins' records
    are still moving (`moving`, see the module's docstring)."""
    start = clock()
    rounds = [ask()]
    while not agree(rounds[-1]) and clock() - start + every <= within:
        wait(every)
        rounds.append(ask())
    last = rounds[-1]
    out = Settled(last, polls=len(rounds), waited=round(clock() - start, 3) if len(rounds) > 1 else 0.0)
    if not agree(last):
        out.moving = moving(rounds)
    return out


def origin_digests(status: dict[str, Any]) -> dict[str, str] | None:
    """A member's digest of each origin's records, None from a node that does not say."""
    held = status.get("state", {}).get("origin_digests") if "error" not in status else None
    if not isinstance(held, dict) or not all(isinstance(v, str) for v in held.values()):
        return None
    return held


def moving(rounds: list[Statuses]) -> list[str]:
    """The origins whose records differ among the members in the last round while every
    member behind on them took some in during the rounds; [] unless *every* differing origin
    is such (one stuck origin makes the whole difference a lasting one), or when a member
    does not report its origins."""
    last = rounds[-1]
    answered = [n for n, s in last.items() if "error" not in s]
    seen: dict[str, list[dict[str, str]]] = {}
    for node in answered:
        held = [origin_digests(r[node]) for r in rounds if node in r]
        if len(answered) < 2 or any(h is None for h in held):
            return []
        seen[node] = [h for h in held if h is not None]
    origins = sorted({o for views in seen.values() for o in views[-1]})
    differing = []
    for origin in origins:
        now = {n: seen[n][-1].get(origin) for n in answered}
        if len(set(now.values())) <= 1:
            continue
        # the origin's own member holds its records first; else the most common digest
        reference = now[origin] if origin in now else Counter(now.values()).most_common(1)[0][0]
        behind = [n for n in answered if now[n] != reference]
        if not all(len({v.get(origin) for v in seen[n]}) > 1 for n in behind):
            return []  # a member behind that took nothing in: a lasting difference
        differing.append(origin)
    return differing
