"""Per-object statistics, as F5's ``show gtm wideip / pool / pool-member`` gives them.

The answer path keeps two plain counters (`gtmcluster.runtime.stats.QueryStats`): queries by (wide IP,
type, rcode, method), and wide IP answers by `Tally` (wide IP, pool, slot, method, servers).
Nothing more is counted per query; this module folds them, when asked (the API, /metrics,
the dashboard), into figures per wide IP, per pool and per pool member, since the node
started (the workers' counts included):

- a wide IP: requests (by type), answers by slot (``preferred``, ``alternate``,
  ``fallback``, ``last_resort``, ``failure_response``, ``persistence``) and by method,
  ``fallbacks`` (answers that did not come from a pool's preferred method or from
  persistence: the first choice could not answer), ``persistence_hits``,
  ``returned_to_dns`` (the static zone answered), ``dropped`` (no reply sent) and the
  other rcodes it was answered with;
- a pool: answers by slot and by method;
- a pool member: answers naming it, by slot (an answer naming two servers counts for each).
"""

from __future__ import annotations

from typing import Any

from gtmcluster.runtime.slices import Steps, whole
from gtmcluster.runtime.stats import QueryStats, Tally

#: the slots of an answer, in the order they are shown
SLOTS = ("preferred", "alternate", "fallback", "last_resort", "failure_response", "persistence")
#: slots whose answers count as fallbacks: the preferred method could not answer
FALLBACK_SLOTS = frozenset(("alternate", "fallback", "last_resort", "failure_response"))
#: counters folded per step of a sliced answer
PER_STEP = 500


def _wideip_entry() -> dict[str, Any]:
    return {
        "requests": 0,
        "types": {},
        "answered": 0,
        "slots": {},
        "methods": {},
        "fallbacks": 0,
        "persistence_hits": 0,
        "returned_to_dns": 0,
        "dropped": 0,
        "rcodes": {},
    }


def _add(counts: dict[str, int], key: str, n: int) -> None:
    counts[key] = counts.get(key, 0) + n


def object_stats_steps(stats: QueryStats, only: str | None = None) -> Steps[dict[str, Any]]:
    """The figures of every wide IP, pool and pool member that has counts (of wide IP *only*
    and its pools' when given), in steps (`gtmcluster.runtime.slices`)."""
    # the counters as they are now (copied at once: answers go on counting meanwhile)
    queries = list(stats.queries.items())
    answered = list(stats.answered.items())
    yield None
    wideips: dict[str, dict[str, Any]] = {}
    for i, ((wideip, qtype, rcode, method), n) in enumerate(queries):
        if i % PER_STEP == PER_STEP - 1:
            yield None
        if not wideip or (only is not None and wideip != only):
            continue
        entry = wideips.get(wideip)
        if entry is None:
            entry = wideips[wideip] = _wideip_entry()
        entry["requests"] += n
        _add(entry["types"], qtype, n)
        if rcode == "drop":
            entry["dropped"] += n
        elif method == "return_to_dns":
            entry["returned_to_dns"] += n
        elif rcode != "NOERROR":
            _add(entry["rcodes"], rcode, n)
    pools: dict[str, dict[str, Any]] = {}
    yield None
    for i, (tally, n) in enumerate(answered):
        if i % PER_STEP == PER_STEP - 1:
            yield None
        if only is not None and tally[0] != only:
            continue
        _count_answer(wideips, pools, tally, n)
    return {"wideips": _sorted(wideips), "pools": _sorted(pools)}


def object_stats(stats: QueryStats, only: str | None = None) -> dict[str, Any]:
    """`object_stats_steps` in one go (tests, small counts)."""
    return whole(object_stats_steps(stats, only))


def _count_answer(wideips: dict[str, dict[str, Any]], pools: dict[str, dict[str, Any]], tally: Tally, n: int) -> None:
    wideip, pool, slot, method, members = tally
    entry = wideips.get(wideip)
    if entry is None:  # (a worker's answers may arrive before its queries)
        entry = wideips[wideip] = _wideip_entry()
    entry["answered"] += n
    _add(entry["slots"], slot, n)
    _add(entry["methods"], method, n)
    if slot in FALLBACK_SLOTS:
        entry["fallbacks"] += n
    elif slot == "persistence":
        entry["persistence_hits"] += n
    if not pool:
        return
    p = pools.get(pool)
    if p is None:
        p = pools[pool] = {"answered": 0, "slots": {}, "methods": {}, "members": {}}
    p["answered"] += n
    _add(p["slots"], slot, n)
    _add(p["methods"], method, n)
    for name in members:
        m = p["members"].get(name)
        if m is None:
            m = p["members"][name] = {"answered": 0, "slots": {}}
        m["answered"] += n
        _add(m["slots"], slot, n)


def _sorted(objects: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for name in sorted(objects):
        entry = objects[name]
        for key in ("slots", "methods", "types", "rcodes", "members"):
            if key in entry:
                entry[key] = dict(sorted(entry[key].items(), key=_slot_order if key == "slots" else None))
        out[name] = entry
    return out


def _slot_order(item: tuple[str, Any]) -> tuple[int, str]:
    name = item[0]
    return (SLOTS.index(name) if name in SLOTS else len(SLOTS), name)
