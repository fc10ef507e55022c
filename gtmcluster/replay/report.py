"""The replay's findings, from each query's outcome before and after: per wide IP the share
of answers per data center and per member, the clients that move (from -> to), the queries
that would now fail or fall back, and how many logged decisions the base replay agrees with.

The report is plain data (dicts, lists, strings, numbers) with keys in a stable order, so
that `--json` is the report itself and the same input gives the same bytes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from gtmcluster.querylog.dnstap import Decided
from gtmcluster.replay.engine import Outcome, Pair

#: the bucket of answers that name no pool member (failure response, drop, fallback address)
NO_MEMBER = "(no member)"
#: disagreements with the log shown as examples, at most
EXAMPLES = 10


def agrees(decided: Decided, outcome: Outcome) -> bool:
    """Whether a replayed *outcome* is what the log says was decided: the same wide IP, pool
    and members (persistence or not), or a failure response for both."""
    if decided.wideip != outcome.wideip:
        return False
    if decided.slot == "failure_response" or outcome.slot == "failure_response":
        return decided.slot == outcome.slot
    return decided.pool == outcome.pool and tuple(decided.members) == outcome.members


def _shares(counts: dict[str, list[float]], total: int) -> dict[str, dict[str, float]]:
    return {
        key: {
            "before": round(before, 3),
            "after": round(after, 3),
            "before_share": round(before / total, 4) if total else 0.0,
            "after_share": round(after / total, 4) if total else 0.0,
        }
        for key, (before, after) in sorted(counts.items())
    }


def _wideip_summary(pairs: list[Pair]) -> dict[str, Any]:
    datacenters: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    members: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    outcomes = {k: [0, 0] for k in ("answered", "fell_back", "failed")}
    for pair in pairs:
        for side, outcome in enumerate((pair.before, pair.after)):
            if outcome.members:
                for dc in outcome.datacenters:
                    datacenters[dc][side] += 1 / len(outcome.datacenters)
                for m in outcome.members:
                    members[m][side] += 1 / len(outcome.members)
            else:
                datacenters[NO_MEMBER][side] += 1
                members[NO_MEMBER][side] += 1
            kind = "failed" if outcome.failed else "fell_back" if outcome.fell_back else "answered"
            outcomes[kind][side] += 1
    return {
        "queries": len(pairs),
        "datacenters": _shares(datacenters, len(pairs)),
        "members": _shares(members, len(pairs)),
        "outcomes": {k: {"before": b, "after": a} for k, (b, a) in sorted(outcomes.items())},
    }


def _where(outcomes: Iterable[Outcome]) -> tuple[str, str]:
    """Where a client's queries go, as (data centers, members): the union over its queries
    (an outcome without members counts by what it is, e.g. "failure_response servfail")."""
    datacenters: set[str] = set()
    members: set[str] = set()
    for o in outcomes:
        if o.members:
            datacenters.update(o.datacenters)
            members.update(o.members)
        else:
            datacenters.add(o.where())
            members.add(o.where())
    return ", ".join(sorted(datacenters)), ", ".join(sorted(members))


def _by_client(pairs: Iterable[Pair]) -> dict[tuple[str, str], list[Pair]]:
    grouped: dict[tuple[str, str], list[Pair]] = defaultdict(list)
    for pair in pairs:
        wideip = pair.before.wideip or pair.after.wideip or ""
        grouped[(wideip, pair.query.client)].append(pair)
    return dict(sorted(grouped.items()))


def _changed(pairs: list[Pair], wanted: str) -> list[dict[str, Any]]:
    """Clients with queries that now fail (*wanted* "failed") or now fall back ("fell_back")."""
    out = []
    for (wideip, client), mine in _by_client(pairs).items():
        hit = [p for p in mine if getattr(p.after, wanted) and not getattr(p.before, wanted)]
        if hit:
            out.append(
                {
                    "wideip": wideip,
                    "client": client,
                    "queries": len(hit),
                    "before": sorted({p.before.where() for p in hit}),
                    "after": sorted({p.after.where() for p in hit}),
                }
            )
    return out


def build(pairs: list[Pair], about: dict[str, Any]) -> dict[str, Any]:
    """The report of *pairs* (the wide IP queries, in log order); *about* says what was
    replayed (files, configs, state, --disable), put in as it is."""
    by_wideip: dict[str, list[Pair]] = defaultdict(list)
    for pair in pairs:
        by_wideip[pair.before.wideip or pair.after.wideip or ""].append(pair)
    moved = []
    for (wideip, client), mine in _by_client(pairs).items():
        before_dcs, before_members = _where(p.before for p in mine)
        after_dcs, after_members = _where(p.after for p in mine)
        if before_dcs != after_dcs:
            moved.append(
                {
                    "wideip": wideip,
                    "client": client,
                    "queries": len(mine),
                    "from": before_dcs,
                    "to": after_dcs,
                    "from_members": before_members,
                    "to_members": after_members,
                }
            )
    compared = [p for p in pairs if p.query.decided is not None]
    disagree = [p for p in compared if p.query.decided is not None and not agrees(p.query.decided, p.before)]
    return {
        **about,
        "queries": len(pairs),
        "agreement": {
            "compared": len(compared),
            "agree": len(compared) - len(disagree),
            "examples": [
                {
                    "client": p.query.client,
                    "name": p.query.name,
                    "logged": _decided_text(p.query.decided),
                    "replayed": p.before.where(),
                }
                for p in disagree[:EXAMPLES]
                if p.query.decided is not None
            ],
        },
        "wideips": {name: _wideip_summary(mine) for name, mine in sorted(by_wideip.items())},
        "moved": moved,
        "now_failing": _changed(pairs, "failed"),
        "now_falling_back": _changed(pairs, "fell_back"),
    }


def _decided_text(decided: Decided) -> str:
    members = f" ({', '.join(decided.members)})" if decided.members else ""
    return f"{decided.pool or decided.slot}{members} by {decided.method}"
