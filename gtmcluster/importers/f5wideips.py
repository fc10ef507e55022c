"""tmsh wide IPs (``gtm wideip a|aaaa|cname``) mapped onto ours: pools in F5's order,
pool-lb-mode, aliases, persistence, last-resort pool; an A and an AAAA wide IP of one name
become one wide IP of both types.
"""

from __future__ import annotations

from typing import Any

from gtmcluster.importers import f5methods, f5names
from gtmcluster.importers.f5parse import Node
from gtmcluster.importers.f5state import POOL_TYPES, TmshState, value
from gtmcluster.importers.model import MAX_PERSIST_TTL, MAX_RATIO, Entry, digits


def wideip(s: TmshState, node: Node) -> None:
    words = node.words
    kind, f5 = (words[2], words[3]) if len(words) >= 4 and words[2] in POOL_TYPES else ("a", words[-1])
    what = f"wideip {kind} {f5}"
    name = f5names.dns_name(f5)  # (F5 answers the path's last component, in any partition)
    if kind not in ("a", "aaaa", "cname"):
        s.imp.lost(node.where, what, f"{kind} wide IPs are not imported (only a, aaaa, cname)")
        return
    settings = {c.key: c for c in node.children() if c.words}
    refs: list[tuple[int, int, Any]] = []
    for position, child in enumerate(settings["pools"].children() if "pools" in settings else []):
        sub = {c.key: value(c) for c in child.children() if c.words}
        ours = s.pool_ref(child.key, kind)
        if ours is None or ours not in s.imp.pools:
            s.imp.lost(child.where, f"{what} pool {child.key}", "no such pool was imported")
            continue
        ratio = s.imp.number(sub.get("ratio"), 1, 0, MAX_RATIO, child.where, f"{what} pool {child.key} ratio")
        order = int(sub["order"]) if digits(sub.get("order", "")) else position
        same = next((r for r in refs if _pool(r[2]) == ours), None)
        if same is not None:  # (tmsh holds a pool once in a wide IP: a listing joined or edited by hand)
            if (same[0], same[2]) == (order, ours if ratio == 1 else {"pool": ours, "ratio": ratio}):
                s.imp.unmapped(child.where, f"{what} pool {child.key}", "listed twice: imported once")
            else:
                why = "listed twice with other settings (F5 holds a pool once in a wide IP): the first is imported"
                s.imp.changed(child.where, f"{what} pool {child.key}", why)
            continue
        refs.append((order, position, ours if ratio == 1 else {"pool": ours, "ratio": ratio}))
    if "pools-cname" in settings:
        s.imp.lost(settings["pools-cname"].where, f"{what} pools-cname", "CNAME pools in an A wide IP are not imported")
    if not refs:
        s.imp.lost(node.where, what, "no pool could be imported: the wide IP is not imported")
        return
    wideip: dict[str, Any] = {"type": kind.upper(), "pools": [r for _, _, r in sorted(refs, key=lambda t: t[:2])]}
    mode = value(settings["pool-lb-mode"]) if "pool-lb-mode" in settings else "round-robin"
    pool_lb, why = f5methods.pool_method(mode)
    if pool_lb is None:
        s.imp.lost(settings["pool-lb-mode"].where, f"{what}: pool-lb-mode {mode}", f"{why}; round_robin is used")
        pool_lb = "round_robin"
    wideip["pool_lb"] = pool_lb
    if "aliases" in settings:
        aliases = [w for c in settings["aliases"].children() for w in c.words] + settings["aliases"].words[1:]
        wideip["aliases"] = [f5names.dns_name(a) for a in aliases]
    if "persistence" in settings and value(settings["persistence"]) == "enabled":
        wideip["persistence"] = {
            "ttl": s.number(settings, "ttl-persistence", 3600, 1, MAX_PERSIST_TTL, what),
            "ipv4_prefix": s.number(settings, "persist-cidr-ipv4", 32, 0, 32, what),
            "ipv6_prefix": s.number(settings, "persist-cidr-ipv6", 128, 0, 128, what),
        }
    if "last-resort-pool" in settings:
        words = settings["last-resort-pool"].words[1:]
        ours = s.pool_ref(words[-1], words[0] if len(words) > 1 else kind) if words else None
        if ours is None or ours not in s.imp.pools:
            s.imp.lost(settings["last-resort-pool"].where, f"{what} last-resort-pool", "no such pool was imported")
        else:
            wideip["last_resort_pool"] = ours
    if "rules" in settings:
        s.imp.lost(settings["rules"].where, f"{what} rules", "iRules have no equivalent")
    if "disabled" in settings:  # (answers its failure_response, as F5's falls to the zone)
        wideip["admin_state"] = "disabled"
    handled = {"pools", "pool-lb-mode", "aliases", "persistence", "ttl-persistence", "persist-cidr-ipv4",
               "persist-cidr-ipv6", "last-resort-pool", "rules", "enabled", "disabled", "pools-cname"}  # fmt: skip
    s.leftovers(node, handled, what)
    add_wideip(s, name, wideip, node.where, s.comment(node))


