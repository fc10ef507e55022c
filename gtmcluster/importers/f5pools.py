"""tmsh pools (``gtm pool a|aaaa|cname``) and their members, mapped onto our pools.

Absent settings take BIG-IP DNS's defaults (modes round-robin, round-robin, return-to-dns;
TTL 30). Members keep F5's member order; a CNAME pool's members become CNAME virtual servers.
"""

from __future__ import annotations

from typing import Any

from gtmcluster.importers import f5methods, f5names
from gtmcluster.importers.f5parse import Node
from gtmcluster.importers.f5state import POOL_TYPES, TmshState, value
from gtmcluster.importers.model import MAX_RATIO, MAX_TTL, Entry, digits

QOS = {
    "qos-rtt": "rtt",
    "qos-hops": "hops",
    "qos-hit-ratio": "completion_rate",
    "qos-topology": "topology",
    "qos-vs-capacity": "vs_capacity",
    "qos-packet-rate": "packet_rate",
    "qos-kilobytes-second": "kbps",
}


def pool(s: TmshState, node: Node) -> None:
    words = node.words
    kind, f5 = (words[2], words[3]) if len(words) >= 4 and words[2] in POOL_TYPES else ("a", words[-1])
    what = f"pool {kind} {f5}"
    if len(words) < 3:
        s.imp.lost(node.where, node.text(), "a pool without a name")
        return
    if kind not in ("a", "aaaa", "cname"):
        s.imp.lost(node.where, what, f"{kind} pools are not imported (only a, aaaa, cname)")
        return
    ours = s.imp.namespace("pool").name(f5, kind)
    s.renamed("pool", f5, ours, node.where)
    settings = {c.key: c for c in node.children() if c.words}
    found = members(s, settings.get("members"), kind, what)
    if not found:
        s.imp.lost(node.where, what, "no member could be imported")
        return
    pool: dict[str, Any] = {"members": [m if r == 1 else {"virtual_server": m, "ratio": r} for m, r in found]}
    fallback_ip = value(settings["fallback-ip"]) if "fallback-ip" in settings else ""
    has_fallback = fallback_ip not in ("", "0.0.0.0", "any", "::", "any6")
    if has_fallback:
        pool["fallback_ip"] = f5names.strip_route_domain(fallback_ip)
    pool["load_balancing"] = methods(s, settings, what, has_fallback, node.where)
    for key, ours_key, default, hi in (("ttl", "ttl", 30, MAX_TTL), ("max-answers-returned", "max_answers", 1, 16)):
        if key in settings:
            at = settings[key]
            pool[ours_key] = s.imp.number(value(at), default, 0 if key == "ttl" else 1, hi, at.where, f"{what}: {key}")
    qos = {
        QOS[k]: s.imp.number(value(c), 0, 0, 1_000_000, c.where, f"{what}: {k}")
        for k, c in settings.items()
        if k in QOS
    }
    if qos:
        pool["qos"] = qos
    if "monitor" in settings:
        monitors, _ = s.monitor_names(settings["monitor"], what)
        for vs, _ratio in found:
            s.pool_monitors[vs].extend(m for m in monitors if m not in s.pool_monitors[vs])
    handled = {
        "members", "fallback-ip", "load-balancing-mode", "alternate-mode", "fallback-mode", "ttl",
        "max-answers-returned", "monitor", "enabled", *QOS,
    }  # fmt: skip
    s.leftovers(node, handled, what)
    s.imp.pools[ours] = Entry(pool, node.where, s.comment(node))


def methods(s: TmshState, settings: dict[str, Node], what: str, has_fallback: bool, pool_where: str) -> dict[str, str]:
    out = {}
    for slot, key in (
        ("preferred", "load-balancing-mode"),
        ("alternate", "alternate-mode"),
        ("fallback", "fallback-mode"),
    ):
        node = settings.get(key)
        f5 = value(node) if node else f5methods.DEFAULTS[slot]
        where = node.where if node else pool_where
        ours, why = f5methods.member_method(f5)
        if ours == "fallback_ip" and not has_fallback:
            ours, why = None, "the pool has no fallback-ip address"
        if ours is None:
            report = s.imp.lost if slot == "preferred" else s.imp.unmapped
            report(where, f"{what}: {key} {f5}", f"{why}; 'none' is used (the next method runs)")
            ours = "none"
        out[slot] = ours
    return out


def members(s: TmshState, node: Node | None, kind: str, what: str) -> list[tuple[str, int]]:
    if node is None:
        return []
    found: list[tuple[int, int, str, int]] = []
    for position, child in enumerate(node.children()):
        settings = {c.key: c for c in child.children() if c.words}
        key = "member-order" if "member-order" in settings else "order"  # (older listings: order)
        order_text = value(settings[key]) if key in settings else ""
        order = int(order_text) if digits(order_text) else position
        ratio_text = value(settings["ratio"]) if "ratio" in settings else None
        ratio = s.imp.number(ratio_text, 1, 0, MAX_RATIO, child.where, f"{what} member {child.key} ratio")
        ours: str | None
        if kind == "cname":
            ours = cname_member(s, child)
        else:
            ours = s.imp.namespace("virtual_server").get(child.key)
            by_address = f5names.address_port(child.key)
            if ours is None and by_address is not None:
                ours = s.by_address.get((str(by_address[0]), by_address[1] or 80))
            if ours is None or ours not in s.imp.virtual_servers:
                s.imp.lost(child.where, f"{what} member {child.key}", "no such virtual server was imported")
                continue
        if kind != "cname" and (":" in s.imp.virtual_servers[ours].value["address"]) != (kind == "aaaa"):
            family = "IPv6" if kind == "a" else "IPv4"
            s.imp.lost(child.where, f"{what} member {child.key}", f"an {family} server cannot answer {kind} queries")
            continue
        if "disabled" in settings:
            s.imp.unmapped(child.where, f"{what} member {child.key}", "disabled in the pool: left out")
            continue
        if any(name == ours for _, _, name, _ in found):
            s.imp.unmapped(child.where, f"{what} member {child.key}", f"{ours} is in the pool already")
            continue
        handled = {"member-order", "order", "ratio", "enabled", "static-target"}
        s.leftovers(child, handled, f"{what} member {child.key}")
        found.append((order, position, ours, ratio))
    return [(name, ratio) for _, _, name, ratio in sorted(found)]


def cname_member(s: TmshState, node: Node) -> str:
    target = node.key
    ours = s.imp.namespace("virtual_server").name(f"cname-{target}")
    if ours not in s.imp.virtual_servers:
        dc = s.first_dc or "DC1"
        if s.first_dc is None:
            s.first_dc = dc
            s.imp.datacenters[dc] = Entry(dc, node.where, "placeholder: the config has no data center")
        s.imp.virtual_servers[ours] = Entry(
            {"cname": target, "datacenter": dc}, node.where, f"CNAME pool member {target}",
            note=f"F5 CNAME members have no data center: {dc} is a placeholder",
        )  # fmt: skip
    return ours
