"""The certificates' days left in `gtmcluster status`: what it reads of a node's
``certificates`` (`gtmcluster.api.tls.expiries`, one entry per certificate the node uses:
``node``, ``ca``, ``api``), the table's rows, and the problems it names (a certificate within
`WARN_DAYS` of its end, or past it), each with the step that fixes it.
"""

from __future__ import annotations

from typing import Any

from gtmcluster.cli.shape import MapOf, Maybe, Obj

#: what `gtmcluster status` reads of a status's ``certificates`` (absent from older nodes)
CERTIFICATES = Maybe(MapOf(Obj({"serial": str, "not_after": str, "days_left": int})))
#: the certificates, in the table's order, and their words
KINDS = {"node": "node certificate", "ca": "group CA", "api": "HTTPS API certificate"}
#: a certificate this close to its end is a problem (the shipped alert rule's bound too)
WARN_DAYS = 21

HEADER = ["CERTIFICATES", "NODE", "CA", "API"]


def cell(entry: dict[str, Any] | None) -> str:
    """Days left, with the date it ends: ``824 days (2028-03-13)``; ``-`` for none."""
    if entry is None:
        return "-"
    days = entry["days_left"]
    words = "EXPIRED" if days < 0 else f"{days} day{'s' if days != 1 else ''}"
    return f"{words} ({entry['not_after'][:10]})"


def rows(statuses: dict[str, dict[str, Any]]) -> list[list[str]]:
    """One row per node that reported its certificates; none when no node did."""
    out = []
    for node, s in statuses.items():
        held = s.get("certificates")
        if "error" in s or not held:
            continue
        out.append([node, *(cell(held.get(kind)) for kind in KINDS)])
    return [HEADER, *out] if out else []


def problems(node: str, s: dict[str, Any]) -> list[str]:
    """*node*'s certificates within `WARN_DAYS` of their end, or past it, and what to do.
    The API's certificate is the node's own (``api.tls`` serves it): named once."""
    held = s.get("certificates") or {}
    out = []
    for kind, words in KINDS.items():
        entry = held.get(kind)
        if entry is None or entry["days_left"] >= WARN_DAYS:
            continue
        if kind == "api" and entry["serial"] == (held.get("node") or {}).get("serial"):
            continue
        days = entry["days_left"]
        when = f"expired on {entry['not_after']}" if days < 0 else f"expires in {days} days ({entry['not_after']})"
        if kind == "ca":
            fix = "make a new group CA and move the group to it (docs/operations.md, Certificates)"
        else:
            fix = f"gtmcluster certs renew {node} --config FILE --reload"
        out.append(f"{words} {when}, serial {entry['serial']}: {fix}")
    return out