def add_wideip(s: TmshState, name: str, wideip: dict[str, Any], where: str, source: str) -> None:
    """Add a wide IP; an A and an AAAA wide IP of one name become one of both types."""
    old = s.imp.wideips.get(name)
    if old is None:
        s.imp.wideips[name] = Entry(wideip, where, source)
        return
    types = old.value["type"] if isinstance(old.value["type"], list) else [old.value["type"]]
    if "CNAME" in (*types, wideip["type"]) or wideip["type"] in types:
        why = f"a second wide IP answering {name} (the first: {old.where}: {old.source})"
        if wideip["type"] in types:  # (in another partition or folder: its path's last part is the name)
            why += f"; F5 refuses two {wideip['type']} wide IPs of one name"
        else:
            why += "; a CNAME cannot share its name with another type here"
        s.imp.lost(where, source, why + ": not imported")
        return
    if wideip.get("admin_state") != old.value.get("admin_state"):  # (one admin state for both types)
        disabled = wideip["type"] if wideip.get("admin_state") else "/".join(types)
        why = f"disabled on F5 for {disabled} only; one wide IP here answers both types: imported enabled"
        s.imp.changed(where, f"wideip {name}", why)
        old.value.pop("admin_state", None)
    first = list(old.value["pools"])
    old.value["type"] = [*types, wideip["type"]]
    old.value["pools"] = first + [p for p in wideip["pools"] if _pool(p) not in map(_pool, first)]
    for kind, f5_pools in ((types[0], first), (wideip["type"], wideip["pools"])):
        ours = [p for p in old.value["pools"] if _answers(s, p, kind)]
        if ours != [p for p in f5_pools if _answers(s, p, kind)]:
            why = f"one wide IP here answers both types from the pools of both: {kind} queries choose among {ours}"
            s.imp.changed(where, f"wideip {name}", why)
        elif kind == wideip["type"] and wideip.get("pool_lb") != old.value.get("pool_lb") and len(ours) > 1:
            why = f"pool-lb-mode differs from the other type's; {old.value['pool_lb']} is used for {kind} queries too"
            s.imp.changed(where, f"wideip {name}", why)
    old.source += f"; {source} ({where})"


def _pool(ref: Any) -> str:
    """The pool a wide IP's reference names (``p`` or ``{pool: p, ratio: N}``)."""
    return ref if isinstance(ref, str) else str(ref["pool"])


def _answers(s: TmshState, ref: Any, kind: str) -> bool:
    """Whether a pool (a wide IP's reference to it) can answer *kind* (A or AAAA) queries:
    a member or a fallback address of that family."""
    pool = s.imp.pools[ref if isinstance(ref, str) else ref["pool"]].value
    names = [m if isinstance(m, str) else m["virtual_server"] for m in pool["members"]]
    addresses = [s.imp.virtual_servers[n].value.get("address", "") for n in names]
    fallback = pool.get("fallback_ip", [])
    addresses += fallback if isinstance(fallback, list) else [fallback]
    return any((":" in a) == (kind == "AAAA") for a in addresses if a)
