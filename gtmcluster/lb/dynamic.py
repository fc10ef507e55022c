"""Dynamic methods: choices from measurements (paths to the LDNS, servers' load).

- `rtt`: the candidate whose data center has the lowest smoothed RTT to the asking LDNS.
  RTTs within the pool's `rtt_tolerance` of the best are ties, settled by the higher
  completion rate, then the fewer hops, then in turn.
- `completion_rate`: the highest completion rate; `hops`: the fewest hops (measured ones),
  from the LDNS's paths (a client figure is an RTT alone).
- `qos`: a weighted score (BIG-IP DNS's quality of service): each measure normalised to
  0..1 against the best candidate (RTT, hops, completion rate, topology score, server
  capacity, packet rate, kbps, connections), times the pool's `qos` coefficients.
- `least_connections`, `packet_rate`, `kbps`: the lowest load; `vs_capacity`: the most
  capacity; figures come from monitors with a load source (a pool counts the sum of its
  members; docs/load-sources.md), each at most `config.loadsource.MAX_FIGURE` (a larger one,
  or one not a number, counts as none: the sums stay finite, the scores numbers).
- `weighted_least_connections`: the lowest connections / ratio (ties in turn).
- `dynamic_ratio`: weighted round robin over ratio × spare share, the spare share being
  (capacity - connections) / capacity, 0 when full (in tenths of the largest).

Paths are per LDNS: a data center's RTT is measured to the resolver that asks, so these
choices hold for every client behind it (scope 0). With client sources on
(``proximity.sources``, docs/client-proximity.md), the path methods first ask
`Measurements.client_paths` for figures of the client itself: the ECS subnet's own (from
browsers' beacons or probes; the answer's scope is then that subnet's prefix), or the
LDNS's measured client population (scope 0); the LDNS's own paths decide when neither has a
figure for every data center of the candidates. A method without the data it needs yields
nothing (so the chain moves on) and, for paths, asks the node to have the LDNS probed;
until the node has reconciled with its peers after a start, they yield nothing at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gtmcluster.config.loadsource import MAX_FIGURE
from gtmcluster.lb.context import Context
from gtmcluster.lb.ranking import Candidate, Method, Ranking, Slot
from gtmcluster.lb.weighted import in_turn

PATH_NOTE = "RTT and paths are measured to the LDNS, not to the client subnet"


def _unready(ctx: Context) -> Ranking | None:
    m = ctx.measurements
    if m is None:
        return Ranking((), note="no measurements on this node")
    if not m.ready:
        return Ranking((), note="not ready: reconciling with peers after a start")
    return None


def _paths(cands: Sequence[Candidate], ctx: Context) -> tuple[dict[str, Any], list[str]]:
    """Each candidate's best usable path (over its data centers) to the asking LDNS, and
    the data centers (with a GTM to measure from) whose path is still unknown.

    Comparing only the measured data centers would favour whichever measured first, so
    while a path is missing the methods yield nothing (BIG-IP uses the alternate method
    until the paths are complete). A data center that measured and got no reply is known:
    its candidates are just not usable.
    """
    m = ctx.measurements
    ldns = str(ctx.client.ldns)
    best: dict[str, Any] = {}
    if (chosen := _client_source(cands, ctx)) is not None:
        ctx.source = chosen.source
        for c in cands:
            for dc in c.datacenters:
                figure = chosen.figures[dc]
                ctx.holds_until(ctx.now + m.clients.max_age - figure.age)
                held = best.get(c.name)
                if held is None or figure.rtt_us < held.rtt_us:
                    best[c.name] = figure
        return best, []
    ctx.source = "ldns"
    waiting: set[str] = set()
    for c in cands:
        for dc in sorted(c.datacenters):
            path = m.path(ldns, dc)
            if path is None:
                ctx.probe_wanted = True
                if dc in m.probing_datacenters:
                    waiting.add(dc)
                continue
            _seen(path, ctx)
            if m.stale(path):
                ctx.probe_wanted = True
            if not path.usable:
                continue
            held = best.get(c.name)
            if held is None or path.rtt_us < held.rtt_us:
                best[c.name] = path
    return best, sorted(waiting)


def _client_source(cands: Sequence[Candidate], ctx: Context) -> Any:
    """The client source that decides for this client (kept in the context for the
    ranking's scope and note), or None: the LDNS's paths decide."""
    m = ctx.measurements
    if m.clients is None:
        return None
    client = ctx.client
    dcs = {dc for c in cands for dc in c.datacenters}
    chosen = m.client_paths(client.address, client.prefix, client.from_ecs, str(client.ldns), dcs)
    ctx.proximity = chosen
    if chosen is None or chosen.source != "client":
        ctx.probe_subnet = m.clients.unmeasured(client.address, client.prefix, client.from_ecs)
    return chosen


def _scope_and_note(ctx: Context, note: str = PATH_NOTE) -> tuple[int, str]:
    """The ranking's ECS scope and note for the source that decided."""
    chosen = ctx.proximity
    if chosen is None:
        return 0, note
    return chosen.scope, described(chosen)


def described(chosen: Any) -> str:
    """What a client source read (`proximity.clients.Chosen`), in words: ``client subnet
    198.51.100.0/24's own RTT (3 samples)``, ``LDNS 192.0.2.53's measured clients (12 beacons)``."""
    if chosen.source == "client":
        return f"client subnet {chosen.subject}'s own RTT ({counted(chosen.samples, 'sample')})"
    return f"LDNS {chosen.subject}'s measured clients ({counted(chosen.samples, 'beacon')})"


def counted(n: int, what: str) -> str:
    """*n* of *what*, as words (``1 sample``, ``3 samples``)."""
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _seen(path: Any, ctx: Context) -> None:
    """The decision holds until *path* goes stale (it then asks for a probe) or is too old
    to use."""
    prober = ctx.measurements.prober
    for limit in (prober.probe_interval, prober.path_ttl):
        if path.age < limit:
            ctx.holds_until(ctx.now + limit - path.age)


def _missing(dcs: Sequence[str], ctx: Context) -> str:
    return f"no path from {', '.join(dcs)} to LDNS {ctx.client.ldns} measured yet (probe requested)"


def rtt(cands: Sequence[Candidate], ctx: Context, slot: Slot) -> Ranking:
    if (early := _unready(ctx)) is not None:
        return early
    paths, waiting = _paths(cands, ctx)
    if waiting or not paths:
        return Ranking((), note=_missing(waiting or sorted({dc for c in cands for dc in c.datacenters}), ctx))
    scores = tuple((c.name, float(paths[c.name].rtt_us)) for c in cands if c.name in paths)
    best_rtt = min(p.rtt_us for p in paths.values())
    measured = [(i, c) for i, c in enumerate(cands) if c.name in paths]
    tied = [(i, c) for i, c in measured if slot.tolerance.tied(paths[c.name].rtt_us, best_rtt)]
    rest = sorted((t for t in measured if t not in tied), key=lambda t: (paths[t[1].name].rtt_us, t[0]))

    def quality(t: tuple[int, Candidate]) -> tuple[int, int]:
        p = paths[t[1].name]
        return (-p.completion, p.hops if p.hops > 0 else 1 << 30)

    tied.sort(key=lambda t: (quality(t), t[0]))
    scope, note = _scope_and_note(ctx)
    equal = [t for t in tied if quality(t) == quality(tied[0])]
    if len(equal) > 1:  # equal in every criterion: take them in turn
        start = ctx.turn(slot.rotation) % len(equal)
        tied = equal[start:] + equal[:start] + tied[len(equal) :]
        note += f"; {len(equal)} tied within the RTT tolerance, taken in turn"
    elif len(tied) > 1:
        note += f"; {len(tied)} within the RTT tolerance, settled by completion rate and hops"
    return Ranking(tuple(c for _, c in tied + rest), scores, scope, note)


def _by_path(key: Callable[[Any], float | None], higher_better: bool, what: str) -> Method:
    def method(cands: Sequence[Candidate], ctx: Context, slot: Slot) -> Ranking:
        if (early := _unready(ctx)) is not None:
            return early
        m = ctx.measurements
        ldns = str(ctx.client.ldns)
        ctx.source = "ldns"  # (a client figure is an RTT alone)
        values: dict[str, float] = {}
        waiting: set[str] = set()
        for c in cands:
            for dc in c.datacenters:
                path = m.path(ldns, dc)
                if path is None:
                    ctx.probe_wanted = True
                    if dc in m.probing_datacenters:
                        waiting.add(dc)
                    continue
                _seen(path, ctx)
                value = key(path)
                if value is None:
                    continue
                held = values.get(c.name)
                better = held is None or (value > held if higher_better else value < held)
                if better:
                    values[c.name] = value
        if waiting:
            return Ranking((), note=_missing(sorted(waiting), ctx))
        if not values:
            return Ranking((), note=f"no {what} measured for LDNS {ldns} yet")
        order = sorted(
            (i for i, c in enumerate(cands) if c.name in values),
            key=lambda i: ((-1 if higher_better else 1) * values[cands[i].name], i),
        )
        scores = tuple((cands[i].name, values[cands[i].name]) for i in order)
        return Ranking(tuple(cands[i] for i in order), scores, 0, PATH_NOTE)

    return method


completion_rate = _by_path(lambda p: float(p.completion) if p.completion > 0 else None, True, "completion rate")
hops = _by_path(lambda p: float(p.hops) if p.hops > 0 else None, False, "hop count")


def _load(c: Candidate, ctx: Context, field: str) -> float | None:
    """A candidate's figure: a server's own, or the sum over a pool's members."""
    return _loads(c, ctx, (field,))[0]


def _loads(c: Candidate, ctx: Context, fields: tuple[str, ...]) -> list[float | None]:
    """A candidate's *fields*, each record read once. A figure outside 0..`MAX_FIGURE`
    (what the readers take: `probe.loadread`) counts as none, whoever wrote it, so a
    pool's sums are finite and no score is infinite or NaN."""
    totals: list[float | None] = [None] * len(fields)
    for vs in c.members:
        figures = ctx.measurements.metrics(vs.name)
        if figures:
            for i, field in enumerate(fields):
                value = figures.get(field)
                if value is not None and 0 <= value <= MAX_FIGURE:  # (NaN is neither)
                    totals[i] = (totals[i] or 0.0) + value
    return totals


def _by_load(field: str, higher_better: bool, what: str) -> Method:
    def method(cands: Sequence[Candidate], ctx: Context, slot: Slot) -> Ranking:
        if ctx.measurements is None:
            return Ranking((), note="no measurements on this node")
        values = {c.name: v for c in cands if (v := _load(c, ctx, field)) is not None}
        if not values:
            return Ranking((), note=f"no {what} reported yet (monitors with a load source)")
        order = sorted(
            (i for i, c in enumerate(cands) if c.name in values),
            key=lambda i: ((-1 if higher_better else 1) * values[cands[i].name], i),
        )
        scores = tuple((cands[i].name, values[cands[i].name]) for i in order)
        return Ranking(tuple(cands[i] for i in order), scores)

    return method


least_connections = _by_load("connections", False, "connection counts")
packet_rate = _by_load("packets_per_second", False, "packet rates")
kbps = _by_load("kbps", False, "throughput")
vs_capacity = _by_load("capacity", True, "capacity")


def weighted_least_connections(cands: Sequence[Candidate], ctx: Context, slot: Slot) -> Ranking:
    """The lowest connections per unit of ratio (Sangfor's 加权最少连接): a member of ratio
    3 with 30 connections is as loaded as one of ratio 1 with 10. Ratio 0 takes nothing;
    equal loads are taken in turn."""
    if ctx.measurements is None:
        return Ranking((), note="no measurements on this node")
    per: dict[str, float] = {}
    for c in cands:
        if c.ratio > 0 and (v := _load(c, ctx, "connections")) is not None:
            per[c.name] = v / c.ratio
    if not per:
        return Ranking((), note="no connection counts reported yet for members of ratio > 0")
    order = sorted((i for i, c in enumerate(cands) if c.name in per), key=lambda i: (per[cands[i].name], i))
    ranked = [cands[i] for i in order]
    scores = tuple((c.name, round(per[c.name], 6)) for c in ranked)
    best = [c for c in ranked if per[c.name] == per[ranked[0].name]]
    note = "connections / ratio"
    if len(best) > 1:
        start = ctx.turn(slot.rotation) % len(best)
        ranked = best[start:] + best[:start] + ranked[len(best) :]
        note += f"; {len(best)} equal, taken in turn"
    return Ranking(tuple(ranked), scores, 0, note)


#: dynamic_ratio answers in cycles where the member of the largest ratio × spare share has
#: this many turns and the others their share of it, rounded (at least 1): a cycle is at most
#: this many turns per member, so a change of figures costs little (`ratio_schedule`)
DYNAMIC_STEPS = 10


def dynamic_weights(cands: Sequence[Candidate], ctx: Context) -> dict[str, float]:
    """Each candidate's ratio × spare share, (capacity - connections) / capacity clamped to
    0..1; those without both figures (or with capacity 0) are left out."""
    out: dict[str, float] = {}
    for c in cands:
        capacity, connections = _loads(c, ctx, ("capacity", "connections"))
        if capacity is None or connections is None or capacity <= 0:
            continue
        out[c.name] = c.ratio * min(max(capacity - connections, 0.0) / capacity, 1.0)
    return out


def dynamic_ratio(cands: Sequence[Candidate], ctx: Context, slot: Slot) -> Ranking:
    """The ratio method over the configured ratios scaled by spare capacity (BIG-IP's
    dynamic ratio, with the spare share as the scale): a member half full is answered half
    as often as its ratio says, a full one not at all."""
    if ctx.measurements is None:
        return Ranking((), note="no measurements on this node")
    weights = dynamic_weights(cands, ctx)
    weighted = [c for c in cands if weights.get(c.name, 0) > 0]
    scores = tuple((c.name, round(weights[c.name], 4)) for c in cands if c.name in weights)
    if not weighted:
        note = "no capacity and connection figures reported yet" if not weights else "no spare capacity (or ratio 0)"
        return Ranking((), scores, note=note)
    note = "ratio × spare share of capacity"
    if len(weighted) == 1:
        return Ranking((weighted[0],), scores, note=note)
    top = max(weights[c.name] for c in weighted)
    shares = tuple(max(1, round(DYNAMIC_STEPS * weights[c.name] / top)) for c in weighted)
    return Ranking(in_turn(weighted, shares, ctx, slot), scores, note=note)


def qos(cands: Sequence[Candidate], ctx: Context, slot: Slot) -> Ranking:
    if (early := _unready(ctx)) is not None:
        return early
    w = slot.qos
    paths, waiting = _paths(cands, ctx)
    if not (w.rtt or w.hops or w.completion_rate):
        ctx.source = ""  # (the paths weigh nothing)
    elif waiting:
        return Ranking((), note=_missing(waiting, ctx))
    parts: dict[str, dict[str, float]] = {c.name: {} for c in cands}

    def lower_better(name: str, values: dict[str, float]) -> None:
        positive = {k: v for k, v in values.items() if v > 0}
        if positive:
            best = min(positive.values())
            for k, v in positive.items():
                parts[k][name] = best / v
        for k, v in values.items():
            if v == 0:
                parts[k][name] = 1.0

    def higher_better(name: str, values: dict[str, float]) -> None:
        top = max(values.values(), default=0)
        if top > 0:
            for k, v in values.items():
                parts[k][name] = v / top

    lower_better("rtt", {n: float(p.rtt_us) for n, p in paths.items()})
    lower_better("hops", {n: float(p.hops) for n, p in paths.items() if p.hops > 0})
    higher_better("completion_rate", {n: float(p.completion) for n, p in paths.items()})
    match = ctx.topology_match()
    topo = {c.name: float(hit[0]) for c in cands if (hit := ctx.topology.score(match, c.topology_mask)) is not None}
    higher_better("topology", topo)
    for field, name, better in (
        ("capacity", "vs_capacity", higher_better),
        ("packets_per_second", "packet_rate", lower_better),
        ("kbps", "kbps", lower_better),
        ("connections", "connections", lower_better),
    ):
        better(name, {c.name: v for c in cands if (v := _load(c, ctx, field)) is not None})
    weights = {
        "rtt": w.rtt,
        "hops": w.hops,
        "completion_rate": w.completion_rate,
        "topology": w.topology,
        "vs_capacity": w.vs_capacity,
        "packet_rate": w.packet_rate,
        "kbps": w.kbps,
        "connections": w.connections,
    }
    score = {c.name: sum(weights[k] * v for k, v in parts[c.name].items()) for c in cands}
    if not any(weights[k] for part in parts.values() for k in part):
        return Ranking((), note="no paths and no load figures for these candidates")
    order = sorted(range(len(cands)), key=lambda i: (-score[cands[i].name], i))
    scores = tuple((cands[i].name, round(score[cands[i].name], 4)) for i in order)
    scope, note = _scope_and_note(ctx)
    return Ranking(tuple(cands[i] for i in order), scores, max(scope, match.scope if w.topology else 0), note)


METHODS: dict[str, Method] = {
    "rtt": rtt,
    "completion_rate": completion_rate,
    "hops": hops,
    "qos": qos,
    "least_connections": least_connections,
    "packet_rate": packet_rate,
    "kbps": kbps,
    "vs_capacity": vs_capacity,
    "weighted_least_connections": weighted_least_connections,
    "dynamic_ratio": dynamic_ratio,
}
