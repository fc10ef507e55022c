"""tmsh pools (``gtm pool a|aaaa|cname``) and their members, mapped onto our pools.

Absent settings take BIG-IP DNS's defaults (modes round-robin, round-robin, return-to-dns;
TTL 30). Members keep F5's member order; a CNAME pool's members become CNAME virtual servers.
A pool or member `disabled` on F5 keeps that as its `admin_state` (an operator's enable
overrides it, as F5's does). A pool without members (or whose members were all lost) that
answers by its fallback-ip becomes one of ours that answers its `fallback_ip` alone.
"""

from __future__ import annotations

import ipaddress
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
SLOTS = (("preferred", "load-balancing-mode"), ("alternate", "alternate-mode"), ("fallback", "fallback-mode"))


#: pool and member settings read only to see that they are at F5's default (then they change
#: nothing): values that change nothing, and why any other value is CHANGED
INERT = {
    "verify-member-availability": (
        ("enabled",),
        "F5 answers with members whatever their availability; here only available members answer",
    ),
    "manual-resume": (
        ("disabled",),
        "F5 keeps the pool out after it went down until an operator enables it; here it comes back by itself"
        " (manual_resume is a virtual server's)",
    ),
    "dynamic-ratio": (("disabled",), "F5 scales the members' ratios by their measured QoS scores; here they are fixed"),
    "qos-lcs": (("0",), "F5's qos score also counts link capacity; ours does not"),
    "qos-vs-score": (("0",), "F5's qos score also counts the LTM's virtual server score; ours does not"),
}  # fmt: skip
LIMIT_WHY = "F5 takes a member out while it is over this limit; there are no such limits here"


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
    fallback_ip = value(settings["fallback-ip"]) if "fallback-ip" in settings else ""
    has_fallback = fallback_ip not in ("", "0.0.0.0", "any", "::", "any6")
    if not found:
        why = fallback_only(settings, kind, fallback_ip if has_fallback else "")
        if why:
            s.imp.lost(node.where, what, f"no member could be imported, {why}")
            return
        if "members" in settings and settings["members"].children():
            why = f"the pool answers only its fallback-ip {fallback_ip}, as F5 does while no member is available"
            s.imp.changed(node.where, what, f"no member could be imported: {why}")
    if has_fallback and not _is_address(f5names.strip_route_domain(fallback_ip)):
        # (with members: the modes that answer by it say what that changes, in `methods`)
        why = "not an IP address: not imported"
        s.imp.unmapped(settings["fallback-ip"].where, f"{what}: fallback-ip {fallback_ip}", why)
        has_fallback = False
    pool: dict[str, Any] = {"members": [member_value(*m) for m in found]}
    if has_fallback:
        pool["fallback_ip"] = f5names.strip_route_domain(fallback_ip)
    pool["load_balancing"] = methods(s, settings, what, has_fallback, node.where)
    for key, ours_key, default, hi in (("ttl", "ttl", 30, MAX_TTL), ("max-answers-returned", "max_answers", 1, 16)):
        if key in settings:
            at = settings[key]
            pool[ours_key] = number(s, value(at), default, 0 if key == "ttl" else 1, hi, at.where, f"{what}: {key}")
    qos = {
        QOS[k]: number(s, value(c), 0, 0, 1_000_000, c.where, f"{what}: {k}") for k, c in settings.items() if k in QOS
    }
    if qos:
        pool["qos"] = qos
    if "monitor" in settings and kind == "cname":
        why = "ours check a CNAME member only at a check_address it lacks: not applied (the members count as up)"
        s.imp.changed(settings["monitor"].where, f"{what}: {settings['monitor'].text()}", why)
    elif "monitor" in settings:
        monitors, _ = s.monitor_names(settings["monitor"], what)
        for vs, _ratio, _admin in found:
            s.pool_monitors[vs].extend(m for m in monitors if m not in s.pool_monitors[vs])
    if "disabled" in settings:
        pool["admin_state"] = "disabled"
    handled = {
        "members", "fallback-ip", "load-balancing-mode", "alternate-mode", "fallback-mode", "ttl",
        "max-answers-returned", "monitor", "enabled", "disabled", *QOS, *inert(s, node, what),
    }  # fmt: skip
    s.leftovers(node, handled, what)
    s.imp.pools[ours] = Entry(pool, node.where, s.comment(node))


def member_value(vs: str, ratio: int, admin: str) -> str | dict[str, Any]:
    """A member as our config writes it: its name alone, unless it has a ratio or is disabled."""
    if ratio == 1 and admin == "enabled":
        return vs
    out: dict[str, Any] = {"virtual_server": vs}
    if ratio != 1:
        out["ratio"] = ratio
    if admin != "enabled":
        out["admin_state"] = admin
    return out


