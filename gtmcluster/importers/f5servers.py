"""tmsh data centers, monitors, servers and their virtual servers, mapped onto our config.

A server's virtual servers become ours (named ``server.vs``), in the server's data center and
with its monitors unless they have their own; a pool's monitors apply to members that have
none (`apply_pool_monitors`); ``depends-on`` may name a virtual server defined later
(`check_dependencies`).
"""

from __future__ import annotations

from typing import Any

from gtmcluster.importers import f5monitors, f5names
from gtmcluster.importers.f5parse import Node
from gtmcluster.importers.f5state import TmshState, value
from gtmcluster.importers.model import Entry


def datacenter(s: TmshState, node: Node) -> None:
    if len(node.words) < 3:
        s.imp.unmapped(node.where, node.text(), "a data center without a name")
        return
    f5 = node.words[2]
    ours = s.imp.namespace("datacenter").name(f5)
    s.renamed("datacenter", f5, ours, node.where)
    s.first_dc = s.first_dc or ours
    if any(c.key == "disabled" for c in node.children()):
        s.dc_disabled.add(ours)
    s.imp.datacenters[ours] = Entry(ours, node.where, s.comment(node))
    s.leftovers(node, {"enabled", "disabled"}, f"datacenter {f5}")


def implied_datacenter(s: TmshState, f5: str, where: str) -> str:
    """A data center a server names that the input does not define (a partition file, a
    fragment): made from the name, with one finding for all the servers in it."""
    ours = s.imp.namespace("datacenter").name(f5)
    s.renamed("datacenter", f5, ours, where)
    s.first_dc = s.first_dc or ours
    source = f"gtm datacenter {f5} (not in the input: named by the servers in it)"
    s.imp.datacenters[ours] = Entry(ours, where, source)
    why = "no 'gtm datacenter' statement in the input: created, enabled, from the servers that name it"
    s.imp.unmapped(where, f"datacenter {f5}", why + " (if it is disabled on F5, disable it here)")
    return ours


def monitor(s: TmshState, node: Node) -> None:
    """``gtm monitor TYPE NAME { ... }`` with its ``defaults-from`` chain (`f5monitors`)."""
    if len(node.words) < 4:
        s.imp.unmapped(node.where, node.text(), "a monitor needs a type and a name")
        return
    f5_type, f5 = node.words[2], node.words[3]
    defs = {name: f5monitors.settings(n) for name, n in s.monitor_defs.items() if n.words[2] == f5_type}
    defs.pop(f5names.strip_partition(f5), None)
    values, problem = f5monitors.resolve(f5_type, f5monitors.settings(node), defs)
    problems = (problem,) if problem and f5_type in f5monitors.TYPES else ()
    s.add_monitor(f5, f5_type, values, node.where, s.comment(node), problems)


def server(s: TmshState, node: Node) -> None:
    if len(node.words) < 3:
        s.imp.unmapped(node.where, node.text(), "a server without a name")
        return
    f5 = node.words[2]
    settings = {c.key: c for c in node.children() if c.words}
    dc_node = settings.get("datacenter")
    dc = s.datacenter_name(value(dc_node)) if dc_node else None
    if dc is None and dc_node is not None and len(dc_node.words) == 2:
        dc = implied_datacenter(s, dc_node.words[1], dc_node.where)
    if dc is None:
        s.imp.lost(node.where, f"server {f5}", "no data center named; its virtual servers are lost")
        return
    disabled = "disabled" in settings or dc in s.dc_disabled
    monitors: list[str] = []
    extra: dict[str, Any] = {}
    if "monitor" in settings:
        monitors, extra = s.monitor_names(settings["monitor"], f"server {f5}")
    for vs_node in settings["virtual-servers"].children() if "virtual-servers" in settings else []:
        virtual_server(s, f5, vs_node, dc, disabled, monitors, extra)
    for key in ("addresses", "product"):
        if key in settings:  # (one finding for all servers: the renderer groups them)
            why = "the server's own addresses and product are not needed (virtual servers carry theirs)"
            s.imp.unmapped(settings[key].where, f"gtm server {key}", why)
    handled = {"datacenter", "monitor", "virtual-servers", "enabled", "disabled", "addresses", "product"}
    s.leftovers(node, handled, f"server {f5}")


def virtual_server(
    s: TmshState, server: str, node: Node, dc: str, disabled: bool, monitors: list[str], extra: dict[str, Any]
) -> None:
    f5 = f"{f5names.strip_partition(server)}:{f5names.strip_partition(node.key)}"
    what = f"virtual server {f5}"
    settings = {c.key: c for c in node.children() if c.words}
    if "destination" not in settings:
        s.imp.lost(node.where, what, "no destination address")
        return
    dest = f5names.address_port(value(settings["destination"]))
    if dest is None:
        s.imp.lost(node.where, what, f"destination {value(settings['destination'])!r} is not an address")
        return
    same = s.by_address.get((str(dest[0]), dest[1] or 80))
    if same is not None:  # ours are told apart by address and port
        s.imp.namespace("virtual_server").alias(f5, same)
        why = f"same address and port as {same} ({s.imp.virtual_servers[same].where}): imported as that one"
        s.imp.unmapped(node.where, what, why)
        return
    ours = s.imp.namespace("virtual_server").name(f5)
    s.renamed("virtual server", f5, ours, node.where)
    vs: dict[str, Any] = {"address": str(dest[0]), "port": dest[1] or 80, "datacenter": dc}
    if dest[1] is None:
        s.imp.changed(node.where, what, "any port: port 80 is used for its checks (give its monitor a port)")
    if "monitor" in settings:
        monitors, extra = s.monitor_names(settings["monitor"], what)
    if monitors:
        vs["monitor"] = monitors[0] if len(monitors) == 1 else monitors
        vs.update(extra)
        s.vs_has_monitor.add(ours)
    if disabled or "disabled" in settings:
        vs["admin_state"] = "disabled"
    if "depends-on" in settings:
        deps = [c.key for c in settings["depends-on"].children()] or settings["depends-on"].words[1:]
        vs["depends_on"] = [s.imp.namespace("virtual_server").name(d) for d in deps]
    s.leftovers(node, {"destination", "monitor", "enabled", "disabled", "depends-on"}, what)
    s.imp.virtual_servers[ours] = Entry(vs, node.where, f"gtm server {server} virtual-servers {node.key}")
    s.by_address.setdefault((vs["address"], vs["port"]), ours)


def check_dependencies(s: TmshState) -> None:
    """depends-on names only imported virtual servers (F5 may name one defined later)."""
    for name, entry in s.imp.virtual_servers.items():
        deps = entry.value.get("depends_on")
        if deps is None:
            continue
        missing = [d for d in deps if d not in s.imp.virtual_servers]
        for d in missing:
            s.imp.changed(entry.where, f"virtual server {name} depends-on {d}", "no such virtual server was imported")
        entry.value["depends_on"] = [d for d in deps if d not in missing]
        if not entry.value["depends_on"]:
            del entry.value["depends_on"]


def apply_pool_monitors(s: TmshState) -> None:
    for vs, monitors in s.pool_monitors.items():
        entry = s.imp.virtual_servers.get(vs)
        if entry is None or vs in s.vs_has_monitor or not monitors:
            continue
        entry.value["monitor"] = monitors[0] if len(monitors) == 1 else monitors
        if len(monitors) > 1:
            entry.note = "monitors of all its pools (all must pass; on F5 each pool used its own)"
