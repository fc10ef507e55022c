"""Which proximity source decided, for `explain` (issue 36): the source a decision names
(`Decision.proximity`), each data center's RTT from that source beside the LDNS's own, and
why each source before it in ``proximity.sources`` was passed over (no client subnet in the
query, too short a one, a data center not measured, too few beacons behind the LDNS).

It reads what `lb.dynamic` read (`Measurements.client_paths`, `.path`, the client and
population records) after the decision and off the query path, for the data centers of the
step that decided: the last step of a path method with a result (a pool's own method, or
the wide IP's `pool_lb` when the pool's method reads no paths).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gtmcluster.config.model import WideIP
from gtmcluster.lb.context import Client
from gtmcluster.lb.dynamic import described
from gtmcluster.lb.pathwhy import PATH_METHODS, candidates_of
from gtmcluster.lb.trace import Decision, Step
from gtmcluster.state import keys

#: what each source is called for an operator
NAMES = {"population": "LDNS population", "ldns": "LDNS"}


def deciding_step(decision: Decision) -> Step | None:
    """The step whose path method decided: the last one of a path method with a result."""
    if not decision.proximity:
        return None
    return next((s for s in reversed(decision.trace) if s.method in PATH_METHODS and s.result), None)


def source_name(source: str | None, figures: Sequence[Any] = ()) -> str:
    """``client RUM``, ``client probe`` (or both), ``LDNS population``, ``LDNS`` or ``none``."""
    if source == "client":
        kinds = sorted({f.source for f in figures}) or ["rum"]
        return "client " + " and ".join("RUM" if k == "rum" else k for k in kinds)
    return NAMES.get(source or "", "none")


def explained(decision: Decision, wideip: WideIP, measurements: Any, client: Client) -> dict[str, Any]:
    """The source that decided *decision* for *client*, its figures and the LDNS's own per
    data center, and the sources passed over before it (see the module's doc)."""
    source = decision.proximity or None
    step = deciding_step(decision)
    if source is None or step is None or measurements is None:
        return {
            "source": None,
            "name": "none",
            "text": f"no proximity source: {decision.method or 'no method'} decided without paths",
            "datacenters": [],
            "passed_over": [],
        }
    dcs = sorted({dc for c in candidates_of(step, wideip) for dc in c.datacenters})
    ldns = str(client.ldns)
    chosen = None
    if source != "ldns":
        chosen = measurements.client_paths(client.address, client.prefix, client.from_ecs, ldns, dcs)
    figures = chosen.figures if chosen is not None else {}
    name = source_name(source, list(figures.values()))
    rows = [_row(dc, figures.get(dc), measurements.path(ldns, dc), source, ldns) for dc in dcs]
    if chosen is not None:
        text = f"decided by {name}: {described(chosen)}"
    else:
        text = f"decided by the LDNS's own paths (LDNS {ldns})"
    text += f"; ECS scope /{chosen.scope}" if chosen is not None and chosen.scope else ""
    return {
        "source": source,
        "name": name,
        "subject": chosen.subject if chosen is not None else ldns,
        "samples": chosen.samples if chosen is not None else None,
        "scope": chosen.scope if chosen is not None else 0,
        "step": step.describe(),
        "text": text,
        "datacenters": rows,
        "passed_over": _passed_over(source, measurements, client, dcs),
    }


def _ms(us: int) -> float:
    return round(us / 1000, 3)


def _row(dc: str, figure: Any, path: Any, source: str, ldns: str) -> dict[str, Any]:
    """One data center: the deciding source's RTT, and the LDNS's own beside it."""
    ldns_rtt = _ms(path.rtt_us) if path is not None and path.usable and path.rtt_us else None
    ldns_text = f"LDNS {ldns_rtt:.1f} ms" if ldns_rtt is not None else "LDNS not measured"
    out: dict[str, Any] = {"datacenter": dc, "ldns_rtt_ms": ldns_rtt}
    if figure is None:  # (the LDNS's own paths decided)
        out.update(rtt_ms=ldns_rtt, from_source="ldns")
        out["text"] = f"{dc} {ldns_text}"
        return out
    out.update(rtt_ms=_ms(figure.rtt_us), from_source=figure.source, age=round(figure.age, 3))
    said = "client" if source == "client" else "population"
    out["text"] = f"{dc} {said} {figure.rtt_us / 1000:.1f} ms ({figure.source}, {figure.age:.0f} s old) · {ldns_text}"
    return out


def _passed_over(decided: str, measurements: Any, client: Client, dcs: list[str]) -> list[dict[str, str]]:
    """Each source before *decided* in the config's order, and why it did not decide."""
    sources = measurements.clients
    if sources is None:
        return []
    out = []
    for source in sources.order:
        if source == decided:
            break
        if source == "client":
            out.append({"source": source, "reason": _why_not_client(measurements, client, dcs)})
        elif source == "population":
            out.append({"source": source, "reason": _why_not_population(measurements, str(client.ldns), dcs)})
    return out


def _held(measurements: Any, key: str) -> Any:
    """A live record's value at *key*, within the client sources' age, or None."""
    record = measurements.store.get(key)
    if record is None or not record.value:
        return None
    if measurements.store.clock() - record.born > measurements.clients.max_age:
        return None
    return record.value


def _why_not_client(measurements: Any, client: Client, dcs: list[str]) -> str:
    if not client.from_ecs:
        return "no client subnet from a trusted resolver in the query (EDNS client subnet, dns_server.ecs_trusted)"
    wanted = keys.CLIENT_PREFIX[client.address.version]
    if client.prefix < wanted:
        return f"the client subnet /{client.prefix} is shorter than the /{wanted} clients are measured at"
    subnet = str(client.network(wanted))
    missing = [dc for dc in dcs if _held(measurements, keys.client(subnet, dc)) is None]
    if missing:
        return f"client subnet {subnet} has no figure from {', '.join(missing)}"
    return f"client subnet {subnet} is measured from every data center (it would decide now)"


def _why_not_population(measurements: Any, ldns: str, dcs: list[str]) -> str:
    value = _held(measurements, keys.population(ldns))
    if value is None:
        return f"no measured clients for LDNS {ldns}"
    n, least = int(value.get("n", 0)), measurements.clients.min_samples
    if n < least:
        return f"LDNS {ldns}'s measured clients are {n} beacons, fewer than rum.min_samples ({least})"
    missing = [dc for dc in dcs if dc not in value.get("rtt", {})]
    if missing:
        return f"LDNS {ldns}'s measured clients have no figure from {', '.join(missing)}"
    return f"LDNS {ldns}'s measured clients have every figure (they would decide now)"