def fallback_only(settings: dict[str, Node], kind: str, address: str) -> str:
    """Why a pool with no member cannot answer by its fallback-ip ("" when it can: one of
    its modes is fallback-ip, and it has an address of the pool's family)."""
    if kind == "cname":
        return "and a CNAME pool answers by members alone"
    modes = [value(settings[k]) if k in settings else f5methods.DEFAULTS[slot] for slot, k in SLOTS]
    if not any(f5methods.member_method(m)[0] == "fallback_ip" for m in modes):
        return "and no mode of the pool is fallback-ip"
    if not address:
        return "and it has no fallback-ip address"
    if not _is_address(f5names.strip_route_domain(address)):
        return f"and its fallback-ip {address} is not an IP address"
    family = ipaddress.ip_address(f5names.strip_route_domain(address)).version
    if family != (6 if kind == "aaaa" else 4):
        return f"and its fallback-ip {address} cannot answer {kind} queries"
    return ""


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def inert(s: TmshState, node: Node, what: str) -> set[str]:
    """The settings of *node* (a pool or a member) that change nothing at the value given
    (`INERT`, and limits while their status is disabled); any other value is CHANGED, with
    what F5 does that this import does not. The keys read."""
    read = set()
    for child in node.children():
        key = child.key
        if key in INERT:
            defaults, why = INERT[key]
        elif key.startswith("limit-") and key.endswith("-status"):
            defaults, why = ("disabled",), LIMIT_WHY
        elif key.startswith("limit-"):
            read.add(key)  # (a limit acts only while its status is enabled)
            continue
        else:
            continue
        read.add(key)
        if value(child) not in defaults:
            s.imp.changed(child.where, f"{what}: {child.text()}", why)
    return read


def number(s: TmshState, text: str | None, default: int, lo: int, hi: int, where: str, what: str) -> int:
    """A whole number of a pool or member (*default* when absent): one not taken as F5
    wrote it (not a number, or cut to our range) changes answers: CHANGED."""
    if text is None or text == "":
        return default
    if not digits(text):
        s.imp.changed(where, f"{what} {text}", f"not a whole number: {default} is used")
        return default
    kept = min(max(int(text), lo), hi)
    if kept != int(text):
        s.imp.changed(where, f"{what} {text}", f"out of our range ({lo} to {hi}): {kept} is used")
    return kept


def methods(s: TmshState, settings: dict[str, Node], what: str, has_fallback: bool, pool_where: str) -> dict[str, str]:
    out = {}
    for slot, key in SLOTS:
        node = settings.get(key)
        f5 = value(node) if node else f5methods.DEFAULTS[slot]
        where = node.where if node else pool_where
        ours, why = f5methods.member_method(f5)
        if ours == "fallback_ip" and not has_fallback:
            ours, why = None, "the pool has no fallback-ip address"
        if ours is None:
            report = s.imp.lost if slot == "preferred" else s.imp.changed
            report(where, f"{what}: {key} {f5}", f"{why}; 'none' is used (the next method runs)")
            ours = "none"
        out[slot] = ours
    return out


def members(s: TmshState, node: Node | None, kind: str, what: str) -> list[tuple[str, int, str]]:
    """The pool's members imported, in F5's member order: (our virtual server, ratio, admin state)."""
    if node is None:
        return []
    found: list[tuple[int, int, str, int, str]] = []
    twice: list[tuple[Node, str]] = []
    for position, child in enumerate(node.children()):
        settings = {c.key: c for c in child.children() if c.words}
        key = "member-order" if "member-order" in settings else "order"  # (older listings: order)
        order_text = value(settings[key]) if key in settings else ""
        order = int(order_text) if digits(order_text) else position
        ratio_text = value(settings["ratio"]) if "ratio" in settings else None
        ratio = number(s, ratio_text, 1, 0, MAX_RATIO, child.where, f"{what} member {child.key} ratio")
        ours: str | None
        if kind == "cname":
            ours = cname_member(s, child, what)
            if ours is None:
                continue
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
        if any(name == ours for _, _, name, _, _ in found):
            twice.append((child, ours))
            continue
        handled = {"member-order", "order", "ratio", "enabled", "disabled", "static-target"}
        handled |= inert(s, child, f"{what} member {child.key}")
        s.leftovers(child, handled, f"{what} member {child.key}")
        found.append((order, position, ours, ratio, "disabled" if "disabled" in settings else "enabled"))
    for child, ours in twice:  # (a double share on F5: that matters only beside other members)
        if len(found) > 1:
            why = f"{ours} is in the pool already: F5 counted it twice (a double share), here it is once"
            s.imp.changed(child.where, f"{what} member {child.key}", why)
        else:
            s.imp.unmapped(child.where, f"{what} member {child.key}", f"{ours} is in the pool already")
    return [(name, ratio, admin) for _, _, name, ratio, admin in sorted(found)]


def cname_member(s: TmshState, node: Node, what: str) -> str | None:
    """Our virtual server answering the CNAME pool member *node* (made on first use); None,
    with a LOST finding, when its target is no host name (a quoted word can be anything)."""
    target = node.key
    problem = f5names.domain_problem(target) or ("the root is no CNAME target" if not target.strip(".") else "")
    if problem:
        s.imp.lost(node.where, f"{what} member {f5names.one_line(target)}", f"{problem}: not imported")
        return None
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
