"""Why a path-based method chose as it did, for `explain`: each data center of a step's
candidates by name, with the figure the method compares (`rtt`: the smoothed RTT and how
many replies it is over; `completion_rate`: the share of probes answered and how many;
`hops`: the hop count; `qos`: all three), or why it has none ("no path measured yet").

It reads the paths the way `lb.dynamic` does (`Measurements.path`, `.stale`,
`.probing_datacenters`), after the decision and off the query path: the engine's steps
carry candidate names only, so the candidates are found again in the wide IP's config.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gtmcluster.config.model import PoolRef, WideIP
from gtmcluster.lb.ranking import Candidate
from gtmcluster.lb.trace import Step

#: the methods that compare paths to the LDNS, and what each line shows of a path
PATH_METHODS = frozenset({"rtt", "completion_rate", "hops", "qos"})


def candidates_of(step: Step, wideip: WideIP) -> list[Candidate]:
    """The candidates *step* ranked, found in *wideip*'s config: its pools for the wide IP's
    `pool_lb`, a pool's members for a pool's method ([] when the step names neither)."""
    refs: Sequence[PoolRef] = (*wideip.pools, *((wideip.last_resort,) if wideip.last_resort else ()))
    wanted = set(step.candidates)
    if step.subject == f"wideip {wideip.name}":
        return [r for r in refs if r.name in wanted]
    if step.subject.startswith("pool "):
        name = step.subject[len("pool ") :].removesuffix(" (last resort)")
        pool = next((r.pool for r in refs if r.name == name), None)
        if pool is not None:
            return [m for m in pool.members if m.name in wanted]
    return []


def datacenter_figures(step: Step, wideip: WideIP, measurements: Any, ldns: str) -> list[dict[str, Any]] | None:
    """Per data center of *step*'s candidates (sorted by name): the path to *ldns* as the
    method read it, and a line saying it (``DC1 rtt 20.9 ms (3 samples) for vs1; measured by n1 4 s ago``). None for
    a step of another method, or when the node keeps no measurements."""
    if step.method not in PATH_METHODS or measurements is None:
        return None
    by_dc: dict[str, list[str]] = {}
    for c in candidates_of(step, wideip):
        for dc in c.datacenters:
            by_dc.setdefault(dc, []).append(c.name)
    return [_figure(step.method, dc, names, measurements, ldns) for dc, names in sorted(by_dc.items())]


def _figure(method: str, dc: str, names: list[str], m: Any, ldns: str) -> dict[str, Any]:
    path = m.path(ldns, dc)
    out: dict[str, Any] = {"datacenter": dc, "candidates": names, "measured": path is not None}
    if path is None:
        if dc in m.probing_datacenters:
            said = "no path measured yet (probe requested)"
        else:
            said = "no path measured yet (no sync group member there to measure from)"
    else:
        replies = path.window.count("1")
        stale = m.stale(path)
        out.update(
            {
                "usable": path.usable,
                "rtt_ms": round(path.rtt_us / 1000, 3) if path.rtt_us else None,
                "rtt_samples": replies,
                "completion_percent": round(path.completion / 100, 2),
                "probes": len(path.window),
                "hops": path.hops or None,
                "measured_by": path.by,
                "age": round(path.age, 3),
                "stale": stale,
            }
        )
        said = _said(method, path, replies)
    out["text"] = f"{dc} {said} for {', '.join(names)}"
    if path is not None:
        out["text"] += f"; measured by {path.by} {path.age:.0f} s ago" + (", stale: re-probe asked" if stale else "")
    return out


def _said(method: str, path: Any, replies: int) -> str:
    """The figure *method* compares, or why it skips this path (as `lb.dynamic` decides:
    `rtt` and `qos` take usable paths, `completion_rate` a rate above 0, `hops` a count)."""
    probes = len(path.window)
    of = f"{probes} probe{'s' if probes != 1 else ''}"
    rtt = f"rtt {path.rtt_us / 1000:.1f} ms ({replies} sample{'s' if replies != 1 else ''})"
    completion = f"completion {path.completion / 100:.3g}% ({of})"
    hops = f"hops {path.hops}" if path.hops else "hops not measured"
    unanswered = f"no reply to the last {of}"
    if method == "hops":
        return hops if path.hops else f"{hops} (not compared)"
    if method == "completion_rate":
        return completion if path.completion > 0 else f"{unanswered} (not compared)"
    if not path.usable:
        return f"{unanswered} (not usable)"
    return rtt if method == "rtt" else f"{rtt}, {completion}, {hops}"
