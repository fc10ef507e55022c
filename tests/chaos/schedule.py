"""The nemesis's plan: a seeded sequence of fault episodes, each undone before the next (pure).

An episode breaks one thing (or two, for the compound ones), holds it, and repairs it; then
the group gets a few seconds to settle. The first episodes are every kind once, in a seeded
order; then kinds are drawn at random until the run's time is used. The last step heals
everything (`final_heal`): links, loss, dead nodes, stopped backends. Clock skew stays.

Kinds:

- ``partition``: cut the link between two GTMs, both ways;
- ``oneway``: cut one direction only (A's packets no longer reach B);
- ``isolate``: cut a GTM from both others (clients still reach it);
- ``loss``: 20% of the packets lost on every link between GTMs, both ways;
- ``kill``: SIGKILL a node, restart it a few seconds later (with its state directory);
- ``skew``: SIGKILL a node and restart it under `faketime` with its clock 20-40 s ahead or
  behind (it stays so);
- ``backend``: stop a virtual server's backend, start it again later;
- ``backend_partition``: cut two GTMs apart and stop the backend of one's server meanwhile;
- ``crash_after_ack``: isolate a GTM, make an admin write there and SIGKILL the node as soon
  as the write is acknowledged, restart it, heal: is an acknowledged write durable?
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

KINDS = (
    "partition",
    "oneway",
    "isolate",
    "loss",
    "kill",
    "skew",
    "backend",
    "backend_partition",
    "crash_after_ack",
)
LOSS = 0.2
#: seconds of calm before the first episode
WARMUP = 5.0


@dataclass(frozen=True)
class Step:
    """One thing the nemesis does, *at* seconds after the run's start."""

    at: float
    action: str  # cut heal loss kill start backend_stop backend_start write_then_kill episode final_heal
    args: dict[str, Any] = field(default_factory=dict)


def plan(
    seed: int, seconds: float, sites: Sequence[str], servers: Mapping[str, str], kinds: Sequence[str] = KINDS
) -> list[Step]:
    """The steps of a run of *seconds* over the GTM nodes *sites* (each with its virtual server in
    *servers*: node -> server), from *seed*, with episodes of *kinds* only."""
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"episode kinds must be some of {', '.join(KINDS)}, not {sorted(unknown) or 'none'}")
    rng = random.Random(seed)
    order = list(kinds)
    rng.shuffle(order)
    steps: list[Step] = []
    t = WARMUP
    n = misfits = 0
    while misfits < 20:  # an episode that does not fit in the time left is passed over
        kind = order[n] if n < len(order) else rng.choice(order)
        n += 1
        episode, duration = _episode(kind, rng, t, list(sites), servers)
        if t + duration > seconds:
            misfits += 1
            continue
        steps.append(Step(t, "episode", {"name": kind, "phase": "start"}))
        steps += episode
        steps.append(Step(t + duration, "episode", {"name": kind, "phase": "end"}))
        t += duration + rng.uniform(4, 8)
    steps.append(Step(seconds, "final_heal"))
    return sorted(steps, key=lambda s: s.at)


def _episode(
    kind: str, rng: random.Random, t: float, sites: list[str], servers: Mapping[str, str]
) -> tuple[list[Step], float]:
    """The steps of one episode starting at *t*, and how long it lasts."""
    a, b = rng.sample(sites, 2)
    if kind == "partition":
        hold = rng.uniform(8, 15)
        return [
            Step(t, "cut", {"a": a, "b": b, "oneway": False}),
            Step(t + hold, "heal", {"a": a, "b": b, "oneway": False}),
        ], hold
    if kind == "oneway":
        hold = rng.uniform(8, 15)
        return [
            Step(t, "cut", {"a": a, "b": b, "oneway": True}),
            Step(t + hold, "heal", {"a": a, "b": b, "oneway": True}),
        ], hold
    if kind == "isolate":
        hold = rng.uniform(10, 15)
        others = [s for s in sites if s != a]
        cuts = [Step(t, "cut", {"a": a, "b": o, "oneway": False}) for o in others]
        heals = [Step(t + hold, "heal", {"a": a, "b": o, "oneway": False}) for o in others]
        return cuts + heals, hold
    if kind == "loss":
        hold = rng.uniform(20, 30)
        return [Step(t, "loss", {"share": LOSS}), Step(t + hold, "loss", {"share": 0.0})], hold
    if kind == "kill":
        down = rng.uniform(3, 8)
        return [Step(t, "kill", {"node": a}), Step(t + down, "start", {"node": a})], down + 5
    if kind == "skew":
        skew = rng.choice((-1, 1)) * rng.randint(20, 40)
        return [Step(t, "kill", {"node": a}), Step(t + 2, "start", {"node": a, "skew": skew})], 12
    if kind == "backend":
        hold = rng.uniform(12, 20)
        vs = servers[a]
        return [Step(t, "backend_stop", {"vs": vs}), Step(t + hold, "backend_start", {"vs": vs})], hold
    if kind == "backend_partition":
        hold = rng.uniform(15, 20)
        vs = servers[rng.choice((a, b))]
        return [
            Step(t, "cut", {"a": a, "b": b, "oneway": False}),
            Step(t + 2, "backend_stop", {"vs": vs}),
            Step(t + hold - 2, "backend_start", {"vs": vs}),
            Step(t + hold, "heal", {"a": a, "b": b, "oneway": False}),
        ], hold
    if kind == "crash_after_ack":
        others = [s for s in sites if s != a]
        return [
            *(Step(t, "cut", {"a": a, "b": o, "oneway": False}) for o in others),
            Step(t + 2, "write_then_kill", {"node": a}),
            Step(t + 4, "start", {"node": a}),
            *(Step(t + 6, "heal", {"a": a, "b": o, "oneway": False}) for o in others),
        ], 6
    raise ValueError(f"unknown episode kind {kind!r}")
